"""The app's Save session control and reopening: the same steps, position and view."""
from __future__ import annotations

import json

import workbench as wb
from workbench.session import Session
from workbench.ui import WorkbenchApp


def test_save_session_control_and_reopen_give_the_same_view(small_graph, tmp_path):
    app = WorkbenchApp(Session(small_graph, backend="cpu"))
    app.fuse(["n0", "n1"])
    app.auto("rules")
    app.undo()                       # the planner's step stays, undone, in the file
    box = sorted(app.view.composites)[0]
    app.view.collapse(box)
    app.selected = ["n5"]
    assert app.transforms_box.get_title(1) == "Save session"
    app.saver.path.value = str(tmp_path / "s.wbsession.json")
    p = app.saver.save()
    assert p is not None and "saved 3 steps (at step 1)" in app.saver.message.value
    d = json.loads(p.read_text())
    assert d["view"] == {"collapsed": sorted(app.view.collapsed), "selected": ["n5"]}
    again = wb.open(wb.open_session(p), display=False)
    assert again.session.plan == app.session.plan
    assert [st.action for st in again.session.history] == \
        [st.action for st in app.session.history]
    assert again.view.collapsed == app.view.collapsed and again.selected == ["n5"]
    assert again.view.svg == app.view.svg
    again.redo()                     # the undone step is there to redo
    assert again.session.position == 2 and again.session.plan == app.session.history[2].plan


def test_a_save_that_cannot_be_written_says_why(small_graph, tmp_path):
    app = WorkbenchApp(Session(small_graph, backend="cpu"))
    app.saver.path.value = str(tmp_path / "s.json")
    app.saver.model.value = str(tmp_path / "absent.onnx")
    assert app.saver.save() is None
    assert "does not exist" in app.saver.message.value and not (tmp_path / "s.json").exists()
