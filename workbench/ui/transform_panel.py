"""The transformations panel: what applies to the selection, preview, history.

Three parts, each over the app's Session (the app wires the callbacks):

- **Transformations** -- every action :meth:`Session.actions` offers for the selected
  nodes, legal ones first with their predicted effect ("-1 kernel, -16.8 MB, 7.16 ->
  6.57 ms"), refused ones with the reason. Picking one *previews* it: the app draws
  the plan as it would be and the numbers; Apply pushes it as a step, Discard goes back.
- **History** -- every step, clickable (jump to it: ``Session.goto``), and two steps
  compared side by side (``Session.compare``).
- **Decisions** -- the planner's decisions of the current step with their reasons,
  under the step's numbers as the Compare table and the step table give them (one
  prediction per step: ``Session.effect``; a planner's figures in its reasons are the
  same, as the step was priced by the model that planned it).

Pricing the actions of a selection costs one cost-model evaluation each, so the list
is made when asked (the Transformations button or ``app.actions()``), not on every
click.
"""
from __future__ import annotations

import html
from typing import Callable

import ipywidgets as w

from ..fusion.actions import Action
from ..session import Session

# decisions listed per step (a 1,000-op plan makes thousands; the rest are counted)
MAX_DECISIONS = 200


def action_rows(actions: list[Action], before,
                words: Callable[[str], str] = str) -> list[tuple[str, int]]:
    """(text, index) per action for the list: legal ones with their effect, refused
    ones marked with their reason (shortened; the full reason shows when picked), in
    ``words`` (the app's: named as the drawing labels them, ui/drawn_names.py)."""
    rows = []
    for i, a in enumerate(actions):
        if a.legal:
            rows.append((f"{a.label}: {a.delta(before)}", i))
        else:
            reason = words(a.reason)
            reason = reason if len(reason) <= 90 else reason[:87] + "..."
            rows.append((f"refused: {a.label} ({reason})", i))
    return rows


def step_line(effect) -> str:
    """A step's numbers as the panels say them (``Session.effect``)."""
    return (f"{effect.kernels} kernels, {effect.bytes_moved / 1e6:.4g} MB, "
            f"{effect.predicted_ms:.4g} ms predicted")


def compare_html(df) -> str:
    """The Compare table as HTML: a step not measured reads "not measured", never NaN."""
    return df.to_html(float_format=lambda x: f"{x:.4g}", na_rep="not measured",
                      escape=True)


def decision_html(decisions, effect=None) -> str:
    """The planner's decisions as a list a person reads: what happened, to which
    nodes, and why (escaped: node names come from model files); ``effect``: the
    step's numbers, shown above them."""
    head = f"<p>this step: {html.escape(step_line(effect))}</p>" if effect else ""
    if not decisions:
        return head + "<i>this step was not made by a planner</i>"
    shown = decisions[:MAX_DECISIONS]
    items = "".join(f"<li><b>{html.escape(d.action)}</b> "
                    f"{html.escape(' + '.join(d.nodes))}: {html.escape(d.reason)}</li>"
                    for d in shown)
    more = (f"<li>... and {len(decisions) - len(shown)} more</li>"
            if len(decisions) > len(shown) else "")
    counts = {}
    for d in decisions:
        counts[d.action] = counts.get(d.action, 0) + 1
    kinds = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    return f"{head}<div class='wb-decisions'><b>{len(decisions)} decisions</b> " \
           f"({kinds})<ol>{items}{more}</ol></div>"


class TransformPanel(w.VBox):
    """The panel; ``on_preview(plan | None)`` draws a plan as a preview (None: the
    current plan again), ``on_apply(action)`` and ``on_goto(index)`` change the
    session through the app, ``selection()`` gives the selected node ids."""

    def __init__(self, session: Session, selection: Callable[[], list[str]],
                 on_preview: Callable, on_apply: Callable, on_goto: Callable,
                 on_lock: Callable | None = None, words: Callable[[str], str] = str):
        self.session = session
        self._words = words             # a refusal's text as the drawing names things
        self._selection, self._on_preview = selection, on_preview
        self._on_apply, self._on_goto = on_apply, on_goto
        self.actions: list[Action] = []
        self.previewing: Action | None = None

        self.list_button = w.Button(description="Transformations", icon="list",
                                    tooltip="list every transformation of the selection "
                                    "with its predicted effect", layout=w.Layout(width="auto"))
        self.choices = w.Select(options=[], rows=8, layout=w.Layout(width="100%"))
        # lock the selected kernel or edge as it is, or unlock it (locks: issue 48)
        self.lock_button = w.ToggleButton(description="Lock", icon="lock", disabled=True,
                                          tooltip="keep the selected kernel (or the edge "
                                          "between two selected nodes) as it is: Auto plans "
                                          "around it", layout=w.Layout(width="auto"))
        self._syncing_lock = False
        self.detail = w.HTML()
        self.apply_button = w.Button(description="Apply", button_style="success",
                                     disabled=True, layout=w.Layout(width="auto"))
        self.cancel_button = w.Button(description="Discard", disabled=True,
                                      tooltip="leave the preview: draw the current plan",
                                      layout=w.Layout(width="auto"))
        self.steps = w.Select(options=[], rows=6, layout=w.Layout(width="100%"))
        self.goto_button = w.Button(description="Go to step", layout=w.Layout(width="auto"))
        self.compare_a = w.Dropdown(options=[], layout=w.Layout(width="45%"))
        self.compare_b = w.Dropdown(options=[], layout=w.Layout(width="45%"))
        self.compare_button = w.Button(description="Compare", layout=w.Layout(width="auto"))
        self.comparison = w.HTML()
        self.decisions = w.HTML()

        transforms = w.VBox([w.HBox([self.list_button, self.apply_button,
                                     self.cancel_button, self.lock_button]),
                             self.choices, self.detail])
        history = w.VBox([self.steps, self.goto_button,
                          w.HBox([self.compare_a, self.compare_b]), self.compare_button,
                          self.comparison])
        tabs = w.Tab(children=[transforms, history, self.decisions])
        for i, title in enumerate(("Transformations", "History", "Decisions")):
            tabs.set_title(i, title)
        super().__init__([tabs], layout=w.Layout(width="100%"))
        self.add_class("wb-transforms")

        self.list_button.on_click(lambda _: self.refresh_actions())
        self.choices.observe(lambda ch: self._picked(ch["new"]), "value")
        self.apply_button.on_click(lambda _: self.apply())
        self.cancel_button.on_click(lambda _: self.cancel())
        self.goto_button.on_click(lambda _: self.steps.value is not None
                                  and self._on_goto(self.steps.value))
        self.compare_button.on_click(lambda _: self.compare())
        if on_lock is not None:
            self.lock_button.observe(lambda _: self._syncing_lock or on_lock(), "value")
        self.refresh_history()

    def show_lock(self, on: bool, enabled: bool) -> None:
        """Show the selection's lock state (without calling ``on_lock``)."""
        self._syncing_lock = True
        try:
            self.lock_button.value, self.lock_button.disabled = on, not enabled
            self.lock_button.description = "Locked" if on else "Lock"
        finally:
            self._syncing_lock = False

    # -- transformations -------------------------------------------------------------
    def refresh_actions(self) -> list[Action]:
        """List the actions of the current selection (priced by the cost model)."""
        self.cancel()
        sel = self._selection()
        if not sel:
            self.actions = []
            self.choices.options = []
            self.detail.value = "<i>select nodes first: the list is what applies to them</i>"
            return []
        self.actions = self.session.actions(sel)
        before = self.session.effect()
        self.choices.value = None
        self.choices.options = action_rows(self.actions, before, self._words)
        legal = sum(a.legal for a in self.actions)
        self.detail.value = html.escape(
            f"{legal} applicable, {len(self.actions) - legal} refused, for "
            f"{', '.join(sel[:6])}{'...' if len(sel) > 6 else ''}; now {step_line(before)}. "
            "Pick one to preview it.")
        return self.actions

    def _picked(self, index) -> None:
        if index is None:
            return
        self.preview(self.actions[index])

    def preview(self, action: Action) -> None:
        """Show ``action``'s plan (legal and priced) or why it is refused."""
        self.previewing = None
        self.apply_button.disabled = True
        if not action.legal:
            self.detail.value = f"<b>refused</b>: {html.escape(action.label)}<br>" \
                                f"{html.escape(self._words(action.reason))}"
            self._on_preview(None)
            self.cancel_button.disabled = True
            return
        before = self.session.effect()
        if action.plan is None:         # tuning: measured when applied
            self.detail.value = f"<b>{html.escape(action.label)}</b>: " \
                                f"{html.escape(action.reason)}"
        else:
            self.detail.value = (f"<b>preview</b> {html.escape(action.label)}: "
                                 f"{html.escape(action.delta(before))}")
            self._on_preview(action.plan)
        self.previewing = action
        self.apply_button.disabled = False
        self.cancel_button.disabled = action.plan is None

    def apply(self):
        """Apply the previewed action (a new step)."""
        action = self.previewing
        if action is None:
            return None
        self.previewing = None
        self.apply_button.disabled = self.cancel_button.disabled = True
        self.choices.options = []
        self.actions = []
        return self._on_apply(action)

    def cancel(self) -> None:
        """Leave the preview: the drawing shows the current plan again."""
        was = self.previewing is not None and self.previewing.plan is not None
        self.previewing = None
        self.apply_button.disabled = self.cancel_button.disabled = True
        if was:
            self._on_preview(None)

    # -- history and decisions -----------------------------------------------------------
    def refresh_history(self) -> None:
        """The step list (all steps, undone ones included) and the decisions."""
        s = self.session
        opts = [(f"{'> ' if i == s.position else '  '}{i}: {st.action} "
                 f"({len(st.plan.groups)} kernels)", i) for i, st in enumerate(s.history)]
        self.steps.options = opts
        self.steps.value = s.position
        pick = [(f"{i}: {st.action}", i) for i, st in enumerate(s.history)]
        self.compare_a.options, self.compare_b.options = pick, pick
        self.compare_a.value = max(0, s.position - 1)
        self.compare_b.value = s.position
        self.decisions.value = decision_html(s.step.decisions, s.effect())

    def compare(self) -> None:
        a, b = self.compare_a.value, self.compare_b.value
        if a is None or b is None:
            return
        df = self.session.compare(a, b)
        self.comparison.value = compare_html(df)
