"""One thread pool on the CPU backend (issue 13): while a program runs, the BLAS
libraries run the library calls (matmul) on ``blas_threads`` threads beside the OpenMP
kernels, and every library's own count is back when the run returns, raises or is
timed. What the BLAS library reports is read with threadpoolctl *inside* the real
matmul call of a real compiled program: the matmul op's library implementation is
wrapped by a spy that records threadpoolctl's report and then runs the real one."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from workbench import GraphBuilder, Session
from workbench.errors import WorkbenchError
from workbench.fusion.mapping import ScheduleKind
from workbench.ops import registry
from workbench.runtime.threads import ENV, blas_threads_now, default_blas_threads


def _numpy_blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def seen_in_matmul(monkeypatch):
    """Each matmul library call appends what threadpoolctl reports for the BLAS
    libraries at that moment, then computes the real product."""
    seen: list[list[int]] = []
    real = registry.get_op("matmul")

    def spy(xp, xs, attrs):
        seen.append(_numpy_blas_threads())
        return real.library(xp, xs, attrs)

    monkeypatch.setitem(registry._REGISTRY, "matmul", dataclasses.replace(real, library=spy))
    return seen


def mlp_graph():
    """x @ w1 -> tanh -> @ w2 + residual: two library calls with kernels between (in
    float16, which the CPU's GEMM kernel does not take, so each matmul stays a library
    call under every planner)."""
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 32, 96), "float16")
    w1 = b.constant(np.random.default_rng(1).standard_normal((96, 192)).astype(np.float16),
                    "w1")
    w2 = b.constant(np.random.default_rng(2).standard_normal((192, 96)).astype(np.float16),
                    "w2")
    h = b.op("tanh", b.op("matmul", x, w1))
    b.output(b.op("add", b.op("matmul", h, w2), x), "y")
    return b.build()


def test_blas_runs_one_thread_inside_a_program_and_is_restored(seen_in_matmul, check_graph):
    with threadpool_limits(limits=3, user_api="blas"):
        before = _numpy_blas_threads()
        assert before and all(n == 3 for n in before)
        # compiled C kernels + 2 matmul calls
        check_graph(mlp_graph(), "xla")
        assert len(seen_in_matmul) == 2
        assert all(n == [1] * len(before) for n in seen_in_matmul), seen_in_matmul
        assert _numpy_blas_threads() == before
        assert blas_threads_now() == before[:len(blas_threads_now())]


def test_timing_runs_are_restored_too(seen_in_matmul):
    s = Session(mlp_graph(), backend="cpu")
    s.auto("xla")
    with threadpool_limits(limits=2, user_api="blas"):
        s.program().time(s.inputs, warmup=1, repeats=2)
        assert seen_in_matmul and all(set(n) == {1} for n in seen_in_matmul)
        assert set(_numpy_blas_threads()) == {2}


def test_restored_when_a_library_call_raises(monkeypatch):
    real = registry.get_op("matmul")

    def failing(xp, xs, attrs):
        assert set(_numpy_blas_threads()) == {1}
        raise RuntimeError("out of memory in the BLAS call")

    s = Session(mlp_graph(), backend="cpu")
    monkeypatch.setitem(registry._REGISTRY, "matmul", dataclasses.replace(real, library=failing))
    with threadpool_limits(limits=2, user_api="blas"):
        with pytest.raises(RuntimeError, match="out of memory"):
            s.run(s.inputs)
        assert set(_numpy_blas_threads()) == {2}


def test_blas_threads_setting(seen_in_matmul, monkeypatch):
    """``blas_threads=None`` (``$WB_BLAS_THREADS=off``) leaves BLAS alone; a count is
    used as given."""
    s = Session(mlp_graph(), backend="cpu")
    with threadpool_limits(limits=2, user_api="blas"):
        s.backend.blas_threads = None
        s.run(s.inputs)
        s.backend.blas_threads = 3
        s.run(s.inputs)
    assert [set(n) for n in seen_in_matmul] == [{2}, {2}, {3}, {3}]

    for value, want in (("", 1), ("1", 1), ("off", None), ("4", 4)):
        monkeypatch.setenv(ENV, value)
        assert default_blas_threads() == want
    monkeypatch.setenv(ENV, "all")
    assert default_blas_threads() >= 1
    monkeypatch.setenv(ENV, "many")
    with pytest.raises(WorkbenchError, match="WB_BLAS_THREADS='many' is not a thread count"):
        default_blas_threads()


def attention_graph():
    """softmax(q k^T / 4) v over [2, 4, 32, 16] heads: batched matmuls around a row
    kernel."""
    b = GraphBuilder("attention")
    q, k, v = (b.input(n, (2, 4, 32, 16)) for n in "qkv")
    s = b.op("mul", b.op("matmul", q, b.op("transpose", k, perm=[0, 1, 3, 2])),
             b.constant(np.float32(0.25)))
    e = b.op("exp", b.op("sub", s, b.op("reduce_max", s, axes=[3], keepdims=True)))
    p = b.op("div", e, b.op("reduce_sum", e, axes=[3], keepdims=True))
    b.output(b.op("matmul", p, v), "y")
    return b.build()


@pytest.mark.parametrize("planner", ["none", "rules", "stitch"])
def test_graphs_with_matmuls_still_match_the_reference(planner, check_graph,
                                                       seen_in_matmul):
    attention, mlp = check_graph(attention_graph(), planner), check_graph(mlp_graph(), planner)
    # the attention's matmuls (equal batch dims) are GEMM kernels on the CPU, on the
    # kernels' threads (one fused attention kernel under rules and stitch); the mlp's
    # two stay library calls, on one BLAS thread
    kinds = [gr.schedule.kind for gr in attention.plan.groups if gr.schedule.gemm is not None
             or gr.schedule.kind is ScheduleKind.opaque]
    assert kinds == [ScheduleKind.gemm] * (2 if planner == "none" else 1)
    calls = sum(gr.schedule.kind is ScheduleKind.opaque for gr in mlp.plan.groups)
    assert calls == 2
    assert len(seen_in_matmul) == calls and all(set(n) == {1} for n in seen_in_matmul)


def test_importing_and_running_leaves_the_environment_alone(tmp_path):
    """The workbench sets no process-wide OpenMP or BLAS setting: a fresh process that
    imports it, compiles and runs a program with matmuls has the environment it had
    and its BLAS thread count back -- while libgomp, as it loaded with the first kernel
    library, read the short spin the workbench chose (it prints what it read under
    OMP_DISPLAY_ENV)."""
    import os
    import subprocess
    import sys
    code = (
        "import os, json\n"
        "before = dict(os.environ)\n"
        "from threadpoolctl import threadpool_info\n"
        "from workbench import Session\n"
        "from tests.runtime.test_threads import mlp_graph\n"
        "blas = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "s = Session(mlp_graph(), backend='cpu'); s.auto('rules'); s.run(s.inputs)\n"
        "after = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "print(json.dumps([dict(os.environ) == before, blas == after,\n"
        "                  'OMP_WAIT_POLICY' in os.environ]))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "WB_BLAS_THREADS")}
    env["WORKBENCH_CACHE"] = str(tmp_path)
    env["OMP_DISPLAY_ENV"] = "VERBOSE"
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[true, true, false]"
    shown = r.stderr + r.stdout          # libgomp prints its settings when it loads
    if "OPENMP DISPLAY ENVIRONMENT" in shown:
        assert "GOMP_SPINCOUNT = '10000'" in shown, shown[-2000:]
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown, shown[-2000:]


def test_a_run_sets_each_blas_library_once_and_restores_only_what_it_set(
        seen_in_matmul, monkeypatch):
    """Every run sets each loaded BLAS library to ``blas_threads`` once and back once
    (none where it already has that count); an OpenBLAS on its own threads is read and
    set through its own functions, which agree with threadpoolctl's controller both
    ways. Real program, real libraries; the calls are counted by wrapping them."""
    from workbench.runtime import threads
    s = Session(mlp_graph(), backend="cpu")    # two matmul library calls a run
    s.program()     # (compiling scans the BLAS libraries afresh)
    counts = threads._blas_controllers()
    direct = [c for c in counts if c.controller.internal_api == "openblas"
              and c.controller.threading_layer == "pthreads"]
    for c in direct:
        assert c.get_num_threads != c.controller.get_num_threads
        with threadpool_limits(limits=2, user_api="blas"):
            assert c.get_num_threads() == c.controller.get_num_threads() == 2
            c.set_num_threads(3)
            assert c.controller.get_num_threads() == 3
    calls: list = []
    for i, c in enumerate(counts):
        monkeypatch.setattr(c, "set_num_threads",
                            lambda n, i=i, put=c.set_num_threads: (calls.append((i, n)),
                                                                   put(n)))
    with threadpool_limits(limits=2, user_api="blas"):
        s.run(s.inputs)
        assert sorted(calls) == sorted([(i, 1) for i in range(len(counts))]
                                       + [(i, 2) for i in range(len(counts))])
        assert set(_numpy_blas_threads()) == {2}
    assert seen_in_matmul and all(set(n) == {1} for n in seen_in_matmul)
    calls.clear()
    with threadpool_limits(limits=1, user_api="blas"):
        s.run(s.inputs)
    assert calls == []
