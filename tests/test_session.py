"""Session: history, undo/redo, refusals leave it unchanged, measurements."""
from dataclasses import replace

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
    # (a kernel of parallel loops only: worksharing loops in its team form,
    # codegen/render/c.py, called in a region its own function opens)
    assert ("#pragma omp parallel for" in c or "#pragma omp for" in c) \
        and "__global__" not in c


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
    kernel = s.program().compiled[0].kernel.name
    # the checked run (start, end), the kernel checked, each timed run: one count
    assert labels[1:] == (["checked run"] * 2 + [f"checked {kernel} against NumPy"]
                          + ["timed run"] * 3)
    assert [d for d, _, _ in seen[1:]] == [0, 1, 2, 3, 4, 5] and {
        t for _, t, _ in seen[1:]} == {5}


# -- the matmul precision, changed as a step ------------------------------------------
def _linear(rows: int = 32, depth: int = 64, cols: int = 48):
    """y = relu(x @ w): one float32 matmul, a library call until fused with its relu."""
    b = wb.GraphBuilder("linear", "a small linear layer")
    x = b.input("x", (rows, depth))
    w = b.constant(np.random.default_rng(0).standard_normal((depth, cols)).astype(np.float32),
                   "w")
    b.output(b.op("relu", b.matmul(x, w)), "y")
    return b.build()


def _emulated_gpu(g) -> Session:
    """A session whose device has TF32 tensor cores: the H100's plans, run by the CUDA
    emulator on this CPU."""
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable():
        pytest.skip(CudaEmuBackend.unavailable())
    return Session(g, backend="cuda-emu")


def test_a_new_matmul_precision_is_a_step_that_undo_takes_back():
    s = _emulated_gpu(_linear())
    s.fuse(["n0", "n1"])                 # the matmul and its relu: a GEMM kernel
    exact = s.plan
    assert s.matmul_precision == "float32" and not s.kernel("n0").tf32
    tf32 = s.set_matmul_precision("tf32")
    assert s.step.action == "matmul precision tf32" and s.position == 2
    assert s.matmul_precision == "tf32" and s.tf32 and tf32.tf32
    # the same partition, made again: the GEMM's tile now multiplies on tensor cores
    assert [gr.nodes for gr in tf32.groups] == [gr.nodes for gr in exact.groups]
    assert tf32 != exact and tf32.planner == exact.planner
    k = s.kernel("n0")
    assert k.tf32 and k.tensor_cores and "wmma::" in s.source("n0")
    assert not s.kernel("n0", exact).tf32 and "wmma::" not in s.source("n0", plan=exact)
    t = s.table(measure=False)
    assert list(t.matmul_precision) == ["float32", "float32", "tf32"]
    assert s.undo() == exact and s.matmul_precision == "float32" and not s.tf32
    assert s.cost_model.device == s.device      # (one model prices every precision)
    assert s.redo() == tf32 and s.matmul_precision == "tf32"


def test_the_precision_in_use_again_adds_no_step():
    s = _emulated_gpu(_linear())
    assert s.set_matmul_precision("float32") is s.plan and len(s.history) == 1
    s.set_matmul_precision("tf32")
    plan = s.plan
    assert s.set_matmul_precision("tf32") is plan and len(s.history) == 2


def test_kernels_and_measurements_are_kept_apart_per_precision():
    # unfused, the matmul is a library call whose schedule differs between the
    # precisions only in saying that it runs on tensor cores: its kernel differs (cuBLAS
    # in TF32 or not), and so does its program
    s = _emulated_gpu(_linear())
    exact = s.plan
    assert not s.kernel("n0").tf32 and not s.program().compiled[0].kernel.tf32
    tf32 = s.set_matmul_precision("tf32")
    a, b = exact.group("n0"), tf32.group("n0")
    assert a != b and a.nodes == b.nodes and not a.schedule.tensor_cores
    assert replace(a.schedule, tensor_cores=True) == b.schedule
    assert s.kernel("n0").tf32 and s.program().compiled[0].kernel.tf32
    assert not s.kernel("n0", exact).tf32 and not s.program(exact).compiled[0].kernel.tf32
    m_tf32 = s.measure(repeats=1)
    assert m_tf32.within_tolerance and s.measured(exact) is None
    m_exact = s.measure(exact, repeats=1)
    assert m_exact is not m_tf32 and s.measure(repeats=1) is m_tf32


def test_each_step_is_priced_at_its_own_precision():
    s = _emulated_gpu(_linear(1024, 1024, 1024))
    exact_ms = s.predict().ms
    s.set_matmul_precision("tf32")
    # the tensor cores' rate for the matmul: a faster prediction; the float32 step
    # keeps its price after the switch
    assert s.predict().ms < exact_ms
    assert s.predict(s.history[0].plan).ms == exact_ms
    t = s.table(measure=False)
    assert t.predicted_ms[0] == exact_ms and t.predicted_ms[1] < exact_ms
    c = s.compare(0, 1)
    assert c.loc["predicted_ms", "change"] < 0


def test_the_fitted_model_follows_the_precision(session):
    session.auto("rules")
    session.measure(repeats=2)
    fitted = session.cost_model
    assert fitted.calibrated_on > 0 and fitted.device == session.device
    with pytest.warns(UserWarning, match="no TF32 tensor cores"):
        session.set_matmul_precision("tf32")
    # the machine's one fitted model prices the new precision too (each kernel's
    # schedule says whether its matmuls run on tensor cores)
    assert session.cost_model is fitted
    session.undo()
    assert session.cost_model is fitted


def test_a_bad_precision_is_one_clear_error_and_changes_nothing(session):
    session.auto("rules")
    before = (list(session.history), session.position, session.plan)
    for bad in ("fp16", "TF32", None, ["tf32"]):
        with pytest.raises(WorkbenchError, match="matmul_precision must be one of "
                                                 "float32, tf32") as e:
            session.set_matmul_precision(bad)
        assert "\n" not in str(e.value)
    assert (list(session.history), session.position, session.plan) == before
    assert session.matmul_precision == "float32"


def test_a_cpu_warns_and_its_matmuls_stay_float32():
    s = Session(_linear(), backend="cpu")
    with pytest.warns(UserWarning, match="has no TF32 tensor cores, so its matmuls stay "
                                         "float32") as seen:
        s.set_matmul_precision("tf32")
    assert len(seen) == 1 and seen[0].filename == __file__   # (the caller's line)
    # asked, and kept as a step (undo goes back to what was asked before), but the
    # kernels are float32's and the table says the step ran in float32
    assert s.step.action == "matmul precision tf32" and s.matmul_precision == "tf32"
    assert not s.tf32 and not any(k.tf32 for k in s.kernels())
    assert list(s.table(measure=False).matmul_precision) == ["float32", "float32"]
    m = s.measure(repeats=1)
    assert m.within_tolerance
