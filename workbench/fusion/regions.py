"""Independent parts of a plan search (:class:`Region`) and which of them are copies of
each other (:func:`region_key`): what makes ``stitch`` plan a 12-layer model in the
time of one layer.

A kernel only ever holds ops joined by edges or by reading the same tensor, and never
two ops with a path between them through a library call (matmul, conv: always a kernel
of its own), since the kernel would then wait on itself. So the search's moves never
join ops of different *regions* -- the connected components of the non-library ops
under "joined, and not separated by a library call" -- and a plan's latency is the sum
over regions. Each region can be searched on its own.

Two regions with the same :func:`region_key` -- the same ops and attributes in the
same order, the same shapes and types, the same wiring inside, the same kind of
outside operand at each input (a graph input, a constant, a scalar constant inlined as
a literal; which inputs are the same tensor), the same outputs read outside, and the
same pairs kept apart by a library call -- price every kernel of the one exactly as the
matching kernel of the other: the cost model and analysis see nothing else. The
transformer layers of a model are such copies, and so are the Q, K and V bias-adds of
one layer: the search runs once per distinct region and copies its plan to the rest.

Example::

    >>> regions = find_regions(g)                            # doctest: +SKIP
    >>> len(regions), len({r.key for r in regions})          # doctest: +SKIP
    (98, 11)
"""
from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

from ..ir import Graph
from ..ops import Kind, get_op


@dataclass(frozen=True)
class Region:
    """Non-library ops searched together: ``nodes`` in topological order, and ``key``,
    equal for regions whose kernels the cost model prices alike (see the module
    docstring)."""
    nodes: tuple[str, ...]
    key: tuple


def kept_apart(g: Graph) -> dict[str, int]:
    """Per node, the bit set (node positions) of the nodes reachable from it along a path
    through a library call: none of them may ever share its kernel."""
    pos = g.position
    opaque = {n.id for n in g.nodes if get_op(n.op).kind is Kind.opaque}
    reach: dict[str, int] = {}     # reachable, the node itself included
    apart: dict[str, int] = {}
    for n in reversed(g.nodes):
        r = 1 << pos[n.id]
        a = 0
        for o in n.outputs:
            for c in g.consumers[o]:
                r |= reach[c.id]
                a |= reach[c.id] if c.id in opaque else apart[c.id]
        reach[n.id], apart[n.id] = r, a
    return apart


def find_regions(g: Graph, readers: dict[str, list[str]],
                 apart: dict[str, int] | None = None) -> list[Region]:
    """The graph's regions in order of their first op. ``readers``: per tensor, the
    non-library ops reading it that the search may make siblings (the search's own
    table, so regions and moves agree on who is joined)."""
    pos = g.position
    kind = {n.id: get_op(n.op).kind for n in g.nodes}
    opaque = {n for n, k in kind.items() if k is Kind.opaque}
    apart = kept_apart(g) if apart is None else apart
    parent = {n.id: n.id for n in g.nodes if n.id not in opaque}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(u, v):
        if (apart[u] >> pos[v]) & 1 or (apart[v] >> pos[u]) & 1:
            return        # never one kernel: not a link
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv, key=pos.__getitem__)] = min(ru, rv, key=pos.__getitem__)

    for n in g.nodes:
        if n.id in opaque:
            continue
        for i in n.inputs:
            p = g.producer.get(i)
            if p is not None and p.id not in opaque:
                join(p.id, n.id)
    for rs in readers.values():     # every pair: the first reader may be kept apart
        for k, r in enumerate(rs):     # from the rest (a shape tensor every layer reads)
            for q in rs[k + 1:]:
                join(r, q)
    groups: dict[str, list[str]] = {}
    for n in g.nodes:
        if n.id not in opaque:
            groups.setdefault(find(n.id), []).append(n.id)
    return [Region(tuple(ns), region_key(g, ns, apart))
            for ns in sorted(groups.values(), key=lambda ns: pos[ns[0]])]


def region_key(g: Graph, nodes, apart: dict[str, int] | None = None) -> tuple:
    """What the cost model and analysis can see of a region (module docstring), with
    every name replaced by its place in the region; of a kernel's ops (``nodes`` in
    topological order), without ``apart``: what its price depends on."""
    pos = g.position
    parts = _node_parts(g)
    local = {n: k for k, n in enumerate(nodes)}
    made = {o: (local[n], j) for n in nodes for j, o in enumerate(parts[n][3])}
    outside: dict[str, int] = {}
    ops = []
    for n in nodes:
        op, attrs, ins_seen, outs_seen = parts[n]
        ins = []
        for i, seen in ins_seen:
            if i in made:
                ins.append(made[i])
            else:
                ins.append(("in", outside.setdefault(i, len(outside))) + seen)
        outs = tuple(seen + (escapes or any(c not in local for c in readers),)
                     for seen, escapes, readers in outs_seen.values())
        far = apart[n] if apart is not None else 0
        kept_apart = tuple(local[m] for m in nodes if (far >> pos[m]) & 1) if far else ()
        ops.append((op, attrs, tuple(ins), outs, kept_apart))
    return tuple(ops)


# Graph -> node id -> what region_key reads of the node that no kernel changes: its op,
# its attributes' text, each input's (shape, dtype, scalar constant, constant), each
# output's (shape, dtype), whether it is a graph output and who reads it. The stitch
# search keys some 15,000 kernels of a small BART; reading these afresh (the attributes'
# repr above all) was a third of its planning time. A Graph is immutable, so its
# entry never goes stale, and it goes when the graph does.
_PARTS: "WeakKeyDictionary[Graph, dict[str, tuple]]" = WeakKeyDictionary()


def _node_parts(g: Graph) -> dict[str, tuple]:
    parts = _PARTS.get(g)
    if parts is None:
        graph_out = set(g.outputs)
        parts = {}
        for node in g.nodes:
            ins = []
            for i in node.inputs:
                v = g.value(i)
                const = i in g.constants
                ins.append((i, (v.shape, str(v.dtype), const and v.numel == 1, const)))
            outs = {o: ((g.value(o).shape, str(g.value(o).dtype)), o in graph_out,
                        tuple(c.id for c in g.consumers[o])) for o in node.outputs}
            parts[node.id] = (node.op, repr(node.attrs), tuple(ins), outs)
        _PARTS[g] = parts
    return parts
