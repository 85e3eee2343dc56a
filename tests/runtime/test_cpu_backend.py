"""The CPU backend: compile cache, concurrent compiles, poisoning catches unwritten output."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import workbench as wb
from workbench.fusion import Plan
from workbench.runtime import Program, get_backend, poison
from workbench.runtime import cc
from workbench.device import H100


def _graph(cols=37):
    b = wb.GraphBuilder("c")
    x = b.input("x", (5, cols))
    b.output(b.sigmoid(x) * 3.0, "y")
    return b.build()


def test_cache_reuses_library(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    p = Plan.singletons(_graph(), H100)
    Program(p, get_backend("cpu"))
    libs = sorted((tmp_path / "cpu").glob("*.so"))
    assert len(libs) == 2
    mtimes = [l.stat().st_mtime_ns for l in libs]
    Program(p, get_backend("cpu"))
    assert [l.stat().st_mtime_ns for l in sorted((tmp_path / "cpu").glob("*.so"))] == mtimes


def test_concurrent_processes_compile_safely(tmp_path):
    code = textwrap.dedent("""
        import numpy as np, workbench as wb
        from workbench.fusion import run_planner
        from workbench.runtime import Program, get_backend, random_inputs, run_reference
        g = wb.load_json("sample_graphs/layernorm.json")
        prog = Program(run_planner("rules", g)[0], get_backend("cpu"))
        ins = random_inputs(g, 3)
        np.testing.assert_allclose(prog.run(ins)["y"], run_reference(g, ins)["y"],
                                   rtol=1e-4, atol=1e-5)
    """)
    env = dict(os.environ, WORKBENCH_CACHE=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert not list((tmp_path / "cpu").glob("tmp*/*")), "temporary files left behind"


def test_poison_values():
    assert np.isnan(poison(np, (3,), wb.DType.float32)).all()
    assert (poison(np, (3,), wb.DType.int32) == np.iinfo(np.int32).min + 7).all()
    assert (poison(np, (3,), wb.DType.bool).view(np.uint8) == 0xAB).all()


def test_vector_math_probe_runs():
    flags = cc.cflags()
    assert "-O3" in flags and "-fopenmp" in flags


def test_missing_compiler_is_a_clear_error(monkeypatch):
    cc.find_compiler.cache_clear()
    monkeypatch.setenv("CC", "definitely-not-a-compiler")
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        with pytest.raises(wb.WorkbenchError, match="no C compiler found"):
            cc.find_compiler()
    finally:
        cc.find_compiler.cache_clear()


def test_a_compiler_that_cannot_link_is_named_not_blamed_on_the_kernel(tmp_path, monkeypatch):
    """Seen on a GPU machine: gcc without a linker ("collect2: fatal error: cannot find
    'ld'"). That is the machine's toolchain, said so, not "a workbench bug"."""
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo fake-cc 1.0; exit 0; }\n"
                    "echo \"collect2: fatal error: cannot find 'ld'\" >&2; exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    for f in (cc.find_compiler, cc.machine_cflags, cc._check_toolchain):
        f.cache_clear()
    try:
        with pytest.raises(wb.errors.BackendUnavailable,
                           match="cannot build a shared library here .*cannot find 'ld'"):
            cc.build_library("k0_exp", "void k0_exp(void) {}\n")
    finally:
        for f in (cc.find_compiler, cc.machine_cflags, cc._check_toolchain):
            f.cache_clear()


@pytest.mark.parametrize("damage", [b"", b"\x7fELF\x02\x01\x01"], ids=["empty", "truncated"])
def test_a_damaged_cached_library_is_rebuilt(tmp_path, monkeypatch, damage):
    """A zero-length or truncated .so in the cache (a full disk, a killed compile) is
    built again instead of failing with 'file too short'."""
    from workbench.codegen import lower_group, render_kernel
    from workbench.runtime.cpu import compile_kernel
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    cols = 41 + len(damage)                  # a source this process has not loaded yet
    p = Plan.singletons(_graph(cols), H100)
    k = lower_group(p.graph, p.groups[0], H100)
    src = render_kernel(k, "c")
    path = cc.build_library(k.name, src)     # built, never loaded, then damaged
    path.write_bytes(damage)
    ck = compile_kernel(k, src)
    assert ck.path == path and path.stat().st_size > 1000
    x = np.random.default_rng(0).uniform(-1, 1, (5, cols)).astype(np.float32)
    out = Program(p, get_backend("cpu")).run({"x": x})["y"]
    np.testing.assert_allclose(out, 3.0 / (1.0 + np.exp(-x)), rtol=1e-5)


def _chain():
    """Three kernels under ``none``: two intermediates between them, one output."""
    b = wb.GraphBuilder("chain")
    x = b.input("x", (64, 48))
    b.output(b.op("exp", b.op("tanh", b.sigmoid(x))), "y")
    return b.build()


def test_intermediates_are_reused_and_outputs_are_fresh():
    """The values between kernels are poisoned once and reused by later runs; every
    run's outputs are its own arrays, right for its own inputs; a keep_all run shares
    nothing with the pool."""
    s = wb.Session(_chain(), backend="cpu")
    prog = s.program()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((64, 48)).astype(np.float32) for _ in range(3)]
    outs = [prog.run({"x": x})["y"] for x in xs]
    for x, y in zip(xs, outs):
        np.testing.assert_allclose(y, np.exp(np.tanh(1 / (1 + np.exp(-x)))), rtol=1e-6)
    assert len({id(y) for y in outs}) == 3 and not np.shares_memory(outs[0], outs[1])
    pool = prog._pool
    g = prog.graph
    assert set(pool) == {v.name for v in g.values} - set(g.inputs) - set(g.outputs)
    kept = prog.run({"x": xs[0]}, keep_all=True)
    assert not any(np.shares_memory(kept[v], a) for v, a in pool.items())
    assert prog._pool is pool and all(prog._pool[v] is a for v, a in pool.items())


def test_runs_in_two_threads_do_not_share_intermediates():
    import threading
    s = wb.Session(_chain(), backend="cpu")
    prog = s.program()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((64, 48)).astype(np.float32) for _ in range(8)]
    got: dict[int, list] = {0: [], 1: []}

    def work(t):
        for _ in range(25):
            got[t].append([prog.run({"x": x})["y"] for x in xs[t::2]])

    threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t in (0, 1):
        want = [np.exp(np.tanh(1 / (1 + np.exp(-x)))) for x in xs[t::2]]
        for run in got[t]:
            for y, w in zip(run, want):
                np.testing.assert_allclose(y, w, rtol=1e-6)


def test_launch_addresses_follow_the_arrays():
    """A kernel's launch reuses the addresses of the arrays it had last time, reads
    them again for any other array (a new input, a new output), and does not keep a
    caller's arrays alive."""
    import gc
    import weakref
    s = wb.Session(_chain(), backend="cpu")
    prog = s.program()
    ck = prog.compiled[0]
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((64, 48)).astype(np.float32) for _ in ck.kernel.params]
    first = ck.addresses(args)
    assert ck.addresses(list(args)) is first
    other = [a.copy() for a in args]
    moved = ck.addresses(other)
    assert moved is not first and moved[:len(args)] == tuple(a.ctypes.data for a in other)
    dead = weakref.ref(other[0])
    del other
    gc.collect()
    assert dead() is None
