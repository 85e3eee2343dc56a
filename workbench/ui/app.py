"""The notebook app: graph view, controls, code panel and plots over one Session.

Every control has a Python method with the same effect, so a notebook can replay a
session (``app.fuse([...])``, ``app.split(...)``, ``app.auto("rules")``,
``app.set_matmul_precision("tf32")``, ``app.undo()``, ``app.measure()``,
``app.export(path)``). A refused action sets
``app.message`` to the reason (shown inline), returns ``None`` and changes nothing:
not the plan, not the drawing.

Example::

    >>> import workbench as wb
    >>> app = wb.open("sample_graphs/layernorm.json", backend="cpu")   # doctest: +SKIP
    >>> app.select("reduce_mean"); app.fuse(); app.measure()             # doctest: +SKIP
    >>> app.history[["step", "action", "kernels", "latency_ms"]]         # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import functools
import html
import math
import os
import threading
import warnings
from typing import Iterable

import ipywidgets as w
import pandas as pd

from ..errors import WorkbenchError
from ..fusion import MAPPINGS, PLANNERS, Plan, ScheduleKind, StitchScheme
from ..fusion.actions import Action
from ..fusion.plan import MATMUL_PRECISIONS
from ..dtypes import DType
from ..measure import StepMeasurement
from ..session import Session
from .charts import KernelRow
from .code_panel import CodePanel
from .describe import edge_choices, edge_label, planner_summary, plural
from .dot import Overlay
from .graph_view import GraphView
from .jobs import Job
from .plots import Plots
from .transform_panel import TransformPanel
from .properties import empty_html, node_properties

OVERLAYS = ("none", "latency", "bytes")


def _action(method):
    """An app action: a WorkbenchError becomes the inline refusal message and the
    action returns None (the session refuses before changing anything, so nothing is
    redrawn; if a step was taken before the error -- the compiler failed -- it is
    shown)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        before = self.session.plan
        try:
            self._check_not_busy()
            return method(self, *args, **kwargs)
        except WorkbenchError as e:
            if self.session.plan is not before:
                self._refresh()
            self._set_message(str(e), refused=True)
            return None
    return run


def _button(description: str, tooltip: str, icon: str = "") -> w.Button:
    return w.Button(description=description, tooltip=tooltip, icon=icon,
                    layout=w.Layout(width="auto"))


class WorkbenchApp(w.VBox):
    """One widget: controls, message line, graph view beside code panel, plots."""

    def __init__(self, session: Session):
        self.session = session
        self._chain_progress = session.progress
        session.progress = self._on_progress   # programs built from now on report here
        self.view = GraphView(session.plan)
        # the panel shows the session's own kernels: what Measure runs
        self.code = CodePanel(lambda plan, gr: session.kernel(gr.id, plan), self._kernel_info)
        self.plots = Plots()
        self.props = w.HTML(empty_html())      # the selected node's properties (Netron's)
        self.props.add_class("wb-props-panel")
        self.code.children = (self.props, *self.code.children)   # above the kernel header
        self._last_group: str | None = None     # what the code panel shows with no selection
        self._edge_choice: str | None = None    # the edge last chosen in the drop-down

        # -- controls --------------------------------------------------------------
        self.search = w.Text(placeholder="select by name or op", continuous_update=False,
                             layout=w.Layout(width="160px"))
        self.buttons = {
            "Fuse": _button("Fuse", "fuse the selected nodes into one kernel"),
            "Split": _button("Split", "split the selected node's kernel into one per op"),
            "Auto": _button("Auto", "replace the plan with the planner's"),
            "Undo": _button("Undo", "go back one step"),
            "Redo": _button("Redo", "go forward one step"),
            "Measure": _button("Measure", "compile, check against NumPy and time this step "
                               "(runs in the background: Cancel stops it)"),
            "Tune": _button("Tune", "search each kernel's launch parameters by measurement "
                            "(a new step; cached per device and kernel)"),
            "Export": _button("Export", "write the current plan as an artifact"),
            "Set scheme": _button("Set scheme", "stitch scheme of the chosen internal edge"),
            "Set mapping": _button("Set mapping", "how the selected row-reduction kernel's "
                                   "rows meet threads (auto: the AStitch rule)"),
            "Cancel": _button("Cancel", "stop the running Measure or Tune (nothing is "
                              "recorded)", icon="stop"),
        }
        self.buttons["Cancel"].layout.display = "none"
        self.buttons["Cancel"].button_style = "warning"
        self._job: Job | None = None
        self._job_lock = threading.Lock()
        self.repeats = 10     # Measure's timed runs (the median is reported)
        # Measure also reads each kernel's DRAM bytes from the hardware counters (Nsight
        # Compute) on a GPU backend, shown beside the counted bytes; settable
        self.counters = session.backend.target == "cuda" and not session.backend.emulated
        self.planner = w.Dropdown(options=list(PLANNERS), value="rules" if "rules" in PLANNERS
                                  else list(PLANNERS)[0], layout=w.Layout(width="110px"))
        # what float32 matmuls may round to (TF32: tensor cores); changing it is a step
        self.matmuls = w.Dropdown(options=MATMUL_PRECISIONS, value=session.matmul_precision,
                                  description="matmuls", layout=w.Layout(width="160px"),
                                  style={"description_width": "initial"},
                                  tooltip="float32: exact; tf32: tensor cores, operands "
                                  "rounded to 10 mantissa bits (a new step; Undo goes back)")
        self.overlay = w.Dropdown(options=OVERLAYS, value="none", description="color",
                                  layout=w.Layout(width="150px"),
                                  style={"description_width": "40px"})
        self.export_path = w.Text(value=f"{_safe_name(session.graph.name)}_artifact",
                                  layout=w.Layout(width="160px"))
        # internal edges of the selected kernel, named as the drawing shows them
        self.edge = w.Dropdown(options=[], description="edge", layout=w.Layout(width="300px"),
                               style={"description_width": "36px"}, disabled=True)
        self.scheme = w.Dropdown(options=[s.value for s in StitchScheme],
                                 layout=w.Layout(width="120px"), disabled=True)
        self.buttons["Set scheme"].disabled = True
        self.mapping = w.Dropdown(options=("auto",) + tuple(m.value for m in MAPPINGS),
                                  value="auto",
                                  description="rows", layout=w.Layout(width="150px"),
                                  style={"description_width": "40px"}, disabled=True)
        self.buttons["Set mapping"].disabled = True
        self.collapse_toggle = w.ToggleButton(
            value=bool(self.view.collapsed), description="Collapse composites",
            tooltip="draw each LayerNorm, GELU... as one box (double-click a box to toggle it)",
            layout=w.Layout(width="auto"), disabled=not self.view.composites)
        for c, cls in ((self.planner, "wb-planner"), (self.matmuls, "wb-matmuls"),
                       (self.overlay, "wb-overlay"),
                       (self.edge, "wb-edge-choice"), (self.scheme, "wb-scheme"),
                       (self.mapping, "wb-mapping")):
            c.add_class(cls)          # (stable selectors for the browser tests)
        self._message = w.HTML()
        self._message.add_class("wb-message")
        self._message_lock = threading.Lock()
        self.progress = w.IntProgress(min=0, max=1, value=0, bar_style="info",
                                      style={"description_width": "initial"},
                                      layout=w.Layout(display="none", width="240px"))
        self.progress.add_class("wb-progress")
        b = self.buttons
        # a control and its button wrap together (a lone "Set mapping" took a row)
        together = lambda *cs: w.HBox(list(cs), layout=w.Layout(flex_flow="row nowrap",
                                                                 flex="0 0 auto"))
        toolbar = w.HBox([together(self.search, b["Fuse"], b["Split"]),
                          together(self.planner, b["Auto"], self.matmuls, b["Undo"],
                                   b["Redo"]),
                          together(b["Measure"], b["Tune"], b["Cancel"]),
                          together(self.export_path, b["Export"])],
                         layout=w.Layout(flex_flow="row wrap"))
        toolbar2 = w.HBox([together(self.overlay, self.collapse_toggle),
                           together(self.edge, self.scheme, b["Set scheme"]),
                           together(self.mapping, b["Set mapping"])],
                          layout=w.Layout(flex_flow="row wrap"))
        toolbar.add_class("wb-toolbar")
        toolbar2.add_class("wb-toolbar")
        status = w.HBox([self.progress, self._message, _app_style()])
        self.view.layout = w.Layout(flex="3 1 0%", min_width="0")
        self.code.layout = w.Layout(flex="2 1 0%", min_width="0")
        main = w.HBox([self.view, self.code])
        main.add_class("wb-main")   # (CSS: the two panels share one height)
        # what applies to the selection (preview, apply), the clickable history and the
        # planner's decisions, folded away until opened
        self.transforms = TransformPanel(session, lambda: self.selected, self._on_preview,
                                         self._apply_action, self.goto)
        self.transforms_box = w.Accordion(children=[self.transforms], selected_index=None)
        self.transforms_box.set_title(0, "Transformations · History · Decisions")
        super().__init__([toolbar, toolbar2, status, main, self.transforms_box, self.plots])
        self.add_class("wb-app")

        b["Fuse"].on_click(lambda _: self.fuse())
        b["Split"].on_click(lambda _: self.split())
        b["Auto"].on_click(lambda _: self.auto(self.planner.value))
        b["Undo"].on_click(lambda _: self.undo())
        b["Redo"].on_click(lambda _: self.redo())
        # long actions run on a worker thread: the app answers while they run
        b["Measure"].on_click(lambda _: self.start("measure"))
        b["Tune"].on_click(lambda _: self.start("tune"))
        b["Cancel"].on_click(lambda _: self.cancel())
        b["Export"].on_click(lambda _: self.export(self.export_path.value))
        b["Set scheme"].on_click(lambda _: self.set_scheme(self.edge.value, self.scheme.value))
        b["Set mapping"].on_click(lambda _: self.set_mapping(None, self.mapping.value))
        self.search.observe(lambda ch: ch["new"] and self.select(ch["new"]), "value")
        self.matmuls.observe(self._on_matmuls, "value")
        self.overlay.observe(lambda ch: self._on_overlay(), "value")
        self.collapse_toggle.observe(self._on_collapse_toggle, "value")
        self.edge.observe(lambda ch: self._show_edge_scheme(), "value")
        self.view.observe(lambda ch: self._on_selection(), "selected")
        self._set_message(f"{session.graph.name}: {plural(len(session.graph.nodes), 'op')}, "
                          f"backend {session.backend.name}"
                          + (", float32 matmuls in TF32" if session.tf32 else "")
                          + ". Click nodes to select "
                          "(shift-click adds), then Fuse; or Auto.")
        self._refresh(redraw=False)

    # -- selection -----------------------------------------------------------------
    @property
    def selected(self) -> list[str]:
        """Selected node ids, in sync with clicks in the view."""
        return list(self.view.selected)

    @selected.setter
    def selected(self, ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(ids))
        known = self.session.graph.node_map
        bad = [i for i in ids if i not in known]
        if bad:
            raise WorkbenchError(f"no node {bad[0]!r} in {self.session.graph.name!r}; node ids "
                                 f"are n0..n{len(known) - 1} (use app.select('name or op'))")
        self.view.selected = ids

    def select(self, query: str) -> list[str]:
        """Select the nodes whose id equals ``query`` or whose op, name or composite
        contains it (case-insensitive), like the search box; returns their ids."""
        q = query.strip().lower()
        hits = [n.id for n in self.session.graph.nodes
                if q and (n.id == q or q in n.op.lower() or q in n.name.lower()
                          or (n.origin is not None and (q in n.origin.composite.lower()
                                                        or q in n.origin.source.lower())))]
        self.view.selected = hits
        shown = ""
        if hits:   # like Model Explorer: open the boxes hiding the first match, centre it
            self.view.focus_on(hits[0])
            shown = f"; showing {hits[0]} (kernel {self.session.plan.group(hits[0]).id})"
        self._set_message(f"selected {len(hits)} node{'s' * (len(hits) != 1)} matching "
                          f"{query!r}{shown}" if hits else f"no node matches {query!r}",
                          refused=not hits)
        return hits

    def _on_selection(self) -> None:
        known = self.session.graph.node_map
        sel = [i for i in self.view.selected if i in known]
        if sel != list(self.view.selected):   # the front end sent an id we do not know
            self.view.selected = sel
            return
        try:
            self._show_code()
            self._show_properties()
            self._update_scheme_controls()
        except WorkbenchError as e:   # (an observer: report, do not raise into the comm)
            self._set_message(str(e), refused=True)

    # -- actions (each control calls one of these) ------------------------------------
    @_action
    def fuse(self, nodes: Iterable[str] | None = None) -> Plan | None:
        """Fuse the given (default: selected) nodes' kernels into one; compiles the new
        kernel and redraws. Refused: ``message`` says why, returns None."""
        refs = list(self.selected if nodes is None else nodes)
        # group ids change when groups merge; a node id of the selection does not
        anchor = self.session.plan.group(refs[0]).nodes[0] if refs else None
        plan = self.session.fuse(refs)
        group = plan.group(anchor)
        self._last_group = group.id
        # compiled now (cached by source on the CPU), so a compiler error shows at
        # once and Measure later only loads it
        self.session.compile([group])
        self._refresh()
        self._set_message(f"fused {len(group.nodes)} ops into {group.id} "
                          f"({group.schedule.describe()}); {plural(len(plan.groups), 'kernel')}")
        return plan

    @_action
    def split(self, ref: str | None = None) -> Plan | None:
        """Split the kernel holding ``ref`` (default: the first selected node)."""
        if ref is None:
            if not self.selected:
                raise WorkbenchError("nothing selected: select a node of the kernel to split")
            ref = self.selected[0]
        gid = self.session.plan.group(ref).id
        plan = self.session.split(ref)
        self._last_group = None
        self._refresh()
        self._set_message(f"split {gid}; {plural(len(plan.groups), 'kernel')}")
        return plan

    @_action
    def auto(self, planner: str = "rules") -> Plan | None:
        """Replace the plan with ``planner``'s (any name in ``workbench.fusion.PLANNERS``)."""
        position = self.session.position
        plan = self.session.auto(planner)
        if planner in PLANNERS:
            self.planner.value = planner
        if self.session.position == position:   # the session added no identical step
            self._set_message(f"auto {planner}: unchanged, the plan already is the "
                              f"{planner} planner's ({plural(len(plan.groups), 'kernel')}); "
                              "no new step")
            return plan
        self._refresh()
        self._set_message(planner_summary(planner, self.session.graph, plan,
                                          self.session.step.decisions))
        return plan

    @_action
    def set_matmul_precision(self, precision: str) -> Plan | None:
        """Let float32 matmuls run in ``precision``, "float32" (exact) or "tf32"
        (tensor cores, operands rounded to 10 mantissa bits): the current kernels made
        again for it as a new step (Session.set_matmul_precision; Undo goes back). What
        the ``matmuls`` drop-down does."""
        s = self.session
        if precision == s.matmul_precision:
            self._set_message(f"matmuls: unchanged, already {precision}; no new step")
            return s.plan
        with warnings.catch_warnings():
            # a device without TF32 tensor cores: said in the status line below, where
            # a person looking at the app reads it
            warnings.simplefilter("ignore")
            plan = s.set_matmul_precision(precision)
        self._refresh()
        self._set_message(_precision_summary(s, precision))
        return plan

    def _on_matmuls(self, change) -> None:
        # (the drop-down set from the session after undo or redo asks for what is
        # already so: nothing to do)
        if change["new"] != self.session.matmul_precision:
            self.set_matmul_precision(change["new"])
            self.matmuls.value = self.session.matmul_precision   # refused: back to it

    @_action
    def set_scheme(self, value: str, scheme) -> Plan | None:
        """Stitch scheme of internal edge ``value`` (a value name, as in the ``edge``
        drop-down's values; delegates to Session.set_scheme)."""
        sc = getattr(scheme, "value", scheme)
        if value is None:
            gr = self._current_group() if self.selected else None
            raise WorkbenchError(
                "select a kernel of two or more ops first: a stitch scheme applies to an "
                "edge inside a kernel" if gr is None else
                f"{gr.id} has no edge inside it ({plural(len(gr.nodes), 'op')}): fuse it "
                "with a neighbour first; a stitch scheme applies to an edge inside a kernel")
        g = self.session.graph
        before = self.session.plan
        gr = before.group_of.get(getattr(g.producer.get(value), "id", None))
        if gr is not None and value in dict(gr.schemes) and gr.scheme(value).value == sc:
            label = edge_label(g, gr, value)
            self._set_message(f"{label}: unchanged, already {sc} stitching; no new step")
            return before
        plan = self.session.set_scheme(value, scheme)
        self._refresh()
        new = plan.group(g.producer[value].id)
        label = edge_label(g, new, value) if value in dict(new.schemes) else value
        self._set_message(f"{label}: {sc} stitching; {new.id} {new.schedule.describe()}"
                          + ("" if plan is not before else " (unchanged; no new step)"))
        return plan

    @_action
    def set_mapping(self, ref: str | None = None, mapping: str = "auto") -> Plan | None:
        """Thread mapping of the row-reduction kernel holding ``ref`` (default: the
        first selected node): warp, block, split, thread, or auto (the rule)."""
        ref = ref or (self.selected[0] if self.selected else None)
        if ref is None:
            raise WorkbenchError("select a node of a row-reduction kernel first")
        before = self.session.plan
        plan = self.session.set_mapping(ref, mapping)
        gr = plan.group(ref)
        launch = self.session.kernel(ref, plan).launch
        if plan is before:
            self._set_message(f"{gr.id}: unchanged, already mapped {mapping} "
                              f"({gr.schedule.describe()}); no new step")
            return plan
        self._refresh()
        self._set_message(f"{gr.id}: mapped {mapping}, {gr.schedule.describe()} ({launch})")
        return plan

    # -- transformations of the selection, history ------------------------------------
    def actions(self, nodes: Iterable[str] | None = None) -> list:
        """Every transformation of the given (default: selected) nodes' kernels with
        its predicted effect, or its refusal; listed in the Transformations panel."""
        if nodes is not None:
            self.selected = nodes
        acts = self.transforms.refresh_actions()
        self.transforms_box.selected_index = 0
        return acts

    def preview(self, action) -> None:
        """Draw the plan ``action`` (or the index of one in :meth:`actions`' list)
        would make, with its numbers; :meth:`apply` or :meth:`cancel_preview` next."""
        if not isinstance(action, Action):
            action = self.transforms.actions[action]
        self.transforms.preview(action)

    def apply(self) -> Plan | None:
        """Apply the previewed transformation as a step."""
        return self.transforms.apply()

    def cancel_preview(self) -> None:
        self.transforms.cancel()

    def _on_preview(self, plan: Plan | None) -> None:
        if plan is None:
            self._redraw()
            self._set_message(f"step {self.session.position}: "
                              f"{plural(len(self.session.plan.groups), 'kernel')}")
            return
        self.view.redraw(plan, overlay=None)
        self._set_message(f"preview: {plural(len(plan.groups), 'kernel')} (not applied: "
                          "Apply or Discard in the Transformations panel)")

    @_action
    def _apply_action(self, action) -> Plan | None:
        before = set(self.session.plan.groups)
        plan = self.session.apply(action)
        self.session.compile([gr for gr in plan.groups if gr not in before])
        self._refresh()
        self._set_message(f"applied {action.label}; {plural(len(plan.groups), 'kernel')}")
        return plan

    @_action
    def goto(self, index: int) -> Plan | None:
        """Jump to step ``index`` of the history (nothing is dropped)."""
        return self._moved("went to", self.session.goto(index))

    def compare(self, a: int, b: int) -> pd.DataFrame:
        """Two steps side by side (kernels, bytes, predicted and measured ms)."""
        return self.session.compare(a, b)

    @_action
    def undo(self) -> Plan | None:
        return self._moved("undo", self.session.undo())

    @_action
    def redo(self) -> Plan | None:
        return self._moved("redo", self.session.redo())

    def _moved(self, verb: str, plan: Plan) -> Plan:
        self._refresh()
        self._set_message(f"{verb}: step {self.session.position} "
                          f"({self.session.step.action}), {plural(len(plan.groups), 'kernel')}")
        return plan

    @_action
    def measure(self) -> StepMeasurement | None:
        """Compile (progress shown), check against NumPy and time the current step;
        updates the plots, the code panel and the overlay."""
        with self._busy("measuring"):
            m = self.session.measure(repeats=self.repeats, counters=self.counters)
        self._refresh()
        state = "all kernels match NumPy" if m.within_tolerance else \
            "SOME KERNELS DIFFER FROM NUMPY"
        dram = ""
        if self.counters:
            dram = (f", DRAM {m.dram_bytes / 1e6:.4g} MB measured ({m.dram_source})"
                    if m.dram_bytes == m.dram_bytes else f"; DRAM counters {m.dram_source}")
        self._set_message(f"step {self.session.position}: {m.latency_ms:.4g} ms, "
                          f"{m.bytes_moved / 1e6:.4g} MB moved{dram}, "
                          f"{plural(m.kernels, 'kernel')} on {m.device}; {state} "
                          f"(max rel. error {m.max_rel_error:.2g})",
                          refused=not m.within_tolerance)
        return m

    @_action
    def tune(self) -> Plan | None:
        """Search every kernel's launch parameters by measurement (progress shown) and
        show the tuned step; ``session.tuning`` holds every candidate's time."""
        with self._busy("tuning"):
            before = self.session.plan
            plan = self.session.tune()
        self._refresh()
        changed = [f"{r.group}: {r.rule_ms:.3g} -> {r.best_ms:.3g} ms"
                   for r in self.session.tuning if r.chosen is not before.group(r.group)]
        self._set_message(f"tuned {plural(len(self.session.tuning), 'kernel')}; "
                          + ("; ".join(changed[:4]) + ("; ..." if len(changed) > 4 else "")
                             if changed else "the rule's launch parameters were fastest"))
        return plan

    @_action
    def export(self, path: str | os.PathLike) -> object | None:
        """Write the current plan as an artifact (delegates to Session.export)."""
        with self._busy("exporting"):
            result = self.session.export(path)
        self._set_message(f"exported step {self.session.position} to {os.fspath(path)}")
        return result if result is not None else os.fspath(path)

    @_action
    def save_graph(self, path: str | os.PathLike) -> str | None:
        """Write the graph as drawn now (collapsed boxes, kernels, colours) to ``path``:
        ``.svg`` or ``.png``. The view's "SVG"/"PNG" buttons download the same."""
        out = self.view.save(path)
        self._set_message(f"saved the graph of step {self.session.position} to {out}")
        return out

    # -- state shown -----------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per step up to the current one (what was measured is filled in)."""
        return self.session.table(measure=False)

    @property
    def message(self) -> str:
        """The last status or refusal line shown in the app."""
        return self._message_text

    def _kernel_info(self, plan: Plan, gid: str) -> dict:
        m = self.session.measured(plan)
        if m is None:
            return {}
        rows = m.per_kernel[m.per_kernel["group"] == gid]
        if rows.empty:
            return {}
        r = rows.iloc[0]
        return {k: float(r[k]) for k in ("latency_ms", "predicted_ms", "bandwidth_GBps")
                if k in r and r[k] == r[k]}

    def _overlay(self) -> Overlay | None:
        metric = self.overlay.value
        if metric == "none":
            return None
        m = self.session.measured()
        if m is not None:
            col = m.per_kernel.set_index("group")
            vals = (col["latency_ms"] if metric == "latency"
                    else (col["bytes_read"] + col["bytes_written"]) / 1e6)
            return Overlay(metric, vals.to_dict())
        if metric == "bytes":   # counted from the kernel IR: no run needed
            return Overlay(metric, {gr.id: (k.bytes_read + k.bytes_written) / 1e6
                                    for gr in self.session.plan.groups
                                    for k in [self.session.kernel(gr.id)]})
        # latency before Measure: the cost model's prediction, and the status line
        # says so (before, the drawing stayed as it was with no word why)
        pred = self.session.predict().by_group()
        return Overlay("predicted latency", {gid: e.ms for gid, e in pred.items()})

    def _on_overlay(self) -> None:
        self._redraw()
        if self.overlay.value == "latency" and self.session.measured() is None:
            self._set_message(f"coloured by predicted latency: step {self.session.position} "
                              "is not measured yet (Measure colours it by measured latency)")

    # -- long actions on a worker thread ----------------------------------------------
    def start(self, action: str) -> Job | None:
        """Run ``measure`` or ``tune`` on a worker thread (what the buttons do): the app
        stays responsive, shows progress and a Cancel button, and disables every control
        that would change the session until it ends. Returns the job (``job.join()``
        waits), or None when refused (another is running)."""
        if action not in ("measure", "tune"):
            raise WorkbenchError(f"unknown background action {action!r}: measure or tune")
        with self._job_lock:
            if self._job is not None and self._job.running:
                self._set_message(f"busy {self._job.label}: wait for it, or press Cancel",
                                  refused=True)
                return None
            label = "measuring" if action == "measure" else "tuning"
            self._job = Job(label, getattr(self, action), self._job_done)
            self._lock_controls(True)
            self._set_message(f"{label} step {self.session.position}… (the app stays "
                              "usable; Cancel stops it)")
            return self._job.start()

    def cancel(self) -> None:
        """Stop the running Measure or Tune at its next kernel or timed run."""
        job = self._job
        if job is None or not job.running:
            self._set_message("nothing to cancel", refused=True)
            return
        # (said before the job is told: the job's own last word, "... cancelled", is
        # set on its thread and must not be overwritten by this one)
        self._set_message(f"cancelling {job.label}…")
        self.buttons["Cancel"].disabled = True
        job.cancel()

    def _job_done(self, job: Job) -> None:
        # on the worker thread: the action already showed its result or refusal
        self._lock_controls(False)
        if job.error is not None:    # not a WorkbenchError: a bug, said in one line
            self._set_message(f"{job.label} failed: {type(job.error).__name__}: "
                              f"{job.error}", refused=True)

    def _check_not_busy(self) -> None:
        job = self._job
        if job is not None and job.running and threading.current_thread() is not job.thread:
            raise WorkbenchError(f"busy {job.label}: wait for it to end, or press Cancel")

    def _lock_controls(self, busy: bool) -> None:
        """Disable (and afterwards restore) every control that changes the session."""
        controls = [c for k, c in self.buttons.items() if k != "Cancel"] + [
            self.search, self.planner, self.matmuls, self.overlay, self.export_path,
            self.edge, self.scheme, self.mapping, self.collapse_toggle, self.transforms.list_button,
            self.transforms.apply_button, self.transforms.goto_button]
        if busy:
            self._enabled_before = [c for c in controls if not c.disabled]
            for c in controls:
                c.disabled = True
            self.add_class("wb-busy")
        else:
            for c in getattr(self, "_enabled_before", []):
                c.disabled = False
            self._enabled_before = []
            self._update_scheme_controls()
            self.remove_class("wb-busy")
        self.buttons["Cancel"].disabled = not busy
        self.buttons["Cancel"].layout.display = "" if busy else "none"

    # -- plumbing ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _busy(self, label: str):
        self.progress.value, self.progress.max = 0, 1
        self.progress.description = label
        self.progress.layout.display = ""
        try:
            yield
        finally:
            self.progress.layout.display = "none"

    def _on_progress(self, done: int, total: int, label: str) -> None:
        if self._job is not None:
            self._job.check()    # Cancel pressed: stop here (raises Cancelled)
        self.progress.max = max(1, total)
        self.progress.value = done
        self.progress.description = f"{done}/{total}"
        self.progress.tooltip = label
        if self._chain_progress:
            self._chain_progress(done, total, label)

    def _set_message(self, text: str, refused: bool = False) -> None:
        # (a job's thread and the kernel's both say things: the text and its class
        # change together, or a refusal could lose its class to the other thread)
        with self._message_lock:
            self._message_text = text
            self._message.value = html.escape(text)
            if refused:
                self._message.add_class("wb-refused")
            else:
                self._message.remove_class("wb-refused")

    def _on_collapse_toggle(self, change) -> None:
        (self.view.collapse if change["new"] else self.view.expand)()

    def _redraw(self) -> None:
        self.view.redraw(self.session.plan, overlay=self._overlay())

    def _refresh(self, redraw: bool = True) -> None:
        """Show the session's current step everywhere."""
        if redraw:
            self._redraw()
        self.matmuls.value = self.session.matmul_precision   # (undo carries it back)
        self._show_code()
        self._show_properties()
        self._update_scheme_controls()
        self.transforms.cancel()
        self.transforms.refresh_history()
        device = getattr(self.session, "device", None)
        # (the step's float32 matmuls on tensor cores in TF32: their ceiling too)
        self.plots.update(self._plotted_history(), self._kernel_rows(), device,
                          device.tensor_flops if getattr(self.session, "tf32", False) else None)

    def _counted_bytes(self, gr) -> int:
        # the cost model counts the bytes the kernel IR moves (the count a measurement
        # reports; tests compare them), cached per group and already computed for the
        # prediction: lowering all 1,020 kernels of a large graph took 1.5 s
        f = self.session.cost_model.features(self.session.graph, gr)
        return f.bytes_read + f.bytes_written

    def _plotted_history(self) -> pd.DataFrame:
        """The history with each unmeasured step's bytes counted, so the bytes chart
        is full before anything runs."""
        h = self.history.copy()
        s = self.session
        for i, st in enumerate(s.history[:s.position + 1]):
            if math.isnan(h.at[i, "bytes_moved_MB"]):
                h.at[i, "bytes_moved_MB"] = sum(map(self._counted_bytes, st.plan.groups)) / 1e6
        return h

    def _kernel_rows(self) -> list[KernelRow]:
        """The current step's kernels: counted bytes, arithmetic and predicted time
        (known without running), measured time and DRAM bytes where measured."""
        s = self.session
        plan, model = s.plan, s.cost_model
        pred = model.predict(plan).by_group()
        m = s.measured()
        meas = {} if m is None else m.per_kernel.set_index("group").to_dict("index")
        rows = []
        for gr in plan.groups:
            f = model.features(s.graph, gr)
            r = meas.get(gr.id, {})
            dram = r.get("dram_read", math.nan) + r.get("dram_written", math.nan)
            rows.append(KernelRow(gr.id, float(f.bytes_read + f.bytes_written),
                                  float(f.flops + f.library_flops), pred[gr.id].ms,
                                  float(r.get("latency_ms", math.nan)), float(dram)))
        return rows

    def _current_group(self):
        plan = self.session.plan
        if self.selected:
            return plan.group(self.selected[0])
        if self._last_group and any(gr.id == self._last_group for gr in plan.groups):
            return plan.group(self._last_group)
        return None

    def _show_code(self) -> None:
        gr = self._current_group()
        if gr is None:
            self.code.clear()
            return
        s = self.session
        prev = s.history[s.position - 1].plan if s.position > 0 else None
        self.code.show(gr.id, s.plan, prev)

    def _show_properties(self) -> None:
        sel = self.selected
        if not sel:
            self.props.value = empty_html()
            return
        plan = self.session.plan
        k = self.session.kernel(plan.group(sel[0]).id, plan)
        launch = f"library call ({k.library.op})" if k.library is not None else str(k.launch)
        self.props.value = node_properties(plan, sel[0], self.view.namespaces, launch,
                                           selected=len(sel)).to_html()

    def _update_scheme_controls(self) -> None:
        if getattr(self, "_enabled_before", None):   # a job runs: controls stay locked
            return
        gr = self._current_group() if self.selected else None
        choices = edge_choices(self.session.graph, gr)
        # labelled as the drawing shows the edge; the first preselected (a blank box
        # sent None to Set scheme)
        self.edge.options = choices or [("no edge inside this kernel" if gr is not None
                                         else "select a kernel", None)]
        values = [v for _, v in choices]
        g, sel = self.session.graph, set(self.selected)
        touching = [v for v in values if g.producer[v].id in sel
                    or any(c.id in sel for c in g.consumers[v])]
        keep = self._edge_choice if self._edge_choice in values else None
        # the edge chosen before if it touches the selection, else one that does
        order = ([keep] if keep in touching else []) + touching + ([keep] if keep else [])
        if values:
            self.edge.value = (order + values)[0]
        else:   # the placeholder shown, not a blank box (its value is None)
            self.edge.index = 0
        for c in (self.edge, self.scheme):
            c.disabled = not choices
        # enabled with any kernel selected: with no internal edge it says why
        self.buttons["Set scheme"].disabled = gr is None
        self._show_edge_scheme()
        rows = gr is not None and gr.schedule.kind is ScheduleKind.row_reduce
        for c in (self.mapping, self.buttons["Set mapping"]):
            c.disabled = not rows
        # the drop-down shows the kernel's current mapping (auto: the rule's choice)
        rule = gr.schedule.mapping if rows else None
        auto = (f"auto ({rule.value})" if rule is not None
                and gr.forced_mapping in ("", "auto") else "auto")
        self.mapping.options = [(auto, "auto")] + [(m.value, m.value) for m in MAPPINGS]
        self.mapping.value = (gr.forced_mapping or "auto") if rows else "auto"

    def _show_edge_scheme(self) -> None:
        """The scheme drop-down shows the chosen edge's current scheme."""
        gr = self._current_group() if self.selected else None
        v = self.edge.value
        if v is not None:
            self._edge_choice = v    # kept across redraws while the kernel has it
        if gr is not None and v is not None and gr.scheme(v) is not None:
            self.scheme.value = gr.scheme(v).value

    # -- display ------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        """Show the widget once per cell: ``app = wb.open(p); app`` displays one app."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        ip = get_ipython()
        count = getattr(ip, "execution_count", None)
        if count is not None and getattr(self, "_shown_in", None) == count:
            return
        self._shown_in = count
        display(self._repr_mimebundle_(), raw=True)

    def __repr__(self) -> str:
        return (f"<WorkbenchApp {self.session.graph.name!r}: step {self.session.position}, "
                f"{plural(len(self.session.plan.groups), 'kernel')}>")


@functools.lru_cache(maxsize=1)
def _app_css() -> str:
    from pathlib import Path
    return (Path(__file__).parent / "static" / "app.css").read_text(encoding="utf-8")


def _app_style() -> w.HTML:
    """The app's layout CSS (static/app.css) as a <style> element of its own."""
    style = w.HTML(f"<style>{_app_css()}</style>", layout=w.Layout(width="0", height="0"))
    style.add_class("wb-style")
    return style


def _precision_summary(session: Session, precision: str) -> str:
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


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:40] or "graph"


def open(source, backend: str = "auto", seed: int = 0, display: bool = True,
         matmul_precision: str = "float32") -> WorkbenchApp:
    """The app over ``source``: a path to a .json/.onnx file, a Graph or a Session
    (then ``backend``, ``seed`` and ``matmul_precision`` are the session's). In IPython
    it is displayed."""
    if isinstance(source, Session):
        session = source
    else:
        session = Session(os.fspath(source) if isinstance(source, os.PathLike) else source,
                          backend=backend, seed=seed, matmul_precision=matmul_precision)
    app = WorkbenchApp(session)
    if display:
        try:
            from IPython import get_ipython
        except ImportError:
            return app
        if get_ipython() is not None:
            app._ipython_display_()
    return app
