"""Kernel libraries are unloaded when nothing can launch their kernels any more: a long
session (a notebook stepping through plans, a tuning search, the fuzzer) no longer
keeps every library it built mapped until Linux's memory maps run out (one fuzzing
process did, after ~1800 graphs); the OpenMP runtime stays loaded, so kernels built
afterwards still run in parallel."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

import workbench as wb
from workbench.runtime import cc
from workbench.session import Session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="/proc/self/maps says what is mapped (Linux)")


def _mapped() -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[-1].strip() for line in f if ".so" in line}


def _session(c: float) -> Session:
    """A graph of its own (the constant is in the source, so every library differs)."""
    b = wb.GraphBuilder(f"scale_{int(c * 1000)}")
    x = b.input("x", (64, 300))
    b.output(b.exp(x * c) + b.softmax(x, axis=-1), "y")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    return s


def test_libraries_are_unmapped_when_their_kernels_are_gone_and_openmp_stays():
    x = np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32)
    paths = []
    for i in range(30):
        s = _session(0.5 + i / 1000)
        prog = s.program()
        want = np.exp(x * np.float32(0.5 + i / 1000)) + np.exp(x - x.max(-1, keepdims=True)) \
            / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)
        np.testing.assert_allclose(prog.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
        paths += [str(ck.path) for ck in prog.compiled if ck.path is not None]
        assert set(paths[-1:]) <= _mapped()        # loaded while the program lives
        del s, prog
    gc.collect()
    assert paths and not set(paths) & _mapped(), "kernel libraries still mapped"
    assert cc._pinned_runtimes, "the OpenMP runtime was not found to pin"
    assert any("gomp" in p or "omp" in p for p in _mapped())
    # a kernel built afterwards loads and runs on the runtime's threads as before
    s = _session(2.0)
    y = s.program().run({"x": x})["y"]
    assert np.isfinite(y).all()


def test_a_library_loaded_twice_stays_until_both_are_gone():
    s1, s2 = _session(3.0), _session(3.0)          # the same source: one cached file
    p1, p2 = s1.program(), s2.program()
    (path,) = {str(ck.path) for ck in p1.compiled if ck.path is not None}
    assert path in {str(ck.path) for ck in p2.compiled}
    del s1, p1
    gc.collect()
    assert path in _mapped()                         # the second load still holds it
    x = np.ones((64, 300), np.float32)
    assert np.isfinite(p2.run({"x": x})["y"]).all()
    del s2, p2
    gc.collect()
    assert path not in _mapped()
