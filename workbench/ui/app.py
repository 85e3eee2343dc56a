"""The notebook app: graph view, controls, code panel and plots over one Session.

Every control has a Python method with the same effect, so a notebook can replay a
session (``app.fuse([...])``, ``app.split(...)``, ``app.auto("rules")``,
``app.set_matmul_precision("tf32")``, ``app.undo()``, ``app.measure()``,
``app.export(path)``). A refused action sets
``app.message`` to the reason (shown inline), returns ``None`` and changes nothing:
not the plan, not the drawing.

The app is built from parts, each in a module of its own: the controls
(:mod:`.controls`) laid out in rows (:mod:`.layout`), the status line
(:mod:`.status_line`), the actions on the plan (:mod:`.plan_actions`), Measure and
Tune on a worker thread (:mod:`.jobs`) and the numbers shown for a step
(:mod:`.step_numbers`); this module builds them into one widget and keeps what it
shows in step with the session.

Example::

    >>> import workbench as wb
    >>> app = wb.open("sample_graphs/layernorm.json", backend="cpu")   # doctest: +SKIP
    >>> app.select("reduce_mean"); app.fuse(); app.measure()             # doctest: +SKIP
    >>> app.history[["step", "action", "kernels", "latency_ms"]]         # doctest: +SKIP
"""
from __future__ import annotations

import functools
import threading
from typing import Iterable

import ipywidgets as w
import pandas as pd

from ..errors import WorkbenchError
from ..fusion import MAPPINGS, Plan, ScheduleKind
from ..fusion.actions import Action
from ..session import Session
from .. import arguments as args
from .code_panel import CodePanel
from .current_step import allowed_schemes, planner_of
from .saved_panel import SavedPanel
from .search_nav import SearchNav
from .session_io import SessionSaver, apply_view, save as save_app_session
from .controls import (action_buttons, collapse_toggle, edge_choice, export_path_box,
                       mapping_choice, matmul_choice, overlay_choice, planner_choice,
                       progress_bar, scheme_choice, search_box)
from .display_once import ShownOncePerCell
from .drawn_names import drawn_text
from .describe import edge_choices, opening_line, plural
from .graph_view import GraphView
from .jobs import BackgroundJobs, Job
from .layout import main_row, status_row, toolbars
from .plan_actions import PlanActions, app_action
from .lock_actions import LockActions
from .plots import Plots
from .properties import empty_html, node_properties
from .status_line import StatusLine
from .step_numbers import kernel_info, kernel_rows, overlay, plotted_history
from .transform_panel import TransformPanel


class WorkbenchApp(ShownOncePerCell, PlanActions, LockActions, BackgroundJobs,
                   w.VBox):
    """One widget: controls, message line, graph view beside code panel, plots."""

    def __init__(self, session: Session):
        self.session = session
        self._chain_progress = session.progress
        session.progress = self._on_progress   # programs built from now on report here
        self._build_panels()
        self._build_controls()
        self._build_status_line()
        super().__init__(self._rows())
        self.add_class("wb-app")
        self._wire_controls()
        self._set_message(opening_line(session))
        self._refresh(redraw=False)
        if getattr(session, "view_state", None):    # reopened from a session file
            apply_view(self, session.view_state)

    def save_session(self, path, model=None):
        """Write the session and this view to ``path`` (see ``Session.save``)."""
        return save_app_session(self, path, model)

    # -- building ------------------------------------------------------------------
    def _build_panels(self) -> None:
        """The graph view, the code panel (the selected node's properties above the
        kernel), the transformations panel and the plots."""
        session = self.session
        self.view = GraphView(session.plan)
        # the panel shows the session's own kernels: what Measure runs
        self.code = CodePanel(lambda plan, gr: session.kernel(gr.id, plan),
                              functools.partial(kernel_info, session),
                              arch=getattr(session.backend, "arch", None))
        self.plots = Plots()
        self.props = w.HTML(empty_html())      # the selected node's properties (Netron's)
        self.props.add_class("wb-props-panel")
        self.code.children = (self.props, *self.code.children)   # above the kernel header
        self._last_group: str | None = None     # what the code panel shows with no selection
        self._edge_choice: str | None = None    # the edge last chosen in the drop-down
        # what applies to the selection (preview, apply), the clickable history and the
        # planner's decisions, folded away until opened
        self.transforms = TransformPanel(
            session, lambda: self.selected, self._on_preview, self._apply_action, self.goto,
            self.toggle_lock, words=lambda t: drawn_text(t, self.session.plan, self.view.box_of))
        self.saver = SessionSaver(self)          # the shareable session file (session_io)
        self.saved_panel = SavedPanel(session, lambda text, refused: (   # (saved_panel.py)
            refused or self._refresh(), self._set_message(text, refused)))
        self.transforms_box = w.Accordion(children=[self.transforms, self.saver,
                                                    self.saved_panel], selected_index=None)
        self.transforms_box.set_title(0, "Transformations · History · Decisions")
        self.transforms_box.set_title(1, "Save session")
        self.transforms_box.set_title(2, "Saved activations")

    def _build_controls(self) -> None:
        """The toolbars' controls, and what Measure and Tune run with."""
        session = self.session
        self.search = search_box()
        self.search_nav = SearchNav(self)        # next / previous match (search_nav.py)
        self.buttons = action_buttons()
        self._job: Job | None = None
        self._job_lock = threading.Lock()
        self.repeats = 10     # Measure's timed runs (the median is reported)
        # Measure also reads each kernel's DRAM bytes from the hardware counters (Nsight
        # Compute) on a GPU backend, shown beside the counted bytes; settable
        self.counters = session.backend.target == "cuda" and not session.backend.emulated
        self.planner = planner_choice()
        self.matmuls = matmul_choice(session.matmul_precision)
        self.overlay = overlay_choice()
        self.export_path = export_path_box(session.graph.name)
        self.edge = edge_choice()
        self.scheme = scheme_choice()
        self.mapping = mapping_choice()
        self.collapse_toggle = collapse_toggle(self.view)

    def _build_status_line(self) -> None:
        self._status = StatusLine()
        self._message = self._status.widget
        self.progress = progress_bar()

    def _rows(self) -> list[w.Widget]:
        """The app top to bottom: two toolbars, the status line, graph beside code,
        the transformations panel, the plots."""
        toolbar, toolbar2 = toolbars(self.search, self.buttons, self.planner, self.matmuls,
                                     self.export_path, self.overlay, self.collapse_toggle,
                                     self.edge, self.scheme, self.mapping)
        status = status_row(self.progress, self._message)
        main = main_row(self.view, self.code)
        toolbar.children = (toolbar.children[0], self.search_nav, *toolbar.children[1:])
        return [toolbar, toolbar2, status, main, self.transforms_box, self.plots]

    def _wire_controls(self) -> None:
        """Each control calls its method."""
        b = self.buttons
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
        b["Overwrite"].on_click(lambda _: self.export(self.export_path.value, force=True))
        self.export_path.observe(lambda ch: self._offer_overwrite(False), "value")
        b["Set scheme"].on_click(lambda _: self.set_scheme(self.edge.value, self.scheme.value))
        b["Set mapping"].on_click(lambda _: self.set_mapping(None, self.mapping.value))
        self.search.observe(lambda ch: ch["new"] and self.select(ch["new"]), "value")
        self.matmuls.observe(self._on_matmuls, "value")
        self.overlay.observe(lambda ch: self._on_overlay(), "value")
        self.collapse_toggle.observe(self._on_collapse_toggle, "value")
        self.edge.observe(lambda ch: self._show_edge_scheme(), "value")
        self.view.observe(lambda ch: self._on_selection(), "selected")

    # -- selection -----------------------------------------------------------------
    @property
    def selected(self) -> list[str]:
        """Selected node ids, in sync with clicks in the view."""
        return list(self.view.selected)

    @selected.setter
    def selected(self, ids: Iterable[str]) -> None:
        ids = list(dict.fromkeys(args.refs(ids, "selected")))
        known = self.session.graph.node_map
        bad = [i for i in ids if i not in known]
        if bad:
            raise WorkbenchError(f"no node {bad[0]!r} in {self.session.graph.name!r}; node ids "
                                 f"are n0..n{len(known) - 1} (use app.select('name or op'))")
        self.view.selected = ids

    def select(self, query: str) -> list[str]:
        """Select the nodes whose id equals ``query`` or whose op, name or composite
        contains it (case-insensitive), like the search box; returns their ids."""
        q = args.name(query, "query").strip().lower()
        hits = [n.id for n in self.session.graph.nodes
                if q and (n.id == q or q in n.op.lower() or q in n.name.lower()
                          or (n.origin is not None and (q in n.origin.composite.lower()
                                                        or q in n.origin.source.lower())))]
        self.view.selected = hits
        self.search_nav.set_hits(hits)
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
            self._show_lock()
            self._settle()
        except WorkbenchError as e:   # (an observer: report, do not raise into the comm)
            self._set_message(str(e), refused=True)

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
            acts = self.transforms.actions
            i = args.count(action, "action (an index of app.actions())", -len(acts),
                           len(acts) - 1) if acts else None
            if i is None:
                raise WorkbenchError("nothing to preview: list the actions of a selection "
                                     "first (app.actions(['n0']))")
            action = acts[i]
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

    @app_action
    def _apply_action(self, action) -> Plan | None:
        before = set(self.session.plan.groups)
        plan = self.session.apply(action)
        self.session.compile([gr for gr in plan.groups if gr not in before])
        self._refresh()
        self._set_message(f"applied {action.label}; {plural(len(plan.groups), 'kernel')}")
        return plan

    @app_action
    def goto(self, index: int) -> Plan | None:
        """Jump to step ``index`` of the history (nothing is dropped)."""
        return self._moved("went to", self.session.goto(index))

    def compare(self, a: int, b: int) -> pd.DataFrame:
        """Two steps side by side (kernels, bytes, predicted and measured ms)."""
        return self.session.compare(a, b)

    @app_action
    def undo(self) -> Plan | None:
        return self._moved("undo", self.session.undo())

    @app_action
    def redo(self) -> Plan | None:
        return self._moved("redo", self.session.redo())

    def _moved(self, verb: str, plan: Plan) -> Plan:
        self._refresh()
        planner = planner_of(self.session)   # (undo: not the undone step's planner)
        if planner is not None:
            self.planner.value = planner
        self._set_message(f"{verb}: step {self.session.position} "
                          f"({self.session.step.action}), {plural(len(plan.groups), 'kernel')}")
        return plan

    # -- state shown -----------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per step up to the current one (what was measured is filled in)."""
        return self.session.table(measure=False)

    @property
    def message(self) -> str:
        """The last status or refusal line shown in the app."""
        return self._status.text

    def _on_overlay(self) -> None:
        self._redraw()
        self._settle()
        if self.overlay.value == "latency" and self.session.measured() is None:
            self._set_message(f"coloured by predicted latency: step {self.session.position} "
                              "is not measured yet (Measure colours it by measured latency)")

    # -- plumbing ------------------------------------------------------------------------
    def _set_message(self, text: str, refused: bool = False) -> None:
        # (in the drawing's words: no value or kernel id the graph does not show)
        self._status.say(drawn_text(text, self.session.plan, self.view.box_of), refused)

    def _settle(self) -> None:
        """After an action that succeeded without a line of its own (a selection, a
        redraw): a refusal still shown is old news, replaced by the current step."""
        if self._status.refused:
            self._set_message(f"step {self.session.position} ({self.session.step.action}), "
                              f"{plural(len(self.session.plan.groups), 'kernel')}")

    def _offer_overwrite(self, show: bool) -> None:
        self.buttons["Overwrite"].layout.display = None if show else "none"

    def _on_collapse_toggle(self, change) -> None:
        (self.view.collapse if change["new"] else self.view.expand)()
        self._settle()
        if self.view.note:    # (a box too tangled to lay out collapsed: round_trips.py)
            self._set_message(f"collapse: {self.view.note}", refused=True)

    def _redraw(self) -> None:
        self.view.locks = self.session.constraints     # (drawn: .lock_marks)
        self.view.redraw(self.session.plan,
                         overlay=overlay(self.session, self.overlay.value))

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
        self._show_lock()
        self.saved_panel.refresh()
        device = getattr(self.session, "device", None)
        # (the step's float32 matmuls on tensor cores in TF32: their ceiling too)
        self.plots.update(plotted_history(self.session), kernel_rows(self.session), device,
                          device.tensor_flops if getattr(self.session, "tf32", False) else None)

    # -- what the selection shows ------------------------------------------------------
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
            # only the schemes the plan accepts for this edge: none offered, then refused
            self.scheme.options = allowed_schemes(self.session.plan, v)
            self.scheme.value = gr.scheme(v).value

    def __repr__(self) -> str:
        return (f"<WorkbenchApp {self.session.graph.name!r}: step {self.session.position}, "
                f"{plural(len(self.session.plan.groups), 'kernel')}>")
