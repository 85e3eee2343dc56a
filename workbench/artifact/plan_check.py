"""What an artifact's manifest says about its graph, checked against the graph rebuilt
from its files: inputs and outputs, the plan's groups, each kernel's buffers and
workspace, library calls, and the order kernels run in."""
from __future__ import annotations

import math

from ..codegen.microkernel import packed_numel
from ..errors import ArtifactError
from ..dtypes import DType
from ..ir import Graph
from ..ir.graph import freeze_attr
from ..ops import get_op
from .limits import MAX_VALUE_BYTES
from .manifest import Manifest
from .messages import show


def check_plan(m: Manifest, g: Graph, where: str) -> None:
    """The manifest's claims checked against the rebuilt graph: inputs and outputs (name,
    shape, dtype); every value's size; groups that partition the graph's nodes, one
    kernel per group in the same order; each buffer's value, size and dtype, workspace
    within limits; library calls that are their node's op; and an order in which every
    kernel reads only what is there, writes only what its group computes, and the
    outputs get computed. So no kernel is handed a buffer of another size than its
    source was generated for, and no value is missing at call time."""
    def fail(what: str) -> ArtifactError:
        return ArtifactError(f"artifact {where}: {what}; re-export the artifact")

    def spec(t) -> str:
        return f"{t.dtype}{list(t.shape)}"

    for kind, specs, names in (("input", m.inputs, g.inputs), ("output", m.outputs, g.outputs)):
        if [t.name for t in specs] != list(names):
            raise fail(f"the {kind}s in manifest.json "
                       f"({show(', '.join(t.name for t in specs))}) do not match the graph's "
                       f"({show(', '.join(names))})")
        for t in specs:
            v = g.value(t.name)
            if t.shape != tuple(v.shape) or t.dtype != v.dtype.value:
                raise fail(f"{kind} {show(t.name)} is {spec(t)} in manifest.json, "
                           f"{v.dtype.value}{list(v.shape)} in the graph")
    values = {v.name: v for v in g.values}
    for v in g.values:
        if math.prod(v.shape) * v.dtype.itemsize > MAX_VALUE_BYTES:
            raise fail(f"graph value {show(v.name)} is larger than {MAX_VALUE_BYTES} bytes")
    largest = max([math.prod(v.shape) for v in g.values] + [1])

    # the plan: groups partition the nodes; one kernel per group, in order
    nodes = {n.id: n for n in g.nodes}
    owner: dict[str, str] = {}
    seen: set[str] = set()
    for gr in m.groups:
        if gr.id in seen:
            raise fail(f"group {show(gr.id)} appears twice in the plan")
        seen.add(gr.id)
        for n in gr.nodes:
            if n not in nodes:
                raise fail(f"group {show(gr.id)} names node {show(n)}, which the graph does "
                           "not have")
            if n in owner:
                raise fail(f"node {show(n)} is in groups {show(owner[n])} and {show(gr.id)}")
            owner[n] = gr.id
    if len(owner) != len(nodes):
        left = next(n for n in nodes if n not in owner)
        raise fail(f"the plan does not compute node {show(left)} (no group holds it)")
    if len(m.kernels) != len(m.groups):
        raise fail(f"manifest.json lists {len(m.kernels)} kernels for {len(m.groups)} plan "
                   "groups (one kernel runs each group)")
    for i, (k, gr) in enumerate(zip(m.kernels, m.groups)):
        if k.group != gr.id:
            raise fail(f"kernel {k.name} runs group {show(k.group)}, but the plan's group "
                       f"{i} is {show(gr.id)} (kernels run in the plan's order)")

    # buffers, and the order values become available in
    ready = set(g.inputs) | set(g.constants)          # compiled kernels
    ready_ref = set(ready)                            # the reference backend: node by node
    for k, gr in zip(m.kernels, m.groups):
        computes = {o for n in gr.nodes for o in nodes[n].outputs}
        for n in gr.nodes:
            missing = [x for x in nodes[n].inputs if x not in ready_ref]
            if missing:
                raise fail(f"group {show(gr.id)} runs node {n} before {show(missing[0])} is "
                           "computed")
            ready_ref.update(nodes[n].outputs)
        names, writes = set(), []
        for p in k.params:
            if p["name"] in names:
                raise fail(f"kernel {k.name} has two parameters named {p['name']}")
            names.add(p["name"])
            dt = DType(p["dtype"])
            if p.get("workspace", False):
                v = values.get(p["value"])
                if v is not None:    # a graph value passed between stitched phases
                    if p["numel"] != math.prod(v.shape) or dt is not v.dtype.compute:
                        raise fail(f"kernel {k.name} workspace {p['name']} "
                                   f"({dt.value}[{p['numel']}]) does not match the graph "
                                   f"value {show(p['value'])} it holds "
                                   f"({v.dtype.compute.value}[{math.prod(v.shape)}])")
                # a packed constant pads each row of B to whole panels (n = 1: PANEL x)
                most = (packed_numel(largest, 1) if p.get("persistent", False)
                        or p.get("packed", False) else largest)
                if not 1 <= p["numel"] <= most or p["numel"] * dt.itemsize > MAX_VALUE_BYTES:
                    raise fail(f"kernel {k.name} workspace {p['name']} has {p['numel']} "
                               f"elements (at most {most}, "
                               + ("the largest value of the graph packed into panels)"
                                  if most > largest else "the largest value of the graph)"))
                continue
            v = values.get(p["value"])
            if v is None or math.prod(v.shape) != p["numel"] or v.dtype is not dt:
                raise fail(f"kernel {k.name} parameter {p['name']} "
                           f"({dt.value}[{p['numel']}], value {show(p['value'], 40)}) does not "
                           "match the graph's value")
            if p["is_output"]:
                writes.append(p["value"])
            elif p["value"] not in ready:
                raise fail(f"kernel {k.name} reads {show(p['value'])} before any kernel "
                           "writes it")
        for w in writes:
            if w not in computes:
                raise fail(f"kernel {k.name} writes {show(w)}, which its group "
                           f"{show(gr.id)} does not compute")
            if w in ready:
                raise fail(f"kernel {k.name} writes {show(w)}, which is already there (an "
                           "input, a constant, or an earlier kernel's output)")
        ready.update(writes)
        if k.library is not None:
            _check_library(k, gr, nodes, fail)
    for o in g.outputs:
        if o not in ready or o not in ready_ref:
            raise fail(f"the plan does not compute the output {show(o)}")


def _check_library(k, gr, nodes, fail) -> None:
    """A library call is exactly its group's single node: op, attributes, arguments."""
    if len(gr.nodes) != 1:
        raise fail(f"kernel {k.name} is a library call for a group of {len(gr.nodes)} nodes")
    n = nodes[gr.nodes[0]]
    c = k.library
    try:
        attrs = {a: freeze_attr(v) for a, v in c.attrs.items()}
        same = attrs == dict(n.attrs)
    except Exception:  # noqa: BLE001 -- any value a JSON object can hold
        same = False
    if c.op != n.op or not same or c.inputs != n.inputs or c.outputs != n.outputs:
        raise fail(f"kernel {k.name} calls {show(c.op, 40)}, which is not its node {n.id} "
                   f"({n.op} with its attributes and arguments)")
    if getattr(get_op(n.op), "library", None) is None:
        raise fail(f"kernel {k.name} calls {n.op}, which has no library implementation")
    params = {p["value"] for p in k.params}
    if not set(c.inputs) | set(c.outputs) <= params:
        raise fail(f"kernel {k.name} library call names values that are not its parameters")
