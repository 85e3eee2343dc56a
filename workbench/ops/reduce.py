"""Reductions over any set of axes, with keepdims.

Each reduction names its identity and its combine step as C text (its
:class:`~workbench.ops.registry.Combiner`); codegen builds the accumulation loop and
(on the GPU) the block-wide tree from those two. Each also names the magnitude its
float rounding is bounded by (``error_scale``): a float sum's error is at most about
eps * sum|x|, so a sum near zero by cancellation is checked against sum|x|.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from .elementwise import EXP_ROWS, FMAX, LIMITS, WRAP, _int_div
from .registry import (Combiner, Helper, Kind, OpDef, attr_bool, normalize_axes,
                       register)


# float max/min use the C renderer's own declared reductions (wbmax/wbmin): OpenMP's
# built-in max starts lanes at -FLT_MAX rather than -inf and may drop NaNs
OMP_MINMAX = Helper("wbmax/wbmin", r"""/* SIMD reductions with NumPy's max/min semantics (NaN wins, from -inf) */
#pragma omp declare reduction(wbmax : float : omp_out = wb_fmax(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(wbmin : float : omp_out = wb_fmin(omp_out, omp_in)) initializer(omp_priv = INFINITY)
/* the same without the NaN test, for a loop that keeps a NaN flag of its own (render/c.py) */
#pragma omp declare reduction(wbmaxn : float : omp_out = wb_fmax_num(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(wbminn : float : omp_out = wb_fmin_num(omp_out, omp_in)) initializer(omp_priv = INFINITY)
""", cuda="", calls=(FMAX,))

# a CPU row loop's 16 reduction lanes combined in halves (codegen/render/c_lanes.py): with
# AVX-512 as vector halves, else the same tree in scalar C (the same bits: each step
# pairs lane i with lane i + half, as _mm256_add_ps(lo, hi) and its narrower halves do)
LANES = Helper("wb_lanes", r"""/* 16 lanes of a row's reduction combined in halves: lane i with i + 8, then + 4,
   + 2, + 1 (render/c_lanes.py); GCC's omp simd combines its lanes one after another */
#ifdef __AVX512F__
#include <immintrin.h>
#define WB_LANES_TREE(a, op4, op8, opss) do { \
    const __m512 v_ = _mm512_loadu_ps(a); \
    const __m256 h_ = op8(_mm512_castps512_ps256(v_), \
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v_), 1))); \
    const __m128 q_ = op4(_mm256_castps256_ps128(h_), _mm256_extractf128_ps(h_, 1)); \
    const __m128 p_ = op4(q_, _mm_movehl_ps(q_, q_)); \
    return _mm_cvtss_f32(opss(p_, _mm_movehdup_ps(p_))); } while (0)
WB_FN float wb_lanes_sum(const float* a) { WB_LANES_TREE(a, _mm_add_ps, _mm256_add_ps, _mm_add_ss); }
WB_FN float wb_lanes_maxn(const float* a) { WB_LANES_TREE(a, _mm_max_ps, _mm256_max_ps, _mm_max_ss); }
WB_FN float wb_lanes_minn(const float* a) { WB_LANES_TREE(a, _mm_min_ps, _mm256_min_ps, _mm_min_ss); }
WB_FN int wb_lanes_or(const int* a) {
  return _mm512_reduce_or_epi32(_mm512_loadu_si512((const void*)a));
}
#else
#define WB_LANES_TREE(a, f) do { \
    float h_[8], q_[4]; \
    for (int i_ = 0; i_ < 8; ++i_) h_[i_] = f(a[i_], a[i_ + 8]); \
    for (int i_ = 0; i_ < 4; ++i_) q_[i_] = f(h_[i_], h_[i_ + 4]); \
    return f(f(q_[0], q_[2]), f(q_[1], q_[3])); } while (0)
WB_FN float wb_lanes_add_(float x, float y) { return x + y; }
WB_FN float wb_lanes_sum(const float* a) { WB_LANES_TREE(a, wb_lanes_add_); }
WB_FN float wb_lanes_maxn(const float* a) { WB_LANES_TREE(a, wb_fmax_num); }
WB_FN float wb_lanes_minn(const float* a) { WB_LANES_TREE(a, wb_fmin_num); }
WB_FN int wb_lanes_or(const int* a) {
  int x = 0;
  for (int i = 0; i < 16; ++i) x |= a[i];
  return x;
}
#endif
""", cuda="", calls=(FMAX,))

# a CPU row's shifted exp pass with its sum in one call (codegen/render/c_exp_rows.py):
# softmax, logsumexp and an attention's rows take e^(x - max) and sum it
EXP_SHIFT_ROWS = Helper("wb_expf_shift_n", r"""/* y = e^(x - c) over a row of n floats, and the sum of y in 16 lanes combined in
   halves, as a row loop's lanes sum it (render/c_exp_rows.py): one pass where the
   subtraction, e^x and the sum took three over the row; the bits of wb_expf and of the
   lanes' sum. y may be x. */
#ifdef __AVX512F__
WB_FN float wb_expf_shift_n(float* y, const float* x, float c, long long n) {
  const __m512 cv = _mm512_set1_ps(c);
  __m512 s = _mm512_setzero_ps();
  long long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = wb_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), cv));
    _mm512_storeu_ps(y + i, e);
    s = _mm512_add_ps(s, e);
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    const __m512 e = wb_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), cv));
    _mm512_mask_storeu_ps(y + i, m, e);
    s = _mm512_mask_add_ps(s, m, s, e);
  }
  float l[16];
  _mm512_storeu_ps(l, s);
  return wb_lanes_sum(l);
}
#else
WB_FN float wb_expf_shift_n(float* y, const float* x, float c, long long n) {
  float l[16] = {0.0f};
  for (long long i = 0; i < n; ++i) {
    y[i] = wb_expf(x[i] - c);
    l[i % 16] += y[i];
  }
  return wb_lanes_sum(l);
}
#endif
""", cuda="", calls=(EXP_ROWS, LANES))

# (integer sums and products accumulate in 64 bits, wrapping as NumPy's do)
SUM = Combiner("0.0f", "0", "({0} + {1})", "wb_wadd({0}, {1})", simd_op=("+", ""))
MEAN = Combiner("0.0f", "0", "({0} + {1})", "wb_wadd({0}, {1})", finish_mean=True,
                simd_op=("+", ""))
PROD = Combiner("1.0f", "1", "({0} * {1})", "wb_wmul({0}, {1})", simd_op=("*", ""))
MAX = Combiner("(-INFINITY)", "WB_MIN_ITYPE", "wb_fmax({0}, {1})",
               "({0} > {1} ? {0} : {1})", simd_op=("wbmax", "max"))
MIN = Combiner("INFINITY", "WB_MAX_ITYPE", "wb_fmin({0}, {1})",
               "({0} < {1} ? {0} : {1})", simd_op=("wbmin", "min"))


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def reduce_axes(attrs, rank: int) -> tuple[int, ...]:
    """The reduced axes: attr axes (absent or null: every axis), validated."""
    axes = attrs.get("axes")
    return normalize_axes(range(rank) if axes is None else axes, rank)


def _make(name, np_fn, combiner, scale_fn, helpers=(), empty=None):
    # empty: why the op is refused over an empty axis (None: its identity is the answer)
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype.kind == "b":
            raise GraphError(f"{name} is not defined for bool; cast first")
        axes = reduce_axes(attrs, len(x.shape))
        keep = attr_bool(attrs, "keepdims", True)
        out = reduced_shape(x.shape, axes, keep)
        if empty and any(x.shape[a] == 0 for a in axes) and math.prod(out):
            raise GraphError(f"{name} over an empty axis (input {list(x.shape)}, axes "
                             f"{list(axes)}) is undefined: {empty}; drop the reduction or "
                             "reduce a non-empty axis")
        return [(out, x.dtype)]

    def reference(xs, attrs):
        x = xs[0]
        axes = reduce_axes(attrs, x.ndim)
        keep = attr_bool(attrs, "keepdims", True)
        # accumulate half precision in float32, as the kernels do
        acc = x.astype(np.float32) if x.dtype == np.float16 else x
        out = reduced_shape(x.shape, axes, keep)
        if math.prod(out) == 0:      # nothing to compute (NumPy's max would raise)
            return [np.zeros(out, x.dtype)]
        if np_fn is np.mean and x.dtype.kind in "iu":
            return [_int_mean(acc, axes, keep).astype(x.dtype)]
        with np.errstate(all="ignore"):
            r = np_fn(acc, axis=axes, keepdims=keep)
        return [np.asarray(r).astype(x.dtype)]

    def error_scale(magnitudes, attrs):
        absx = magnitudes[0]
        axes = reduce_axes(attrs, absx.ndim)
        keep = attr_bool(attrs, "keepdims", True)
        if math.prod(reduced_shape(absx.shape, axes, keep)) == 0:
            return np.zeros(reduced_shape(absx.shape, axes, keep))
        return scale_fn(absx, axis=axes, keepdims=keep)

    doc = f"{name[7:]} over attr axes (keepdims attr, default true)"
    if empty:
        doc += f"; refused over an empty axis ({empty})"
    return register(OpDef(name, Kind.reduce, (1, 1), infer, reference, None, doc,
                          helpers=tuple(helpers), combiner=combiner, error_scale=error_scale))


def _int_mean(x, axes, keep):
    """An integer mean as the kernels take it: the sum in 64 bits, divided exactly
    (truncated); over an empty axis 0 (NumPy would give NaN, which no integer holds)."""
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    acc = np.int64 if x.dtype.kind == "i" else np.uint64   # unsigned sums stay unsigned
    s = np.sum(x.astype(acc), axis=axes, keepdims=keep)
    if n == 0:
        return np.zeros_like(s)
    return _int_div(s, acc(n))


# error scales (over the inputs' magnitudes, ops.magnitude): a sum or mean of them; the
# largest for max/min; their product for a product (first order: each factor's relative
# error adds up, and the product of the magnitudes bounds every partial product)
_make("reduce_sum", np.sum, SUM, np.sum, (WRAP, LANES, EXP_SHIFT_ROWS))
_make("reduce_mean", np.mean, MEAN, np.mean, (WRAP, LANES))
_make("reduce_prod", np.prod, PROD, np.prod, (WRAP,))
# max and min have no identity (the kernels would give -inf/+inf or the integer limit;
# NumPy raises): refused over an empty axis when the result has elements
_make("reduce_max", np.max, MAX, np.max, (FMAX, LIMITS, OMP_MINMAX, LANES),
      empty="max has no identity")
_make("reduce_min", np.min, MIN, np.max, (FMAX, LIMITS, OMP_MINMAX, LANES),
      empty="min has no identity")
