"""The shareable session file: Session.save / workbench.open_session give back the same
graph, every step (undo/redo after reopening), the position, locks and the view; a
bad or edited file is refused with one clear message."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.runtime import random_inputs
from workbench.session import Session
from workbench.session_file import SessionFileError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sample_graphs"))
from make_samples import block_chain  # noqa: E402


@pytest.fixture
def worked(tmp_path):
    """A session with manual, planner, mapping and lock steps, the last one undone."""
    s = Session(block_chain(2), backend="cpu")
    s.fuse(["n0", "n1"])
    s.auto("rules")
    row = next(gr for gr in s.plan.groups if gr.schedule.mapping is not None)
    s.set_mapping(row.id, "warp")
    s.lock(row.id)
    s.undo()
    assert len(s.history) == 5 and s.position == 3
    return s


def test_reopening_gives_the_same_graph_history_position_and_view(worked, tmp_path):
    s = worked
    path = s.save(tmp_path / "s.wbsession.json", view={"collapsed": ["c0"], "selected": ["n3"]})
    r = wb.open_session(path)
    assert r.graph.name == s.graph.name and [n.op for n in r.graph.nodes] == \
        [n.op for n in s.graph.nodes]
    assert len(r.history) == len(s.history) and r.position == s.position
    for a, b in zip(r.history, s.history):
        assert a.action == b.action and a.plan == b.plan and a.plan.planner == b.plan.planner
        assert a.constraints == b.constraints
    assert r.view_state == {"collapsed": ["c0"], "selected": ["n3"]}
    # the reopened plan runs correctly (against the NumPy reference, fresh inputs)
    x = random_inputs(r.graph, np.random.default_rng().integers(1 << 30))
    got, want = r.run(x), s.run(x)
    for o in r.graph.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-5, atol=1e-5)
    # undo and redo work after reopening, through the saved steps
    r.redo()
    assert r.plan == s.history[s.position + 1].plan
    r.goto(0)
    assert r.plan == s.history[0].plan


def test_a_model_file_is_referenced_by_hash(tmp_path):
    src = ROOT / "sample_graphs" / "layernorm.json"
    model = tmp_path / "m.json"
    shutil.copy(src, model)
    s = Session(str(model), backend="cpu")
    s.auto("rules")
    path = s.save(tmp_path / "s.json", model=model)
    d = json.loads(path.read_text())
    assert set(d["graph"]) == {"file", "sha256"} and len(d["graph"]["sha256"]) == 64
    assert wb.open_session(path).plan == s.plan
    model.write_text(model.read_text().replace('"name"', '"name" ', 1))
    with pytest.raises(SessionFileError, match="has changed since the session was saved"):
        wb.open_session(path)
    model.unlink()
    with pytest.raises(SessionFileError, match="missing .*put it back"):
        wb.open_session(path)


def _edited(tmp_path, worked, edit):
    path = worked.save(tmp_path / "s.json")
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d) if not isinstance(d, str) else d)
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="other"), "not a session file"),
    (lambda d: d.update(version=9), "version 9 .*reads versions 1, 2"),
    (lambda d: d.update(position=99), "position 99 is not a step"),
    (lambda d: d["steps"][1]["groups"][0].update(nodes=["n999"]), r"steps\[1\]\.groups\[0\]"
                                                                  r"\.nodes names no node"),
    (lambda d: d["steps"][1]["groups"].pop(), r"steps\[1\] leaves \d+ nodes in no kernel"),
    (lambda d: d["steps"][0].update(matmul_precision="fp8"), "matmul_precision 'fp8'"),
    (lambda d: d["steps"][2]["groups"][0].update(schemes=[["x", "sideways"]]),
     "bad scheme or launch"),
    (lambda d: d.pop("steps"), "has no 'steps'"),
    (lambda d: d.update(seed="0"), "seed is str, not int"),
])
def test_an_edited_file_is_refused_with_the_field_named(tmp_path, worked, edit, message):
    with pytest.raises(SessionFileError, match=message) as e:
        wb.open_session(_edited(tmp_path, worked, edit))
    assert "\n" not in str(e.value) and "save the session again" in str(e.value)


def test_not_json_and_missing_files_are_refused(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"format": "workbench.session", "format": 1}')
    with pytest.raises(SessionFileError, match="appears twice"):
        wb.open_session(p)
    p.write_text("{not json")
    with pytest.raises(SessionFileError, match="not valid JSON"):
        wb.open_session(p)
    with pytest.raises(SessionFileError, match="no session file"):
        wb.open_session(tmp_path / "absent.json")
