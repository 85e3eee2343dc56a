"""Chunk a matmul and the AllReduce of its result into k pipelined pieces (CoCoNet's
overlap): the matmul's rows are cut into k slices, each multiplied and its AllReduce
started at once, the waits after the last piece, the pieces joined. A rank's
sub-program then runs piece i+1's matmul while piece i's AllReduce is in flight
(collectives are asynchronous: gloo's run on its own threads), so the step costs about
``max(mm, comm) + min(mm, comm) / k`` instead of ``mm + comm``, plus k-1 more messages.

Legal where the AllReduce reads a matmul that nothing else reads, whose left operand's
dim 0 is not its contracted or sharded dim and splits into k equal pieces (rows are
independent in a matmul, so each piece is exact). Refused otherwise, with the reason.
"""
from __future__ import annotations

from ..errors import FusionRefused
from ..ir.graph import Node, Value
from ..ops.collective import WAIT
from .placement import Shard
from .program import DistProgram
from .rewrite import renumbered
from .transforms import _program, _start, _wait_of


def chunk_all_reduce(d: DistProgram, ref: str, k: int) -> DistProgram:
    """``ref`` (an all_reduce, its wait, or the value it makes) and the matmul feeding
    it as ``k`` pipelined pieces; FusionRefused where it cannot be."""
    g = d.graph
    n = _start(d, ref, ("all_reduce",), "not an all_reduce: chunking pipelines a matmul "
               "with the AllReduce of its result")
    if not isinstance(k, int) or k < 2:
        raise FusionRefused(f"k={k!r}: chunk into 2 or more pieces")
    mm = g.producer.get(n.inputs[0])
    if mm is None or mm.op != "matmul":
        raise FusionRefused(f"{n.name} reduces {n.inputs[0]!r}, which no matmul makes: "
                            "only a matmul's rows are cut into pieces here")
    if len(g.consumers[mm.outputs[0]]) > 1 or mm.outputs[0] in g.outputs:
        raise FusionRefused(f"{mm.name}'s result is read by more than {n.name}: its pieces "
                            "would have to be joined for the other readers too")
    a, b = mm.inputs
    sa = g.value(a).shape
    if len(sa) < 2 or len(g.value(b).shape) < 2:
        raise FusionRefused(f"{mm.name}: a matrix times a vector has no rows to cut")
    if d.placements[a] == Shard(0):
        raise FusionRefused(f"{mm.name}: dim 0 of {a!r} is sharded across the ranks; "
                            "cutting it would cut the shards")
    if sa[0] % k:
        raise FusionRefused(f"{mm.name}: dim 0 of {a!r} ({sa[0]}) does not split into "
                            f"{k} equal pieces; pick a k that divides it")
    w = _wait_of(d, n)
    y, out, dt = w.outputs[0], g.value(mm.outputs[0]), g.value(mm.outputs[0]).dtype
    rows, p = sa[0] // k, d.ranks
    names = [[f"{y}.c{i}.{s}" for s in ("in", "mm", "start", "done")] for i in range(k)]
    if any(v in g.value_map for row in names for v in row):
        raise FusionRefused(f"{n.name}: value names {names[0]}... are taken")
    head, tail, vals = [], [], []
    for i, (xin, prod, start, done) in enumerate(names):
        head += [Node.make(f"{mm.id}c{i}s", "slice", [a], [xin],
                           {"starts": [i * rows], "ends": [(i + 1) * rows], "axes": [0]},
                           f"{mm.name}.c{i}.slice"),
                 Node.make(f"{mm.id}c{i}", "matmul", [xin, b], [prod], {}, f"{mm.name}.c{i}"),
                 Node.make(f"{n.id}c{i}", "all_reduce", [prod], [start],
                           {**n.attr_map, "group_size": p}, f"{n.name}.c{i}")]
        tail.append(Node.make(f"{w.id}c{i}", WAIT, [start], [done], {}, f"{w.name}.c{i}"))
        piece = (rows, *out.shape[1:])
        vals += [Value(xin, (rows, *sa[1:]), g.value(a).dtype), Value(prod, piece, dt),
                 Value(start, piece, dt), Value(done, piece, dt)]
    tail.append(Node.make(f"{w.id}cat", "concat", [r[3] for r in names], [y], {"axis": 0},
                          f"{w.name}.join"))
    nodes = []
    for m in g.nodes:
        if m is mm:
            nodes += head
        elif m is w:
            nodes += tail
        elif m is not n:
            nodes.append(m)
    return _program(d, renumbered(g, nodes, vals, drop=[mm.outputs[0], n.outputs[0]]),
                    d.leaves)


def matmul_of(d: DistProgram, n: Node) -> Node | None:
    """The matmul an all_reduce ``n`` reduces the result of, if any."""
    m = d.graph.producer.get(n.inputs[0])
    return m if m is not None and m.op == "matmul" else None
