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
from .registry import Kind, Mapping_, OpDef, broadcast_shapes, register


def _same_dtype(op: str, values) -> DType:
    dts = {v.dtype for v in values}
    if len(dts) != 1:
        raise GraphError(f"{op} needs inputs of one dtype, got "
                         f"{', '.join(sorted(d.value for d in dts))}; insert a cast")
    return dts.pop()


def _unary(name, scalar_f, ref, scalar_i=None, kinds="f", mapping=Mapping_.one_to_one,
           flops=1, doc=""):
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

    return register(OpDef(name, Kind.elementwise, mapping, (1, 1), infer, reference,
                          scalar, doc, flops))


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
_unary("rsqrt", "rsqrtf({0})", lambda x: 1 / np.sqrt(x), flops=4)
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


def _binary(name, scalar_f, ref, scalar_i=None, kinds="fi", out=None, flops=1, doc=""):
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

    return register(OpDef(name, Kind.elementwise, Mapping_.one_to_one, (2, 2), infer,
                          reference, scalar, doc, flops))


_binary("add", "({0} + {1})", np.add)
_binary("sub", "({0} - {1})", np.subtract)
_binary("mul", "({0} * {1})", np.multiply)
_binary("div", "({0} / {1})",
        lambda a, b: np.true_divide(a, b) if a.dtype.kind == "f" else _int_div(a, b),
        scalar_i="wb_idiv({0}, {1})")
_binary("pow", "powf({0}, {1})", np.power,
        scalar_i="wb_ipow({0}, {1})", flops=8)
# NaN-propagating like NumPy (fmaxf would drop the NaN)
_binary("max", "wb_fmax({0}, {1})", np.maximum, scalar_i="({0} > {1} ? {0} : {1})")
_binary("min", "wb_fmin({0}, {1})", np.minimum, scalar_i="({0} < {1} ? {0} : {1})")
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


register(OpDef("where", Kind.elementwise, Mapping_.one_to_one, (3, 3), _where_infer,
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
    return f"(({_CTYPE[out_dt.compute]}){args[0]})"


_CTYPE = {DType.float32: "float", DType.int32: "int", DType.int64: "long long",
          DType.bool: "int"}


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


register(OpDef("cast", Kind.elementwise, Mapping_.one_to_one, (1, 1), _cast_infer,
               _cast_ref, _cast_scalar, "convert element type (attr to)"))
