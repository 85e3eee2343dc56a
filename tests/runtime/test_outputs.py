"""A run's outputs (runtime/outputs.py, runtime/program.py): production and timed
calls poison nothing and may write into the caller's arrays (``run(inputs, out=...)``),
checked runs poison, and an element a real compiled kernel forgets to write is caught
by the checked run whatever the unchecked runs left in memory."""
import time
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.errors import GraphError
from workbench.fusion import run_planner
from workbench.measure import measure_program
from workbench.runtime import Program, get_backend, random_inputs, run_reference
from workbench.runtime.program import CHECKED_ENV

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


@pytest.fixture(autouse=True)
def production_runs(monkeypatch):
    """These tests are about the unchecked path: the suite's every-run-checked off."""
    monkeypatch.delenv(CHECKED_ENV, raising=False)


def _forgetful():
    """exp over 1,024 elements, and the same kernel compiled from its own C source
    with its loop stopping one element short (a real kernel that forgets one)."""
    b = wb.GraphBuilder("e")
    b.output(b.exp(b.input("x", (16, 64))), "y")
    g = b.build()
    cpu = get_backend("cpu")
    good = Program(run_planner("none", g)[0], cpu)
    k = good.kernels[0]
    src = good.compiled[0].source
    assert src.count("i < 1024;") == 1
    bad = cpu.compile_source(k, src.replace("i < 1024;", "i < 1023;"))
    return g, Program(good.plan, cpu, kernels=[k], compiled=[bad])


@pytest.mark.parametrize("sample,planner", [("layernorm.json", "stitch"),
                                            ("attention_softmax.json", "none"),
                                            ("bert_chain.json", "stitch")])
def test_out_arrays_are_written_and_reused(sample, planner):
    """``run(inputs, out=...)`` writes every output into the caller's arrays and returns
    them (no new array), call after call, each equal to the reference of its inputs."""
    s = wb.Session(str(SAMPLES / sample), backend="cpu")
    if planner != "none":
        s.auto(planner)
    prog = s.program()
    out = prog.new_outputs()
    for seed in (3, 4, 5):
        ins = random_inputs(s.graph, seed)
        got = prog.run(ins, out=out)
        want = prog.run(ins, checked=True)
        for o in s.graph.outputs:
            assert got[o] is out[o]
            np.testing.assert_array_equal(got[o], want[o])
        ref = run_reference(s.graph, ins)
        for o in s.graph.outputs:
            assert np.allclose(got[o], ref[o], rtol=1e-3, atol=1e-4), o


def test_only_checked_runs_poison_and_they_catch_a_forgotten_element():
    """A kernel that skips its last element: an unchecked run leaves whatever the
    array held (here a stale 7.0: it would pass a comparison by luck), a checked run
    -- ``checked=True``, the checkers' ``keep_all`` run, the measurement -- shows
    NaN there and the kernel fails its check."""
    g, prog = _forgetful()
    x = random_inputs(g, 1)
    out = {"y": np.full((16, 64), 7.0, np.float32)}
    got = prog.run(x, out=out)["y"]
    assert got[-1, -1] == 7.0 and np.allclose(got.reshape(-1)[:-1],
                                              np.exp(x["x"]).reshape(-1)[:-1])
    assert np.isnan(prog.run(x, out=out, checked=True)["y"][-1, -1])
    assert np.isnan(prog.run(x, checked=True)["y"][-1, -1])
    assert np.isnan(prog.run(x, keep_all=True)["y"][-1, -1])
    m = measure_program(prog, x, run_reference(g, x), warmup=1, repeats=2)
    assert not m.within_tolerance
    # the suite's switch: every run checked
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CHECKED_ENV, "1")
        assert np.isnan(prog.run(x, out=out)["y"][-1, -1])


def test_bad_out_is_refused_with_a_clear_message():
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    prog = s.program()
    x = random_inputs(s.graph, 0)
    (name,) = s.graph.outputs
    shape = s.graph.value(name).shape
    good = np.empty(shape, np.float32)
    cases = [
        ([good], "must be a dict"),
        ({"nope": good}, "no output of the graph"),
        ({name: np.empty(shape, np.float64)}, "float64.*the output is float32"),
        ({name: np.empty(shape[::-1], np.float32).T}, "not a writeable C-contiguous"),
        ({name: np.empty((2,) + shape, np.float32)}, "the output is float32"),
        ({name: x[s.graph.inputs[0]]}, "shares memory with input"),
        ({name: good.tolist()}, "not a numpy array"),
    ]
    ro = np.empty(shape, np.float32)
    ro.flags.writeable = False
    cases.append(({name: ro}, "not a writeable"))
    for out, match in cases:
        with pytest.raises(GraphError, match=match):
            prog.run(x, out=out)
    assert s.run(x, out={name: good})[name] is good


def test_the_driver_times_each_kernel_inside_the_call():
    """Each kernel's own time is taken in the native call, between the kernels: they
    sum to no more than the call around them, and a Python thread holding the
    interpreter meanwhile (a notebook's front end) cannot land on a kernel."""
    s = wb.Session(str(SAMPLES / "bias_gelu_residual_layernorm.json"), backend="cpu")
    prog = s.program()
    assert prog._driver() is not None and len(prog.compiled) > 2
    x = random_inputs(s.graph, 0)
    out = prog.new_outputs()
    prog.run(x, out=out)
    ns = np.zeros(len(prog.compiled), np.int64)
    t0 = time.perf_counter_ns()
    prog.execute(x, out=out, kernel_ns=ns)
    call = time.perf_counter_ns() - t0
    assert (ns > 0).all() and ns.sum() <= call
    t = prog.time_calls(x, warmup=1, repeats=3)
    assert len(t.per_kernel) == len(prog.compiled) and all(k > 0 for k in t.per_kernel)
    assert 0 < t.kernels <= t.step and t.overhead >= 0
    assert prog.time(x, warmup=1, repeats=1)[1] > 0


def test_a_loaded_artifact_writes_into_out(tmp_path):
    """The exported artifact's runtime runs as a program does: unchecked by default,
    into the caller's arrays with ``run(..., out=...)``."""
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    s.auto("stitch")
    model = wb.load_artifact(s.export(tmp_path / "ln.zip"))
    x = random_inputs(s.graph, 2)
    out = model.new_outputs()
    got = model.run(x, out=out)
    want = s.program().run(x, checked=True)
    for o in s.graph.outputs:
        assert got[o] is out[o]
        np.testing.assert_array_equal(got[o], want[o])
        np.testing.assert_array_equal(model(**x)[o], want[o])
    with pytest.raises(GraphError, match="no output of the graph"):
        model.run(x, out={"nope": out[s.graph.outputs[0]]})


def test_kept_outputs_are_the_programs_own():
    """``kept_outputs()`` hands out the same arrays call after call (a training step
    writes its new parameters there and copies them out at once), and a program of
    another plan keeps its own set: a session changing plans never writes a new plan's
    outputs into the old plan's arrays."""
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    first = s.program()
    kept = first.kept_outputs()
    assert first.kept_outputs() is kept
    ins = random_inputs(s.graph, 7)
    got = first.run(ins, out=kept)
    want = run_reference(s.graph, ins)
    for o in s.graph.outputs:
        assert got[o] is kept[o]
        np.testing.assert_allclose(got[o], want[o], rtol=1e-4, atol=1e-5)
    s.auto("stitch")
    second = s.program()
    assert second is not first
    assert all(second.kept_outputs()[o] is not kept[o] for o in s.graph.outputs)


def test_outputs_start_on_a_cache_line():
    """The arrays a run makes for its outputs -- new each call, ``new_outputs()``, and
    poisoned in a checked run -- start a 64-byte line (NumPy's start 16 bytes past
    one), and hold the reference's values."""
    s = wb.Session(str(SAMPLES / "softmax.json"), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    ins = random_inputs(s.graph, 11)
    want = run_reference(s.graph, ins)
    for got in (prog.run(ins), prog.run(ins, checked=True),
                prog.run(ins, out=prog.new_outputs())):
        for o in s.graph.outputs:
            assert got[o].ctypes.data % 64 == 0, o
            np.testing.assert_allclose(got[o], want[o], rtol=1e-5, atol=1e-6)


def test_inputs_taken_as_given_only_when_the_full_check_would_pass_them_unchanged():
    """The host fast path (``KernelSequence._host_inputs``) hands an input on as given
    only where it is a C-contiguous NumPy array of the declared shape and dtype; a
    strided view, a subclass or a list goes the full way (copied, or refused with the
    full check's message)."""
    b = wb.GraphBuilder("in")
    b.output(b.exp(b.input("x", (4, 8))), "y")
    g = b.build()
    prog = Program(run_planner("none", g)[0], get_backend("cpu"))
    x = random_inputs(g, 3)["x"]
    want = np.exp(x)
    assert prog._host_inputs({"x": x})["x"] is x
    strided = np.ascontiguousarray(x.T).T          # same values, Fortran order
    assert prog._host_inputs({"x": strided}) is None
    for given in (x, strided, np.asmatrix(x), x.tolist()):
        if isinstance(given, list):
            with pytest.raises(GraphError, match="dtype float64"):
                prog.run({"x": given})
            continue
        np.testing.assert_allclose(prog.run({"x": given})["y"], want, rtol=1e-6)
    with pytest.raises(GraphError, match="shape"):
        prog.run({"x": x[:2]})
    with pytest.raises(GraphError, match="missing inputs"):
        prog.run({})
