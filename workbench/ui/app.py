"""The notebook app: graph view, controls, code panel and plots over one Session.

Every control has a Python method with the same effect, so a notebook can replay a
session (``app.fuse([...])``, ``app.split(...)``, ``app.auto("rules")``,
``app.undo()``, ``app.measure()``, ``app.export(path)``). A refused action sets
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
import os
from typing import Iterable

import ipywidgets as w
import pandas as pd

from ..errors import WorkbenchError
from ..fusion import MAPPINGS, PLANNERS, Plan, ScheduleKind, StitchScheme
from ..measure import StepMeasurement
from ..session import Session
from .code_panel import CodePanel
from .dot import Overlay
from .graph_view import GraphView
from .plots import Plots
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

        # -- controls --------------------------------------------------------------
        self.search = w.Text(placeholder="select by name or op", continuous_update=False,
                             layout=w.Layout(width="180px"))
        self.buttons = {
            "Fuse": _button("Fuse", "fuse the selected nodes into one kernel"),
            "Split": _button("Split", "split the selected node's kernel into one per op"),
            "Auto": _button("Auto", "replace the plan with the planner's"),
            "Undo": _button("Undo", "go back one step"),
            "Redo": _button("Redo", "go forward one step"),
            "Measure": _button("Measure", "compile, check against NumPy and time this step"),
            "Tune": _button("Tune", "search each kernel's launch parameters by measurement "
                            "(a new step; cached per device and kernel)"),
            "Export": _button("Export", "write the current plan as an artifact"),
            "Set scheme": _button("Set scheme", "stitch scheme of the chosen internal edge"),
            "Set mapping": _button("Set mapping", "how the selected row-reduction kernel's "
                                   "rows meet threads (auto: the AStitch rule)"),
        }
        self.planner = w.Dropdown(options=list(PLANNERS), value="rules" if "rules" in PLANNERS
                                  else list(PLANNERS)[0], layout=w.Layout(width="110px"))
        self.overlay = w.Dropdown(options=OVERLAYS, value="none", description="color",
                                  layout=w.Layout(width="150px"),
                                  style={"description_width": "40px"})
        self.export_path = w.Text(value=f"{_safe_name(session.graph.name)}_artifact",
                                  layout=w.Layout(width="180px"))
        self.edge = w.Dropdown(options=[], description="edge", layout=w.Layout(width="220px"),
                               style={"description_width": "40px"}, disabled=True)
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
        self._message = w.HTML()
        self._message.add_class("wb-message")
        self.progress = w.IntProgress(min=0, max=1, value=0, bar_style="info",
                                      layout=w.Layout(display="none", width="240px"))
        b = self.buttons
        toolbar = w.HBox([self.search, b["Fuse"], b["Split"], self.planner, b["Auto"],
                          b["Undo"], b["Redo"], b["Measure"], b["Tune"], self.export_path,
                          b["Export"]],
                         layout=w.Layout(flex_flow="row wrap"))
        toolbar2 = w.HBox([self.overlay, self.collapse_toggle, self.edge, self.scheme,
                           b["Set scheme"], self.mapping, b["Set mapping"]],
                          layout=w.Layout(flex_flow="row wrap"))
        status = w.HBox([self.progress, self._message])
        self.view.layout = w.Layout(flex="3 1 0%", min_width="0")
        self.code.layout = w.Layout(flex="2 1 0%", min_width="0")
        super().__init__([toolbar, toolbar2, status, w.HBox([self.view, self.code]),
                          self.plots])
        self.add_class("wb-app")

        b["Fuse"].on_click(lambda _: self.fuse())
        b["Split"].on_click(lambda _: self.split())
        b["Auto"].on_click(lambda _: self.auto(self.planner.value))
        b["Undo"].on_click(lambda _: self.undo())
        b["Redo"].on_click(lambda _: self.redo())
        b["Measure"].on_click(lambda _: self.measure())
        b["Tune"].on_click(lambda _: self.tune())
        b["Export"].on_click(lambda _: self.export(self.export_path.value))
        b["Set scheme"].on_click(lambda _: self.set_scheme(self.edge.value, self.scheme.value))
        b["Set mapping"].on_click(lambda _: self.set_mapping(None, self.mapping.value))
        self.search.observe(lambda ch: ch["new"] and self.select(ch["new"]), "value")
        self.overlay.observe(lambda ch: self._redraw(), "value")
        self.collapse_toggle.observe(self._on_collapse_toggle, "value")
        self.view.observe(lambda ch: self._on_selection(), "selected")
        self._set_message(f"{session.graph.name}: {len(session.graph.nodes)} ops, "
                          f"backend {session.backend.name}. Click nodes to select "
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
                          f"({group.schedule.describe()}); {len(plan.groups)} kernels")
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
        self._set_message(f"split {gid}; {len(plan.groups)} kernels")
        return plan

    @_action
    def auto(self, planner: str = "rules") -> Plan | None:
        """Replace the plan with ``planner``'s (any name in ``workbench.fusion.PLANNERS``)."""
        plan = self.session.auto(planner)
        if planner in PLANNERS:
            self.planner.value = planner
        fused = sum(1 for d in self.session.step.decisions if d.action == "fused")
        self._refresh()
        self._set_message(f"auto {planner}: {len(plan.groups)} kernels "
                          f"({fused} fusion decisions)")
        return plan

    @_action
    def set_scheme(self, value: str, scheme) -> Plan | None:
        """Stitch scheme of internal edge ``value`` (delegates to Session.set_scheme)."""
        plan = self.session.set_scheme(value, scheme)
        self._refresh()
        self._set_message(f"{value}: {getattr(scheme, 'value', scheme)} stitching")
        return plan

    @_action
    def set_mapping(self, ref: str | None = None, mapping: str = "auto") -> Plan | None:
        """Thread mapping of the row-reduction kernel holding ``ref`` (default: the
        first selected node): warp, block, split, thread, or auto (the rule)."""
        ref = ref or (self.selected[0] if self.selected else None)
        if ref is None:
            raise WorkbenchError("select a node of a row-reduction kernel first")
        plan = self.session.set_mapping(ref, mapping)
        gr = plan.group(ref)
        self._refresh()
        launch = self.session.kernel(ref, plan).launch
        self._set_message(f"{gr.id}: {gr.schedule.describe()} ({launch})")
        return plan

    @_action
    def undo(self) -> Plan | None:
        return self._moved("undo", self.session.undo())

    @_action
    def redo(self) -> Plan | None:
        return self._moved("redo", self.session.redo())

    def _moved(self, verb: str, plan: Plan) -> Plan:
        self._refresh()
        self._set_message(f"{verb}: step {self.session.position} "
                          f"({self.session.step.action}), {len(plan.groups)} kernels")
        return plan

    @_action
    def measure(self) -> StepMeasurement | None:
        """Compile (progress shown), check against NumPy and time the current step;
        updates the plots, the code panel and the overlay."""
        with self._busy("measuring"):
            m = self.session.measure()
        self._refresh()
        state = "all kernels match NumPy" if m.within_tolerance else \
            "SOME KERNELS DIFFER FROM NUMPY"
        self._set_message(f"step {self.session.position}: {m.latency_ms:.4g} ms, "
                          f"{m.bytes_moved / 1e6:.4g} MB moved, {m.kernels} kernels on "
                          f"{m.device}; {state} (max rel. error {m.max_rel_error:.2g})",
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
        self._set_message(f"tuned {len(self.session.tuning)} kernels; "
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
        return None

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
        self.progress.max = max(1, total)
        self.progress.value = done
        self.progress.description = f"{done}/{total}"
        self.progress.tooltip = label
        if self._chain_progress:
            self._chain_progress(done, total, label)

    def _set_message(self, text: str, refused: bool = False) -> None:
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
        self._show_code()
        self._show_properties()
        self._update_scheme_controls()
        m = self.session.measured()
        dev = getattr(self.session, "device", None) if m is not None else None
        bw = getattr(dev, "dram_bandwidth", None)
        self.plots.update(self.history, None if m is None else m.per_kernel,
                          bw / 1e9 if bw else None, getattr(dev, "name", ""))

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
        gr = self._current_group() if self.selected else None
        edges = list(gr.schemes) if gr is not None else []
        can = bool(edges)
        self.edge.options = [(f"{v} ({s.value})", v) for v, s in edges]
        for c in (self.edge, self.scheme, self.buttons["Set scheme"]):
            c.disabled = not can
        if edges:
            self.scheme.value = edges[0][1].value
        rows = gr is not None and gr.schedule.kind is ScheduleKind.row_reduce
        for c in (self.mapping, self.buttons["Set mapping"]):
            c.disabled = not rows

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
                f"{len(self.session.plan.groups)} kernels>")


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:40] or "graph"


def open(source, backend: str = "auto", seed: int = 0, display: bool = True) -> WorkbenchApp:
    """The app over ``source``: a path to a .json/.onnx file, a Graph or a Session
    (then ``backend`` and ``seed`` are the session's). In IPython it is displayed."""
    if isinstance(source, Session):
        session = source
    else:
        session = Session(os.fspath(source) if isinstance(source, os.PathLike) else source,
                          backend=backend, seed=seed)
    app = WorkbenchApp(session)
    if display:
        try:
            from IPython import get_ipython
        except ImportError:
            return app
        if get_ipython() is not None:
            app._ipython_display_()
    return app
