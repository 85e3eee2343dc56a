"""Every error bound the workbench holds a result to, and how it measures the error.

Kernels against the NumPy reference: the relative error of an output is
``max |y - r| / max(|r|, floor)``, elementwise, where ``floor = 1e-3 * max |r|`` keeps
elements near zero from dominating. NaN where the reference has NaN (and only there)
counts as agreement; a NaN anywhere else -- an element never written, since outputs
are poisoned -- makes the error infinite. Integers and booleans must match exactly
(error 0 or inf). Measured against a magnitude (the bound of its rounding error), an
element whose magnitude passes float32's largest value may be any non-finite value:
float32 arithmetic does not determine which (where a product or a partial sum
overflows -- an FMA or not, the order of a sum -- decides between inf, -inf and NaN;
the float64 reference may not overflow at all), as its infinite bound already allows
any finite value where the reference is finite. Where the reference is not finite such
an element still must not be finite.

A whole model against the framework it came from (torch, onnxruntime): the error is
relative to the largest output, ``max |y - r| / max |r|`` (:func:`relative_to_largest`;
a float32 sum over channels or a window rounds relative to its terms, not to a result
that cancels to near zero), held to :data:`FRAMEWORK_TOLERANCE` in float32.
"""
from __future__ import annotations

import numpy as np

from .dtypes import C_INT, DType

# Relative error bound accepted when a kernel is compared with the NumPy reference.
# float16 rounds at every stored intermediate in the reference but only once in a
# fused kernel, so its bound is loose; bfloat16 keeps 8 significant bits against
# float16's 11 (a rounding is off by up to 2^-9 of the value, not 2^-12), so its bound
# is looser still: a dozen of its roundings; integers and booleans must match exactly.
TOLERANCE = {
    DType.float32: 1e-4,
    DType.float16: 2e-2,
    DType.bfloat16: 5e-2,
    **{d: 0.0 for d in C_INT},
    DType.bool: 0.0,
}

# A float32 matmul allowed TF32 (tensor cores) rounds each operand to 10 mantissa bits
# before multiplying: a product of two is off by up to 2^-9 of |a||b| where they are
# truncated (a tensor core ignores the low bits of an unconverted operand; rounded to
# nearest, 2^-10), so an element of A @ B by up to TF32_PRODUCT_ERROR * (|A| @ |B|)
# besides float32's accumulation (measure.verify holds such a product to that).
TF32_PRODUCT_ERROR = 2.0 ** -9
# A bfloat16 or float16 matmul on tensor cores multiplies in its own type: its operands
# are exact there, but a value the kernel computed in float32 on the way (a fused
# attention's probabilities, a prologue's result) is rounded to nearest into it, off
# by up to 2^-8 (bfloat16) or 2^-11 (float16) of itself: a product of two by twice that.
HALF_PRODUCT_ERROR = {DType.bfloat16: 2.0 ** -7, DType.float16: 2.0 ** -10}
# A float32 model against the framework it was exported from (torch eager,
# onnxruntime), relative to the largest output (:func:`relative_to_largest`): the zoo's
# transformers, CNNs and audio encoders sum thousands of terms per output in another
# order, and stay within a few 1e-6 of it
FRAMEWORK_TOLERANCE = 1e-4

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


def relative_to_largest(got, want) -> float:
    """``max |got - want| / max |want|`` in float64 (inf where the shapes differ; the
    largest |want| floored at 1e-30): a model's output against another framework's."""
    y, r = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if y.shape != r.shape:
        return float("inf")
    if r.size == 0:
        return 0.0
    return float(np.max(np.abs(y - r)) / max(float(np.max(np.abs(r))), 1e-30))


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
