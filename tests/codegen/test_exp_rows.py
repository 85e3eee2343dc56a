"""The CPU row kernels' e^x over a row (``wb_expf_n``, ops/elementwise.py; its shifted
form with the row's sum, ``wb_expf_shift_n``, ops/reduce.py) and the split exp pass that
calls it (codegen/render/c_exp_rows.py).

``wb_expf_n`` gives ``wb_expf``'s bits, element for element, with AVX-512 (intrinsics,
``vscalefps``) and without (``-mno-avx512f``: the portable loop), over every 2003rd
float in [-110, 110], the special values and every tail length; ``wb_expf`` itself is
held to its ulp bound in tests/ops/test_exp.py. Row kernels that split their exp pass
(a softmax with a masked tail, a logsumexp) match float64; a longer row keeps its
fused loop.
"""
from __future__ import annotations

import ctypes
import platform
import re

import numpy as np
import pytest

from tests.ops.test_exp import SPECIAL, _dense
from workbench.codegen.render.c import CRenderer
from workbench.codegen.kir import Loop
from workbench.codegen.render.c_exp_rows import (MAX_COLS, _output_row, _row_sum,
                                                 _shifted_row, exp_position)
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.runtime import cc
from workbench.session import Session

F32 = np.float32
WRAP = """
void t_rows(float* x, long long n) { wb_expf_n(x, n); }
float t_shift(float* y, const float* x, float c, long long n) { return wb_expf_shift_n(y, x, c, n); }
void t_each(float* x, long long n) { for (long long i = 0; i < n; ++i) x[i] = wb_expf(x[i]); }
int t_avx512(void) {
#ifdef __AVX512F__
  return 1;
#else
  return 0;
#endif
}
"""


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(l for l in f if l.startswith("flags")).split()[2:])
    except (OSError, StopIteration):
        return set()


@pytest.mark.parametrize("flags", ["", "-mno-avx512f"], ids=["native", "portable"])
def test_row_exp_gives_wb_expf_bits(flags):
    if flags and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 flag selects the portable path here")
    if not flags and "avx512f" not in _cpu_flags():
        pytest.skip("this CPU has no AVX-512: the native build is the portable path")
    lib = _library(flags)
    x = np.concatenate([SPECIAL, _dense(), np.random.default_rng(5).standard_normal(4099)
                        .astype(F32) * 30])

    def run(f, a):
        out = a.copy()
        f(out.ctypes.data, len(out))
        return out
    got, want = run(lib.t_rows, x), run(lib.t_each, x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
        x[got.view(np.uint32) != want.view(np.uint32)][:5]
    # every tail length (the masked last vector), and nothing past n written
    for n in range(0, 40):
        buf = np.full(48, -7.0, F32)
        buf[:n] = x[100:100 + n]
        out = buf.copy()
        lib.t_rows(out.ctypes.data, n)
        assert np.array_equal(out[:n].view(np.uint32), run(lib.t_each, buf[:n]).view(np.uint32))
        assert (out[n:] == -7.0).all()


def _library(flags: str):
    """The helpers and the wrappers above, built with ``flags`` added."""
    src = CRenderer().prelude(uses="wb_expf_n(x, n); wb_expf_shift_n(y, x, c, n);") + WRAP
    assert "wb_expf_n" in src and ("_mm512_scalef_ps" in src)
    mp = pytest.MonkeyPatch()
    mp.setenv(cc.EXTRA_CFLAGS_ENV, flags)
    try:
        lib = cc.load_library(cc.build_library("t_exp_rows", src))
    finally:
        mp.undo()
    for f in (lib.t_rows, lib.t_each):
        f.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
    lib.t_shift.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_longlong]
    lib.t_shift.restype = ctypes.c_float
    assert lib.t_avx512() == (not flags)       # (the path under test is the one built)
    return lib


def _lanes_sum(e: np.ndarray) -> np.float32:
    """The float32 sum of ``e`` as a row loop's 16 lanes take it (render/c_lanes.py):
    lane i sums elements i, i + 16, ... in order; then lane i with i + 8, + 4, + 2, + 1."""
    lanes = np.zeros(16, F32)
    for i, v in enumerate(e):
        lanes[i % 16] = F32(lanes[i % 16] + v)
    while len(lanes) > 1:
        h = len(lanes) // 2
        lanes = (lanes[:h] + lanes[h:]).astype(F32)
    return lanes[0]


@pytest.mark.parametrize("flags", ["", "-mno-avx512f"], ids=["native", "portable"])
def test_shifted_row_exp_gives_wb_expf_bits_and_the_lanes_sum(flags):
    if flags and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 flag selects the portable path here")
    if not flags and "avx512f" not in _cpu_flags():
        pytest.skip("this CPU has no AVX-512: the native build is the portable path")
    lib = _library(flags)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(1000) * 20).astype(F32)
    for n in [*range(0, 40), 512, 1000]:
        for c in (F32(0.0), F32(x[:max(n, 1)].max()), F32(-3.25)):
            buf = np.full(n + 8, -7.0, F32)
            s = lib.t_shift(buf.ctypes.data, x.ctypes.data, c, n)
            want = x[:n] - c
            lib.t_each(want.ctypes.data, n)
            assert np.array_equal(buf[:n].view(np.uint32), want.view(np.uint32)), (n, c)
            assert (buf[n:] == -7.0).all()        # (nothing past n written)
            assert F32(s).view(np.uint32) == _lanes_sum(want).view(np.uint32), (n, c, s)
    # in place, as a row kept in the output's row is taken
    y = x.copy()
    lib.t_shift(y.ctypes.data, y.ctypes.data, F32(1.5), len(y))
    want = x - F32(1.5)
    lib.t_each(want.ctypes.data, len(want))
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


def _session(g):
    s = Session(g, backend="cpu", seed=0)
    s.auto("stitch")
    return s


def test_softmax_with_a_masked_tail_splits_its_exp_pass():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((6, 37)) * 20).astype(F32)
    x[1, 3] = -np.inf
    x[2, :] = -1e38
    b = GraphBuilder("softmax_tail")
    t = b.input("x", x.shape)
    b.output(b.softmax(t), "p")
    s = _session(b.build())
    (k,) = s.kernels()
    # (the row's e^(x - max) and its sum in one call, into the output's row)
    assert re.search(r"acc\d+ = acc\d+ \+ wb_expf_shift_n\(wb_ex_, in0 \+ row \* 37, acc\d+, 37\)",
                     s.source(k.group, target="c"))
    p = s.run({"x": x})["p"]
    z = x.astype(np.float64)
    ref = np.exp(z - z.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, ref, rtol=2e-6, atol=1e-7)
    assert p[1, 3] == 0


@pytest.mark.parametrize("cols", [MAX_COLS, MAX_COLS + 1])
def test_logsumexp_rows_split_up_to_max_cols(cols):
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((5, cols)) * 10).astype(F32)
    b = GraphBuilder("lse_rows")
    t = b.input("x", x.shape)
    m = b.reduce_max(t, axes=[-1], keepdims=True)
    b.output(b.log(b.reduce_sum(b.exp(t - m), axes=[-1], keepdims=True)) + m, "y")
    s = _session(b.build())
    (k,) = s.kernels()
    src = s.source(k.group, target="c")
    assert ("wb_expf_shift_n(wb_ex_" in src) == (cols <= MAX_COLS)
    y = s.run({"x": x})["y"]
    z = x.astype(np.float64)
    zm = z.max(axis=1, keepdims=True)
    np.testing.assert_allclose(y, np.log(np.exp(z - zm).sum(axis=1, keepdims=True)) + zm,
                               rtol=1e-6)


def test_a_long_softmax_row_is_one_call_into_the_output_row():
    # past MAX_COLS a row is split only where the call is the whole pass: it reads the
    # row, writes e^(x - max) into the output's row and returns the sum (no stack array)
    rng = np.random.default_rng(13)
    cols = MAX_COLS * 3 + 5
    x = (rng.standard_normal((4, cols)) * 20).astype(F32)
    x[2, 7] = -np.inf
    b = GraphBuilder("softmax_long")
    t = b.input("x", x.shape)
    b.output(b.softmax(t), "p")
    s = _session(b.build())
    (k,) = s.kernels()
    src = s.source(k.group, target="c")
    assert f"wb_expf_shift_n(wb_ex_, in0 + row * {cols}, " in src
    assert "float wb_ex_[" not in src
    p = s.run({"x": x})["p"]
    z = x.astype(np.float64)
    ref = np.exp(z - z.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, ref, rtol=5e-6, atol=1e-9)
    assert p[2, 7] == 0


def _row_loops(body):
    """Every block or lane loop of a kernel body, nested ones included."""
    for x in body:
        if isinstance(x, Loop):
            if x.bind in ("block", "lane"):
                yield x
            yield from _row_loops(x.body)


def _softmax_and_lse(cols: int = 37):
    b = GraphBuilder("softmax_rows")
    b.output(b.softmax(b.input("x", (6, cols))), "p")
    b2 = GraphBuilder("lse_rows")
    t = b2.input("x", (5, cols))
    m = b2.reduce_max(t, axes=[-1], keepdims=True)
    b2.output(b2.log(b2.reduce_sum(b2.exp(t - m), axes=[-1], keepdims=True)) + m, "y")
    return [_session(b.build()), _session(b2.build())]


def test_the_split_is_recognised_on_the_row_kernels_ir():
    """The row kernels the split is meant for -- a softmax and a logsumexp -- have an
    exp pass the split recognises in their kernel IR: the loop's one e^x, its
    argument ``x[col] - max`` read from a float row, and all that follows it the
    row's sum (the call is the whole pass); the softmax also stores e^x into the
    output's row, which the call then writes. A change in the lowering that loses
    one of these fails here, not silently in the generated C."""
    r = CRenderer()
    for s, home in zip(_softmax_and_lse(), (True, False)):
        (k,) = s.kernels()
        split = [(loop, at) for loop in _row_loops(k.body)
                 if (at := exp_position(loop)) is not None]
        assert len(split) == 1, k.name
        loop, at = split[0]
        ex = loop.body[at]
        arg = re.fullmatch(r"wb_expf\((\w+)\)", ex.expr).group(1)
        row, shift = _shifted_row(r, loop, at, arg)     # (x less the row's max)
        assert row == "in0 + row * 37" and re.fullmatch(r"\w+", shift), (row, shift)
        assert (_output_row(r, loop, ex.var) is not None) == home, k.name
        rest = loop.body[at + 1:]
        if home:
            rest = tuple(x for x in rest if x is not _output_row(r, loop, ex.var)[0])
        assert _row_sum(loop, rest, ex.var) is not None, k.name


class _UncastC(CRenderer):
    """The C renderer with float loads and stores printed without their casts
    (``float t = x[i];``, ``y[i] = t;``): the same kernels in other C text."""

    def to_compute(self, dtype, src):
        return src if dtype is DType.float32 else super().to_compute(dtype, src)

    def to_storage(self, dtype, expr):
        return expr if dtype is DType.float32 else super().to_storage(dtype, expr)


def test_the_split_does_not_depend_on_how_loads_and_stores_print():
    """The split is decided from the kernel IR, so a renderer printing loads and
    stores otherwise still splits the same rows into the same call (it was once
    decided by matching the C text of a load, which such a change turned off)."""
    for s in _softmax_and_lse():
        (k,) = s.kernels()
        texts = ["\n".join(r.stmts(k.body, 1)) for r in (CRenderer(), _UncastC())]
        assert "= in0[" in texts[1] and "(float)in0[" not in texts[1]
        calls = [re.search(r"wb_expf_shift_n\([^;]*;", t).group(0) for t in texts]
        assert calls[0] == calls[1] and "in0 + row * 37" in calls[0], calls
