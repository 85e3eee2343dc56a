"""What the app's controls show, read from the session's current step, so they never
name a state the drawing does not have: the planner that made the current plan (after
Undo too), the stitch schemes an edge may take (no choice that will be refused), the
export name a model suggests, and whether an export path is taken.

Example::

    >>> planner_of(session)                             # doctest: +SKIP
    'stitch'
    >>> allowed_schemes(session.plan, "t3")             # doctest: +SKIP
    ['local', 'regional', 'global']
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import WorkbenchError
from ..fusion import PLANNERS, StitchScheme
from ..fusion.plan import Plan

# graph names exporters give every model: the file's or module's name says more
GENERIC_NAMES = {"main_graph", "torch_jit", "torch-jit-export", "onnx_model", "graph",
                 "model", ""}


def planner_of(session) -> str | None:
    """The planner whose plan the current step builds on: the last ``auto`` step at or
    before it (edits after it keep its name), ``none`` (one kernel per op) when the
    history holds no such step; None for a planner the drop-down does not list."""
    for step in reversed(session.history[:session.position + 1]):
        if step.action.startswith("auto "):
            name = step.action.split(" ", 1)[1]
            return name if name in PLANNERS else None
    return "none" if "none" in PLANNERS else None


def allowed_schemes(plan: Plan, value: str) -> list[str]:
    """The stitch schemes ``value`` (an edge inside a kernel) can be given: its current
    one and each the plan accepts (``independent`` never applies to an edge, and e.g.
    ``local`` is refused for a row result read across threads)."""
    gr = plan.group_of.get(getattr(plan.graph.producer.get(value), "id", None))
    current = gr.scheme(value) if gr is not None else None
    out = []
    for sc in StitchScheme:
        if sc is current:
            out.append(sc.value)
            continue
        try:
            plan.set_scheme(value, sc)
        except WorkbenchError:
            continue
        out.append(sc.value)
    return out


def export_name(graph_name: str, source=None) -> str:
    """The export box's first name: the model file's stem when the app opened a file
    and the graph's own name is one every exporter writes (torch's ``main_graph``),
    else the graph's name; ``_artifact`` appended, in safe characters."""
    name = graph_name
    if isinstance(source, (str, os.PathLike)) and graph_name.strip() in GENERIC_NAMES:
        name = Path(os.fspath(source)).stem
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:40] or "graph"
    return f"{safe}_artifact"


def taken(path) -> bool:
    """Whether an export to ``path`` would be refused without ``force``: something
    non-empty is there (what the artifact writer refuses)."""
    p = Path(os.fspath(path))
    if p.is_dir():
        return any(p.iterdir())
    return p.exists() or p.is_symlink()
