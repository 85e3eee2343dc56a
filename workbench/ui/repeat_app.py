"""The app over a repeat: its box, the "fuse steps xF" transformations and the plot.

``wb.open(repeat)`` (a :class:`~workbench.ir.repeat.Repeat`, a repeat's ``.json`` file
or a :class:`~workbench.RepeatSession`) gives this widget, the graph app's
counterpart for a repeat (issue 46; ``docs/repeat.md``):

- the repeat drawn as a collapsible box labelled with its trip count ("repeat
  cartpole_x256 x256") and the current step ("fuse steps x16: 16 calls"), holding the
  body's text (``repeat_view.repeat_box_html``), and below it, folded, the body drawn
  by the graph app's view (``GraphView``, one box per op) under the same label;
- the transformations list: "unfused" and "fuse steps xF" for every F offered, each
  with its predicted time (refused ones disabled, with the reason), Apply, Undo, Redo,
  Auto (the stitch planner's F, its decisions listed) and Measure;
- the history, clickable as text, and a message line that says what happened or why
  not;
- the plot of speedup over unfused against F (``repeat_view.speedup_figure``): the cost
  model's for every F, and the measured one for the F values measured.

Every control has a Python method with the same effect (``app.fuse_steps(16)``,
``app.apply("fuse steps x16")``, ``app.undo()``, ``app.measure()``, ``app.auto()``);
a refused action sets ``app.message`` to the reason and changes nothing.

    >>> app = wb.open(cartpole(4096, 256))                   # doctest: +SKIP
    >>> app.fuse_steps(16); app.box_label                    # doctest: +SKIP
    'repeat cartpole_x256 ×256 · fuse steps ×16: 16 calls'
"""
from __future__ import annotations

import html

import ipywidgets as w

from ..errors import WorkbenchError
from ..fusion import Plan
from .controls import button
from .display_once import ShownOncePerCell
from .graph_view import GraphView
from .plots import Plots
from .repeat_view import repeat_box_html, repeat_label, speedup_figure


class RepeatApp(ShownOncePerCell, w.VBox):
    """One widget over a :class:`~workbench.RepeatSession` (see the module docstring)."""

    def __init__(self, session):
        self.session = session
        self.message = ""
        self.box = w.HTML()
        self.box.add_class("wb-repeat-box")
        self.choice = w.Dropdown(description="Transform", layout=w.Layout(width="auto"))
        self.choice.add_class("wb-repeat-actions")
        self.buttons = {
            "Apply": button("Apply", "apply the chosen transformation as a step"),
            "Undo": button("Undo", "go back one step"),
            "Redo": button("Redo", "go forward one step"),
            "Auto": button("Auto", "the stitch planner's F (the cost model's choice)"),
            "Measure": button("Measure", "time the current step (the fastest of 5 runs) "
                              "and plot its speedup over unfused (timing unfused too)"),
        }
        for name, b in self.buttons.items():
            b.add_class(f"wb-repeat-{name.lower()}")
            b.on_click(lambda _b, name=name: self._clicked(name))
        self.status = w.HTML()
        self.status.add_class("wb-repeat-status")
        self.history_html = w.HTML()
        self.plots = Plots()
        # the body drawn as the graph app draws a graph (one box per op), folded away
        # until opened: the box above holds its text
        self.body_view = GraphView(Plan.singletons(session.repeat.body, session.device))
        self.body_box = w.Accordion(children=[self.body_view], selected_index=None)
        self.body_box.add_class("wb-repeat-body")
        super().__init__([self.box, self.body_box,
                          w.HBox([self.choice, *self.buttons.values()]),
                          self.status, self.history_html, self.plots])
        self.add_class("wb-repeat-app")
        self._refresh(f"repeat {session.repeat.name}: {session.repeat.trips} steps over "
                      f"{session.repeat.batch} environments; choose a transformation")

    # -- what the app shows ----------------------------------------------------------
    @property
    def box_label(self) -> str:
        return repeat_label(self.session.repeat, self.session.steps_per_call)

    def figure(self) -> dict:
        """The plot's figure (plotly JSON): speedup against F, predicted and measured."""
        return self.plots.figures[0]

    def _refresh(self, message: str) -> None:
        s = self.session
        self.box.value = repeat_box_html(s.repeat, s.steps_per_call)
        self.body_box.set_title(0, f"{self.box_label}: the body drawn")
        options = []
        for a in s.actions():
            tail = (f" · predicted {a.predicted.ms:.3f} ms" if a.legal else
                    f" · refused: {a.reason[:80]}")
            options.append((a.label + tail, a.label))
        current = self.choice.value
        self.choice.options = options
        if current in {v for _, v in options}:
            self.choice.value = current
        self.buttons["Undo"].disabled = s.position == 0
        self.buttons["Redo"].disabled = s.position == len(s.history) - 1
        rows = [(f"<b>{i}: {html.escape(h)}</b>" if i == s.position else
                 f"{i}: {html.escape(h)}") for i, h in enumerate(s.history)]
        decisions = "".join(f"<li>{html.escape(str(d))}</li>" for d in s.decisions)
        self.history_html.value = ("<div class='wb-repeat-history'>History: "
                                   + " &rarr; ".join(rows) + "</div>"
                                   + (f"<details><summary>Decisions</summary><ul>{decisions}"
                                      "</ul></details>" if decisions else ""))
        self.plots.figures = [_plain(speedup_figure(s.table(measure=False)))]
        self._say(message)

    def _say(self, message: str) -> None:
        self.message = message
        self.status.value = f"<span class='wb-repeat-message'>{html.escape(message)}</span>"

    # -- actions (each a control's) -----------------------------------------------------
    def _act(self, what, done: str):
        """Run a session action; a refusal is the message and changes nothing."""
        try:
            out = what()
        except WorkbenchError as e:
            self._say(str(e))
            return None
        self._refresh(done)
        return out

    def apply(self, label: str | None = None):
        """Apply the transformation labelled ``label`` ("unfused", "fuse steps x16";
        None: the one chosen in the list)."""
        label = self.choice.value if label is None else label
        match = [a for a in self.session.actions() if a.label == label]
        if not match:
            self._say(f"no transformation {str(label)[:40]!r}; the list offers "
                      + ", ".join(a.label for a in self.session.actions())[:200])
            return None
        return self._act(lambda: self.session.apply(match[0]), f"applied {label}")

    def fuse_steps(self, f: int):
        return self._act(lambda: self.session.fuse_steps(f), f"applied fuse steps x{f}")

    def undo(self):
        return self._act(self.session.undo, "undo")

    def redo(self):
        return self._act(self.session.redo, "redo")

    def auto(self):
        return self._act(lambda: self.session.auto("stitch"),
                         "the stitch planner's step (its decisions below)")

    def measure(self, repeats: int = 5):
        """Time the current step and unfused (the plot's baseline), and plot the
        measured speedup."""
        s = self.session

        def both():
            s.measure(None, repeats)
            return s.measure(..., repeats)
        secs = self._act(both, "measured")
        if secs is not None:
            self._say(f"measured {s.history[s.position]}: {secs * 1e3:.3f} ms")
        return secs

    def _clicked(self, name: str) -> None:
        {"Apply": self.apply, "Undo": self.undo, "Redo": self.redo, "Auto": self.auto,
         "Measure": self.measure}[name]()

    def __repr__(self) -> str:
        return f"<RepeatApp {self.box_label!r}>"


def _plain(fig: dict) -> dict:
    """The figure as plain data a trait syncs (NumPy numbers as floats; speedup_figure
    already gives unmeasured points as None)."""
    import json
    return json.loads(json.dumps(fig, default=float))


def open_repeat(source, backend: str = "auto", seed: int = 0,
                display: bool = True) -> RepeatApp:
    """The repeat app over a Repeat, a repeat file or a RepeatSession (then ``backend``
    and ``seed`` are the session's); displayed in IPython."""
    from ..repeat_session import RepeatSession
    from ..session_kinds import repeat_session
    session = source if isinstance(source, RepeatSession) else \
        repeat_session(source, backend=backend, seed=seed)
    app = RepeatApp(session)
    if display:
        try:
            from IPython import get_ipython
            from IPython.display import display as show
        except ImportError:
            return app
        if get_ipython() is not None:
            show(app)
    return app


__all__ = ["RepeatApp", "open_repeat"]
