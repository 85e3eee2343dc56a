"""Elementwise primitives: one scalar expression per op, NumPy broadcasting.

The scalar expression is C99 text over the compute type (float for float32 and
float16, the integer type for integers, int 0/1 for bool). Both renderers print it as
is; where C and CUDA differ (``rsqrtf`` exists only in CUDA) the renderer's prelude
defines the helper. Names starting ``wb_`` are such prelude helpers.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..ir.dtypes import DType
from .registry import Helper, Kind, OpDef, broadcast_shapes, register

# -- prelude helpers the scalar expressions call --------------------------------------
LIMITS = Helper("WB_MIN/MAX", r"""
#define WB_MIN_int32 (-2147483647 - 1)
#define WB_MAX_int32 2147483647
#define WB_MIN_int64 (-9223372036854775807LL - 1)
#define WB_MAX_int64 9223372036854775807LL
""")
FMAX = Helper("wb_fmax", r"""/* NaN-propagating max/min, as NumPy's maximum/minimum (fmaxf would drop the NaN) */
/* (| not ||: no short circuit, so loops over them still vectorize) */
WB_FN float wb_fmax(float a, float b) { return ((a != a) | (a > b)) ? a : b; }
WB_FN float wb_fmin(float a, float b) { return ((a != a) | (a < b)) ? a : b; }
""")
IDIV = Helper("wb_idiv", r"""/* integer division truncates toward zero; x / 0 gives 0 instead of trapping */
WB_FN long long wb_idiv(long long a, long long b) { return b == 0 ? 0 : a / b; }
""")
IPOW = Helper("wb_ipow", r"""WB_FN long long wb_ipow(long long a, long long b) {
  long long r = 1;
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
  return r;
}
""")
F2I = Helper("wb_f2i", r"""/* float -> int saturates and maps NaN to 0, as NumPy does on x86 */
WB_FN int wb_f2i_int32(float x) {
  return x != x ? 0 : (x >= 2147483647.0f ? WB_MAX_int32 :
         (x <= -2147483648.0f ? WB_MIN_int32 : (int)x));
}
WB_FN long long wb_f2i_int64(float x) {
  return x != x ? 0 : (x >= 9.2233720e18f ? WB_MAX_int64 :
         (x <= -9.2233720e18f ? WB_MIN_int64 : (long long)x));
}
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


def _unary(name, scalar_f, ref, scalar_i=None, kinds="f", flops=1, doc="", helpers=()):
    def infer(ins, attrs):
        dt = ins[0].dtype
        if dt.kind not in kinds:
            raise GraphError(f"{name} is not defined for {dt.value}")
        return [(ins[0].shape, dt)]

    def scalar(args, in_dt, out_dt, attrs):
        if in_dt[0].kind == "f":
            return scalar_f.format(*args)
        return (scalar_i or scalar_f).format(*args)

    def reference(xs, attrs):
        with np.errstate(all="ignore"):
            return [np.asarray(ref(xs[0])).astype(xs[0].dtype, copy=False)]

    return register(OpDef(name, Kind.elementwise, (1, 1), infer, reference, scalar, doc,
                          flops, tuple(helpers)))


def _int_div(a, b):
    # C semantics: truncate toward zero; division by zero gives 0 here rather than trap
    with np.errstate(all="ignore"):
        q = np.where(b == 0, 0, np.trunc(np.true_divide(a, np.where(b == 0, 1, b))))
    return q.astype(a.dtype)


_unary("neg", "(-{0})", np.negative, kinds="fi", doc="-x")
_unary("abs", "fabsf({0})", np.abs, scalar_i="({0} < 0 ? -{0} : {0})", kinds="fi")
_unary("exp", "expf({0})", np.exp, flops=4)
_unary("log", "logf({0})", np.log, flops=4)
_unary("sqrt", "sqrtf({0})", np.sqrt, flops=4)
_unary("rsqrt", "rsqrtf({0})", lambda x: 1 / np.sqrt(x), flops=4, helpers=(RSQRT,))
_unary("reciprocal", "(1.0f / {0})", np.reciprocal, flops=2)
_unary("tanh", "tanhf({0})", np.tanh, flops=8)
_unary("erf", "erff({0})", lambda x: _erf(x), flops=8)
_unary("sigmoid", "(1.0f / (1.0f + expf(-{0})))", lambda x: 1 / (1 + np.exp(-x)), flops=6)
_unary("relu", "({0} > 0.0f ? {0} : 0.0f)", lambda x: np.maximum(x, 0),
       scalar_i="({0} > 0 ? {0} : 0)", kinds="fi")
_unary("sin", "sinf({0})", np.sin, flops=8)
_unary("cos", "cosf({0})", np.cos, flops=8)
_unary("floor", "floorf({0})", np.floor)
_unary("ceil", "ceilf({0})", np.ceil)
_unary("not", "(!{0})", np.logical_not, kinds="b")


def _erf(x):
    # NumPy has no erf; SciPy's is exact to double precision
    from scipy.special import erf
    return erf(x.astype(np.float64))


def _binary(name, scalar_f, ref, scalar_i=None, kinds="fi", out=None, flops=1, doc="",
            helpers=()):
    def infer(ins, attrs):
        dt = _same_dtype(name, ins)
        if dt.kind not in kinds:
            raise GraphError(f"{name} is not defined for {dt.value}")
        return [(broadcast_shapes(ins[0].shape, ins[1].shape), out or dt)]

    def scalar(args, in_dt, out_dt, attrs):
        return (scalar_f if in_dt[0].kind == "f" else (scalar_i or scalar_f)).format(*args)

    def reference(xs, attrs):
        a, b = xs
        with np.errstate(all="ignore"):
            r = ref(a, b)
        return [np.asarray(r).astype((out or DType.of(a.dtype)).np, copy=False)]

    return register(OpDef(name, Kind.elementwise, (2, 2), infer, reference, scalar, doc,
                          flops, tuple(helpers)))


_binary("add", "({0} + {1})", np.add)
_binary("sub", "({0} - {1})", np.subtract)
_binary("mul", "({0} * {1})", np.multiply)
_binary("div", "({0} / {1})",
        lambda a, b: np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b),
        scalar_i="wb_idiv({0}, {1})", helpers=(IDIV,))
_binary("pow", "powf({0}, {1})", np.power,
        scalar_i="wb_ipow({0}, {1})", flops=8, helpers=(IPOW,))
# NaN-propagating like NumPy (fmaxf would drop the NaN)
_binary("max", "wb_fmax({0}, {1})", np.maximum, scalar_i="({0} > {1} ? {0} : {1})",
        helpers=(FMAX,))
_binary("min", "wb_fmin({0}, {1})", np.minimum, scalar_i="({0} < {1} ? {0} : {1})",
        helpers=(FMAX,))
for _n, _c, _f in [("eq", "==", np.equal), ("ne", "!=", np.not_equal), ("lt", "<", np.less),
                   ("le", "<=", np.less_equal), ("gt", ">", np.greater),
                   ("ge", ">=", np.greater_equal)]:
    _binary(_n, "({0} %s {1})" % _c, _f, kinds="fib", out=DType.bool)
_binary("and", "({0} && {1})", np.logical_and, kinds="b")
_binary("or", "({0} || {1})", np.logical_or, kinds="b")


def _where_infer(ins, attrs):
    c, a, b = ins
    if c.dtype is not DType.bool:
        raise GraphError(f"where needs a bool condition, got {c.dtype.value}")
    dt = _same_dtype("where", (a, b))
    return [(broadcast_shapes(c.shape, a.shape, b.shape), dt)]


register(OpDef("where", Kind.elementwise, (3, 3), _where_infer,
               lambda xs, at: [np.where(xs[0], xs[1], xs[2])],
               lambda a, i, o, at: "({0} ? {1} : {2})".format(*a), "cond ? a : b"))


def _cast_infer(ins, attrs):
    return [(ins[0].shape, DType.of(attrs["to"]))]


def _cast_scalar(args, in_dt, out_dt, attrs):
    src, dst = in_dt[0].kind, out_dt.kind
    if dst == "b":
        return f"({args[0]} != 0)"
    if src == "f" and dst == "i":
        # out-of-range float->int is undefined in C; NumPy saturates on x86, so clamp
        return f"wb_f2i_{out_dt.value}({args[0]})"
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
               "convert element type (attr to)", helpers=(LIMITS, F2I)))
