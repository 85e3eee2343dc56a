"""CoCoNet's transformations of a distributed program, each refused with the reason.

* :func:`split_all_reduce`: ``AllReduce(x)`` -> ``AllGather(ReduceScatter(x, dim), dim)``
  (the ring AllReduce *is* these two halves; splitting it names the point between them
  where every rank holds a reduced 1/p shard).
* :func:`shard_after`: move the work after an ``AllGather`` onto the shard, before the
  gather: each rank computes 1/p of it (the sharded optimizer: each rank updates 1/p of
  the parameters), its replicated leaves (parameters, moments) read as shards, and
  every result read later gathered again. Elementwise work moves; a reduction moves
  when it does not reduce the sharded dim (a LayerNorm over rows whose rows are split
  across ranks cannot). The per-rank planner then fuses the moved work into one kernel
  (it is one compute segment of the rank's sub-program).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import FusionRefused, GraphError
from ..ir.graph import Node, Value
from ..ops import Kind, get_op
from ..ops.collective import WAIT
from .placement import Replicate, Shard
from .program import DistProgram
from .rewrite import renumbered


@dataclass(frozen=True)
class Moved:
    """What :func:`shard_after` did: the nodes moved onto the shard, the leaves now read
    as shards, the results gathered after, and each node it left with the reason."""
    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    gathered: tuple[str, ...]
    left: tuple[tuple[str, str], ...]


def _node(d: DistProgram, ref: str) -> Node:
    g = d.graph
    for n in g.nodes:
        if ref in (n.id, n.name) or ref in n.outputs:
            return n
    raise FusionRefused(f"{d.graph.name} has no node or value {ref!r}; name a node id "
                        "(n3), its name or a value it makes")


def _start(d: DistProgram, ref: str, ops, why: str) -> Node:
    """The collective start ``ref`` names (the start, its wait, or a value either
    makes), if its op is one of ``ops``; else FusionRefused saying ``why`` the step
    needs such a collective."""
    n = _node(d, ref)
    if n.op == WAIT:
        n = d.graph.producer[n.inputs[0]]
    if n.op not in ops:
        raise FusionRefused(f"{n.name} is {n.op}, {why}")
    return n


def _wait_of(d: DistProgram, start: Node) -> Node:
    return next(c for c in d.graph.consumers[start.outputs[0]] if c.op == WAIT)


def split_all_reduce(d: DistProgram, ref: str, dim: int = 0) -> DistProgram:
    """``ref`` (an all_reduce, its wait, or the value it makes) as a reduce_scatter along
    ``dim`` and an all_gather; FusionRefused where it cannot be."""
    n = _start(d, ref, ("all_reduce",), "not an all_reduce: only an AllReduce splits into "
               "ReduceScatter + AllGather")
    g, p = d.graph, d.ranks
    x = g.value(n.inputs[0])
    rank = len(x.shape)
    if not -rank <= dim < max(rank, 1) or rank == 0:
        raise FusionRefused(f"{n.name}: dim {dim} is out of range for {list(x.shape)}")
    dim %= rank
    if x.shape[dim] % p:
        raise FusionRefused(f"{n.name}: dim {dim} of {list(x.shape)} ({x.shape[dim]}) does "
                            f"not divide into {p} shards; pick a dim that does")
    w = _wait_of(d, n)
    y = w.outputs[0]
    base = f"{y}.rs"
    names = [f"{base}.start", base, f"{y}.ag.start"]
    if any(v in g.value_map for v in names):
        raise FusionRefused(f"{n.name}: value names {names} are taken")
    op = n.attr("reduce_op", "sum")
    new = [Node.make(n.id + "rs", "reduce_scatter", [x.name], [names[0]],
                     {"reduce_op": op, "dim": dim, "group_size": p}, f"{n.name}.rs"),
           Node.make(w.id + "rs", WAIT, [names[0]], [names[1]], {}, f"{w.name}.rs"),
           Node.make(n.id + "ag", "all_gather", [names[1]], [names[2]],
                     {"dim": dim, "group_size": p}, f"{n.name}.ag"),
           Node.make(w.id + "ag", WAIT, [names[2]], [y], {}, f"{w.name}.ag")]
    nodes = []
    for m in g.nodes:
        if m is n:
            nodes += new
        elif m is not w:
            nodes.append(m)
    vals = [Value(v, x.shape, x.dtype) for v in names]
    return _program(d, renumbered(g, nodes, vals, drop=[n.outputs[0]]), d.leaves)


def _program(d: DistProgram, graph, leaves) -> DistProgram:
    out = DistProgram(graph, d.ranks, leaves)
    try:
        out.verify()
    except GraphError as e:
        raise FusionRefused(f"the result would not be a legal program: {e}") from None
    return out


def shard_after(d: DistProgram, ref: str, keep_sharded=()) -> tuple[DistProgram, Moved]:
    """Move the work after the all_gather ``ref`` onto the shard (see the module doc);
    ``keep_sharded``: graph outputs left sharded rather than gathered (optimizer
    state each rank keeps its slice of). FusionRefused naming what blocks it where
    nothing can move."""
    n = _start(d, ref, ("all_gather",), "not an all_gather: work moves onto the shard "
               "before an AllGather (split an AllReduce first)")
    g = d.graph
    w = _wait_of(d, n)
    y = w.outputs[0]
    dim = n.attr("dim") % len(g.value(y).shape)
    after = g.nodes[g.position[w.id] + 1:]
    # the work downstream of the gather, and the work on leaves only that feeds it (an
    # optimizer's m * beta1): both move, so a rank computes 1/p of each
    down, vals = set(), {y}
    for m in after:
        if any(i in vals for i in m.inputs):
            down.add(m.id)
            vals.update(m.outputs)
    need = {i for m in after if m.id in down for i in m.inputs}
    feeds = set()
    for m in reversed(after):
        if m.id not in down and any(o in need for o in m.outputs):
            feeds.add(m.id)
            need.update(m.inputs)
    leaves = set(g.inputs) | set(g.constants)
    fvals: set = set()
    for m in after:
        if m.id in feeds and all(i in leaves or i in fvals for i in m.inputs):
            fvals.update(m.outputs)
        else:
            feeds.discard(m.id)
    moved: list[Node] = []
    left: list[tuple[str, str]] = []
    made, stays = {y}, set()     # values the moved work makes; values left after it
    for m in after:
        if m.id not in down and m.id not in feeds:
            stays.update(m.outputs)
            continue
        why = _blocker(d, m, dim)
        late = [i for i in m.inputs if i in stays and i not in made]
        if why is None and late:
            why = f"it reads {late[0]!r}, which stays after the gather"
        if why is None:
            moved.append(m)
            made.update(m.outputs)
        else:
            left.append((m.name, why))
            stays.update(m.outputs)
    if not moved:
        reasons = "; ".join(f"{a}: {b}" for a, b in left) or "nothing reads its result"
        raise FusionRefused(f"no work after {n.name} can move onto the shard ({reasons})")
    out, leaves_, gathered = _build(d, n, w, moved, dim, keep_sharded)
    return out, Moved(tuple(m.id for m in moved), leaves_, gathered, tuple(left))


def _blocker(d: DistProgram, m: Node, dim: int) -> str | None:
    op = get_op(m.op)
    if op.kind is Kind.reduce:
        if dim in m.attr("axes"):
            return (f"{m.op} reduces dim {dim}, which the shard splits: a row would be "
                    "split across ranks")
    elif op.kind is not Kind.elementwise:
        return f"{m.op} is a {op.kind.value} op: only elementwise work and row reductions move"
    return None


def _build(d, start, wait, moved, dim, keep_sharded):
    g, p = d.graph, d.ranks
    ids = {m.id for m in moved}
    y = wait.outputs[0]
    made = {o for m in moved for o in m.outputs}
    rank_y = len(g.value(y).shape)
    leaves = dict(d.leaves)
    resharded, sliced, vals = [], {}, []
    slices = []
    for m in moved:
        for i in m.inputs:
            if i in made or i == y or i in resharded or i in sliced:
                continue
            pl = d.placements[i]
            if not isinstance(pl, Replicate):
                raise FusionRefused(f"it reads {i!r}, placed {pl}: only replicated values "
                                    "are read as shards")
            shape = g.value(i).shape
            k = dim - (rank_y - len(shape))
            if k < 0 or shape[k] == 1:
                continue        # (broadcast along the sharded dim: every rank reads it whole)
            leaf = i in g.inputs or i in g.constants
            if leaf and all(c.id in ids for c in g.consumers[i]) and i not in g.outputs:
                leaves[i] = Shard(k)      # each rank is given only its slice
                resharded.append(i)
                continue
            # read elsewhere too, or computed: each rank slices its copy
            sliced[i] = f"{i}.slice{k}"
            vals.append(Value(sliced[i], shape, g.value(i).dtype))
            slices.append(Node.make(f"{start.id}s{i}", "shard_local", [i], [sliced[i]],
                                    {"dim": k, "group_size": p}, f"{start.name}.slice.{i}"))
    outside = {i for m in g.nodes if m.id not in ids for i in m.inputs}
    keep = set(keep_sharded)
    gathered = [o for m in moved for o in m.outputs
                if (o in outside or o in g.outputs) and o not in keep]
    s = start.inputs[0]
    rename = {o: f"{o}.shard" for o in gathered}
    sub = lambda names: tuple(s if v == y else sliced.get(v, rename.get(v, v)) for v in names)
    body = [Node(m.id, m.op, sub(m.inputs), tuple(rename.get(o, o) for o in m.outputs),
                 m.attrs, m.name, m.origin) for m in moved]
    y_read = y in g.outputs or any(y in m.inputs for m in g.nodes
                                   if m.id not in ids and m is not wait)
    gathers = []
    for o in gathered:
        v = g.value(o)
        vals += [Value(rename[o], v.shape, v.dtype), Value(f"{o}.ag.start", v.shape, v.dtype)]
        gathers += [Node.make(f"{start.id}g{o}", "all_gather", [rename[o]], [f"{o}.ag.start"],
                              {"dim": dim, "group_size": p}, f"{start.name}.{o}"),
                    Node.make(f"{wait.id}g{o}", WAIT, [f"{o}.ag.start"], [o], {},
                              f"{wait.name}.{o}")]
    head = [m for m in g.nodes[:g.position[wait.id] + 1]
            if y_read or m.id not in (start.id, wait.id)]
    tail = [m for m in g.nodes[g.position[wait.id] + 1:] if m.id not in ids]
    # a sliced value computed after the gather is computed before the moved work reads it
    early = [m for m in tail if any(o in sliced for o in m.outputs)]
    if early:
        need = set().union(*(m.inputs for m in early))
        if need & made:
            raise FusionRefused("the moved work reads a value computed from its own results")
        tail = [m for m in tail if m not in early]
    drop = [] if y_read else [y, start.outputs[0]]
    try:
        graph = renumbered(g, head + early + slices + body + gathers + tail, vals, drop=drop)
    except GraphError as e:
        raise FusionRefused(f"the moved work cannot be ordered: {e}") from None
    return _program(d, graph, leaves), tuple(resharded), tuple(gathered)
