"""ONNX handlers of the elementwise ops: arithmetic and comparisons, unary math, Pow,
the variadic Max/Min/Sum/Mean, Where, Cast and CastLike (to the float and integer
formats the workbench holds in wider types too), Identity and inference Dropout, and
the activations (HardSigmoid ... Mish, PRelu, Clip, Gelu, Swish), which decompose
through :mod:`workbench.ir.composites`.

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

import numpy as np

from ...ir import composites
from ...dtypes import DType
from .common import HELD_FLOATS, HELD_INTS, _Ctx, _dtype_of_elem, _handles, _Unsupported

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "eq",
           "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
           "And": "and", "Or": "or", "Xor": "ne"}
_UNARY = {"Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu", "Sin": "sin",
          "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Neg": "neg", "Not": "not"}


@_handles(*_BINARY)
def _binary(c: _Ctx):
    return [c.b.op(_BINARY[c.node.op_type], c.x(0), c.x(1))]


@_handles(*_UNARY)
def _unary(c: _Ctx):
    return [c.b.op(_UNARY[c.node.op_type], c.x(0))]


@_handles("Pow")
def _pow(c: _Ctx):
    # ONNX lets the exponent have its own type; the result has the base's type
    base, e = c.x(0), c.x(1)
    if e.dtype is base.dtype:
        return [c.b.pow(base, e)]
    if base.dtype.is_float:
        return [c.b.pow(base, c.b.cast(e, to=base.dtype))]
    if e.dtype.is_float:
        fb = c.b.cast(base, to=e.dtype)
        return [c.b.cast(c.b.pow(fb, e), to=base.dtype)]
    return [c.b.pow(base, c.b.cast(e, to=base.dtype))]


@_handles("Max", "Min", "Sum", "Mean")
def _variadic(c: _Ctx):
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[c.node.op_type]
    xs = c.xs()
    acc = xs[0]
    for t in xs[1:]:
        acc = c.b.op(op, acc, t)
    if c.node.op_type == "Mean" and len(xs) > 1:
        acc = c.b.div(acc, c.scalar(len(xs), acc))
    return [acc]


@_handles("Where")
def _where(c: _Ctx):
    return [c.b.where(c.x(0), c.x(1), c.x(2))]


@_handles("Cast", "CastLike")
def _cast(c: _Ctx):
    x = c.x(0)
    if c.node.op_type == "Cast":
        elem = c.attr("to")
        to = _dtype_of_elem(elem, f"Cast {c.display!r} target type")
    else:
        elem = c.scope.elem_type(c.node.input[1])
        to = c.scope.dtype(c.node.input[1])
    if elem in HELD_INTS:
        return [_wrapped(c, x, *HELD_INTS[elem], to)]
    y = x if to is x.dtype else c.b.cast(x, to=to)
    if elem in HELD_FLOATS:
        y = _rounded(c, y, HELD_FLOATS[elem])
    return [y]


def _rounded(c: _Ctx, y, fmt: str):
    """float32 y rounded to a float format the workbench holds in float32: FP8, FP4 or
    E8M0 (attr saturate, default 1; E8M0's round_mode)."""
    attrs = {"format": fmt, "saturate": bool(c.attr("saturate", 1))}
    if fmt == "float8e8m0":
        attrs["round_mode"] = c.attr("round_mode", "up")
    return c.b.op("round_float", y, **attrs)


def _wrapped(c: _Ctx, x, bits: int, signed: bool, holder: DType):
    """x as a 2- or 4-bit integer held in ``holder`` (int8/uint8): through int64 (so a
    float is truncated and saturated first, as the workbench casts floats to
    integers), then wrapped to ``bits`` bits, as ml_dtypes' casts wrap."""
    w = x if x.dtype is DType.int64 else c.b.cast(x, to=DType.int64)
    span, half = 1 << bits, 1 << (bits - 1)
    if signed:     # ((w + half) mod span) - half: two's complement in `bits` bits
        w = c.b.sub(c.b.op("mod", c.b.add(w, c.scalar(half, w)), c.scalar(span, w)),
                    c.scalar(half, w))
    else:
        w = c.b.op("mod", w, c.scalar(span, w))
    return c.b.cast(w, to=holder)


@_handles("Identity")
def _identity(c: _Ctx):
    return [c.x(0)]


@_handles("Dropout")
def _dropout(c: _Ctx):
    # inference: identity; with training_mode true it is random and not supported
    if c.has(2) and bool(c.const(2, "training_mode").reshape(-1)[0]):
        raise _Unsupported("training_mode=1 (random dropout)")
    x = c.x(0)
    return [x, np.ones(x.shape, dtype=bool)]


_ACTIVATIONS: dict[str, tuple[str, dict[str, float]]] = {
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": ("hard_swish", {}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "Elu": ("elu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625,
                      "gamma": 1.05070102214813232421875}),
    "Celu": ("celu", {"alpha": 1.0}),
    "Softplus": ("softplus", {}),
    "Softsign": ("softsign", {}),
    "Mish": ("mish", {}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Sign": ("sign", {}),
}


@_handles(*_ACTIVATIONS)
def _activation(c: _Ctx):
    fn, defaults = _ACTIVATIONS[c.node.op_type]
    kw = {k: float(c.attr(k, v)) for k, v in defaults.items()}
    return [getattr(composites, fn)(c.b, c.x(0), source=c.display, **kw)]


@_handles("PRelu")
def _prelu(c: _Ctx):
    return [composites.prelu(c.b, c.x(0), c.x(1), source=c.display)]


@_handles("Clip")
def _clip(c: _Ctx):
    return [composites.clip(c.b, c.x(0), c.opt(1), c.opt(2), source=c.display)]


@_handles("Gelu")
def _gelu(c: _Ctx):
    return [composites.gelu(c.b, c.x(0), approximate=c.attr("approximate", "none"),
                            source=c.display)]


@_handles("Swish")
def _swish(c: _Ctx):
    x = c.x(0)
    alpha = float(c.attr("alpha", 1.0))
    return [x * c.b.sigmoid(x * alpha if alpha != 1.0 else x)]


@_handles("IsNaN")
def _isnan(c: _Ctx):
    x = c.x(0)
    return [c.b.ne(x, x)]


@_handles("Tan")
def _tan(c: _Ctx):
    x = c.x(0)
    return [c.b.sin(x) / c.b.cos(x)]
