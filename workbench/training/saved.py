"""Saved activations: each forward value a training graph's backward reads is either
stored (the forward writes it, the backward reads it back) or recomputed (the
backward computes it again from values that are stored). This module lists them with
their price, suggests which to recompute by a minimum cut (the rule of functorch's
rematerialization partitioner: store the fewest bytes from which everything the
backward needs can be recomputed, never recomputing a GEMM or convolution), and
rewrites the graph so the backward recomputes the chosen ones.

    >>> saved = saved_values(g)                         # doctest: +SKIP
    >>> keep = min_cut(g); g2 = rematerialize(g, recompute=suggested(g))   # doctest: +SKIP

The choice is a graph rewrite (a new graph for a new session), not yet a step of a
plan: a plan partitions one graph's nodes, and recomputation adds nodes.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from ..errors import WorkbenchError
from ..ir import Graph, Node
from ..ops import Kind, get_op
from .phases import BACKWARD, phase

_INF = float("inf")


@dataclass(frozen=True)
class Saved:
    """A forward value the backward reads: its bytes (written once, read back once when
    stored), the arithmetic recomputing it costs (the flops of its chain back to the
    graph's inputs and the values that must stay stored), and why it cannot be
    recomputed, if it cannot."""
    value: str
    nbytes: int
    op: str
    recompute_flops: int
    refused: str | None = None

    @property
    def stored_bytes(self) -> int:
        return 2 * self.nbytes


def _forward(g: Graph) -> set[str]:
    return {n.id for n in g.nodes if phase(n) == "forward"}


def _refusal(g: Graph, node: Node) -> str | None:
    """Why a forward node's value must be stored rather than recomputed."""
    if get_op(node.op).kind is Kind.opaque:
        return (f"{node.op} ({node.id}) is compute-bound: recomputing it costs more "
                "than storing its result")
    return None


def saved_values(g: Graph) -> list[Saved]:
    """The forward values read by backward nodes, in the graph's order."""
    fwd = _forward(g)
    if len(fwd) == len(g.nodes):
        raise WorkbenchError(f"graph {g.name!r} has no backward nodes; import it with "
                             "from_torch(..., training=True)")
    prod = g.producer
    read = {i for n in g.nodes if n.id not in fwd for i in n.inputs}
    out = []
    for n in g.nodes:
        if n.id not in fwd:
            continue
        for v in n.outputs:
            if v in read:
                refused = _refusal(g, n)
                if refused is None and v in g.outputs:
                    refused = f"{v} is a graph output: it is stored anyway"
                out.append(Saved(v, g.value(v).nbytes, n.op,
                                 _chain_flops(g, v, fwd, prod), refused))
    return out


def _chain_flops(g: Graph, v: str, fwd: set[str], prod) -> int:
    """Flops of recomputing v from the inputs and the values that must stay stored."""
    seen, todo, flops = set(), [v], 0
    while todo:
        x = todo.pop()
        n = prod.get(x)
        if n is None or n.id in seen or n.id not in fwd or (x != v and _refusal(g, n)):
            continue
        seen.add(n.id)
        flops += get_op(n.op).flops * g.value(n.outputs[0]).numel
        todo.extend(n.inputs)
    return flops


def min_cut(g: Graph) -> set[str]:
    """The forward values to store: a minimum cut, in bytes, between the graph's
    inputs (free: they exist anyway) and the values the backward reads, through the
    forward nodes -- every value the backward reads is then stored or recomputable
    from stored ones. A compute-bound node's value (a GEMM's) is never recomputed: it
    is a source of the cut, stored where the backward needs it."""
    fwd = _forward(g)
    need = {s.value for s in saved_values(g)}
    prod = g.producer
    cap: dict[tuple, float] = {}

    def edge(a, b, c):
        cap[(a, b)] = cap.get((a, b), 0.0) + c
        cap.setdefault((b, a), 0.0)

    fwd_values = [o for n in g.nodes if n.id in fwd for o in n.outputs]
    for v in fwd_values:
        n = prod[v]
        edge(("in", v), ("out", v), float(g.value(v).nbytes))   # storing v costs its bytes
        if _refusal(g, n) or v in g.outputs:
            edge("S", ("in", v), _INF)          # cannot be recomputed: stored if needed
        for i in n.inputs:
            if i in prod and prod[i].id in fwd:
                edge(("out", i), ("in", v), _INF)
            # (inputs and constants are there anyway: nothing to cut)
        if v in need:
            edge(("out", v), "T", _INF)
    cut = _min_cut_edges(cap, "S", "T")
    return {v for (a, b) in cut if a[0] == "in" for v in [a[1]]}


def _min_cut_edges(cap: dict, s, t) -> list[tuple]:
    """Edmonds-Karp; the saturated edges from the source's side of the residual graph."""
    adj: dict = {}
    for (a, b) in cap:
        adj.setdefault(a, []).append(b)
    flow = dict.fromkeys(cap, 0.0)
    while True:
        parent = {s: None}
        q = deque([s])
        while q and t not in parent:
            a = q.popleft()
            for b in adj.get(a, ()):
                if b not in parent and cap[(a, b)] - flow[(a, b)] > 0:
                    parent[b] = a
                    q.append(b)
        if t not in parent:
            break
        path, b = [], t
        while parent[b] is not None:
            path.append((parent[b], b))
            b = parent[b]
        push = min(cap[e] - flow[e] for e in path)
        if push == _INF:
            raise WorkbenchError("every path from the inputs to the backward's reads "
                                 "passes only values that cannot be stored")
        for (a, b) in path:
            flow[(a, b)] += push
            flow[(b, a)] -= push
    side = set(parent)
    return [(a, b) for (a, b) in cap if a in side and b not in side and cap[(a, b)] > 0]


def suggested(g: Graph) -> set[str]:
    """The saved values the minimum cut recomputes (every one it does not store)."""
    keep = min_cut(g)
    return {s.value for s in saved_values(g) if s.value not in keep and s.refused is None}


SAVED_COLUMNS = ("value", "op", "stored_bytes", "recompute_flops", "suggestion", "refused")


def saved_table(g: Graph) -> list[dict]:
    """One row per saved value (:func:`saved_values`' order): its bytes as stored
    (written once, read back once), the flops of recomputing it, what the minimum cut
    suggests (``store`` or ``recompute``) and, where it cannot be recomputed, why."""
    keep = min_cut(g)
    return [{"value": s.value, "op": s.op, "stored_bytes": s.stored_bytes,
             "recompute_flops": s.recompute_flops,
             "suggestion": "store" if s.refused or s.value in keep else "recompute",
             "refused": s.refused or ""} for s in saved_values(g)]


def rematerialize(g: Graph, recompute: set[str] | frozenset[str]) -> Graph:
    """g with the backward reading a recomputed copy of each value in ``recompute``:
    the copies' nodes (namespace ``backward.recompute``) are placed before the first
    backward node, computed from the inputs and the values not recomputed."""
    saved = {s.value: s for s in saved_values(g)}
    for v in sorted(recompute):
        if v not in saved:
            raise WorkbenchError(f"{v!r} is not a forward value the backward reads; "
                                 f"choose from {sorted(saved)[:8]}")
        if saved[v].refused:
            raise WorkbenchError(f"{v!r} cannot be recomputed: {saved[v].refused}")
    fwd, prod = _forward(g), g.producer
    names = {v.name for v in g.values}
    copies: dict[str, str] = {}    # forward value -> its recomputed copy
    new_nodes: list[Node] = []
    new_values = []
    # a copy's id follows its original's position (numeric, as every id), so a graph's
    # ids name the set recomputed: two sets' graphs never share a plan (a session
    # caches per plan, and its steps may hold both: ``Session.recompute``)
    base = len(g.nodes)

    def copy_of(v: str) -> str:
        n = prod.get(v)
        if v in copies:
            return copies[v]
        if n is None or n.id not in fwd or (v not in recompute and v in saved) \
                or _refusal(g, n):
            return v        # an input, a stored value, or one that must stay stored
        ins = tuple(copy_of(i) for i in n.inputs)
        outs = []
        for o in n.outputs:
            name, k = f"{o}.recomputed", 1
            while name in names:
                name, k = f"{o}.recomputed{k}", k + 1
            names.add(name)
            copies[o] = name
            new_values.append(replace(g.value(o), name=name))
            outs.append(name)
        origin = replace(n.origin, source=f"{BACKWARD}.recompute") if n.origin else None
        new_nodes.append(replace(n, id=f"n{base + g.position[n.id]}", inputs=ins,
                                 outputs=tuple(outs), name=f"{n.name} (recomputed)",
                                 origin=origin))
        return copies[v]

    for v in sorted(recompute, key=lambda x: g.position[prod[x].id]):
        copy_of(v)
    first_bwd = next(i for i, n in enumerate(g.nodes) if n.id not in fwd)
    rewired = [replace(n, inputs=tuple(copies.get(i, i) if i in recompute else i
                                       for i in n.inputs))
               if n.id not in fwd else n for n in g.nodes]
    nodes = (*rewired[:first_bwd], *new_nodes, *rewired[first_bwd:])
    return Graph(g.name, (*g.values, *new_values), nodes, g.inputs, g.outputs,
                 g.constants, g.description, g.input_ranges)


@dataclass(frozen=True)
class Priced:
    """A recomputation choice priced as the cost model prices plans: the planner's
    kernels, counted bytes and predicted ms of the graph as it is and rewritten."""
    recompute: frozenset[str]
    kernels: tuple[int, int]
    bytes_moved: tuple[int, int]
    predicted_ms: tuple[float, float]
