"""A rank's own sub-program: the distributed program cut at its collectives into
compute segments (graphs of local shapes, compiled by the ordinary backends) and the
collectives between them, in program order.

A segment is a maximal run of non-collective nodes. Its inputs are the values it reads
that an earlier step made (or the program's inputs); its outputs those a later step or
the program's outputs read. Constants stay constants where every rank holds the same
data (replicated: generated code folds scalars), and become inputs where sharded (each
rank is fed its slice). Node attributes are unchanged: the propagation rules admit only
ops whose attributes hold for the local shape (a reduction's axes, a matmul).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ir.graph import Graph, Node, Value
from ..ops.collective import COLLECTIVES, SHARD_LOCAL, WAIT
from .placement import Replicate
from .program import DistProgram


@dataclass(frozen=True)
class Segment:
    """Compute nodes ``nodes`` (ids of the program) as the local graph ``graph``;
    ``on_arrival``: the received value it is fused into (:mod:`.received`: run per
    ``fuse_segment`` elements of it as they arrive), else empty."""
    index: int
    nodes: tuple[str, ...]
    graph: Graph
    on_arrival: str = ""
    fuse_segment: int = 0


@dataclass(frozen=True)
class Comm:
    """A collective's start or its wait, or a shard_local (``node``: the program's
    node)."""
    index: int
    node: Node


def local_steps(d: DistProgram) -> list:
    """The rank's steps in program order: Segments and Comms."""
    g = d.graph
    later_reads: dict[str, int] = {}      # value -> the last node position reading it
    for i, n in enumerate(g.nodes):
        for v in n.inputs:
            later_reads[v] = i
    for o in g.outputs:
        later_reads[o] = len(g.nodes)
    # (nodes fused into a received value: a segment of their own, run per piece)
    fused = {v: w for w in g.nodes if w.op == WAIT for v in w.attr("fused") or ()}
    steps: list = []
    run: list[int] = []
    into = [None]

    def close():
        if run:
            seg = _segment(d, [g.nodes[i] for i in run], run[-1], later_reads, len(steps))
            if seg is not None:     # (a run whose results nothing reads is dropped)
                w = into[0]
                steps.append(seg if w is None else dataclasses.replace(
                    seg, on_arrival=w.outputs[0], fuse_segment=w.attr("fuse_segment")))
            run.clear()

    for i, n in enumerate(g.nodes):
        if n.op in COLLECTIVES or n.op in (WAIT, SHARD_LOCAL):
            close()
            steps.append(Comm(len(steps), n))
        else:
            w = fused.get(n.outputs[0])
            if w is not into[0]:
                close()
                into[0] = w
            run.append(i)
    close()
    return steps


def _segment(d: DistProgram, nodes: list[Node], last: int, later_reads: dict,
             index: int) -> Segment | None:
    g, pl = d.graph, d.placements
    made = {o for n in nodes for o in n.outputs}
    read = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in made))
    consts = [v for v in read if v in g.constants and isinstance(pl[v], Replicate)]
    inputs = [v for v in read if v not in consts]
    outputs = [o for n in nodes for o in n.outputs if later_reads.get(o, -1) > last]
    if not outputs:
        return None
    local = lambda v: Value(v, d.local_shape(v), g.value(v).dtype)
    values = [local(v) for v in (*read, *[o for n in nodes for o in n.outputs])]
    sub = dataclasses.replace(
        g, name=f"{g.name}.seg{index}", values=tuple(values),
        nodes=tuple(_localized(d, n, f"n{k}") for k, n in enumerate(nodes)),
        inputs=tuple(inputs), outputs=tuple(outputs),
        constants={c: g.constants[c] for c in consts},
        input_ranges={k: r for k, r in g.input_ranges.items() if k in inputs})
    return Segment(index, tuple(n.id for n in nodes), sub.verify())


def _localized(d: DistProgram, n: Node, id_: str) -> Node:
    """Node ``n`` on the rank's local shapes: a reshape's target shape is written for
    the global tensor (a sharded one is reshaped by each rank on its piece)."""
    if n.op == "reshape" and tuple(n.attr("shape")) != tuple(d.local_shape(n.outputs[0])):
        attrs = {**n.attr_map, "shape": tuple(d.local_shape(n.outputs[0]))}
        return dataclasses.replace(n, id=id_, attrs=tuple(sorted(attrs.items())))
    return dataclasses.replace(n, id=id_)
