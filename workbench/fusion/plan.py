"""Fusion plans: an immutable partition of a graph's nodes into kernels.

A :class:`Plan` is a value. ``fuse`` and ``split`` return a new plan or raise
:class:`~workbench.errors.FusionRefused` with a reason; the old plan is untouched,
which is what makes undo and redo free.

Example::

    >>> p = Plan.singletons(g)                       # doctest: +SKIP
    >>> p2 = p.fuse(["n0", "n1"]); len(p2.groups)    # doctest: +SKIP
"""
from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

from ..errors import FusionRefused
from ..ir import Graph
from .schedule import Schedule, analyze


class StitchScheme(enum.Enum):
    """How an intermediate passes between two ops inside one kernel (FusionStitching)."""
    independent = "independent"   # no dependency: unrelated ops packed into one kernel
    local = "local"               # same thread, registers
    regional = "regional"         # same block: shared memory + block barrier
    global_ = "global"            # global memory + grid barrier (one wave only)


@dataclass(frozen=True)
class Group:
    """One kernel: its nodes (topological order), schedule, and each internal edge's
    stitch scheme as (value name, scheme) pairs."""
    id: str
    nodes: tuple[str, ...]
    schedule: Schedule
    schemes: tuple[tuple[str, StitchScheme], ...] = ()

    def scheme(self, value: str) -> StitchScheme | None:
        return dict(self.schemes).get(value)


def _schemes(g: Graph, nodes: tuple[str, ...], sched: Schedule):
    """Edges inside a group: a per-row result read by element-level code in a
    block-per-row kernel crosses threads, and a value the schedule keeps on chip for
    the row's later passes lives in shared memory (both regional); everything else
    stays in the thread that made it (local)."""
    members = set(nodes)
    out = []
    for nid in nodes:
        for o in g.node(nid).outputs:
            if not any(c.id in members for c in g.consumers[o]):
                continue
            crosses_threads = (sched.kind == "row_reduce" and sched.mapping == "block"
                               and o in sched.per_row
                               and any(c.id in members
                                       and all(x not in sched.per_row for x in c.outputs)
                                       for c in g.consumers[o]))
            regional = o in sched.row_cached or crosses_threads
            out.append((o, StitchScheme.regional if regional else StitchScheme.local))
    return tuple(out)


def make_group(g: Graph, nodes: Iterable[str]) -> Group:
    order = {n.id: i for i, n in enumerate(g.nodes)}
    ns = tuple(sorted(set(nodes), key=order.__getitem__))
    sched = analyze(g, ns)
    return Group(f"k{order[ns[0]]}", ns, sched, _schemes(g, ns, sched))


@dataclass(frozen=True, eq=False)
class Plan:
    """A partition of ``graph``'s nodes into groups, in a topological order of groups."""
    graph: Graph
    groups: tuple[Group, ...]
    planner: str = "manual"

    @staticmethod
    def singletons(g: Graph) -> "Plan":
        """One kernel per op (the ``none`` planner)."""
        return Plan(g, tuple(make_group(g, [n.id]) for n in g.nodes), "none")

    def __eq__(self, other) -> bool:
        return isinstance(other, Plan) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @cached_property
    def key(self) -> tuple:
        return tuple(sorted(gr.nodes for gr in self.groups))

    @cached_property
    def group_of(self) -> dict[str, Group]:
        return {n: gr for gr in self.groups for n in gr.nodes}

    def group(self, ref: str) -> Group:
        """A group by its id (``k3``) or by any node id in it (``n3``)."""
        for gr in self.groups:
            if gr.id == ref:
                return gr
        if ref in self.group_of:
            return self.group_of[ref]
        raise FusionRefused(f"no group or node {ref!r}; groups are "
                            + ", ".join(gr.id for gr in self.groups[:12])
                            + ("..." if len(self.groups) > 12 else ""))

    def __repr__(self) -> str:
        return f"Plan({self.graph.name!r}, {len(self.groups)} kernels, planner={self.planner!r})"

    # -- transformations -------------------------------------------------------
    def fuse(self, refs: Iterable[str], planner: str = "manual") -> "Plan":
        """Merge the groups holding these nodes/groups into one kernel, if legal."""
        refs = list(refs)
        if not refs:
            raise FusionRefused("nothing selected: pick at least two nodes to fuse")
        merged = {self.group(r).id: self.group(r) for r in refs}
        if len(merged) < 2:
            raise FusionRefused("the selection is already one kernel")
        nodes = {n for gr in merged.values() for n in gr.nodes}
        self._check_acyclic(nodes)
        new = make_group(self.graph, nodes)   # raises when no schedule fits
        return self._replace(set(merged), [new], planner)

    def split(self, ref: str, planner: str = "manual") -> "Plan":
        """Break the group holding ref back into one kernel per op."""
        gr = self.group(ref)
        if len(gr.nodes) == 1:
            raise FusionRefused(f"{gr.id} has one op; there is nothing to split")
        return self._replace({gr.id}, [make_group(self.graph, [n]) for n in gr.nodes], planner)

    def _replace(self, drop: set[str], add: list[Group], planner: str) -> "Plan":
        keep = [gr for gr in self.groups if gr.id not in drop] + add
        return Plan(self.graph, toposort_groups(self.graph, keep), planner)

    def _check_acyclic(self, nodes: set[str]) -> None:
        check_acyclic(self.graph, {gr.id: gr for gr in self.groups}, self.group_of, nodes)


def check_acyclic(g: Graph, groups: dict[str, Group], owner: dict[str, Group],
                  nodes: set[str]) -> None:
    """Refuse when merging ``nodes``' groups would make kernels depend on each other in
    a cycle.

    Kernels run as units, so the check walks the group graph: from the groups the
    selection feeds, follow consumers; reaching the selection again means some outside
    kernel both reads from it and feeds it.
    """
    def successors(node_ids):
        return {owner[c.id].id for n in node_ids for o in g.node(n).outputs
                for c in g.consumers[o]}

    merged = {owner[n].id for n in nodes}
    start = successors(nodes) - merged
    via = {s: s for s in start}
    stack = list(start)
    while stack:
        cur = stack.pop()
        for nxt in successors(groups[cur].nodes):
            if nxt in merged:
                first = groups[via[cur]]
                raise FusionRefused(
                    f"would create a cycle through {first.nodes[0]}"
                    + (f" (kernel {first.id})" if len(first.nodes) > 1 else "")
                    + ": it reads from the selection and feeds back into it")
            if nxt not in via:
                via[nxt] = via[cur]
                stack.append(nxt)


def toposort_groups(g: Graph, groups: list[Group]) -> tuple[Group, ...]:
    """Order groups so every group runs after the groups it reads from (Kahn's
    algorithm; among ready groups the one with the earliest node goes first, so the
    order is deterministic and close to the graph's)."""
    owner = {n: gr.id for gr in groups for n in gr.nodes}
    by_id = {gr.id: gr for gr in groups}
    succ: dict[str, set[str]] = {gr.id: set() for gr in groups}
    indeg = dict.fromkeys(by_id, 0)
    for gr in groups:
        for n in gr.nodes:
            for i in g.node(n).inputs:
                p = g.producer.get(i)
                if p is not None and owner[p.id] != gr.id and gr.id not in succ[owner[p.id]]:
                    succ[owner[p.id]].add(gr.id)
                    indeg[gr.id] += 1
    key = lambda k: int(k[1:])
    ready = [(key(k), k) for k, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(by_id[k])
        for nxt in succ[k]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                heapq.heappush(ready, (key(nxt), nxt))
    if len(order) != len(groups):
        raise FusionRefused("the plan's kernels depend on each other in a cycle")
    return tuple(order)
