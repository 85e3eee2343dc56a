"""Planners: whole-graph fusion decisions.

- ``none``: one kernel per op -- the baseline every speedup is measured against.
- ``xla``: the XLA/TVM baseline. Greedy producer-into-consumer fusion in which a
  reduction ends its kernel (XLA's reduction is a fusion root; TVM's reduce group
  takes no consumers): elementwise chains, and a reduction with its elementwise
  inputs. LayerNorm is several kernels.
- ``rules``: the same greedy walk with the row-reduction template: each op tries to
  join the kernel of each of its producers; the join happens when the producer is not
  a library call and the merged group is legal (acyclic, and one schedule template
  fits: elementwise chains, a reduction with its elementwise inputs *and consumers* --
  the per-row result reaches them through shared memory, regional stitching inside
  one template -- and reductions over the same rows such as LayerNorm's two means).
  Every decision is logged with its reason.
- ``stitch``: FusionStitching/AStitch-style, scored by the cost model (see
  :mod:`workbench.fusion.stitch`).

Planners work on a :class:`Partition` -- a mutable table of node sets -- and build
:class:`Group` values only for the final plan (and where legality needs a schedule):
re-analysing a growing group at every merge made a long chain quadratic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..errors import FusionRefused, WorkbenchError
from ..ir import Graph
from ..ops import Kind, get_op
from .plan import Plan, make_group, toposort_groups
from .schedule import analyze


@dataclass(frozen=True)
class Decision:
    """One planner decision, for people: what was tried, what happened and why."""
    action: str      # fused | not fused | split | mapped | kept | seed | dominant
    nodes: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        nodes = f" {' + '.join(self.nodes)}" if self.nodes else ""
        return f"{self.action}{nodes}: {self.reason}"


class Partition:
    """A planner's working state: which group each node is in, each group's nodes and
    the nodes outside it that read from it -- all updated incrementally on merges
    (small into large), so a long chain of merges stays near-linear.

    Group ids are ``k<index of the group's first node>``, as ``make_group`` names them;
    ``members`` lists are in no particular order until :meth:`to_plan`.
    """

    def __init__(self, g: Graph, groups: Iterable[Iterable[str]] | None = None):
        self.g = g
        self.index = g.position
        self.kind = {n.id: get_op(n.op).kind for n in g.nodes}
        self.owner: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.external: dict[str, set[str]] = {}      # group -> consumer nodes outside it
        self.reduces: dict[str, int] = {}            # group -> reductions in it
        for nodes in (groups if groups is not None else ([n.id] for n in g.nodes)):
            self._add(list(nodes))

    def copy(self) -> "Partition":
        p = Partition.__new__(Partition)
        p.g, p.index, p.kind = self.g, self.index, self.kind
        p.owner = dict(self.owner)
        p.members = dict(self.members)       # lists are never mutated once shared
        p.external = dict(self.external)
        p.reduces = dict(self.reduces)
        return p

    def _add(self, nodes: list[str]) -> str:
        gid = f"k{min(self.index[n] for n in nodes)}"
        mine = set(nodes)
        self.members[gid] = nodes
        self.external[gid] = {c.id for n in nodes for o in self.g.node(n).outputs
                              for c in self.g.consumers[o] if c.id not in mine}
        self.reduces[gid] = sum(self.kind[n] is Kind.reduce for n in nodes)
        for n in nodes:
            self.owner[n] = gid
        return gid

    def _drop(self, gid: str) -> list[str]:
        del self.external[gid], self.reduces[gid]
        return self.members.pop(gid)

    def first(self, gid: str) -> str:
        """The group's node that comes first in the graph."""
        return min(self.members[gid], key=self.index.__getitem__)

    def has_reduce(self, gid: str) -> bool:
        return self.reduces[gid] > 0

    def successors(self, gid: str) -> set[str]:
        return {self.owner[c] for c in self.external[gid]}

    def predecessors(self, gid: str) -> set[str]:
        out = set()
        for n in self.members[gid]:
            for i in self.g.node(n).inputs:
                p = self.g.producer.get(i)
                if p is not None and self.owner[p.id] != gid:
                    out.add(self.owner[p.id])
        return out

    def cycle(self, gids: set[str], horizon: int | None = None) -> str | None:
        """Why merging these groups would make kernels depend on each other in a cycle
        (the same search and message as ``plan.check_acyclic``), or None.

        ``horizon``: groups whose every node comes after this node index can be
        skipped (the caller knows they cannot lead back into the selection)."""
        start = set().union(*(self.successors(x) for x in gids)) - gids
        via = {s: s for s in start}
        stack = [s for s in start if not self._beyond(s, horizon)]
        while stack:
            cur = stack.pop()
            for nxt in self.successors(cur):
                if nxt in gids:
                    first = via[cur]
                    return (f"would create a cycle through {self.first(first)}"
                            + (f" (kernel {first})" if len(self.members[first]) > 1
                               else "")
                            + ": it reads from the selection and feeds back into it")
                if nxt not in via:
                    via[nxt] = via[cur]
                    if not self._beyond(nxt, horizon):
                        stack.append(nxt)
        return None

    def _beyond(self, gid: str, horizon: int | None) -> bool:
        return horizon is not None and int(gid[1:]) > horizon

    def merge(self, gids: Iterable[str]) -> str:
        """Merge groups into one; returns its id. The largest group's nodes keep their
        entries where its id survives, so merging one op into a long chain is cheap."""
        gids = sorted(set(gids), key=lambda x: -len(self.members[x]))
        big = gids[0]
        gid = f"k{min(int(x[1:]) for x in gids)}"
        nodes = list(self.members[big])       # (lists may be shared with copies)
        ext = set(self.external[big])
        red = 0
        moved = []
        for x in gids:
            red += self.reduces[x]
            if x != big:
                moved.extend(self.members[x])
                ext |= self.external[x]
            self._drop(x)
        nodes.extend(moved)
        for n in (moved if gid == big else nodes):
            self.owner[n] = gid
        self.members[gid] = nodes
        self.external[gid] = {c for c in ext if self.owner[c] != gid}
        self.reduces[gid] = red
        return gid

    def replace(self, drop: Iterable[str], add: Iterable[Iterable[str]]) -> list[str]:
        """Drop groups and add others (node sets)."""
        for x in set(drop):
            self._drop(x)
        return [self._add(list(ns)) for ns in add]

    def key(self) -> frozenset:
        return frozenset(frozenset(v) for v in self.members.values())

    def to_plan(self, planner: str) -> Plan:
        groups = [make_group(self.g, nodes) for nodes in self.members.values()]
        return Plan(self.g, toposort_groups(self.g, groups), planner)


def plan_none(g: Graph, model=None) -> tuple[Plan, list[Decision]]:
    return Plan.singletons(g), []


def rules_partition(g: Graph, reduction_ends_kernel: bool = False
                    ) -> tuple[Partition, list[Decision]]:
    """The ``rules`` planner's partition and log (see the module docstring); with
    ``reduction_ends_kernel``, the ``xla`` planner's.

    Equivalent to merging with ``make_group`` and ``check_acyclic`` at every step, but
    linear on long chains: two groups without reductions always merge into one
    elementwise kernel (so no schedule is analysed until the end; a merge with a
    reduction is checked by ``analyze``), the groups are made once at the end, and the
    cycle search skips groups of nodes not yet visited -- such a group holds one op
    that reads only from earlier ops, and can only feed ops later still, never the
    selection.
    """
    part = Partition(g)
    log: list[Decision] = []
    for node in g.nodes:
        if part.kind[node.id] is Kind.opaque:
            continue
        here = part.index[node.id]
        for i in dict.fromkeys(node.inputs):
            prod = g.producer.get(i)
            if prod is None or part.kind[prod.id] is Kind.opaque:
                continue
            mine, theirs = part.owner[node.id], part.owner[prod.id]
            if mine == theirs:
                continue
            why = part.cycle({mine, theirs}, horizon=here)
            if why is None and reduction_ends_kernel and part.has_reduce(theirs):
                why = ("a reduction ends its kernel (XLA/TVM): its consumers start a "
                       "new one")
            if why is None and (part.has_reduce(mine) or part.has_reduce(theirs)):
                try:
                    analyze(g, tuple(sorted(part.members[mine] + part.members[theirs],
                                            key=part.index.__getitem__)))
                except FusionRefused as e:
                    why = str(e)
            if why is not None:
                log.append(Decision("not fused", (prod.id, node.id), why))
                continue
            part.merge({mine, theirs})
            log.append(Decision("fused", (prod.id, node.id),
                                f"{prod.op} into {node.op}: {i} stays on chip"))
    return part, log


def plan_rules(g: Graph, model=None) -> tuple[Plan, list[Decision]]:
    part, log = rules_partition(g)
    return part.to_plan("rules"), log


def plan_xla(g: Graph, model=None) -> tuple[Plan, list[Decision]]:
    part, log = rules_partition(g, reduction_ends_kernel=True)
    return part.to_plan("xla"), log


def _plan_stitch(g: Graph, model=None) -> tuple[Plan, list[Decision]]:
    from .stitch import plan_stitch
    return plan_stitch(g, model)


PLANNERS = {"none": plan_none, "xla": plan_xla, "rules": plan_rules,
            "stitch": _plan_stitch}


def run_planner(name: str, g: Graph, model=None) -> tuple[Plan, list[Decision]]:
    """A planner's plan of g and its decisions. ``model`` (a CostModel) is what the
    cost-driven planners score with; the others ignore it."""
    try:
        fn = PLANNERS[name]
    except KeyError:
        raise WorkbenchError(f"unknown planner {name!r}; choose one of "
                             f"{', '.join(PLANNERS)}") from None
    return fn(g, model)
