"""The app's saved-activations panel: ``Session.saved()`` one row per value the forward
hands the backward (bytes stored, flops to recompute, the minimum cut's suggestion)
with a store / recompute toggle that applies the step (``session_saved.py``); a value
that cannot be recomputed shows why, its toggle disabled. Undo, redo and the history
move over these steps like any other; the panel follows the current step on refresh.
"""
from __future__ import annotations

import html

import ipywidgets as w

from ..errors import WorkbenchError

CHOICES = ("store", "recompute")


class SavedPanel(w.VBox):
    """``refresh()`` rebuilds the rows for the session's current step; a toggle calls
    ``Session.recompute`` / ``Session.store`` and then ``on_step(message, refused)``."""

    def __init__(self, session, on_step):
        self.session, self.on_step = session, on_step
        self.toggles: dict[str, w.ToggleButtons] = {}
        self._building = False
        self._shown = None       # the graph the rows are for (a step changes it)
        super().__init__([])
        self.add_class("wb-saved")
        self.refresh()

    def refresh(self, force: bool = False) -> None:
        s = self.session
        if s.graph is self._shown and not force:
            return               # (the table prices a minimum cut: not at every refresh)
        self._shown = s.graph
        if "loss" not in s.graph.outputs:      # (not a training graph: nothing saved)
            self.children, self.toggles = (w.HTML(
                '<span class="wb-dim">no backward: import with '
                'from_torch(..., training=True)</span>'),), {}
            return
        table = s.saved()
        self._building = True
        rows, self.toggles = [], {}
        for r in table.itertuples(index=False):
            t = w.ToggleButtons(options=CHOICES, value=r.choice,
                                style={"button_width": "auto"},
                                disabled=bool(r.refused) and r.choice == "store",
                                tooltips=[f"store {r.value}", f"recompute {r.value}"])
            t.observe(lambda ch, v=r.value: self._toggled(v, ch["new"]), names="value")
            self.toggles[r.value] = t
            why = (f'cannot be recomputed: {html.escape(str(r.refused))}' if r.refused
                   else f'suggested: {r.suggestion}')
            rows.append(w.HBox([w.HTML(
                f'<code>{html.escape(r.value)}</code> ({html.escape(r.op)}) '
                f'{r.stored_bytes:,} B stored, {r.recompute_flops:,} flops to recompute; '
                f'<span class="wb-dim">{why}</span>'), t]))
        self._building = False
        self.children = tuple(rows) or (w.HTML('<span class="wb-dim">the backward reads '
                                               'no forward value</span>'),)

    def _toggled(self, value: str, choice: str) -> None:
        if self._building:
            return
        s = self.session
        try:
            (s.recompute if choice == "recompute" else s.store)(value)
        except WorkbenchError as e:          # (FusionRefused too: said, nothing changed)
            self.on_step(str(e), True)
            self.refresh(force=True)
            return
        self.on_step(f"{choice} {value}: step {s.position}", False)
