"""Bucket small AllReduces into one message: their inputs flattened and joined into one
flat buffer, one AllReduce, the reduced buffer cut back into the pieces (as DDP's
gradient buckets). n messages become one: n-1 latencies saved, for copying every
byte into the buffer and out again -- worth it for small tensors, where a message's
latency (~0.4 ms on this machine's gloo) outweighs the copy.

Legal for AllReduces of one reduction whose inputs are all made before the first of
their results is read (a later input that depends on an earlier AllReduce's result
cannot travel in the same message). Refused otherwise, with the reason.
"""
from __future__ import annotations

import math

from ..errors import FusionRefused
from ..ir.graph import Node, Value
from ..ops.collective import WAIT
from .program import DistProgram
from .rewrite import renumbered
from .transforms import _node, _program, _wait_of


def bucket_all_reduces(d: DistProgram, refs=None, name: str = "bucket") -> DistProgram:
    """The AllReduces ``refs`` (default: every AllReduce of the program) as one AllReduce
    over a flat buffer; FusionRefused where they cannot share one message."""
    g = d.graph
    if refs is None:
        ars = [n for n in g.nodes if n.op == "all_reduce"]
    else:
        ars = []
        for r in refs:
            n = _node(d, r)
            n = g.producer[n.inputs[0]] if n.op == WAIT else n
            if n.op != "all_reduce":
                raise FusionRefused(f"{n.name} is {n.op}, not an all_reduce: only "
                                    "AllReduces are bucketed")
            ars.append(n)
    ars = list(dict.fromkeys(ars))
    if len(ars) < 2:
        raise FusionRefused(f"{len(ars)} AllReduce(s) named: bucketing joins two or more")
    ops = {n.attr("reduce_op", "sum") for n in ars}
    if len(ops) > 1:
        raise FusionRefused(f"AllReduces {', '.join(n.name for n in ars)} reduce by "
                            f"{', '.join(sorted(ops))}: one message reduces one way")
    waits = [_wait_of(d, n) for n in ars]
    results = {w.outputs[0]: n for n, w in zip(ars, waits)}
    for n in ars:
        hit = _depends_on(g, n.inputs[0], results)
        if hit:
            raise FusionRefused(f"{n.name}'s input {n.inputs[0]!r} depends on {hit!r}, the "
                                f"result of {results[hit].name}: they cannot go in one "
                                "message")
    names = [f"{name}.in", f"{name}.start", f"{name}.out"]
    if any(v in g.value_map for v in names):
        raise FusionRefused(f"value names {names} are taken; pass another name=")
    sizes = [math.prod(g.value(n.inputs[0]).shape) for n in ars]
    total, dt = sum(sizes), g.value(ars[0].inputs[0]).dtype
    pack, vals = [], []
    for n, size in zip(ars, sizes):
        flat = f"{n.inputs[0]}.flat"
        pack.append(Node.make(f"{n.id}f", "reshape", [n.inputs[0]], [flat],
                              {"shape": [size]}, f"{n.name}.flat"))
        vals.append(Value(flat, (size,), dt))
    pack += [Node.make(f"{name}c", "concat", [m.outputs[0] for m in pack], [names[0]],
                       {"axis": 0}, f"{name}.pack"),
             Node.make(f"{name}s", "all_reduce", [names[0]], [names[1]],
                       {**ars[0].attr_map}, f"{name}"),
             Node.make(f"{name}w", WAIT, [names[1]], [names[2]], {}, f"{name}.wait")]
    vals += [Value(v, (total,), dt) for v in names]
    unpack, off = [], 0
    for n, w, size in zip(ars, waits, sizes):
        y = w.outputs[0]
        piece = f"{y}.piece"
        unpack += [Node.make(f"{w.id}p", "slice", [names[2]], [piece],
                             {"starts": [off], "ends": [off + size], "axes": [0]},
                             f"{w.name}.piece"),
                   Node.make(f"{w.id}r", "reshape", [piece], [y],
                             {"shape": list(g.value(y).shape)}, f"{w.name}.unpack")]
        vals.append(Value(piece, (size,), dt))
        off += size
    # the program's order kept where it can be: the buffer starts as soon as its last
    # input is made, and is cut up just before the first result is read
    pos = {n.id: i for i, n in enumerate(g.nodes)}
    gone = {m.id for m in (*ars, *waits)}
    at_start = max(pos[n.id] for n in ars)
    at_wait = min(pos[w.id] for w in waits)
    keyed = [(pos[m.id], 0, m) for m in g.nodes if m.id not in gone]
    keyed += [(at_start, 1, m) for m in pack] + [(at_wait, 1, m) for m in unpack]
    nodes = _ordered(keyed)
    return _program(d, renumbered(g, nodes, vals, drop=[n.outputs[0] for n in ars]),
                    d.leaves)


def _depends_on(g, value: str, targets) -> str | None:
    """The first of ``targets`` that ``value`` is computed from, if any."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v in targets:
            return v
        if v in seen or v not in g.producer:
            continue
        seen.add(v)
        todo += g.producer[v].inputs
    return None


def _ordered(keyed) -> list[Node]:
    """A topological order of the nodes, each as early as its key allows (Kahn's, the
    ready node of smallest (key, tie, position) first)."""
    import heapq
    made = {o: i for i, (_, _, m) in enumerate(keyed) for o in m.outputs}
    deps = [{made[v] for v in m.inputs if v in made} for _, _, m in keyed]
    users: dict[int, list[int]] = {}
    for i, ds in enumerate(deps):
        for j in ds:
            users.setdefault(j, []).append(i)
    left = [len(ds) for ds in deps]
    ready = [(k, t, i) for i, (k, t, _) in enumerate(keyed) if not left[i]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, _, i = heapq.heappop(ready)
        out.append(keyed[i][2])
        for u in users.get(i, ()):
            left[u] -= 1
            if not left[u]:
                heapq.heappush(ready, (keyed[u][0], keyed[u][1], u))
    return out
