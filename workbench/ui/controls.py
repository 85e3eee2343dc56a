"""The app's controls, made: the toolbar's buttons with their tooltips, the drop-downs
and boxes beside them, and the progress bar of the status line.

Each function makes one control as the app starts; the app wires them to its methods.
The drop-downs carry stable CSS classes (``wb-planner``, ``wb-edge-choice``...) that
the browser tests select by.

Example::

    >>> buttons = action_buttons()                       # doctest: +SKIP
    >>> buttons["Fuse"].tooltip                          # doctest: +SKIP
    'fuse the selected nodes into one kernel'
"""
from __future__ import annotations

import ipywidgets as w

from ..fusion import MAPPINGS, PLANNERS, StitchScheme
from ..fusion.plan import MATMUL_PRECISIONS
from .graph_view import GraphView

OVERLAYS = ("none", "latency", "bytes")


def button(description: str, tooltip: str, icon: str = "") -> w.Button:
    return w.Button(description=description, tooltip=tooltip, icon=icon,
                    layout=w.Layout(width="auto"))


def action_buttons() -> dict[str, w.Button]:
    """The toolbars' buttons by name: Cancel hidden until a job runs, Set scheme and
    Set mapping disabled until a kernel is selected."""
    buttons = {
        "Fuse": button("Fuse", "fuse the selected nodes into one kernel"),
        "Split": button("Split", "split the selected node's kernel into one per op"),
        "Auto": button("Auto", "replace the plan with the planner's"),
        "Undo": button("Undo", "go back one step"),
        "Redo": button("Redo", "go forward one step"),
        "Measure": button("Measure", "compile, check against NumPy and time this step "
                          "(runs in the background: Cancel stops it)"),
        "Tune": button("Tune", "search each kernel's launch parameters by measurement "
                       "(a new step; cached per device and kernel)"),
        "Export": button("Export", "write the current plan as an artifact"),
        "Overwrite": button("Overwrite", "replace the artifact already at this path "
                            "with the current plan"),
        "Set scheme": button("Set scheme", "stitch scheme of the chosen internal edge"),
        "Set mapping": button("Set mapping", "how the selected row-reduction kernel's "
                              "rows meet threads (auto: the AStitch rule)"),
        "Cancel": button("Cancel", "stop the running Measure or Tune (nothing is "
                         "recorded)", icon="stop"),
    }
    buttons["Cancel"].layout.display = "none"
    buttons["Cancel"].button_style = "warning"
    # shown when an Export finds its path taken (the refusal says so)
    buttons["Overwrite"].layout.display = "none"
    buttons["Overwrite"].button_style = "warning"
    buttons["Set scheme"].disabled = True
    buttons["Set mapping"].disabled = True
    return buttons


def search_box() -> w.Text:
    return w.Text(placeholder="select by name or op", continuous_update=False,
                  layout=w.Layout(width="160px"))


def planner_choice() -> w.Dropdown:
    planner = w.Dropdown(options=list(PLANNERS), value="rules" if "rules" in PLANNERS
                         else list(PLANNERS)[0], layout=w.Layout(width="110px"))
    planner.add_class("wb-planner")          # (stable selectors for the browser tests)
    return planner


def matmul_choice(precision: str) -> w.Dropdown:
    """What float32 matmuls may round to (TF32: tensor cores); changing it is a step."""
    matmuls = w.Dropdown(options=MATMUL_PRECISIONS, value=precision,
                         description="matmuls", layout=w.Layout(width="160px"),
                         style={"description_width": "initial"},
                         tooltip="float32: exact; tf32: tensor cores, operands "
                         "rounded to 10 mantissa bits (a new step; Undo goes back)")
    matmuls.add_class("wb-matmuls")
    return matmuls


def overlay_choice() -> w.Dropdown:
    overlay = w.Dropdown(options=OVERLAYS, value="none", description="color",
                         layout=w.Layout(width="150px"),
                         style={"description_width": "40px"})
    overlay.add_class("wb-overlay")
    return overlay


def export_path_box(graph_name: str) -> w.Text:
    return w.Text(value=f"{_safe_name(graph_name)}_artifact",
                  layout=w.Layout(width="160px"))


def edge_choice() -> w.Dropdown:
    """The internal edges of the selected kernel, named as the drawing shows them."""
    edge = w.Dropdown(options=[], description="edge", layout=w.Layout(width="300px"),
                      style={"description_width": "36px"}, disabled=True)
    edge.add_class("wb-edge-choice")
    return edge


def scheme_choice() -> w.Dropdown:
    # (independent is how unrelated ops share a kernel, never an edge's scheme: not
    # offered; the app narrows the list to what the chosen edge accepts)
    scheme = w.Dropdown(options=[s.value for s in StitchScheme
                                 if s is not StitchScheme.independent],
                        layout=w.Layout(width="120px"), disabled=True)
    scheme.add_class("wb-scheme")
    return scheme


def mapping_choice() -> w.Dropdown:
    mapping = w.Dropdown(options=("auto",) + tuple(m.value for m in MAPPINGS),
                         value="auto",
                         description="rows", layout=w.Layout(width="150px"),
                         style={"description_width": "40px"}, disabled=True)
    mapping.add_class("wb-mapping")
    return mapping


def collapse_toggle(view: GraphView) -> w.ToggleButton:
    return w.ToggleButton(
        value=bool(view.collapsed), description="Collapse composites",
        tooltip="draw each LayerNorm, GELU... as one box (double-click a box to toggle it)",
        layout=w.Layout(width="auto"), disabled=not view.composites)


def progress_bar() -> w.IntProgress:
    progress = w.IntProgress(min=0, max=1, value=0, bar_style="info",
                             style={"description_width": "initial"},
                             layout=w.Layout(display="none", width="240px"))
    progress.add_class("wb-progress")
    return progress


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:40] or "graph"
