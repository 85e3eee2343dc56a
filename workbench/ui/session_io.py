"""The app's side of the shareable session file (:mod:`workbench.session_file`): the
view state saved with the session (collapsed containers, selection), the view put
back when a reopened session is shown, and the "Save session" control.

    >>> app.save_session("bert.wbsession.json", model="bert.onnx")   # doctest: +SKIP
    >>> wb.open(wb.open_session("bert.wbsession.json"))            # same graph, steps, view  # doctest: +SKIP
"""
from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as w

from ..errors import WorkbenchError


def view_state(app) -> dict:
    """What the drawing shows: its collapsed containers and the selection."""
    return {"collapsed": sorted(app.view.collapsed), "selected": list(app.selected)}


def apply_view(app, state: dict) -> None:
    """Put a saved view back (containers and nodes the graph no longer has are
    skipped: the graph is checked by hash, so there are none unless edited)."""
    view = app.view
    collapsed = state.get("collapsed")
    if isinstance(collapsed, list):
        # (set directly, then one redraw: collapsing box by box redrew once per box)
        view._collapsed = frozenset(c for c in collapsed if c in view.composites)
        view.redraw()
    selected = state.get("selected")
    if isinstance(selected, list):
        app.selected = [n for n in selected if isinstance(n, str) and n in app.session.graph.node_map]


def save(app, path, model=None) -> Path:
    return app.session.save(path, model=model, view=view_state(app))


class SessionSaver(w.VBox):
    """A path, an optional model file (stored by path and hash instead of the graph),
    and the Save session button; the message says what was written or why not."""

    def __init__(self, app):
        self.app = app
        name = "".join(c if c.isalnum() or c in "_-." else "_" for c in app.session.graph.name)
        self.path = w.Text(value=f"{name[:60] or 'session'}.wbsession.json",
                           description="file", layout=w.Layout(width="340px"))
        self.model = w.Text(value="", placeholder="model file (empty: store the graph)",
                            description="model", layout=w.Layout(width="340px"))
        self.button = w.Button(description="Save session", icon="save",
                               tooltip="write the graph (or a reference to the model file), "
                                       "every step and the view as JSON; reopen with "
                                       "wb.open(wb.open_session(path))")
        self.message = w.HTML()
        self.button.on_click(lambda _: self.save())
        super().__init__([w.HBox([self.path, self.button]), self.model, self.message])
        self.add_class("wb-session-saver")

    def save(self) -> Path | None:
        try:
            p = save(self.app, self.path.value.strip(), self.model.value.strip() or None)
        except (WorkbenchError, OSError) as e:
            self.message.value = f'<span class="wb-error">{html.escape(str(e)[:400])}</span>'
            return None
        n = len(self.app.session.history)
        self.message.value = html.escape(
            f"saved {n} step{'s' * (n != 1)} (at step {self.app.session.position}) to {p}; "
            f"reopen: wb.open(wb.open_session({str(p)!r}))")
        return p
