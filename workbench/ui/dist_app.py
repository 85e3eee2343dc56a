"""The app over a distributed program: ``wb.open(Session(path, ranks=2))``.

One widget over a :class:`~workbench.distributed.session.DistSession`: the program
drawn as the chosen rank runs it (:mod:`.dist_view`: collectives as their own node
kind, placements on the edges, the rank's shard shapes), a rank selector, the
session's transformations listed on the current program with a preview
(:mod:`.dist_actions`), applied, undone and redone as steps, the planner (Auto) with
every candidate it did not apply and why, and a per-rank timeline of one step
(:mod:`.timeline`): measured on gloo ranks by Measure (on a worker thread, as the
plain app's Measure) beside the alpha-beta model's rows and its simulated scale-out,
labelled so.

Every control has a Python method with the same effect; a refused action sets
``app.message`` to the reason, returns None and changes nothing.

Example::

    >>> app = wb.open(Session("sample_graphs/distributed/dp_adamw.json", ranks=2))  # doctest: +SKIP
    >>> app.rank = 1; app.actions(); app.preview(0); app.apply()                    # doctest: +SKIP
    >>> app.measure(); app.timeline["data"][0]["name"]                              # doctest: +SKIP
"""
from __future__ import annotations

import functools
import html
import os

import ipywidgets as w

from ..distributed.session import DistSession
from ..distributed.timeline import measured_bars, modelled_bars, simulated_bars
from ..errors import WorkbenchError
from ..fusion.planners import PLANNERS
from ..ops.collective import COLLECTIVES
from .display_once import ShownOncePerCell
from .dist_actions import Offer, candidates, effect_line
from .dist_dot import check_rank, collective_label, local_text
from .dist_view import DistGraphView
from .jobs import Job
from .layout import main_row, status_row
from .plots import Plots
from .status_line import StatusLine
from .timeline import timeline_figure

RANK_BUTTONS_UP_TO = 8    # more ranks: a drop-down


def dist_action(method):
    """A WorkbenchError becomes the inline refusal and the action returns None."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            if self.job is not None and self.job.running:
                raise WorkbenchError(f"{self.job.label} is running: wait for it to end")
            return method(self, *args, **kwargs)
        except WorkbenchError as e:
            self._say(str(e), refused=True)
            return None
    return run


class DistApp(ShownOncePerCell, w.VBox):
    """Toolbar, status line, graph beside the node panel, transformations, timeline."""

    def __init__(self, session: DistSession):
        self.session = session
        self.job: Job | None = None
        self.offers: list[Offer] = []
        self.previewing: Offer | None = None
        self._measured = None            # (program, RankRun) of the last Measure
        self.repeats = 3
        self.view = DistGraphView(session.program)
        self._build_controls()
        self._status = StatusLine()
        self.props = w.HTML()
        self.props.add_class("wb-props-panel")
        self.offer_list = w.Select(options=[], rows=6, layout=w.Layout(width="100%"))
        self.offer_list.add_class("wb-dist-offers")
        self.offer_buttons = {k: w.Button(description=k) for k in ("Preview", "Apply",
                                                                   "Discard")}
        self.history_html, self.decisions_html = w.HTML(), w.HTML()
        self.decisions_html.add_class("wb-dist-decisions")
        panel = w.VBox([self.offer_list, w.HBox(list(self.offer_buttons.values())),
                        self.history_html, self.decisions_html])
        self.transforms_box = w.Accordion(children=[panel], selected_index=0)
        self.transforms_box.set_title(0, "Transformations · History · Decisions")
        self.plots = Plots()
        super().__init__([self.toolbar, status_row(self.progress, self._status.widget),
                          main_row(self.view, self.props), self.transforms_box, self.plots])
        self.add_class("wb-app")
        self.add_class("wb-dist-app")
        self._wire()
        self._say(f"{session.graph.name}: {len(session.graph.nodes)} nodes on "
                  f"{session.ranks} ranks, {self._collective_count()} collectives; "
                  "choose a rank to see its shard's shapes")
        self._refresh()

    # -- building ----------------------------------------------------------------
    def _build_controls(self) -> None:
        p = self.session.ranks
        opts = [(f"rank {r}", r) for r in range(p)]
        self.rank_choice = (w.ToggleButtons(options=opts, value=0) if p <= RANK_BUTTONS_UP_TO
                            else w.Dropdown(options=opts, value=0, description="rank"))
        self.rank_choice.add_class("wb-rank")
        self.buttons = {k: w.Button(description=k) for k in
                        ("Transformations", "Auto", "Undo", "Redo", "Measure")}
        self.planner = w.Dropdown(options=list(PLANNERS), value=self.session.planner,
                                  layout=w.Layout(width="110px"))
        self.keep = w.Text(placeholder="outputs kept sharded: m_out,v_out",
                           layout=w.Layout(width="240px"))
        self.progress = w.IntProgress(layout=w.Layout(display="none", width="120px"))
        self.toolbar = w.HBox([self.rank_choice, self.buttons["Transformations"],
                               self.keep, self.planner, self.buttons["Auto"],
                               self.buttons["Undo"], self.buttons["Redo"],
                               self.buttons["Measure"]],
                              layout=w.Layout(flex_flow="row wrap"))
        self.toolbar.add_class("wb-toolbar")

    def _wire(self) -> None:
        b, o = self.buttons, self.offer_buttons
        self.rank_choice.observe(lambda ch: self._set_rank(ch["new"]), "value")
        b["Transformations"].on_click(lambda _: self.actions())
        b["Auto"].on_click(lambda _: self.auto(self.planner.value))
        b["Undo"].on_click(lambda _: self.undo())
        b["Redo"].on_click(lambda _: self.redo())
        b["Measure"].on_click(lambda _: self.start_measure())
        o["Preview"].on_click(lambda _: self.offer_list.value is not None
                              and self.preview(self.offer_list.value))
        o["Apply"].on_click(lambda _: self.apply())
        o["Discard"].on_click(lambda _: self.cancel_preview())
        self.view.observe(lambda ch: self._show_node(), "selected")

    # -- rank and selection ----------------------------------------------------------
    @property
    def rank(self) -> int:
        """The rank whose shapes the drawing shows."""
        return self.view.rank

    @rank.setter
    def rank(self, r: int) -> None:
        check_rank(self.session.program, r)
        self.rank_choice.value = r          # (its observer redraws)

    def _set_rank(self, r: int) -> None:
        self.view.show(self.previewing.program if self.previewing else None, rank=r)
        self._show_node()
        self._say(f"rank {r} of {self.session.ranks}: the shapes and slices it holds")

    @property
    def selected(self) -> list[str]:
        return list(self.view.selected)

    def select(self, query: str) -> list[str]:
        """Select the nodes whose id is ``query`` or whose op or name contains it."""
        q = str(query).strip().lower()
        hits = [n.id for n in self.view.graph.nodes
                if q and (n.id == q or q in n.op.lower() or q in n.name.lower())]
        self.view.selected = hits
        self._say(f"selected {len(hits)} nodes matching {query!r}" if hits
                  else f"no node matches {query!r}", refused=not hits)
        return hits

    def _show_node(self) -> None:
        d, r = self.view.program, self.view.rank
        sel = [i for i in self.view.selected if i in d.graph.node_map]
        if not sel:
            c = self.session.counted(d)
            self.props.value = (
                f"<b>{html.escape(d.graph.name)}</b> on {d.ranks} ranks<br>per rank: "
                f"compute reads and writes {c['compute_bytes'] / 1e3:.4g} KB, collectives "
                f"send {c['sent_bytes'] / 1e3:.4g} KB<br><i>click a node for its "
                "placements</i>")
            return
        n = d.graph.node(sel[0])
        pl = d.placements
        head = (f"{n.id} · {collective_label(n)} (async start)" if n.op in COLLECTIVES
                else f"{n.id} · {n.op}")
        rows = [f"<tr><td>in</td><td>{html.escape(v)}</td><td>{pl[v]}</td>"
                f"<td>{html.escape(local_text(d, v, r))}</td></tr>" for v in n.inputs]
        rows += [f"<tr><td>out</td><td>{html.escape(v)}</td><td>{pl[v]}</td>"
                 f"<td>{html.escape(local_text(d, v, r))}</td></tr>" for v in n.outputs]
        wait = [c.id for v in n.outputs for c in d.graph.consumers[v]
                if c.op == "wait_tensor"] if n.op in COLLECTIVES else []
        flight = f"<br>in flight until its wait {wait[0]}" if wait else ""
        self.props.value = (f"<b>{html.escape(head)}</b>{flight}<table><tr><th></th>"
                            f"<th>value</th><th>placement</th><th>rank {r} holds</th></tr>"
                            f"{''.join(rows)}</table>")

    # -- transformations ---------------------------------------------------------------
    def _keep(self, keep_sharded=None) -> tuple[str, ...]:
        if keep_sharded is None:
            keep_sharded = [k for k in self.keep.value.split(",") if k.strip()]
        return tuple(k.strip() for k in keep_sharded)

    @dist_action
    def actions(self, keep_sharded=None) -> list[Offer]:
        """Every transformation the session offers on the current program, tried:
        legal ones with their effect, refused ones with the reason."""
        self.offers = candidates(self.session, self._keep(keep_sharded))
        self.offer_list.options = [(effect_line(self.session, o), i)
                                   for i, o in enumerate(self.offers)]
        self.transforms_box.selected_index = 0
        legal = sum(o.legal for o in self.offers)
        self._say(f"{legal} of {len(self.offers)} transformations apply here" if self.offers
                  else "no transformation applies: the program has no collective the "
                       "session transforms", refused=not self.offers)
        return self.offers

    @dist_action
    def preview(self, index: int) -> Offer | None:
        """Draw what offer ``index`` of :meth:`actions` would make; Apply or Discard."""
        if not self.offers:
            raise WorkbenchError("nothing to preview: list the transformations first "
                                 "(app.actions())")
        if isinstance(index, bool) or not isinstance(index, int) \
                or not 0 <= index < len(self.offers):
            raise WorkbenchError(f"no transformation {index!r:.20}: choose 0.."
                                 f"{len(self.offers) - 1}")
        o = self.offers[index]
        self.offer_list.value = index
        if not o.legal:
            raise WorkbenchError(f"{o.label} is refused: {o.reason}")
        self.previewing = o
        self.view.show(o.program)
        self.decisions_html.value = _notes_html("this transformation would", o.notes)
        self._say(f"preview: {effect_line(self.session, o)} (not applied: Apply or "
                  "Discard)")
        return o

    @dist_action
    def apply(self):
        """Apply the previewed transformation as a step of the session."""
        if self.previewing is None:
            raise WorkbenchError("nothing previewed: preview a transformation first")
        o, self.previewing = self.previewing, None
        o.apply(self.session)
        self._refresh()
        self._say(f"applied {o.label}: step {self._position()}")
        return self.session.program

    def cancel_preview(self) -> None:
        self.previewing = None
        self.view.show(self.session.program)
        self._show_decisions()
        self._say("preview discarded")

    @dist_action
    def auto(self, planner: str | None = None, keep_sharded=None):
        """The session's planner: applies the candidate the model says is faster,
        lists every one not applied with the reason."""
        self.session.auto(planner or self.planner.value, self._keep(keep_sharded))
        self._refresh()
        applied = [x for x in self.session.step.decisions if x.startswith("applied")]
        self._say(f"auto: {applied[0] if applied else 'nothing applied'} (decisions below)")
        return self.session.program

    @dist_action
    def undo(self):
        self.session.undo()
        self._refresh()
        self._say(f"undo: now at {self.session.step.action}")
        return self.session.program

    @dist_action
    def redo(self):
        self.session.redo()
        self._refresh()
        self._say(f"redo: now at {self.session.step.action}")
        return self.session.program

    # -- measuring and the timeline -----------------------------------------------------
    @dist_action
    def measure(self, repeats: int | None = None):
        """Run the current program on the session's gloo ranks (checked against the
        reference) and draw its timeline; returns the RankRun."""
        return self._measured_run(self._run(repeats))

    def _run(self, repeats):
        program = self.session.program
        return program, self.session.run(repeats=repeats or self.repeats)

    def _measured_run(self, result):
        self._measured = result
        program, run = result
        self._draw_timeline()
        worst = max(run.errors.values(), default=0.0)
        slow = max(run.times, key=lambda t: t.step_s)
        self._say(f"measured on {run.ranks} gloo ranks: slowest step {slow.step_s * 1e3:.3g}"
                  f" ms (compute {slow.compute_s * 1e3:.3g}, communication "
                  f"{slow.comm_s * 1e3:.3g}); error {worst:.2g}"
                  + ("" if run.ok else " -- outside the tolerance"), refused=not run.ok)
        return run

    @dist_action
    def start_measure(self, repeats: int | None = None) -> Job:
        """Measure on a worker thread (the app answers meanwhile); ``app.job.join()``
        waits for it."""
        self._busy(True)
        self._say(f"measuring on {self.session.ranks} gloo ranks...")
        self.job = Job("measuring", lambda: self._run(repeats), self._measure_done).start()
        return self.job

    def _measure_done(self, job: Job) -> None:
        self._busy(False)
        if job.error is not None:
            self._say(f"measure failed: {job.error}", refused=True)
        else:
            self._measured_run(job.result)

    def _busy(self, on: bool) -> None:
        for c in (*self.buttons.values(), *self.offer_buttons.values()):
            c.disabled = on
        self.progress.layout.display = None if on else "none"
        self.progress.bar_style = "info"
        self.progress.value = 50 if on else 0

    @property
    def timeline(self) -> dict:
        """The timeline figure (plotly JSON) as drawn."""
        return self.plots.figures[0] if self.plots.figures else {}

    def _draw_timeline(self) -> None:
        d, link = self.session.program, self.session.link
        bars, note = [], ""
        if self._measured is not None:
            if self._measured[0] is d:
                bars += measured_bars(d, self._measured[1])
            else:
                note = "measured rows are of an earlier step: Measure again"
        bars += modelled_bars(d, link)
        sim, skipped = simulated_bars(d, link)
        bars += sim
        if skipped:     # (the whole reasons: app.simulation_skipped)
            why = skipped[0].split(";")[0].rsplit(": ", 1)[-1][:100]
            note = "; ".join(filter(None, [note, "not simulated on " + ", ".join(
                s.split(":")[0] for s in skipped) + f" ({why})"]))
        self.simulation_skipped = skipped
        self.plots.figures = [timeline_figure(bars, note)]

    # -- plumbing -------------------------------------------------------------------------
    def _position(self) -> int:
        """The current step's index in the history (undo moves it back)."""
        return self.session.history.index(self.session.step)

    def _refresh(self) -> None:
        self.previewing = None
        self.offers, self.offer_list.options = [], []
        self.view.show(self.session.program)
        self._show_node()
        here = self._position()
        items = "".join(f"<li class=wb-current><b>{html.escape(st.action)}</b></li>"
                        if i == here else f"<li>{html.escape(st.action)}</li>"
                        for i, st in enumerate(self.session.history))
        self.history_html.value = f"<b>History</b><ol start=0>{items}</ol>"
        self._show_decisions()
        self._draw_timeline()

    def _show_decisions(self) -> None:
        self.decisions_html.value = _notes_html(
            f"step {self.session.step.action}", self.session.step.decisions)

    def _collective_count(self) -> int:
        return sum(n.op in COLLECTIVES for n in self.session.graph.nodes)

    def _say(self, text: str, refused: bool = False) -> None:
        self._status.say(text, refused)

    @property
    def message(self) -> str:
        return self._status.text

    # shown once per cell, as the plain app (``app = wb.open(s); app`` shows one app)
    def __repr__(self) -> str:
        return (f"<DistApp {self.session.graph.name!r} on {self.session.ranks} ranks: "
                f"{self.session.step.action}>")


def _notes_html(head: str, notes) -> str:
    if not notes:
        return f"<b>{html.escape(head)}</b>: <i>no decisions recorded</i>"
    items = "".join(f"<li>{html.escape(x)}</li>" for x in notes)
    return f"<b>{html.escape(head)}</b><ul>{items}</ul>"


def is_distributed(source) -> bool:
    """Whether ``wb.open(source)`` opens the distributed app."""
    from ..distributed.program import DistProgram, is_distributed_file
    if isinstance(source, (DistSession, DistProgram)):
        return True
    try:
        return isinstance(source, (str, os.PathLike)) and is_distributed_file(source)
    except (OSError, ValueError):     # (a name no file can have: the plain app says so)
        return False


def open_dist(source, seed: int = 0) -> DistApp:
    """The app over a DistSession, a DistProgram or a distributed .json file (on the
    ranks it names)."""
    if isinstance(source, DistSession):
        return DistApp(source)
    from ..distributed.session import load_program
    d = load_program(source, getattr(source, "ranks", None) or _file_ranks(source))
    return DistApp(DistSession(d, ranks=d.ranks, seed=seed, backend="cpu"))


def _file_ranks(path) -> int:
    from ..distributed.program import load_json
    return load_json(path).ranks
