"""The plan driver (runtime/driver.py): a CPU program's kernels run in one native call,
every value bit for bit what launching them one by one gives, run after run on new
inputs; programs it cannot call (a library call, a kernel of too many arguments, the
driver turned off) run kernel by kernel."""
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.runtime import driver, random_inputs
from workbench.runtime.program import Program

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


def _one_by_one(prog) -> Program:
    """The same compiled kernels, launched one by one."""
    twin = Program(prog.plan, prog.backend, kernels=prog.kernels, compiled=prog.compiled,
                   plan_driver=False)
    assert twin._driver() is None
    return twin


@pytest.mark.parametrize("sample,planner,blas", [
    ("bert_chain.json", "stitch", None), ("bert_chain.json", "stitch", 1),
    ("bias_gelu_residual_layernorm.json", "none", None),
    ("attention_softmax.json", "none", None), ("cross_entropy.json", "rules", None),
    ("adam.json", "none", None)])
def test_driver_gives_what_kernels_one_by_one_give(sample, planner, blas):
    """GEMM, row and elementwise kernels (with ``blas=1`` each GEMM calls sgemm, the
    driver passing its address), over three runs on new inputs: the graph's inputs and
    fresh outputs are the arguments a run writes, the rest written once."""
    s = wb.Session(str(SAMPLES / sample), backend="cpu")
    s.auto(planner)
    if blas is not None:
        for gr in s.plan.groups:
            if gr.schedule.gemm is not None:
                s.set_launch(gr.id, blas=blas)
    prog = s.program()
    assert len(prog.compiled) > 1 and prog._driver() is not None
    if blas:
        assert any(ck.extra for ck in prog.compiled)
    twin = _one_by_one(prog)
    outs = []
    for seed in range(3):
        ins = random_inputs(s.graph, seed)
        got, want = prog.run(ins), twin.run(ins)
        for o in s.graph.outputs:
            assert np.array_equal(got[o], want[o], equal_nan=True), o
            assert not np.isnan(got[o]).any()
        outs.append(got)
    # every run's outputs its own arrays, kept as they were
    first = random_inputs(s.graph, 0)
    for o in s.graph.outputs:
        assert np.array_equal(outs[0][o], twin.run(first)[o])
        assert not np.shares_memory(outs[0][o], outs[1][o])


def test_no_driver_for_a_library_call_or_too_many_arguments(monkeypatch):
    b = wb.GraphBuilder("prefix")       # a running sum: a library call (NumPy's)
    x = b.input("x", (8, 50))
    b.output(b.op("tanh", b.op("cumsum", b.op("exp", x), axis=1)), "y")
    s = wb.Session(b.build(), backend="cpu")
    prog = s.program()
    assert any(ck.kernel.library is not None for ck in prog.compiled)
    assert prog._driver() is None
    xs = random_inputs(s.graph, 0)["x"]
    np.testing.assert_allclose(prog.run({"x": xs})["y"],
                               np.tanh(np.cumsum(np.exp(xs), axis=1)), rtol=1e-5)
    s = wb.Session(str(SAMPLES / "bert_chain.json"), backend="cpu")
    s.auto("stitch")
    widest = max(len(ck.kernel.params) + len(ck.extra) for ck in s.program().compiled)
    monkeypatch.setattr(driver, "MAX_ARGS", widest - 1)
    assert not driver.applies(s.program().compiled)
    monkeypatch.setattr(driver, "MAX_ARGS", widest)
    assert driver.applies(s.program().compiled)


def test_driver_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("WB_PLAN_DRIVER", "0")
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    prog = s.program()
    assert prog._driver() is None
    assert all(np.isfinite(v).all() for v in prog.run(random_inputs(s.graph, 0)).values())


def test_driver_source_calls_each_arity():
    """Every kernel arity up to MAX_ARGS has its call (the switch in DRIVER_C)."""
    src = driver.DRIVER_C
    assert "case 0: ((void (*)(void))f)(); break;" in src
    last = ", ".join(["void*"] * driver.MAX_ARGS)
    assert f"case {driver.MAX_ARGS}: ((void (*)({last}))f)(" in src


def test_a_loaded_artifact_runs_through_the_driver(tmp_path):
    """An exported plan's shipped kernels, loaded and compiled again, run in one native
    call too, giving what the session's program gives."""
    s = wb.Session(str(SAMPLES / "bert_chain.json"), backend="cpu")
    s.auto("stitch")
    out = s.export(tmp_path / "bert_chain.zip")
    runner = wb.load_artifact(out).runner("cpu")
    assert runner._driver() is not None
    ins = random_inputs(s.graph, 4)
    got, want = runner.run(ins), s.program().run(ins)
    for o in s.graph.outputs:
        assert np.array_equal(got[o], want[o]), o


def test_time_takes_the_whole_plan_as_calls_through_the_driver(monkeypatch):
    """``Program.time``: the whole plan timed as calls through the driver (warm-up and
    timed), what a caller waits for, each kernel's own time taken inside those calls --
    but for the program's first run, kernel by kernel (the intermediates it keeps made
    and poisoned as each kernel is about to run: runtime/memory_plan.py)."""
    s = wb.Session(str(SAMPLES / "cross_entropy.json"), backend="cpu")
    s.auto("rules")
    prog = s.program()
    drv = prog._driver()
    calls = []
    real = drv.run
    monkeypatch.setattr(drv, "run", lambda *a: (calls.append(1), real(*a)))
    per, total = prog.time(random_inputs(s.graph, 0), warmup=1, repeats=3)
    assert len(per) == len(prog.compiled) > 1 and total > 0 and all(t > 0 for t in per)
    assert len(calls) == 3          # (the warm-up, the first run, kernel by kernel)
    prog.time(random_inputs(s.graph, 0), warmup=1, repeats=3)
    assert len(calls) == 3 + 1 + 3
    twin = _one_by_one(prog)
    twin.time(random_inputs(s.graph, 0), warmup=1, repeats=3)
    assert len(calls) == 7          # (kernel by kernel: no call through the driver)


def test_unchecked_and_checked_runs_through_the_driver_match_the_reference(monkeypatch):
    """A production call (not checked: outputs neither poisoned nor new when ``out=``
    is given) and a checked one, through the driver with its arguments' addresses read
    once, on fresh random inputs each run: every output element written (the caller's
    arrays are filled with a sentinel first) and equal to the NumPy reference."""
    from workbench.runtime.reference import run_reference
    s = wb.Session(str(SAMPLES / "bias_gelu_residual_layernorm.json"), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    prog.run(random_inputs(s.graph, 9))
    assert prog._driver() is not None
    out = prog.new_outputs()
    for seed, checked in ((1, "0"), (2, "0"), (3, "1"), (4, "0")):
        monkeypatch.setenv("WB_CHECKED_RUNS", checked)
        ins = random_inputs(s.graph, seed)
        for a in out.values():
            a[...] = 12345.0
        got = prog.run(ins, out=out)
        want = run_reference(s.graph, ins)
        for o in s.graph.outputs:
            assert got[o] is out[o]
            assert not (got[o] == 12345.0).any() and not np.isnan(got[o]).any(), o
            np.testing.assert_allclose(got[o], want[o], rtol=2e-4, atol=2e-4)
        fresh = prog.run(ins)         # new arrays, unfilled when not checked
        for o in s.graph.outputs:
            assert fresh[o] is not out[o]
            np.testing.assert_array_equal(fresh[o], got[o])


def _two_convs():
    """Two 3 x 3 convolutions with constant filters in a row (each computed directly,
    its filters packed on its first run), a depthwise one between them."""
    rng = np.random.default_rng(5)
    b = wb.GraphBuilder("two_convs")
    x = b.input("x", (2, 16, 12, 12))
    w1 = b.constant(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w1")
    w2 = b.constant(rng.standard_normal((32, 1, 3, 3)).astype(np.float32), "w2")
    w3 = b.constant(rng.standard_normal((24, 32, 3, 3)).astype(np.float32), "w3")
    y = b.relu(b.op("conv", x, w1, pads=[1, 1, 1, 1]))
    y = b.relu(b.op("conv", y, w2, pads=[1, 1, 1, 1], group=32))
    b.output(b.op("conv", y, w3, pads=[1, 1, 1, 1]), "y")
    return b.build()


def _team_twin(prog):
    """The same program's driver told that no kernel has a team form: every kernel
    opens its own parallel region, as a kernel-by-kernel launch does."""
    d = prog._driver()
    none = np.zeros_like(d._team)
    return d, d._call[:-1] + (none.ctypes.data,), none


@pytest.mark.parametrize("sample,planner", [
    ("bert_chain.json", "stitch"), ("bert_chain.json", "none"), ("adam.json", "none"),
    ("attention_softmax.json", "none"), ("layernorm.json", "stitch"), ("", "stitch")])
def test_runs_of_team_kernels_in_one_region_give_what_each_in_its_own_gives(sample,
                                                                          planner):
    """Consecutive kernels with a team form (nothing but parallel loops) run inside one
    parallel region of the driver's, each kernel's loops shared out among its threads
    and ending in a barrier; kernels without one (a constant packed on the first run)
    run between such regions. Bit for bit what each kernel in its own region gives,
    every output written (the run checked: outputs poisoned first), and every kernel's
    own time taken (the master's, from the barrier before it to its own)."""
    s = wb.Session(str(SAMPLES / sample) if sample else _two_convs(), backend="cpu")
    s.auto(planner)
    prog = s.program()
    twin = _one_by_one(prog)
    prog.run(random_inputs(s.graph, 9))          # (the pool's first run: one by one)
    d, alone, _keep = _team_twin(prog)
    teams = d._team != 0
    assert teams.any()
    runs = [i for i in range(1, len(teams)) if teams[i] and teams[i - 1]]
    assert runs or len(teams) == 1, "no two consecutive team kernels"
    ns = np.zeros(len(prog.compiled), dtype=np.int64)
    for seed in range(3):
        ins = random_inputs(s.graph, seed)
        got = prog.execute(ins, checked=True, kernel_ns=ns)
        assert (ns > 0).all(), ns
        want = twin.run(ins)
        for o in s.graph.outputs:
            assert np.array_equal(got[o], want[o], equal_nan=True), o
            assert not np.isnan(got[o]).any(), o
        with_team, d._call = d._call, alone
        try:
            other = prog.run(ins, checked=True)
        finally:
            d._call = with_team
        for o in s.graph.outputs:
            assert np.array_equal(other[o], want[o], equal_nan=True), o


def test_a_kernel_of_parallel_loops_has_a_team_form_and_one_with_a_serial_step_none():
    """The C rendering: a kernel of parallel loops (and constants packed once, which
    every thread may claim) is ``<name>_team`` (worksharing ``omp for`` loops) and
    ``<name>`` opening a region that calls it; a statement outside the loops that
    every thread would repeat leaves the kernel without a team form."""
    from dataclasses import replace
    from workbench.codegen.kir import Let, PackA, PackB
    from workbench.dtypes import DType
    from workbench.codegen.render import RENDERERS
    from workbench.codegen.render.c import TEAM_SUFFIX, team_form
    s = wb.Session(_two_convs(), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    assert any(isinstance(x, (PackA, PackB)) for ck in prog.compiled
               for x in ck.kernel.body), "no kernel packs a constant on its first run"
    cpu = s.backend
    for ck in prog.compiled:
        team = f"{ck.kernel.name}{TEAM_SUFFIX}("
        assert team_form(ck.kernel), ck.kernel.name
        assert team in ck.source and ck.team_fn is not None
        body = ck.source.split(team)[-1]     # (its definition, the source's end)
        assert "#pragma omp for" in body and "#pragma omp parallel for" not in body
        serial = replace(ck.kernel, body=(Let("wb_unused", DType.float32, "0.0f"),)
                         + ck.kernel.body)
        assert not team_form(serial)
        assert TEAM_SUFFIX not in RENDERERS["c"].kernel(serial)
        # compiled, the library carries the renderer's decision: no team function
        # for the backend to find (runtime/cpu.py reads the library, not the source)
        lone = cpu.compile_source(serial, cpu.render(serial))
        assert lone.fn is not None and lone.team_fn is None


def test_a_kernel_from_the_cache_and_a_shipped_one_keep_their_team_form(tmp_path,
                                                                      monkeypatch):
    """Whether a compiled kernel has a team form is what its library exports, so a
    library loaded from the kernel cache (built by an earlier process) and an
    artifact's kernels (no body to decide from: the shipped source is what runs) have
    the team forms the session's own kernels have -- and, through the driver, give
    what they give."""
    from workbench.runtime import cpu
    from workbench.runtime.cc import build_library
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    s = wb.Session(_two_convs(), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    teams = [ck.team_fn is not None for ck in prog.compiled]
    assert all(teams)
    for ck in prog.compiled:
        path = build_library(ck.kernel.name, ck.source)
        assert path.parent.parent == tmp_path / "cache"      # (built by the program)
        before = path.stat().st_mtime_ns
        again = cpu.compile_kernel(ck.kernel, ck.source)     # (a cache hit: not rebuilt)
        assert again.path == path and path.stat().st_mtime_ns == before
        assert again.team_fn is not None
    shipped = wb.load_artifact(s.export(tmp_path / "two_convs.zip")).runner("cpu")
    assert all(not ck.kernel.body for ck in shipped.compiled)
    assert [ck.team_fn is not None for ck in shipped.compiled] == teams
    assert (shipped._driver()._team != 0).all()
    ins = random_inputs(s.graph, 6)
    got, want = shipped.run(ins), prog.run(ins)
    for o in s.graph.outputs:
        assert np.array_equal(got[o], want[o]), o
