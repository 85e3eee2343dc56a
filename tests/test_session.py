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
    assert t.dram_MB.isna().all()            # measured DRAM bytes only with counters=True
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


def test_model_is_refitted_to_the_sessions_measurements(session):
    from workbench.fusion.cost import samples_from
    device_model = session.cost_model
    assert device_model.calibrated_on == 0
    session.baseline(repeats=3)
    session.auto("rules")
    m = session.measure(repeats=3)
    # the step's prediction was made before the model saw the step's timings
    assert not np.isnan(m.predicted_ms) and m.predicted_ms > 0
    fitted = session.cost_model
    assert fitted.calibrated_on == 5 + 1          # every kernel measured so far

    def squared_error(model):
        return sum((model.estimate(s_plan.graph, s_plan.group(r["group"])).seconds
                    / (r["latency_ms"] / 1e3) - 1) ** 2
                   for s_plan, mm in [(p, session.measured(p)) for p in
                                      (session.history[0].plan, session.plan)]
                   for r in mm.per_kernel.to_dict("records"))
    # least squares on relative error: the fit is at least as good on what it saw
    assert squared_error(fitted) <= squared_error(device_model) + 1e-9
    assert len(samples_from(device_model, session.plan, m.per_kernel)) == 1


def test_assigned_model_is_kept(session):
    model = session.cost_model
    session.cost_model = model
    session.measure(repeats=2)
    assert session.cost_model is model and not session.calibrate


def test_table_without_measuring_uses_cached_baseline(session):
    session.baseline(repeats=3)
    session.auto("rules")
    session.measure(repeats=3)
    t = session.table(measure=False)
    assert t.speedup_vs_none.notna().all()
    assert session.measured() is session.measure()


def test_progress_reports_compiling_then_measuring():
    b = wb.GraphBuilder("sm")
    b.output(b.softmax(b.input("x", (8, 16))), "y")
    seen = []
    s = Session(b.build(), backend="cpu", progress=lambda d, t, what: seen.append((d, t, what)))
    s.auto("rules")
    s.measure(repeats=3)
    labels = [w for _, _, w in seen]
    assert seen[0][:2] == (1, 1)                          # the one kernel compiled
    assert labels[1:] == ["ran and checked against NumPy"] + ["timed run"] * 3
    assert [d for d, _, _ in seen[1:]] == [1, 2, 3, 4] and {t for _, t, _ in seen[1:]} == {4}
