"""The CPU kernels' own e^x (``wb_expf``, ops/elementwise.py) and the products that
stand for ``pow`` by a literal 2, 3 or 4, against float64 NumPy over the whole float
range: within 1 ulp where the result is a normal float, within one subnormal step
below, and exactly 0, inf and NaN where e^x is. The masked-softmax inputs (-3.4e38,
-inf) are among them: they are why the helper exists (glibc's vector expf slows 20-30x
on them). The sigmoid, which takes e^-|x| from the same polynomial, within 3 ulp of
float64. Run unfused and fused (exp inside a sigmoid, a softmax and a GELU)."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.ir import GraphBuilder
from workbench.session import Session

F32 = np.float32
TINY = np.finfo(F32).smallest_subnormal
SPECIAL = np.array([np.nan, -np.inf, np.inf, -np.finfo(F32).max, np.finfo(F32).max, -1e38,
                    -104.0, -103.97, -103.9, -95.0, -87.34, -87.0, 0.0, -0.0, 1e-30, -1e-45,
                    87.0, 88.0, 88.72, 88.7228, 88.73, 88.75, 88.76, 89.0, 100.0,
                    # where the helper takes |x| as 104 (and just inside it)
                    103.99, 104.0, 104.01, 1e10, -103.99, -104.01, -1e10,
                    -59.9218788], F32)    # (the Cephes form's worst: 1.010 ulp)


def _dense() -> np.ndarray:
    """Every 2003rd float in [-110, 110] (1.1 million, both signs, subnormals included):
    the helper was measured within 0.893 ulp over every third one (in C, against
    float64's exp), so a form that loses accuracy anywhere shows here."""
    bits = np.arange(0, np.float32(110.0).view(np.uint32), 2003, dtype=np.uint32)
    pos = bits.view(F32)
    return np.concatenate([pos, -pos])


def _inputs(n: int = 20_000, dense: bool = False) -> np.ndarray:
    rng = np.random.default_rng(7)
    return np.concatenate([SPECIAL, rng.standard_normal(n).astype(F32),
                           (rng.standard_normal(n) * 40).astype(F32),
                           np.linspace(-110, 95, n, dtype=F32),
                           _dense() if dense else SPECIAL[:0]])


def _run(g, x, planner):
    s = Session(g, backend="cpu", seed=0)
    if planner != "none":
        s.auto(planner)
    return s.run({"x": x})


def _assert_close_ulp(got: np.ndarray, x64: np.ndarray, exact: np.ndarray, what: str):
    """got (float32) within 1 ulp of the float64 ``exact`` where that is a normal
    float, within one subnormal step below, and equal where it is 0, inf or NaN."""
    with np.errstate(all="ignore"):
        want = exact.astype(F32)
        normal = np.abs(want) >= np.finfo(F32).tiny
        special = ~np.isfinite(want) | (want == 0)
        err = np.abs(got.astype(np.float64) - exact)
        ulp = np.spacing(np.abs(want)).astype(np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same[special].all(), (what, x64[special & ~same], got[special & ~same])
    bad = normal & ~special & (err > ulp)
    assert not bad.any(), (what, x64[bad][:5], got[bad][:5], want[bad][:5])
    sub = ~normal & ~special & (err > TINY)
    assert not sub.any(), (what, x64[sub][:5], got[sub][:5], want[sub][:5])


@pytest.mark.parametrize("planner", ["none", "rules"])
def test_exp_and_sigmoid_over_the_float_range(planner):
    x = _inputs(dense=True)
    b = GraphBuilder("exp")
    t = b.input("x", x.shape)
    b.output(b.op("exp", t), "e")
    b.output(b.op("sigmoid", t), "s")
    got = _run(b.build(), x, planner)
    x64 = x.astype(np.float64)
    _assert_close_ulp(got["e"], x64, np.exp(x64), "exp")
    # sigmoid against float64: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below (no
    # overflow). The kernel computes e^-|x| (1 ulp) and one sum and one quotient of
    # its own: within 3 ulp where the result is normal, within a few subnormal steps
    # below -87.3 (where float32's 1 / (1 + e^-x), the op's NumPy reference, gives 0
    # once e^-x overflows: the kernel keeps e^x's subnormal value)
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x64))
        exact = np.where(x64 >= 0, 1 / (1 + e), e / (1 + e))
    want = exact.astype(F32)
    ok = ~np.isnan(x)
    normal = ok & (want >= np.finfo(F32).tiny)
    err = np.abs(got["s"].astype(np.float64) - exact)
    assert (err <= 3 * np.spacing(want).astype(np.float64))[normal].all()
    assert (err <= 3 * TINY)[ok & ~normal].all()
    assert (got["s"][x <= -104] == 0).all() and (got["s"][x >= 17] == 1).all()
    assert np.isnan(got["s"][np.isnan(x)]).all()


def test_masked_softmax_rows_are_exact_zeros_where_masked():
    """A softmax over logits plus a -3.4e38 (finfo.min) or -inf mask, fused into one
    row kernel: the masked columns are exactly 0, the rest sum to 1."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 128)).astype(F32)
    mask = np.where(np.tril(np.ones((64, 128))) > 0, 0.0, np.finfo(F32).min).astype(F32)
    mask[::2][mask[::2] != 0] = -np.inf
    b = GraphBuilder("masked_softmax")
    t, m = b.input("x", x.shape), b.input("m", mask.shape)
    b.output(b.softmax(b.op("add", t, m)), "p")
    s = Session(b.build(), backend="cpu", seed=0)
    s.auto("rules")
    p = s.run({"x": x, "m": mask})["p"]
    assert (p[mask != 0] == 0).all()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-6)
    with np.errstate(all="ignore"):
        z = (x + mask).astype(np.float64)
        ref = np.exp(z - z.max(axis=1, keepdims=True))
        ref /= ref.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(p, ref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("power", [2.0, 3.0, 4.0, 2.5])
def test_pow_by_a_literal(power):
    """pow(x, 2 | 3 | 4) is a product in the kernel, powf otherwise; within 2 ulp of
    float64 (two or three roundings) and inf, NaN and signed zeros as powf gives
    them."""
    x = np.concatenate([_inputs(4000), np.array([-0.0, 1e13, -1e13, 1e-30], F32)])
    b = GraphBuilder("pow")
    t = b.input("x", x.shape)
    b.output(b.op("pow", t, b.constant(np.float32(power))), "y")
    s = Session(b.build(), backend="cpu", seed=0)
    src = s.source(s.graph.nodes[0].id, target="c")
    body = src[src.index("void k"):]        # (the prelude declares powf)
    assert ("powf(" in body) == (power == 2.5)
    y = s.run({"x": x})["y"]
    with np.errstate(all="ignore"):
        want32 = np.power(x, F32(power))
        exact = np.power(x.astype(np.float64), power)
    same = (y == want32) | (np.isnan(y) & np.isnan(want32))
    finite = np.isfinite(want32) & (want32 != 0)
    assert same[~finite].all(), (x[~finite & ~same], y[~finite & ~same])
    assert np.array_equal(np.signbit(y[~finite & ~np.isnan(y)]),
                          np.signbit(want32[~finite & ~np.isnan(want32)]))
    normal = finite & (np.abs(want32) >= np.finfo(F32).tiny)
    err = np.abs(y.astype(np.float64) - exact)
    assert (err <= 2 * np.spacing(np.abs(want32)).astype(np.float64))[normal].all()
