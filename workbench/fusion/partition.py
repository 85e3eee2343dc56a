"""A planner's working state (:class:`Partition`) and its log (:class:`Decision`).

Planners work on a Partition -- a mutable table of node sets -- and build
:class:`~.plan.Group` values only for the final plan (and where legality needs a
schedule): re-analysing a growing group at every merge made a long chain quadratic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..ir import Graph
from ..ops import Kind, get_op
from .cycles import cycle_reason, cycle_via
from ..device import Device
from .plan import Plan, make_group, toposort_groups


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
            self._add(nodes)

    def copy(self) -> "Partition":
        p = Partition.__new__(Partition)
        p.g, p.index, p.kind = self.g, self.index, self.kind
        p.owner = dict(self.owner)
        p.members = dict(self.members)       # lists are never mutated once shared
        p.external = dict(self.external)
        p.reduces = dict(self.reduces)
        return p

    def adopt(self, other: "Partition") -> None:
        """Take the grouping of ``other`` (a copy of this one, changed as a trial)."""
        self.owner, self.members = other.owner, other.members
        self.external, self.reduces = other.external, other.reduces

    def _add(self, nodes: Iterable[str]) -> str:
        # in graph order: callers pass sets, whose order is their names' hash order and
        # differs per process; whatever reads a kernel's first member must not
        nodes = sorted(nodes, key=self.index.__getitem__)
        gid = f"k{self.index[nodes[0]]}"
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
        (:mod:`.cycles`, as ``Plan.fuse`` asks), or None.

        ``horizon``: groups whose every node comes after this node index can be
        skipped (the caller knows they cannot lead back into the selection)."""
        skip = None if horizon is None else (lambda gid: int(gid[1:]) > horizon)
        via = cycle_via(gids, self.successors, skip)
        if via is None:
            return None
        return cycle_reason(self.first(via), via, len(self.members[via]))

    def merge(self, gids: Iterable[str]) -> str:
        """Merge groups into one; returns its id. The largest group's nodes keep their
        entries where its id survives, so merging one op into a long chain is cheap."""
        gids = sorted(set(gids), key=lambda x: (-len(self.members[x]), int(x[1:])))
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
        return [self._add(ns) for ns in add]

    def key(self) -> frozenset:
        return frozenset(frozenset(v) for v in self.members.values())

    def to_plan(self, planner: str, device: Device, matmul_precision: str = "float32"
                ) -> Plan:
        tf32 = matmul_precision == "tf32"
        groups = [make_group(self.g, nodes, device=device, tf32=tf32)
                  for nodes in self.members.values()]
        return Plan(self.g, toposort_groups(self.g, groups), planner, device,
                    matmul_precision)
