"""The repeat in the main Session and the app (session_kinds.py, ui/repeat_app.py):
``wb.Session(repeat)`` and ``wb.open(repeat)`` open it as any graph opens; the box's
label follows the step; "fuse steps xF" applies, undoes and redoes; the plot shows the
predicted speedup for every F and the measured one where measured; the stitch planner
chooses F and lists what it considered, or why fusing is refused."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.ir.repeat import save_repeat
from workbench.testing.simulators import cartpole
from workbench.ui.repeat_app import RepeatApp


def test_session_opens_a_repeat_and_its_file(tmp_path):
    r = cartpole(64, 8)
    s = wb.Session(r, backend="cpu", seed=3)
    assert isinstance(s, wb.RepeatSession) and s.seed == 3
    save_repeat(r, tmp_path / "cp.json")
    s2 = wb.Session(str(tmp_path / "cp.json"))
    assert isinstance(s2, wb.RepeatSession) and s2.repeat.trips == 8
    with pytest.raises(wb.WorkbenchError, match="a repeat runs on the cpu backend"):
        wb.Session(r, backend="reference")
    with pytest.raises(wb.WorkbenchError, match="takes backend and seed, not "
                                                "matmul_precision; the command line"):
        wb.Session(r, matmul_precision="tf32")
    # a graph file is still a graph's session
    assert type(wb.Session("sample_graphs/layernorm.json", backend="reference")) is wb.Session


def test_auto_stitch_chooses_f_and_lists_every_f_considered():
    s = wb.Session(cartpole(256, 16))
    f = s.auto("stitch")
    assert s.steps_per_call == f and s.history == ["unfused", f"fuse steps x{f}"]
    considered = [d.nodes[0] for d in s.decisions]
    assert considered == ["unfused", "x1", "x2", "x4", "x8", "x16"]
    chosen = [d for d in s.decisions if d.action == "fused"]
    assert len(chosen) == 1 and chosen[0].nodes == (f"x{f}",)
    assert "chosen: the smallest F" in chosen[0].reason
    assert all("predicted" in d.reason and " ms" in d.reason for d in s.decisions)
    with pytest.raises(wb.WorkbenchError, match="a repeat's planner is stitch"):
        s.auto("rules")


def test_auto_on_a_body_reducing_across_environments_says_why():
    b = wb.GraphBuilder("mean_field")
    x = b.input("x", (32,))
    b.output(x - b.reduce_mean(x, axes=[0], keepdims=True), "x_next")
    s = wb.Session(wb.repeat(b.build(), 4, {"x": "x_next"}))
    assert s.auto("stitch") is None and s.history == ["unfused"]
    refused = [d for d in s.decisions if d.action == "not fused"]
    assert len(refused) == 1 and "grid-wide barrier" in refused[0].reason


def test_app_fuse_undo_redo_and_the_plot():
    r = cartpole(256, 16)
    app = wb.open(r, display=False)
    assert isinstance(app, RepeatApp)
    assert app.box_label == "repeat cartpole_x16 \u00d716 \u00b7 unfused: 16 calls"
    assert "<details" in app.box.value and "cartpole(" in app.box.value   # the body inside
    assert app.body_box.get_title(0) == app.box_label + ": the body drawn"
    assert len(app.body_view.graph.nodes) == len(r.body.nodes)          # drawn op by op
    labels = [v for _, v in app.choice.options]
    assert labels == ["unfused", "fuse steps x1", "fuse steps x2", "fuse steps x4",
                      "fuse steps x8", "fuse steps x16"]
    assert all("predicted" in t for t, _ in app.choice.options)
    fig = app.figure()
    assert [d["name"] for d in fig["data"]] == ["predicted"]
    assert fig["data"][0]["x"] == [1, 2, 4, 8, 16]
    app.choice.value = "fuse steps x8"
    app.buttons["Apply"].click()                       # the control, as a user clicks it
    assert app.box_label.endswith("fuse steps \u00d78: 2 calls")
    assert app.body_box.get_title(0).startswith(app.box_label)
    assert app.session.history == ["unfused", "fuse steps x8"]
    assert app.buttons["Redo"].disabled and not app.buttons["Undo"].disabled
    app.undo()
    assert app.box_label.endswith("unfused: 16 calls") and app.session.steps_per_call is None
    app.redo()
    assert app.session.steps_per_call == 8
    secs = app.measure(repeats=1)
    assert secs > 0 and app.message.startswith("measured fuse steps x8")
    measured = app.figure()["data"][0]
    assert measured["name"] == "measured" and measured["y"][3] > 0   # at F=8
    assert measured["y"][0] is None                                   # F=1: not measured
    # a refused action: the reason, and nothing changed
    assert app.fuse_steps(99) is None and "at most" in app.message
    assert app.session.history == ["unfused", "fuse steps x8"]
    assert app.apply("fuse steps x3") is None and "no transformation" in app.message
    with pytest.raises(wb.WorkbenchError, match="a repeat runs on the cpu backend"):
        wb.open(r, backend="cuda-emu", display=False)


def test_app_of_a_refused_body_offers_fusing_disabled_with_the_reason():
    b = wb.GraphBuilder("mean_field")
    x = b.input("x", (32,))
    b.output(x - b.reduce_mean(x, axes=[0], keepdims=True), "x_next")
    app = wb.open(wb.repeat(b.build(), 4, {"x": "x_next"}), display=False)
    assert all("refused: node" in t for t, v in app.choice.options if v != "unfused")
    assert app.apply("fuse steps x4") is None and "grid-wide barrier" in app.message
    assert app.session.history == ["unfused"]
    assert app.figure()["data"][0]["x"] == []          # no F to plot
