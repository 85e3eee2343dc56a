"""The edges where C and NumPy part ways, pinned: integer overflow wraps (C calls it
undefined), MIN / -1 and x / 0 do not trap, integer means do not overflow their input
type, an integer mean over an empty axis is 0, a cast to float16 rounds inside a fused
kernel as it would between kernels, and 64-bit gather indices are clamped, not
truncated to 32 bits. Each case states the expected values outright (so a reference that
drifted with the kernel would still fail) and runs the kernels unfused and fused."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.runtime import run_reference
from workbench.session import Session

I32, I64, F32, F16 = DType.int32, DType.int64, DType.float32, DType.float16
SIGNED = [DType.int8, DType.int16, I32, I64]
UNSIGNED = [DType.uint8, DType.uint16, DType.uint32, DType.uint64]
PLANNERS = ["none", "rules"]


def _run(g, inputs, planner):
    s = Session(g, backend="cpu", seed=0)
    if planner != "none":
        s.auto(planner)
    return s.run(inputs)


def _check(g, inputs, expected: dict, planner):
    ref = run_reference(g, inputs)
    got = _run(g, inputs, planner)
    for name, want in expected.items():
        np.testing.assert_array_equal(ref[name], want, err_msg=f"reference {name}")
        np.testing.assert_array_equal(got[name], want, err_msg=f"kernel {name} ({planner})")


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("dt", SIGNED, ids=lambda d: d.value)
def test_integer_division_edges(planner, dt):
    info = np.iinfo(dt.np)
    b = GraphBuilder("idiv")
    x, y = b.input("x", (6,), dt), b.input("y", (6,), dt)
    b.output(b.op("add", b.op("div", x, y), b.op("sub", x, x)), "q")
    xs = np.array([info.min, 7, -7, 7, 5, info.max], dt.np)
    ys = np.array([-1, 0, 2, -2, -1, -1], dt.np)
    want = np.array([info.min, 0, -3, -3, -5, -info.max], dt.np)
    _check(b.build(), {"x": xs, "y": ys}, {"q": want}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("dt", SIGNED, ids=lambda d: d.value)
def test_integer_overflow_wraps(planner, dt):
    info = np.iinfo(dt.np)
    b = GraphBuilder("wrap")
    x, y = b.input("x", (3,), dt), b.input("y", (3,), dt)
    b.output(b.op("add", x, y), "s")
    b.output(b.op("mul", x, y), "p")
    b.output(b.op("neg", x), "n")
    b.output(b.op("abs", x), "a")
    xs = np.array([info.max, info.min, 3], dt.np)
    ys = np.array([1, -1, 5], dt.np)
    with np.errstate(over="ignore"):
        want = {"s": xs + ys, "p": xs * ys, "n": -xs, "a": np.abs(xs)}
    assert want["s"][0] == info.min and want["n"][1] == info.min   # NumPy wraps
    _check(b.build(), {"x": xs, "y": ys}, want, planner)


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("dt", UNSIGNED, ids=lambda d: d.value)
def test_unsigned_arithmetic_wraps_and_divides_unsigned(planner, dt):
    # values past the signed range of the same width (and, for uint64, past any long
    # long): the kernels must add, divide, compare and raise them as unsigned numbers
    top = int(np.iinfo(dt.np).max)
    b = GraphBuilder("uwrap")
    x, y = b.input("x", (5,), dt), b.input("y", (5,), dt)
    b.output(b.op("add", x, y), "s")
    b.output(b.op("sub", x, y), "d")
    b.output(b.op("mul", x, y), "p")
    b.output(b.op("neg", x), "n")
    b.output(b.op("div", x, y), "q")
    b.output(b.op("max", x, y), "m")
    b.output(b.op("gt", x, y), "g")
    b.output(b.op("pow", y, b.constant(np.array(3, dt.np))), "c")
    b.output(b.op("mod", x, y), "r")
    xs = np.array([top, top, top - 2, 7, 0], dt.np)
    ys = np.array([1, 2, top // 2 + 1, 0, 3], dt.np)
    with np.errstate(all="ignore"):
        want = {"s": xs + ys, "d": xs - ys, "p": xs * ys, "n": -xs,
                "q": np.array([top, top // 2, (top - 2) // (top // 2 + 1), 0, 0], dt.np),
                "m": np.maximum(xs, ys), "g": xs > ys, "c": ys ** np.array(3, dt.np),
                "r": np.array([0, 1, top // 2 - 2, 0, 0], dt.np)}
    assert want["s"][0] == 0 and want["d"][4] == top - 2    # NumPy wraps
    _check(b.build(), {"x": xs, "y": ys}, want, planner)


@pytest.mark.parametrize("planner", PLANNERS)
def test_uint64_reductions_past_two_to_the_63(planner):
    b = GraphBuilder("ured")
    x = b.input("x", (2, 3), DType.uint64)
    for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min"):
        b.output(b.op(op, x, axes=[1], keepdims=False), op)
    big = 2 ** 63 + 10
    xs = np.array([[big, big, 2], [5, 2 ** 64 - 1, 2 ** 62]], np.uint64)
    with np.errstate(over="ignore"):
        sums = xs.sum(axis=1)
    want = {"reduce_sum": sums, "reduce_max": xs.max(axis=1), "reduce_min": xs.min(axis=1),
            # the mean of the wrapped 64-bit sum, truncated, as NumPy's integers would
            "reduce_mean": sums // np.uint64(3)}
    _check(b.build(), {"x": xs}, want, planner)


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("dt", SIGNED + UNSIGNED, ids=lambda d: d.value)
def test_float_to_narrow_integer_casts_saturate(planner, dt):
    info = np.iinfo(dt.np)
    b = GraphBuilder("f2i")
    x = b.input("x", (7,), F32)
    b.output(b.op("cast", b.op("mul", x, x), to=dt.value), "y")      # fused with the mul
    xs = np.array([np.nan, 1e30, -1e30, 3.7, -3.7, 11.2, 0.5], np.float32)
    with np.errstate(over="ignore"):
        sq = xs * xs                     # NaN, inf, inf, 13.69, 13.69, 125.44, 0.25
    # NaN -> 0, past the top -> the top, else truncated (every square is >= 0); the
    # squares below 256 fit every type but int8, which saturates 13 and 125 not at all
    want = np.array([0, info.max, info.max] + [min(int(v), info.max) for v in sq[3:]],
                    dt.np)
    _check(b.build(), {"x": xs}, {"y": want}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
def test_int32_mean_does_not_overflow(planner):
    b = GraphBuilder("imean")
    x = b.input("x", (2, 4), I32)
    b.output(b.op("reduce_mean", x, axes=[1], keepdims=False), "m")
    b.output(b.op("reduce_sum", x, axes=[1], keepdims=False), "s")
    xs = np.array([[2_000_000_000] * 4, [-2_000_000_000, -1, 0, 2]], np.int32)
    # the mean truncates toward zero; the int32 sum wraps like NumPy's int32 result
    with np.errstate(over="ignore"):
        want_sum = np.sum(xs, axis=1, dtype=np.int32)
    _check(b.build(), {"x": xs},
           {"m": np.array([2_000_000_000, -499_999_999], np.int32), "s": want_sum}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("dt", SIGNED + UNSIGNED, ids=lambda d: d.value)
def test_integer_mean_over_an_empty_axis_is_zero(planner, dt):
    b = GraphBuilder("emptymean")
    x = b.input("x", (3, 0), dt)
    b.output(b.op("reduce_mean", x, axes=[1], keepdims=False), "m")
    _check(b.build(), {"x": np.zeros((3, 0), dt.np)}, {"m": np.zeros(3, dt.np)}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
def test_cast_to_float16_rounds_inside_a_fused_kernel(planner):
    b = GraphBuilder("castf16")
    x = b.input("x", (4,), F32)
    h = b.op("cast", x, to="float16")
    b.output(b.op("sub", b.op("cast", h, to="float32"), x), "err")
    xs = np.array([1 + 2.0 ** -12, 2049.0, 65520.0, 0.1], np.float32)
    with np.errstate(over="ignore"):
        want = xs.astype(np.float16).astype(np.float32) - xs
    assert want[0] != 0 and np.isinf(want[2])       # really not representable
    _check(b.build(), {"x": xs}, {"err": want}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
def test_gather_clamps_64_bit_indices(planner):
    b = GraphBuilder("gather64")
    data = b.input("data", (8,), F32)
    idx = b.input("idx", (3,), I64)
    b.output(b.op("gather", data, idx, axis=0), "y")
    d = np.arange(8, dtype=np.float32) + 0.5
    ids = np.array([2 ** 32 + 1, -2 ** 32 + 3, 2 ** 31], np.int64)
    _check(b.build(), {"data": d, "idx": ids}, {"y": d[[7, 0, 7]]}, planner)


@pytest.mark.parametrize("planner", PLANNERS)
def test_integer_sum_wraps_before_a_fused_cast(planner):
    # the kernel accumulates in 64 bits; the sum is an int32 (wrapped) before the cast
    # to float that the fused kernel applies to it
    b = GraphBuilder("isumcast")
    x = b.input("x", (2, 4), I32)
    b.output(b.op("cast", b.op("reduce_sum", x, axes=[1], keepdims=False), to="float32"),
             "f")
    xs = np.array([[2_000_000_000] * 4, [1, 2, 3, 4]], np.int32)
    with np.errstate(over="ignore"):
        want = np.sum(xs, axis=1, dtype=np.int32).astype(np.float32)
    assert want[0] == np.float32(-589934592)
    _check(b.build(), {"x": xs}, {"f": want}, planner)
