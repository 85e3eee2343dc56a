"""Recompute / store steps in session files (session_file.py, version 2): saved and
reopened in a fresh Session, the same history (undo and redo across the steps), the
same graph at each step and the same results (the cpu backend's generated kernels
against the NumPy reference on fresh random inputs); a version 1 file still opens;
an edited recompute entry is refused with one message naming the field."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F

import workbench as wb
from workbench.runtime import random_inputs, run_reference
from workbench.session_file import SessionFileError
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest

from test_training_import import NormGelu


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(5)
    m, x, y = NormGelu(8), torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    return wb.from_torch(m, (x,), training=True, loss=F.mse_loss, targets=(y,))


@pytest.fixture
def worked(graph):
    """rules; recompute two values; store one again; undo that store (5 steps, at 3)."""
    s = wb.Session(graph, backend="cpu")
    s.auto("rules")
    table = s.saved()
    values = list(table.loc[table["refused"] == "", "value"][:2])
    assert len(values) == 2, table
    s.recompute(*values)
    s.store(values[0])
    s.undo()
    assert len(s.history) == 4 and s.position == 2 and s.recomputed == set(values)
    return s, values


def _graph_key(g):
    return [(n.id, n.op, n.inputs, n.outputs) for n in g.nodes], g.outputs


def _runs_as_reference(s, loaded):
    x = random_inputs(s.graph, int(np.random.default_rng().integers(1 << 30)))
    want, got = run_reference(loaded, x), s.run(x)
    for k in loaded.outputs:
        assert relative_to_largest(got[k], want[k]) <= FRAMEWORK_TOLERANCE, k


def test_recompute_steps_save_and_reopen(worked, tmp_path):
    s, values = worked
    path = s.save(tmp_path / "s.wbsession.json")
    d = json.loads(path.read_text())
    assert d["version"] == 2
    assert [st["recompute"] for st in d["steps"]] == [[], [], sorted(values), [values[1]]]
    r = wb.open_session(path)
    assert len(r.history) == len(s.history) and r.position == s.position
    assert _graph_key(r.loaded_graph) == _graph_key(s.loaded_graph)
    for i in range(len(s.history)):
        s.goto(i), r.goto(i)
        assert r.step.action == s.step.action and r.plan == s.plan
        assert r.recomputed == s.recomputed and _graph_key(r.graph) == _graph_key(s.graph)
    # one graph per set of values, as the session makes them: the same object again
    assert r.history[0].plan.graph is r.history[1].plan.graph is r.loaded_graph
    # every step with a graph of its own runs correctly, after undo and redo
    r.goto(2)
    _runs_as_reference(r, r.loaded_graph)
    r.redo()
    assert r.recomputed == {values[1]}
    _runs_as_reference(r, r.loaded_graph)
    r.undo(), r.undo()
    assert r.graph is r.loaded_graph and r.recomputed == frozenset()
    # a new step after reopening
    r.recompute(values[0])
    assert r.recomputed == {values[0]} and len(r.history) == 3


def test_a_version_1_file_still_opens(graph, tmp_path):
    s = wb.Session(graph, backend="cpu")
    s.auto("rules")
    path = s.save(tmp_path / "s.json")
    d = json.loads(path.read_text())
    d["version"] = 1
    for st in d["steps"]:
        del st["recompute"]
    path.write_text(json.dumps(d))
    r = wb.open_session(path)
    assert [st.plan for st in r.history] == [st.plan for st in s.history]
    assert r.recomputed == frozenset() and r.graph is r.loaded_graph


@pytest.mark.parametrize("edit, message", [
    (lambda d, v: d["steps"][2].update(recompute=["no_such_value"]),
     r"steps\[2\]\.recompute names 'no_such_value', not a forward value"),
    (lambda d, v: d["steps"][2].update(recompute=v[:1]), r"steps\[2\]\.groups\[\d+\]"),
    (lambda d, v: d["steps"][2].update(recompute=[v[0], v[0]]), "not a list of distinct"),
    (lambda d, v: d["steps"][2].update(recompute=v[0]), r"steps\[2\]\.recompute is str"),
    (lambda d, v: d["steps"][2].pop("recompute"), r"steps\[2\] has no 'recompute'"),
    (lambda d, v: d.update(version=1), r"steps\[0\]\.recompute in a version 1 file"),
])
def test_an_edited_recompute_entry_is_refused(worked, tmp_path, edit, message):
    s, values = worked
    before = (s.position, len(s.history), s.recomputed, s.plan)
    path = s.save(tmp_path / "s.json")
    d = json.loads(path.read_text())
    edit(d, values)
    path.write_text(json.dumps(d))
    with pytest.raises(SessionFileError, match=message) as e:
        wb.open_session(path)
    assert "\n" not in str(e.value) and "save the session again" in str(e.value)
    # the session that wrote the file is left as it was
    assert (s.position, len(s.history), s.recomputed, s.plan) == before


def test_a_value_that_cannot_be_recomputed_is_refused(tmp_path):
    # GELU's backward reads the bias-free projection's product: a GEMM's result
    torch.manual_seed(6)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.GELU(),
                            torch.nn.Linear(8, 4))
    x, y = torch.randn(3, 8), torch.randn(3, 4)
    s = wb.Session(wb.from_torch(m, (x,), training=True, loss=F.mse_loss, targets=(y,)),
                   backend="cpu")
    s.auto("rules")
    refused = s.saved().query("refused != ''")["value"].iloc[0]
    path = s.save(tmp_path / "s.json")
    d = json.loads(path.read_text())
    d["steps"][1]["recompute"] = [refused]
    path.write_text(json.dumps(d))
    with pytest.raises(SessionFileError, match=r"steps\[1\]\.recompute names .*cannot be "
                                                "recomputed .*compute-bound"):
        wb.open_session(path)
