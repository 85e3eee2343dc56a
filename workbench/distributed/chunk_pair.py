"""Chunk a sharded step's ReduceScatter / AllGather pair into k pipelined pieces: the
ReduceScatter's input is cut along a dim the shard does not split (columns, for a
ReduceScatter of rows), each piece reduce-scattered, the elementwise work on the shard
(the sharded optimizer of :func:`.transforms.shard_after`) run per piece, and each
piece's result gathered on its own; the pieces are joined (``concat``) at the end.

In program order every ReduceScatter starts at once; then, per piece, its wait, its
compute, and its AllGather's start; the AllGathers' waits come last. So a rank runs the
kernel on piece i while piece i+1's ReduceScatter arrives and piece i-1's AllGather
is in flight (gloo moves them on its own threads), at the cost of k-1 more messages
per collective and the copies that cut and join the pieces.

Legal where the work after the ReduceScatter's wait, up to the next collective, is
elementwise over values of the ReduceScatter's shape (or scalars), and the cut dim
divides into k. Refused otherwise, with the reason.
"""
from __future__ import annotations

import math

from ..errors import FusionRefused
from ..ir.graph import Node, Value
from ..ops import Kind, get_op
from ..ops.collective import COLLECTIVES, SHARD_LOCAL, WAIT
from .program import DistProgram
from .rewrite import renumbered
from .transforms import _program, _start, _wait_of


def _cut_dim(shape, sd: int, k: int, dim) -> int:
    dims = [dim % len(shape)] if dim is not None else \
        [c for c in reversed(range(len(shape))) if c != sd and shape[c] % k == 0][:1]
    if not dims or dims[0] == sd:
        raise FusionRefused(f"no dim of {list(shape)} other than the sharded dim {sd} "
                            f"splits into {k} equal pieces" if not dims else
                            f"dim {sd} is the one the ReduceScatter shards; cut another")
    if shape[dims[0]] % k:
        raise FusionRefused(f"dim {dims[0]} ({shape[dims[0]]}) does not split into {k} "
                            "equal pieces; pick a k that divides it")
    return dims[0]


def chunk_sharded(d: DistProgram, ref: str, k: int, dim: int | None = None) -> DistProgram:
    """ReduceScatter ``ref`` (or its wait, or the value either makes), the elementwise
    work after it and the AllGathers of that work's results as ``k`` pieces cut along
    ``dim`` (default: the last dim the shard does not split that k divides)."""
    g = d.graph
    n = _start(d, ref, ("reduce_scatter",), "not a reduce_scatter: this chunks a sharded "
               "step's ReduceScatter / AllGather pair")
    if not isinstance(k, int) or k < 2:
        raise FusionRefused(f"k={k!r}: chunk into 2 or more pieces")
    w = _wait_of(d, n)
    if w.attr("fused"):
        raise FusionRefused(f"the work after {n.name} is fused into its arrival; undo "
                            "that, chunk, then fuse")
    shape = g.value(n.inputs[0]).shape
    sd = n.attr("dim") % len(shape)
    c = _cut_dim(shape, sd, k, dim)
    at = g.nodes.index(w)
    region = []
    for m in g.nodes[at + 1:]:
        if m.op in COLLECTIVES or m.op in (WAIT, SHARD_LOCAL):
            break
        region.append(m)
    # (lists, not sets: the new values' order must not depend on string hashing)
    made = list(dict.fromkeys([w.outputs[0], *(o for m in region for o in m.outputs)]))
    before = set(g.inputs) | set(g.constants) | {o for m in g.nodes[:at] for o in m.outputs}
    for m in region:
        if get_op(m.op).kind is not Kind.elementwise:
            raise FusionRefused(f"{m.outputs[0]} ({m.op}) after {n.name} is not elementwise:"
                                " its pieces would not be pieces of its result")
        for v in (*m.inputs, *m.outputs):
            if v not in made and v not in before:
                raise FusionRefused(f"{m.outputs[0]} reads {v!r}, made after the wait")
            if math.prod(g.value(v).shape) != 1 and g.value(v).shape != shape:
                raise FusionRefused(f"{m.outputs[0]} ({m.op}) reads or makes {v!r} of shape "
                                    f"{list(g.value(v).shape)}, not {list(shape)}: a "
                                    "broadcast operand would be cut")
    if not region:
        raise FusionRefused(f"no compute follows {n.name}'s wait: nothing to pipeline "
                            "with its pieces")
    later = g.nodes[at + 1 + len(region):]
    gathers = {m.id: m for m in later if m.op == "all_gather" and m.inputs[0] in made
               and m.attr("dim") % len(shape) == sd}
    gwaits = {_wait_of(d, m).id: m for m in gathers.values()}
    piece = tuple(e // k if i == c else e for i, e in enumerate(shape))
    name = lambda v, i: f"{v}.p{i}"
    outside = list(dict.fromkeys(v for m in region for v in m.inputs
                                 if v not in made and math.prod(g.value(v).shape) != 1))
    cut = [n.inputs[0], n.outputs[0], *outside, *made, *(m.outputs[0] for m in gathers.values()),
           *(_wait_of(d, m).outputs[0] for m in gathers.values())]
    if any(name(v, i) in g.value_map for v in cut for i in range(k)):
        raise FusionRefused(f"value names {name(cut[0], 0)}... are taken")
    vals = [Value(name(v, i), piece, g.value(v).dtype) for v in cut for i in range(k)]
    sl = lambda v, i, tag: Node.make(f"{tag}{i}", "slice", [v], [name(v, i)], {
        "starts": [i * piece[c]], "ends": [(i + 1) * piece[c]], "axes": [c]},
        f"{v}.cut{i}")
    rn = lambda m, i, tag: Node.make(f"{m.id}{tag}{i}", m.op, [
        name(v, i) if v in made or v in outside else v for v in m.inputs],
        [name(o, i) for o in m.outputs], m.attr_map, f"{m.name}.p{i}", m.origin)
    nodes = list(g.nodes[:g.nodes.index(n)])
    for i in range(k):      # (every piece's ReduceScatter starts at once)
        nodes += [sl(n.inputs[0], i, "cutx"), Node.make(
            f"{n.id}p{i}", n.op, [name(n.inputs[0], i)], [name(n.outputs[0], i)],
            n.attr_map, f"{n.name}.p{i}")]
    nodes += [m for m in g.nodes[g.nodes.index(n) + 1:at]]
    for i in range(k):      # (wait, compute, gather: piece i's kernel beside i+1's RS)
        nodes.append(Node.make(f"{w.id}p{i}", WAIT, [name(n.outputs[0], i)],
                               [name(w.outputs[0], i)], w.attr_map, f"{w.name}.p{i}"))
        nodes += [sl(v, i, f"cut{j}_") for j, v in enumerate(outside)]
        nodes += [rn(m, i, "p") for m in region]
        nodes += [rn(m, i, "p") for m in gathers.values()]
    read_later = {v for m in later if m.id not in gathers for v in m.inputs} | set(g.outputs)
    joined = [v for v in made if v in read_later and v != w.outputs[0]]
    join = lambda v, tag: Node.make(f"{tag}", "concat", [name(v, i) for i in range(k)], [v],
                                    {"axis": c}, f"{v}.join")
    nodes += [join(v, f"join{j}_") for j, v in enumerate(joined)]
    for m in later:
        if m.id in gathers:
            continue
        if m.id in gwaits:
            s = gwaits[m.id]
            nodes += [Node.make(f"{m.id}p{i}", WAIT, [name(s.outputs[0], i)],
                                [name(m.outputs[0], i)], m.attr_map, f"{m.name}.p{i}")
                      for i in range(k)]
            nodes.append(join(m.outputs[0], f"join{m.id}"))
        else:
            nodes.append(m)
    drop = [n.outputs[0], w.outputs[0], *(v for v in made if v not in joined),
            *(m.outputs[0] for m in gathers.values())]
    return _program(d, renumbered(g, nodes, vals, drop=drop), d.leaves)
