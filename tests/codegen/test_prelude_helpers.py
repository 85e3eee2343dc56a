"""Each kernel's prelude holds the helpers its code calls, and those they call; no other.

A helper a kernel needs but its prelude lacks is an undeclared function, macro or
OpenMP reduction: the real C compiler (``-fsyntax-only``, implicit declarations as
errors) checks every kernel of every sample graph under every planner, each source on
its own as the CPU backend compiles it (NVRTC does the same for CUDA in
test_cuda_compile.py, through the same ``render_kernel``).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.codegen import RENDERERS, lower_plan, render_kernel
from workbench.codegen.render.c import MICRO_KERNEL
from workbench.codegen.render.helpers import closure, defined_names, needed
from workbench.frontends import load
from workbench.fusion import run_planner
from workbench.ops import all_helpers
from workbench.runtime import cc

SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))
CANDIDATES = {"c": all_helpers() + (MICRO_KERNEL,), "cuda": all_helpers()}
# a missing helper is an error, not GCC 12's warning about an implicit declaration
STRICT = ("-fsyntax-only", "-Werror=implicit-function-declaration")


def _syntax_errors(sources: dict[str, str]) -> list[str]:
    """The compiler's complaints about each source (name -> text) that it rejects."""
    compiler, _ = cc.find_compiler()
    flags = [f for f in cc.machine_cflags() if f not in ("-shared", "-fPIC")]
    with tempfile.TemporaryDirectory() as tmp:
        def check(item):
            name, src = item
            path = Path(tmp) / f"{name}.c"
            path.write_text(src)
            r = subprocess.run([compiler, *flags, *STRICT, str(path)], capture_output=True,
                               text=True)
            return f"{name}: {r.stderr[-800:]}" if r.returncode else None
        with ThreadPoolExecutor(2) as pool:
            return [e for e in pool.map(check, sources.items()) if e]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_kernel_compiles_with_its_own_prelude(path):
    g = load(path)
    sources = {}
    for planner in ("none", "xla", "rules", "stitch"):
        for k in lower_plan(run_planner(planner, g)[0]):
            if k.library is None:
                sources.setdefault(render_kernel(k, "c"), f"{planner}_{k.name}")
    assert sources
    assert _syntax_errors({n: s for s, n in sources.items()}) == []


def test_a_missing_helper_is_caught():
    """The check above fails where a prelude lacks what its kernel calls, or what a
    helper it calls calls (wb_sigmoidf's wb_exp_core)."""
    def build(b):
        x = b.input("x", (8, 16))
        b.output(b.op("max", b.op("sigmoid", x), x), "out")
    src = _kernel_sources(build, "stitch")["c"]
    called = needed(CANDIDATES["c"], "c", src)
    assert [h.name for h in called] == ["wb_expf", "wb_sigmoidf", "wb_fmax"]
    assert _syntax_errors({"whole": src}) == []
    cuts = {h.name.replace("/", "_"): src.replace(h.body("c"), "") for h in called}
    assert all(cut != src for cut in cuts.values())
    assert len(_syntax_errors(cuts)) == len(cuts)


def _kernel_sources(build, planner="rules"):
    b = wb.GraphBuilder("t")
    build(b)
    kernels = lower_plan(run_planner(planner, b.build())[0])
    return {t: "\n".join(render_kernel(k, t) for k in kernels) for t in ("c", "cuda")}


def test_a_kernel_without_transcendentals_has_no_exp_or_philox():
    def build(b):
        x, y = b.input("x", (8, 16)), b.input("y", (8, 16))
        b.output(b.op("mul", b.op("add", x, y), y), "out")
    for target, src in _kernel_sources(build).items():
        for name in ("wb_expf", "wb_exp_core", "wb_philox", "wb_random_normal",
                     "wb_round_mini", "wb_gemm_packed", "wb_f2i_int32", "wbmax"):
            assert name not in src, (target, name)
    # and the full prelude it was cut from still has them all
    assert all(n in RENDERERS["c"].prelude() for n in ("wb_expf", "wb_philox4x32",
                                                       "wb_gemm_packed"))


def test_a_helpers_dependencies_come_with_it():
    def build(b):
        x = b.input("x", (8, 16))
        key = b.input("key", (), "int64", range=(0, 2 ** 40))
        idx = b.input("idx", (8, 16), "int32", range=(0, 2 ** 20))
        b.output(b.op("sigmoid", x), "s")
        b.output(b.op("random_normal", key, idx), "z")
    src = _kernel_sources(build, "none")["c"]
    # wb_sigmoidf calls wb_exp_core (wb_expf's); Box-Muller calls Philox: each
    # defined before its caller, though the kernels call only the callers
    for callee, caller in (("wb_exp_core", "wb_sigmoidf"),
                           ("wb_philox4x32", "wb_random_normal")):
        assert re.search(rf"WB_FN \w+ {callee}\(", src), callee
        assert src.index(f" {callee}(") < src.index(f" {caller}(")


@pytest.mark.parametrize("target", ["c", "cuda"])
def test_every_helper_declares_what_it_calls(target):
    """What a helper's text calls of another helper is in what it declares (so the
    selection never leaves a callee out), and each comes after what it calls."""
    hs = CANDIDATES[target]
    order = [h.name for h in hs]
    for h in hs:
        used = set(re.findall(r"\b\w+\b", h.body(target))) - defined_names(h.body(target))
        calls = {g.name for g in hs if g is not h and defined_names(g.body(target)) & used}
        assert calls <= closure([h]), (h.name, calls)
        assert all(order.index(c) < order.index(h.name) for c in closure([h]) - {h.name})


def test_every_helper_compiles_with_what_it_declares():
    """Each C helper alone, with the helpers it declares it calls, is a whole source."""
    r = RENDERERS["c"]
    srcs = {re.sub(r"\W", "_", h.name): r.prelude(uses=" ".join(defined_names(h.body("c"))))
            for h in CANDIDATES["c"] if h.body("c")}
    assert all(len(s) < len(r.prelude()) for s in srcs.values())
    assert _syntax_errors(srcs) == []
