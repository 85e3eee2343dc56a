"""Elementwise primitives: one scalar expression per op, NumPy broadcasting.

The scalar expression is C99 text over the compute type (float for float32 and
float16, the integer type for integers, int 0/1 for bool). Both renderers print it as
is; where C and CUDA differ (``rsqrtf`` exists only in CUDA) the renderer's prelude
defines the helper. Names starting ``wb_`` are such prelude helpers.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..dtypes import C_INT, DType, c_int_literal
from .registry import Helper, Kind, OpDef, broadcast_shapes, register

# -- prelude helpers the scalar expressions call --------------------------------------
def _limits_text() -> str:
    lines = []
    for dt, ctype in C_INT.items():
        info = np.iinfo(dt.np)
        lo = c_int_literal(info.min, dt) if info.min == 0 else \
            f"({c_int_literal(info.min + 1, dt)} - 1)"   # -2^63 is no literal
        lines.append(f"#define WB_MIN_{dt.value} (({ctype}){lo})")
        lines.append(f"#define WB_MAX_{dt.value} (({ctype}){c_int_literal(info.max, dt)})")
    return "\n" + "\n".join(lines) + "\n"


LIMITS = Helper("WB_MIN/MAX", _limits_text())
FMAX = Helper("wb_fmax", r"""/* NaN-propagating max/min, as NumPy's maximum/minimum (fmaxf would drop the NaN) */
/* (this form, not ((a != a) | (a > b)), which gives the same bits: GCC 12 could not
   if-convert two of those in a row, a ReLU6, and left the loop scalar with a branch per
   element, 40x slower; tests/codegen/test_vectorization.py) */
WB_FN float wb_fmax(float a, float b) { return (a > b || a != a) ? a : b; }
WB_FN float wb_fmin(float a, float b) { return (a < b || a != a) ? a : b; }
/* wb_fmax of two numbers (neither NaN), one instruction (maxps); a max over many taps
   chains these and looks for a NaN once (codegen/lower.py's pooling) */
WB_FN float wb_fmax_num(float a, float b) { return a > b ? a : b; }
WB_FN float wb_fmin_num(float a, float b) { return a < b ? a : b; }
""")
# e^x on the CPU, written out rather than glibc's: its vector expf (libmvec) leaves
# the vector path for a whole vector when one lane's result is outside float's normal
# range, 20-30x slower, and a masked softmax (logits plus -3.4e38) or a SiLU of large
# inputs hits that in nearly every vector; calls to it also keep GCC from vectorizing
# any select around them. This one is arithmetic only (Cody-Waite reduction, Cephes'
# coefficients evaluated by Horner's rule, the scale 2^n as two normal powers of two):
# every input costs the same, within 0.90 ulp of e^x where e^x is a normal float
# (0.893 at worst over every third float in [-110, 110], against float64; the
# Cephes form p r^2 + r + 1 reached 1.010 at -59.92), within one subnormal step below,
# 0, inf and NaN exactly where e^x is (tests/ops/test_exp.py). 0.31 ns an element
# with a sum, one core, GCC 12, AVX-512, where the form before took 0.46 (three range
# selects, rintf and a conversion): softmax's exp pass is most of its time.
# CUDA's expf has no such path.
EXP = Helper("wb_expf", r"""/* e^x, branch-free and vectorizable (see ops/elementwise.py) */
WB_FN float wb_exp_core(float x) {                       /* x in [-104, 104] */
  /* x = n ln2 + r: the sum's rounding rounds x / ln2 to the integer n (1.5 2^23 puts
     the units in the last place), n + 254 in the low bits of t's representation */
  const float t = x * 1.44269504088896341f + (12582912.0f + 254.0f);
  const float n = t - (12582912.0f + 254.0f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;                                      /* e^r */
  /* 2^n = 2^(e1 - 127) 2^(e2 - 127), each normal: e1 + e2 = n + 254, e1 = (n + 254) >> 1
     (n + 254 is in [104, 404] for x in [-104, 104]) */
  union { float f; int32_t i; } u = {t}, s1, s2;
  const int32_t e = u.i - 0x4B400000, e1 = e >> 1;
  s1.i = e1 << 23;
  s2.i = (e - e1) << 23;
  return p * s1.f * s2.f;
}
WB_FN float wb_expf(float x) {
  /* |x| past 104 is taken as +-104, where the core already gives 0 (e^-104 is under
     half the least subnormal) or inf (e^88.73 passes float's largest), so past it
     nothing is left to select: one compare, one blend. NaN fails the compare and
     stays NaN through the arithmetic. */
  const float xc = fabsf(x) > 104.0f ? copysignf(104.0f, x) : x;
  return wb_exp_core(xc);
}
""", cuda="WB_FN float wb_expf(float x) { return expf(x); }\n")
# e^x over an array, for the CPU row kernels' exp passes: GCC vectorizes wb_expf's
# scalar C, but no C spelling of p 2^n reaches AVX-512's vscalefps through its
# vectorizer, so this is written with intrinsics. Its own helper, printed only where a
# kernel calls it: immintrin.h is parsed in every compile that includes it. No CUDA
# kernel calls it.
EXP_ROWS = Helper("wb_expf_n", r"""/* e^x of n floats in place, a CPU row kernel's exp pass (see ops/elementwise.py).
   With AVX-512: wb_expf's own steps as intrinsics, but 2^n taken by vscalefps, which
   rounds p 2^n once as p s1 s2 does (p s1 is exact), so the bits are wb_expf's; 16
   vector instructions a vector where GCC's vectorized wb_expf takes 27 (the two
   scalings' 7, the clamp's 5), and C cannot ask GCC's vectorizer for vscalefps.
   Without AVX-512: wb_expf over the array. */
#ifdef __AVX512F__
#include <immintrin.h>
WB_FN __m512 wb_exp16(__m512 x) {
  /* max/min give their second operand where either is NaN: a NaN passes through */
  x = _mm512_min_ps(_mm512_set1_ps(104.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f),
                                   _mm512_set1_ps(12582912.0f + 254.0f));
  const __m512 n = _mm512_sub_ps(t, _mm512_set1_ps(12582912.0f + 254.0f));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
WB_FN void wb_expf_n(float* x, long long n) {
  long long i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, wb_exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(x + i, m, wb_exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
#else
WB_FN void wb_expf_n(float* x, long long n) {
  #pragma omp simd
  for (long long i = 0; i < n; ++i) x[i] = wb_expf(x[i]);
}
#endif
""", cuda="", calls=(EXP,))
# The logistic function from e^-|x|, which never overflows: 1 / (1 + t) for x >= 0 and
# t / (1 + t) below, so a SiLU (x * sigmoid(x), EfficientNet's activation) needs none
# of e^x's range selects: 19% less time per element than 1 / (1 + e^-x) (0.46 against
# 0.56 ns, one core, AVX-512) and exact below -88.7 too, where e^-x overflows and
# 1 / (1 + e^-x) gives 0 for a subnormal e^x (tests/ops/test_exp.py). The GPU keeps
# that form: CUDA's expf has no range branches to save.
SIGMOID = Helper("wb_sigmoidf", r"""/* 1 / (1 + e^-x), through e^-|x| (see ops/elementwise.py) */
WB_FN float wb_sigmoidf(float x) {
  const float a = x < 0.0f ? x : -x;                     /* -|x| */
  const float t = wb_exp_core(a > -104.0f ? a : -104.0f); /* e^-|x| */
  const float q = (x < 0.0f ? t : 1.0f) / (1.0f + t);
  return x != x ? x : q;
}
""", cuda="WB_FN float wb_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n",
   calls=(EXP,))                                          # (wb_exp_core, in C)
# Integer arithmetic is total, as NumPy's is: it wraps around (two's complement) where C
# would have undefined overflow -- computed in unsigned, where overflow is defined.
WRAP = Helper("wb_wrap", r"""/* integer arithmetic wraps around (two's complement), as NumPy's does */
WB_FN long long wb_wadd(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
WB_FN long long wb_wsub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
WB_FN long long wb_wmul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
""")
IDIV = Helper("wb_idiv", r"""/* integer division truncates toward zero; x / 0 gives 0 and MIN / -1 wraps to MIN
   instead of trapping */
WB_FN long long wb_idiv(long long a, long long b) { return b == 0 ? 0 : (b == -1 ? wb_wsub(0, a) : a / b); }
""", calls=(WRAP,))
IPOW = Helper("wb_ipow", r"""WB_FN unsigned long long wb_upow(unsigned long long x, unsigned long long b) {
  unsigned long long r = 1;
  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }
  return r;
}
WB_FN long long wb_ipow(long long a, long long b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  return (long long)wb_upow((unsigned long long)a, (unsigned long long)b);
}
""")
# unsigned values may not fit a long long (uint64): divided and raised unsigned, where
# nothing overflows but x / 0 (0, as for signed integers)
UDIV = Helper("wb_udiv", "WB_FN unsigned long long wb_udiv(unsigned long long a, "
              "unsigned long long b) { return b == 0 ? 0 : a / b; }\n")
def _f2i_text() -> str:
    """float -> int saturates and maps NaN to 0, as NumPy does on x86 (C leaves an
    out-of-range conversion undefined): one function per integer type. The bounds are
    float constants; where the type's limit is no float (2^31 - 1) the comparison is
    with the next float up, which only the limit itself reaches."""
    out = ["/* float -> int saturates and maps NaN to 0, as NumPy does on x86 */"]
    for dt, ctype in C_INT.items():
        info = np.iinfo(dt.np)
        hi, lo = float(np.float32(info.max)), float(np.float32(info.min))
        out.append(f"WB_FN {ctype} wb_f2i_{dt.value}(float x) {{\n"
                   f"  return x != x ? 0 : (x >= {hi!r}f ? WB_MAX_{dt.value} :\n"
                   f"         (x <= {lo!r}f ? WB_MIN_{dt.value} : ({ctype})x));\n}}")
    return "\n".join(out) + "\n"


F2I = Helper("wb_f2i", _f2i_text(), calls=(LIMITS,))
# A cast to float16 inside a kernel rounds there, as it would between kernels (the value
# is then kept in float like every half value, but it is a half value)
ROUND_F16 = Helper("wb_round_f16",
                   "WB_FN float wb_round_f16(float x) { return (float)(_Float16)x; }\n",
                   cuda="WB_FN float wb_round_f16(float x) "
                        "{ return __half2float(__float2half(x)); }\n")
# bfloat16 storage: its 16 bits are the top half of a float32's. A store rounds to
# nearest even; a NaN keeps its sign and top payload bits and is made quiet, since
# adding the rounding bias could carry its payload into the exponent (an inf). A union
# reads the float's bits in C and CUDA alike; compilers fold it into a register move
# (GCC vectorizes loops over it).
BF16 = Helper("wb_bf16", r"""/* bfloat16 storage: the top 16 bits of a float32 */
WB_FN float wb_bf16_load(unsigned short h) {
  union { unsigned int u; float f; } v; v.u = (unsigned int)h << 16;
  return v.f;
}
WB_FN unsigned short wb_bf16_store(float x) {
  union { float f; unsigned int u; } v; v.f = x;
  if (x != x) return (unsigned short)((v.u >> 16) | 0x40u);
  return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
/* float32 -> bfloat16 precision, still float32 (a cast to bfloat16 inside a kernel) */
WB_FN float wb_round_bf16(float x) { return wb_bf16_load(wb_bf16_store(x)); }
""")
# CUDA has rsqrtf; C does not
RSQRT = Helper("rsqrtf", "/* CUDA has rsqrtf; C does not */\n"
                "WB_FN float rsqrtf(float x) { return 1.0f / sqrtf(x); }\n", cuda="")


def _same_dtype(op: str, values) -> DType:
    dts = {v.dtype for v in values}
    if len(dts) != 1:
        raise GraphError(f"{op} needs inputs of one dtype, got "
                         f"{', '.join(sorted(d.value for d in dts))}; insert a cast")
    return dts.pop()


def _unary(name, scalar_f, ref, scalar_i=None, kinds="f", flops=1, doc="", helpers=(),
           slope=lambda x, y: 1.0):
    """slope(x, y): |dy/dx| in float64, how an error in x carries into y."""
    def infer(ins, attrs):
        dt = ins[0].dtype
        if dt.kind not in kinds:
            raise GraphError(f"{name} is not defined for {dt.value}")
        return [(ins[0].shape, dt)]

    def scalar(args, in_dt, out_dt, attrs):
        if in_dt[0].kind == "f":
            return scalar_f.format(*args)
        # ({t}: the result's C type, for the wrapping helpers' casts back)
        return (scalar_i or scalar_f).format(*args, t=out_dt.c_compute)

    def reference(xs, attrs):
        with np.errstate(all="ignore"):
            return [np.asarray(ref(xs[0])).astype(xs[0].dtype, copy=False)]

    return register(OpDef(name, Kind.elementwise, (1, 1), infer, reference, scalar, doc,
                          flops, tuple(helpers), slopes=lambda xs, y: (slope(xs[0], y),)))


def _int_div(a, b):
    """The kernels' integer division, exactly: truncated toward zero, x / 0 = 0, and
    MIN / -1 wraps to MIN (in integers: a float quotient is inexact past 2^53)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        safe = np.where((b == 0) | (b == -1), 1, b)
        q = np.floor_divide(a, safe)
        q = q + ((a - q * safe != 0) & ((a < 0) != (safe < 0)))   # floor -> trunc
        return np.where(b == 0, 0, np.where(b == -1, np.negative(a), q)).astype(a.dtype)


_unary("neg", "(-{0})", np.negative, scalar_i="(({t})wb_wsub(0, {0}))", kinds="fi",
       doc="-x", helpers=(WRAP,))
_unary("abs", "fabsf({0})", np.abs, scalar_i="({0} < 0 ? ({t})wb_wsub(0, {0}) : {0})",
       kinds="fi", helpers=(WRAP,),
       doc="absolute value |x|")
_unary("exp", "wb_expf({0})", np.exp, flops=4, helpers=(EXP, EXP_ROWS), slope=lambda x, y: np.abs(y),
       doc="e ** x")
_unary("log", "logf({0})", np.log, flops=4, slope=lambda x, y: 1 / np.abs(x),
       doc="natural logarithm ln x (NaN below 0, -inf at 0)")
_unary("sqrt", "sqrtf({0})", np.sqrt, flops=4, slope=lambda x, y: 0.5 / np.abs(y),
       doc="square root")
_unary("rsqrt", "rsqrtf({0})", lambda x: 1 / np.sqrt(x), flops=4, helpers=(RSQRT,),
       slope=lambda x, y: 0.5 * np.abs(y / x),
       doc="reciprocal square root 1 / sqrt(x)")
_unary("reciprocal", "(1.0f / {0})", np.reciprocal, flops=2, slope=lambda x, y: y * y,
       doc="1 / x")
_unary("tanh", "tanhf({0})", np.tanh, flops=8, slope=lambda x, y: 1 - y * y,
       doc="hyperbolic tangent")
_unary("erf", "erff({0})", lambda x: _erf(x), flops=8,
       slope=lambda x, y: 1.1283791670955126 * np.exp(-x * x),
       doc="Gauss error function (exact GELU is x/2 (1 + erf(x / sqrt 2)))")
_unary("sigmoid", "wb_sigmoidf({0})", lambda x: 1 / (1 + np.exp(-x)), flops=6,
       helpers=(EXP, SIGMOID),
       slope=lambda x, y: np.abs(y * (1 - y)),
       doc="logistic 1 / (1 + e ** -x)")
# NumPy's maximum(x, 0): NaN stays NaN (as torch's relu), and -0 becomes +0
_unary("relu", "wb_fmax({0}, 0.0f)", lambda x: np.maximum(x, 0),
       scalar_i="({0} > 0 ? {0} : 0)", kinds="fi", helpers=(FMAX,),
       doc="max(x, 0); NaN stays NaN")
_unary("sin", "sinf({0})", np.sin, flops=8,
       doc="sine (radians)")
_unary("cos", "cosf({0})", np.cos, flops=8,
       doc="cosine (radians)")
_unary("floor", "floorf({0})", np.floor,
       doc="round toward -inf")
_unary("ceil", "ceilf({0})", np.ceil,
       doc="round toward +inf")
_unary("not", "(!{0})", np.logical_not, kinds="b", slope=lambda x, y: 0.0,
       doc="logical not of a bool")


def _int_pow(a, b):
    """The kernels' integer power: wraps around like NumPy's; a negative exponent gives
    1 for base 1, +-1 for base -1 and 0 otherwise (NumPy raises instead)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    with np.errstate(all="ignore"):
        if a.dtype.kind == "u":
            # no negative exponents; the -1 below would promote uint64 to float64 and
            # round every power past 2^53
            return np.power(a, b)
        pos = np.power(a, np.where(b < 0, 0, b))
        neg = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 1, -1, 1), 0))
        return np.where(b < 0, neg, pos).astype(a.dtype)


def _erf(x):
    # NumPy has no erf; SciPy's is exact to double precision
    from scipy.special import erf
    return erf(x.astype(np.float64))


def _binary(name, scalar_f, ref, scalar_i=None, kinds="fi", out=None, flops=1, doc="",
            helpers=(), slopes=lambda a, b, y: (1.0, 1.0), scalar_u=None):
    """slopes(a, b, y): (|dy/da|, |dy/db|) in float64; scalar_u: the unsigned integers'
    expression where it is not scalar_i's."""
    def infer(ins, attrs):
        dt = _same_dtype(name, ins)
        if dt.kind not in kinds:
            raise GraphError(f"{name} is not defined for {dt.value}")
        return [(broadcast_shapes(ins[0].shape, ins[1].shape), out or dt)]

    def scalar(args, in_dt, out_dt, attrs):
        if in_dt[0].kind == "f":
            expr = scalar_f(*args) if callable(scalar_f) else scalar_f
        elif scalar_u and not in_dt[0].signed:
            expr = scalar_u
        else:
            expr = scalar_i or scalar_f
        return expr.format(*args, t=out_dt.c_compute)

    def reference(xs, attrs):
        a, b = xs
        with np.errstate(all="ignore"):
            r = ref(a, b)
        return [np.asarray(r).astype((out or DType.of(a.dtype)).np, copy=False)]

    return register(OpDef(name, Kind.elementwise, (2, 2), infer, reference, scalar, doc,
                          flops, tuple(helpers), slopes=lambda xs, y: slopes(*xs, y)))


_binary("add", "({0} + {1})", np.add, scalar_i="(({t})wb_wadd({0}, {1}))", helpers=(WRAP,),
       doc="a + b (broadcasting; integers wrap around)")
_binary("sub", "({0} - {1})", np.subtract, scalar_i="(({t})wb_wsub({0}, {1}))",
        helpers=(WRAP,),
       doc="a - b (broadcasting; integers wrap around)")
_binary("mul", "({0} * {1})", np.multiply, scalar_i="(({t})wb_wmul({0}, {1}))",
        helpers=(WRAP,), slopes=lambda a, b, y: (np.abs(b), np.abs(a)),
       doc="a * b (broadcasting; integers wrap around)")
_binary("div", "({0} / {1})",
        lambda a, b: np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b),
        scalar_i="(({t})wb_idiv({0}, {1}))", scalar_u="(({t})wb_udiv({0}, {1}))",
        helpers=(WRAP, IDIV, UDIV), slopes=lambda a, b, y: (1 / np.abs(b), np.abs(y / b)),
       doc="a / b; integers truncate toward zero and x / 0 gives 0")
# x ** 2, x ** 3, x ** 4 with the exponent a literal of the kernel (GELU's tanh form
# cubes): products, a few times faster than powf and vectorized everywhere, within
# float32's bound of it (at most two roundings more); inf, NaN and -0 as powf gives them
_SMALL_POWERS = {"2.0f": "({0} * {0})", "3.0f": "({0} * {0} * {0})",
                 "4.0f": "(({0} * {0}) * ({0} * {0}))"}


def _pow_f(a: str, b: str) -> str:
    return _SMALL_POWERS.get(b, "powf({0}, {1})").format(a, b)


_binary("pow", _pow_f, lambda a, b: _int_pow(a, b) if a.dtype.kind in "iu"
        else np.power(a, b), scalar_i="(({t})wb_ipow({0}, {1}))",
        scalar_u="(({t})wb_upow({0}, {1}))", flops=8, helpers=(IPOW,),
        slopes=lambda a, b, y: (np.abs(b * y / a), np.abs(y * np.log(np.abs(a)))),
        doc="a ** b; for integers it wraps around, and a negative exponent gives 1 for "
            "base 1, +-1 for base -1 (by the exponent's parity) and 0 otherwise (base 0 "
            "too), as the kernels' wb_ipow does -- NumPy would raise")
# NaN-propagating like NumPy (fmaxf would drop the NaN)
_binary("max", "wb_fmax({0}, {1})", np.maximum, scalar_i="({0} > {1} ? {0} : {1})",
        helpers=(FMAX,),
       doc="elementwise maximum; NaN propagates")
_binary("min", "wb_fmin({0}, {1})", np.minimum, scalar_i="({0} < {1} ? {0} : {1})",
        helpers=(FMAX,),
       doc="elementwise minimum; NaN propagates")
for _n, _c, _f in [("eq", "==", np.equal), ("ne", "!=", np.not_equal), ("lt", "<", np.less),
                   ("le", "<=", np.less_equal), ("gt", ">", np.greater),
                   ("ge", ">=", np.greater_equal)]:
    _binary(_n, "({0} %s {1})" % _c, _f, kinds="fib", out=DType.bool,
            slopes=lambda a, b, y: (0.0, 0.0), doc=f"a {_c} b as a bool (broadcasting)")
_binary("and", "({0} && {1})", np.logical_and, kinds="b", slopes=lambda a, b, y: (0.0, 0.0),
       doc="logical and of two bools")
_binary("or", "({0} || {1})", np.logical_or, kinds="b", slopes=lambda a, b, y: (0.0, 0.0),
       doc="logical or of two bools")


def _where_infer(ins, attrs):
    c, a, b = ins
    if c.dtype is not DType.bool:
        raise GraphError(f"where needs a bool condition, got {c.dtype.value}")
    dt = _same_dtype("where", (a, b))
    return [(broadcast_shapes(c.shape, a.shape, b.shape), dt)]


register(OpDef("where", Kind.elementwise, (3, 3), _where_infer,
               lambda xs, at: [np.where(xs[0], xs[1], xs[2])],
               lambda a, i, o, at: "({0} ? {1} : {2})".format(*a), "cond ? a : b",
               slopes=lambda xs, y: (0.0, xs[0] != 0, xs[0] == 0)))


def cast_target(attrs) -> DType:
    """attr to: a dtype name (float32, float16, bfloat16, int8 ... uint64, bool) or a
    DType."""
    if "to" not in attrs:
        raise GraphError("attr to is required: the dtype to convert to ("
                         f"{', '.join(d.value for d in DType)})")
    to = attrs["to"]
    if isinstance(to, (bool, np.bool_)) or not isinstance(to, (str, DType, type, np.dtype)):
        raise GraphError(f"unsupported dtype {to!r:.40} in attr to; supported: "
                         f"{', '.join(d.value for d in DType)}")
    return DType.of(to)


def _cast_infer(ins, attrs):
    return [(ins[0].shape, cast_target(attrs))]


def _cast_scalar(args, in_dt, out_dt, attrs):
    src, dst = in_dt[0].kind, out_dt.kind
    if dst == "b":
        return f"({args[0]} != 0)"
    if src == "f" and dst == "i":
        # out-of-range float->int is undefined in C; NumPy saturates on x86, so clamp
        return f"wb_f2i_{out_dt.value}({args[0]})"
    if out_dt is DType.float16:
        return f"wb_round_f16((float){args[0]})"
    if out_dt is DType.bfloat16:
        return f"wb_round_bf16((float){args[0]})"
    return f"(({out_dt.c_compute}){args[0]})"


def _cast_ref(xs, attrs):
    to = DType.of(attrs["to"])
    x = xs[0]
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f" and to.kind == "i":
            # saturate like the kernels' wb_f2i_*: NaN -> 0, out of range -> min/max
            info = np.iinfo(to.np)
            x64 = x.astype(np.float64)
            hi, lo, nan = x64 >= float(info.max), x64 <= float(info.min), np.isnan(x64)
            r = np.where(hi | lo | nan, 0, x64).astype(to.np)
            r[hi], r[lo] = info.max, info.min
            return [r]
        return [x.astype(to.np)]


register(OpDef("cast", Kind.elementwise, (1, 1), _cast_infer, _cast_ref, _cast_scalar,
               "convert element type (attr to)", helpers=(LIMITS, F2I, ROUND_F16, BF16),
               slopes=lambda xs, y: (1.0,)))
