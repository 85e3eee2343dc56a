"""The transformations panel over a real session: list, preview, apply, cancel,
history jumps, comparison, decisions (escaped)."""
from __future__ import annotations

import pytest

from workbench.fusion.partition import Decision
from workbench.session import Session
from workbench.ui.transform_panel import TransformPanel, decision_html


@pytest.fixture
def panel(small_graph):
    s = Session(small_graph, backend="reference")
    calls = {"preview": [], "apply": [], "goto": []}
    sel = []

    def apply(action):
        calls["apply"].append(action)
        s.apply(action)
        p.refresh_history()

    def goto(i):
        calls["goto"].append(i)
        s.goto(i)
        p.refresh_history()

    p = TransformPanel(s, lambda: list(sel), calls["preview"].append, apply, goto)
    return p, s, calls, sel


def test_list_preview_apply(panel):
    p, s, calls, sel = panel
    assert p.refresh_actions() == [] and "select nodes first" in p.detail.value
    sel[:] = ["n0", "n1"]
    acts = p.refresh_actions()
    assert acts and len(p.choices.options) == len(acts)
    assert "applicable" in p.detail.value and "refused" in p.detail.value
    i = next(i for i, a in enumerate(acts) if a.label == "fuse n0 n1")
    text = dict((v, t) for t, v in p.choices.options)[i]
    assert text.startswith("fuse n0 n1: -1 kernel, -")
    p.choices.value = i                      # picking previews
    assert calls["preview"][-1] == acts[i].plan and "preview" in p.detail.value
    assert not p.apply_button.disabled and not p.cancel_button.disabled
    assert len(s.history) == 1               # a preview changes nothing
    p.apply_button.click()
    assert calls["apply"] == [acts[i]] and s.plan == acts[i].plan
    assert p.apply_button.disabled and p.choices.options == ()
    assert p.steps.value == 1 and p.steps.options[1][0].startswith("> 1: fuse n0 n1")


def test_cancel_and_refused(panel):
    p, s, calls, sel = panel
    s.auto("rules")
    sel[:] = [s.plan.groups[0].nodes[0]]
    acts = p.refresh_actions()
    legal = next(i for i, a in enumerate(acts) if a.legal and a.plan is not None)
    p.choices.value = legal
    p.cancel_button.click()
    assert calls["preview"][-1] is None and p.previewing is None
    refused = next(i for i, a in enumerate(acts) if not a.legal)
    p.choices.value = refused
    assert "refused" in p.detail.value and p.apply_button.disabled
    assert p.apply() is None and calls["apply"] == []


def test_history_goto_compare_and_decisions(panel):
    p, s, calls, sel = panel
    s.auto("xla")
    s.auto("rules")
    p.refresh_history()
    assert [v for _, v in p.steps.options] == [0, 1, 2] and p.steps.value == 2
    assert "decisions" in p.decisions.value
    p.steps.value = 0
    p.goto_button.click()
    assert calls["goto"] == [0] and s.position == 0 and len(s.history) == 3
    assert "not made by a planner" in p.decisions.value
    p.compare_a.value, p.compare_b.value = 0, 2
    p.compare_button.click()
    assert "kernels" in p.comparison.value and "step 2: auto rules" in p.comparison.value


def test_decisions_are_escaped_and_bounded():
    ds = [Decision("fused", ("n1", "<img src=x>"), "because <b>")] * 250
    out = decision_html(ds)
    assert "<img" not in out and "&lt;img src=x&gt;" in out and "&lt;b&gt;" in out
    assert "250 decisions" in out and "and 50 more" in out


def test_the_app_lists_previews_applies_and_jumps(app):
    """In the app: the preview redraws the graph with the plan it would make (the
    session unchanged), Apply adds the step and compiles it, Cancel draws the current
    plan again, the history list jumps."""
    s = app.session
    drawn = app.view.svg
    acts = app.actions(["n0", "n1"])
    assert app.transforms_box.selected_index == 0 and app.transforms.actions == acts
    i = next(i for i, a in enumerate(acts) if a.label == "fuse n0 n1")
    app.preview(i)
    assert app.view.plan == acts[i].plan and app.view.svg != drawn
    assert len(s.history) == 1 and "preview" in app.message
    app.cancel_preview()
    assert app.view.plan == s.plan and app.view.svg == drawn
    app.preview(acts[i])
    plan = app.apply()
    assert plan == acts[i].plan and s.plan == plan and len(s.history) == 2
    assert app.message.startswith("applied fuse n0 n1")
    assert s.program(plan) is not None            # compiled: Measure only loads it
    assert [v for _, v in app.transforms.steps.options] == [0, 1]
    app.goto(0)
    assert s.position == 0 and app.view.plan == s.history[0].plan
    assert app.transforms.steps.value == 0
    assert app.goto(5) is None and "no step 5" in app.message
    df = app.compare(0, 1)
    assert df.loc["kernels", "change"] == -1
