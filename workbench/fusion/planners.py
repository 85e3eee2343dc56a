"""The planner registry: whole-graph fusion plans by name.

- ``none``, ``xla``, ``rules``: greedy (:mod:`.greedy`);
- ``stitch``: FusionStitching/AStitch-style, scored by the cost model (:mod:`.stitch`).

A planner is a function ``(graph, model, device, matmul_precision) -> (plan,
decisions)``; adding one is one entry in :data:`PLANNERS`.
"""
from __future__ import annotations

from ..errors import WorkbenchError
from ..ir import Graph
from ..device import DEFAULT_DEVICE, Device
from .greedy import plan_none, plan_rules, plan_xla
from .partition import Decision
from .plan import Plan, check_precision
from .stitch import plan_stitch

PLANNERS = {"none": plan_none, "xla": plan_xla, "rules": plan_rules,
            "stitch": plan_stitch}


def run_planner(name: str, g: Graph, model=None, device: Device | None = None,
                matmul_precision: str = "float32") -> tuple[Plan, list[Decision]]:
    """A planner's plan of g and its decisions, for ``device`` (default: the model's,
    else the default GPU) at ``matmul_precision`` ("tf32": float32 matmuls may round to
    TF32 on tensor cores). ``model`` (a CostModel) is what the cost-driven planners
    score with; the others ignore it."""
    try:
        fn = PLANNERS[name]
    except (KeyError, TypeError):      # (a list or None is no planner name either)
        raise WorkbenchError(f"unknown planner {name!r}; choose one of "
                             f"{', '.join(PLANNERS)}") from None
    check_precision(matmul_precision)
    device = device or (model.device if model is not None else DEFAULT_DEVICE)
    return fn(g, model, device, matmul_precision)


__all__ = ["Decision", "PLANNERS", "run_planner"]
