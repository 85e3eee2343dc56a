"""Sentences and labels the app shows: counts with the right plural, a kernel's
internal edges named the way the drawing shows them, a planner's result, the first
status line and what a change of matmul precision did.

Pure functions of session, graph, plan and decisions, so each wording is tested
without widgets.

Example::

    >>> plural(1, "kernel"), plural(121, "kernel")
    ('1 kernel', '121 kernels')
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

from ..dtypes import DType
from ..fusion import Decision, Group, Plan
from ..fusion.actions import edge_text
from ..ir import Graph
from ..session import Session


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 kernel``, ``2 kernels``; thousands grouped (``1,020 ops``)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def edge_label(g: Graph, group: Group, value: str) -> str:
    """An edge inside ``group`` as the drawing shows it: ``reduce_mean n0 → sub n1``
    (its other readers inside the kernel counted), with its current scheme."""
    sc = group.scheme(value)
    return edge_text(g, group, value) + (f" ({sc.value})" if sc is not None else "")


def edge_choices(g: Graph, group: Group | None) -> list[tuple[str, str]]:
    """(label, value name) of every edge inside ``group`` whose stitch scheme can be
    set, in the kernel's order; empty for a single-op kernel or none."""
    if group is None:
        return []
    return [(edge_label(g, group, v), v) for v, _ in group.schemes]


def planner_summary(planner: str, g: Graph, plan: Plan,
                    decisions: Iterable[Decision]) -> str:
    """What a planner did: ops into kernels, how many of them fused, and its log by
    kind (the stitch planner starts from the rules plan, so its log holds only what
    it changed beside the seed: counting ``fused`` entries alone said "0")."""
    fused = [gr for gr in plan.groups if len(gr.nodes) > 1]
    in_fused = sum(len(gr.nodes) for gr in fused)
    counts = Counter(d.action for d in decisions)
    log = ", ".join(f"{n} {a}" for a, n in counts.most_common())
    return (f"auto {planner}: {plural(len(g.nodes), 'op')} in "
            f"{plural(len(plan.groups), 'kernel')} ({plural(in_fused, 'op')} fused into "
            f"{plural(len(fused), 'kernel')})"
            + (f"; {plural(sum(counts.values()), 'planner decision')}: {log}" if log else ""))


def opening_line(session: Session) -> str:
    """The app's first status line: the graph, the backend, and what to do first."""
    return (f"{session.graph.name}: {plural(len(session.graph.nodes), 'op')}, "
            f"backend {session.backend.name}"
            + (", float32 matmuls in TF32" if session.tf32 else "")
            + ". Click nodes to select "
            "(shift-click adds), then Fuse; or Auto.")


def precision_summary(session: Session, precision: str) -> str:
    """The status line after the matmul precision changed: what the matmuls now run
    in, and why not TF32 where there are no tensor cores for it."""
    step = f"step {session.position}: matmul precision {precision}"
    kernels = plural(len(session.plan.groups), "kernel")
    g = session.graph
    mm = sum(1 for n in g.nodes
             if n.op == "matmul" and g.value(n.inputs[0]).dtype is DType.float32)
    if precision == "tf32" and not session.tf32:
        what = "CPU" if not session.device.is_gpu else "device"
        return (f"{step}; this {what} ({session.device.name}) has no TF32 tensor cores: "
                f"matmuls stay float32; {kernels}")
    if mm == 0:
        return f"{step}; no float32 matmul in this graph, so its kernels compute as before"
    if precision == "tf32":
        return (f"{step}, float32 matmuls in TF32 ({plural(mm, 'matmul')} on tensor cores, "
                f"operands rounded to 10 mantissa bits); {kernels}")
    return f"{step}, float32 matmuls exact ({plural(mm, 'matmul')}); {kernels}"
