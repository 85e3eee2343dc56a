"""Comparing kernel outputs with the NumPy reference.

The relative error of an output is ``max |y - r| / max(|r|, floor)``, elementwise,
where ``floor = 1e-3 * max |r|`` keeps elements near zero from dominating. NaN where
the reference has NaN (and only there) counts as agreement; a NaN anywhere else -- an
element never written, since outputs are poisoned -- makes the error infinite.
Integers and booleans must match exactly (error 0 or inf). Measured against a
magnitude (the bound of its rounding error), an element whose magnitude passes
float32's largest value may be any non-finite value: float32 arithmetic does not
determine which (where a product or a partial sum overflows -- an FMA or not, the
order of a sum -- decides between inf, -inf and NaN; the float64 reference may not
overflow at all), as its infinite bound already allows any finite value where the
reference is finite. Where the reference is not finite such an element still must
not be finite.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import TOLERANCE, DType

FLOAT32_MAX = float(np.finfo(np.float32).max)


def max_rel_error(out: np.ndarray, ref: np.ndarray, scale=None) -> float:
    """Worst elementwise relative error; ``scale`` (broadcastable to ref), when given,
    is a per-element magnitude the error may be measured against instead of |ref|."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return float("inf")
    if ref.dtype.kind in "biu":
        a = out.view(np.uint8) if out.dtype == np.bool_ else out
        b = ref.view(np.uint8) if ref.dtype == np.bool_ else ref
        return 0.0 if np.array_equal(a, b) else float("inf")
    o, r = out.astype(np.float64), ref.astype(np.float64)
    sc = None
    if scale is not None:
        sc = np.broadcast_to(np.abs(np.asarray(scale, np.float64)), r.shape)
        # (past float32's range: any non-finite result; see the module docstring)
        held = ~((sc > FLOAT32_MAX) & (~np.isfinite(o) | np.isfinite(r)))
        o, r, sc = o[held], r[held], sc[held]
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    if np.any(nan_o != nan_r):
        return float("inf")
    ok = ~nan_r
    if not ok.any():
        return 0.0
    o, r = o[ok], r[ok]
    sc = None if sc is None else sc[ok]
    inf_r = np.isinf(r)
    if np.any(o[inf_r] != r[inf_r]):
        return float("inf")
    o, r = o[~inf_r], r[~inf_r]
    if r.size == 0:
        return 0.0
    floor = max(1e-3 * float(np.max(np.abs(r))), 1e-30)
    denom = np.maximum(np.abs(r), floor)
    if sc is not None:
        denom = np.maximum(denom, sc[~inf_r])
    return float(np.max(np.abs(o - r) / denom))


def tolerance(dtype: DType) -> float:
    """The largest relative error accepted for outputs of this dtype."""
    return TOLERANCE[dtype]


def output_error(dtype: DType, out, ref, magnitude=None) -> float:
    """A graph output against the whole-graph (op-by-op) reference (``magnitude``:
    the one its rounding error is bounded by, where the matmuls may round their
    operands -- ``verify.graph_magnitudes`` -- else |ref|).

    A half-precision output (float16, bfloat16) is measured against its largest
    magnitude (``max |y - r| / max |r|``): every op of the reference rounds to the
    half type, so an element near zero computed from values of size 1 carries an
    absolute error of their ulp, which the elementwise floor of 1e-3 of the largest
    value would call 3 (a bfloat16 LayerNorm) -- while it is one ulp of the tensor."""
    scale = magnitude
    if dtype.is_half:
        r = np.abs(np.asarray(ref, np.float64))
        top = float(np.max(r, initial=0.0, where=np.isfinite(r)))
        scale = top if magnitude is None else np.maximum(magnitude, top)
    return max_rel_error(out, ref, scale)


def check_outputs(g, outs: dict, refs: dict, magnitudes: dict | None = None
                  ) -> tuple[float, bool]:
    """(worst error over outputs (:func:`output_error`), whether every output is within
    tolerance); ``magnitudes``: each output's error bound's magnitude, where it is not
    |ref| (a plan whose matmuls run in TF32)."""
    worst, ok = 0.0, True
    for name, ref in refs.items():
        e = output_error(g.value(name).dtype, outs[name], ref,
                         None if magnitudes is None else magnitudes[name])
        worst = max(worst, e)
        ok &= e <= tolerance(g.value(name).dtype)
    return worst, ok
