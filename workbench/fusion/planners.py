"""Planners: whole-graph fusion decisions.

- ``none``: one kernel per op -- the baseline every speedup is measured against.
- ``rules``: XLA/TVM-style greedy fusion. Walking the graph in topological order,
  each op tries to join the kernel of each of its producers; the join happens when the
  producer is not a library call and the merged group is legal (acyclic, and one
  schedule template fits: elementwise chains, a reduction with its elementwise inputs
  and outputs, and reductions over the same rows such as LayerNorm's two means).
  Every decision is logged with its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import FusionRefused, WorkbenchError
from ..ir import Graph
from ..ops import Kind, get_op
from .plan import Plan, check_acyclic, make_group, toposort_groups


@dataclass(frozen=True)
class Decision:
    """One planner decision, for people: what was tried, what happened and why."""
    action: str      # fused | not fused
    nodes: tuple[str, ...]
    reason: str

    def __str__(self) -> str:
        return f"{self.action} {' + '.join(self.nodes)}: {self.reason}"


def plan_none(g: Graph) -> tuple[Plan, list[Decision]]:
    return Plan.singletons(g), []


def plan_rules(g: Graph) -> tuple[Plan, list[Decision]]:
    # Works on a table of groups and orders them once at the end: sorting after every
    # merge made planning quadratic in the number of kernels.
    start = Plan.singletons(g)
    groups = {gr.id: gr for gr in start.groups}
    owner = dict(start.group_of)
    log: list[Decision] = []
    for node in g.nodes:
        if get_op(node.op).kind is Kind.opaque:
            continue
        for i in dict.fromkeys(node.inputs):
            prod = g.producer.get(i)
            if prod is None or get_op(prod.op).kind is Kind.opaque:
                continue
            mine, theirs = owner[node.id], owner[prod.id]
            if mine.id == theirs.id:
                continue
            nodes = set(mine.nodes) | set(theirs.nodes)
            try:
                check_acyclic(g, groups, owner, nodes)
                new = make_group(g, nodes)       # refuses when no schedule fits
            except FusionRefused as e:
                log.append(Decision("not fused", (prod.id, node.id), str(e)))
                continue
            del groups[mine.id], groups[theirs.id]
            groups[new.id] = new
            owner.update(dict.fromkeys(new.nodes, new))
            log.append(Decision("fused", (prod.id, node.id),
                                f"{prod.op} into {node.op}: {i} stays on chip"))
    return Plan(g, toposort_groups(g, list(groups.values())), "rules"), log


PLANNERS = {"none": plan_none, "rules": plan_rules}


def run_planner(name: str, g: Graph) -> tuple[Plan, list[Decision]]:
    try:
        fn = PLANNERS[name]
    except KeyError:
        raise WorkbenchError(f"unknown planner {name!r}; choose one of "
                             f"{', '.join(PLANNERS)}") from None
    return fn(g)
