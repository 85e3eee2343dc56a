"""Session: history, undo/redo, refusals leave it unchanged, measurements."""
import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused, WorkbenchError
from workbench.session import STEP_COLUMNS, Session


@pytest.fixture
def session():
    b = wb.GraphBuilder("sm", "softmax of a small batch")
    x = b.input("x", (64, 100))
    b.output(b.softmax(x), "y")
    return Session(b.build(), backend="cpu")


def test_undo_redo_walks_history(session):
    p0 = session.plan
    p1 = session.fuse(["n0", "n1"])
    p2 = session.auto("rules")
    assert len(p2.groups) == 1
    assert session.undo() == p1
    assert session.undo() == p0
    with pytest.raises(WorkbenchError, match="nothing to undo"):
        session.undo()
    assert session.redo() == p1
    session.split("n0")          # a new step drops the undone future
    with pytest.raises(WorkbenchError, match="nothing to redo"):
        session.redo()


def test_refused_fusion_leaves_session_unchanged(session):
    session.auto("rules")
    before = (list(session.history), session.position, session.plan)
    with pytest.raises(FusionRefused):
        session.fuse(["n0"])
    assert (list(session.history), session.position, session.plan) == before


def test_measure_and_table(session):
    session.auto("rules")
    m = session.measure(repeats=3)
    assert m.kernels == 1 and m.within_tolerance and m.latency_ms > 0
    # compulsory traffic of the fused kernel: x read once, y written once
    assert m.bytes_read == m.bytes_written == 64 * 100 * 4
    t = session.table(repeats=3)
    assert list(t.columns) == STEP_COLUMNS
    assert list(t.kernels) == [5, 1]
    assert t.ok.all()
    assert t.bytes_moved_MB.iloc[0] > 2 * t.bytes_moved_MB.iloc[1]


def test_run_matches_reference_on_fresh_inputs(session):
    session.auto("rules")
    x = np.random.default_rng(7).standard_normal((64, 100)).astype(np.float32)
    y = session.run({"x": x})["y"]
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(1), 1, rtol=1e-5)


def test_bad_inputs_are_named(session):
    with pytest.raises(WorkbenchError, match="missing inputs"):
        session.run({})
    with pytest.raises(WorkbenchError, match="shape"):
        session.run({"x": np.zeros((3, 3), np.float32)})
    with pytest.raises(WorkbenchError, match="dtype"):
        session.run({"x": np.zeros((64, 100), np.float64)})


def test_source_of_a_group_in_both_targets(session):
    session.auto("rules")
    cu = session.source("n0", "cuda")
    c = session.source("n0", "c")
    assert "__global__" in cu and "__syncthreads" in cu
    assert "#pragma omp parallel for" in c and "__global__" not in c


def test_unknown_backend_and_planner():
    with pytest.raises(WorkbenchError, match="unknown backend"):
        Session("sample_graphs/softmax.json", backend="tpu")
    s = Session("sample_graphs/softmax.json", backend="reference")
    with pytest.raises(WorkbenchError, match="unknown planner"):
        s.auto("magic")
