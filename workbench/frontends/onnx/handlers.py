"""The ONNX op handlers: one function per ONNX op type (or family of op types), each
turning a node (seen through a :class:`_Ctx`) into workbench primitives or composites,
and returning one result per ONNX output (a Tensor, a NumPy constant, or None).

Importing this module registers every handler with :func:`_handles`.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ...ir import Tensor, composites
from ...dtypes import DType
from .common import (HELD_FLOATS, HELD_INTS, _Ctx, _dtype_of_elem, _handles, _Unsupported,
                     to_array)

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "eq",
           "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge",
           "And": "and", "Or": "or", "Xor": "ne"}
_UNARY = {"Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu", "Sin": "sin",
          "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Neg": "neg", "Not": "not"}


def _malformed(c: _Ctx, why: str) -> GraphError:
    """The model's own fault (not the importer's): one line naming the node."""
    return GraphError(f"{c.node.op_type} {c.display!r}: {why} -- the model is malformed; "
                      "fix it or re-export it")


def _axis(c: _Ctx, a, rank: int, what: str = "axis", upto: int = 0) -> int:
    """An ONNX axis in [-rank, rank + upto) as an index (upto=1: Flatten's axis may be
    rank itself)."""
    a = int(a)
    if not -rank <= a < rank + upto:
        raise _malformed(c, f"{what} {a} is out of range for rank {rank}")
    return a + rank if a < 0 else a


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


# -- composites -----------------------------------------------------------------------

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


@_handles("Softmax", "LogSoftmax")
def _softmax(c: _Ctx):
    fn = composites.softmax if c.node.op_type == "Softmax" else composites.log_softmax
    return [fn(c.b, c.x(0), axis=int(c.attr("axis", -1)), source=c.display)]


@_handles("Gelu")
def _gelu(c: _Ctx):
    return [composites.gelu(c.b, c.x(0), approximate=c.attr("approximate", "none"),
                            source=c.display)]


@_handles("LayerNormalization")
def _layer_norm(c: _Ctx):
    x, scale, bias = c.x(0), c.x(1), c.opt(2)
    axis, eps = int(c.attr("axis", -1)), float(c.attr("epsilon", 1e-5))
    stash = int(c.attr("stash_type", 1))
    if stash != 1:
        raise _Unsupported(f"stash_type={stash} (only 1, float32, is supported)")
    b = c.b
    if not x.dtype.is_half:
        y, mean, inv = composites.layer_norm(b, x, scale, bias, axis, eps, c.display,
                                             return_stats=True)
        return [y, mean, inv]
    # stash_type=1: normalize in float32, then scale and shift in the input type
    with b.composite("LayerNormalization", c.display):
        n, mean, inv = composites.layer_norm(b, b.cast(x, to="float32"), None, None, axis,
                                             eps, c.display, return_stats=True)
        y = b.cast(n, to=x.dtype) * scale
        return [y + bias if bias is not None else y, mean, inv]


@_handles("RMSNormalization")
def _rms_norm(c: _Ctx):
    x, scale = c.x(0), c.x(1)
    axis, eps = int(c.attr("axis", -1)), float(c.attr("epsilon", 1e-5))
    if int(c.attr("stash_type", 1)) != 1:
        raise _Unsupported("stash_type other than 1 (float32)")
    if not x.dtype.is_half:
        return [composites.rms_norm(c.b, x, scale, axis, eps, c.display)]
    n = composites.rms_norm(c.b, c.b.cast(x, to="float32"), None, axis, eps, c.display)
    return [c.b.cast(n, to=x.dtype) * scale]


@_handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c: _Ctx):
    x = c.x(0)
    op = "reduce_mean" if c.node.op_type == "GlobalAveragePool" else "reduce_max"
    return [c.b.op(op, x, axes=list(range(2, len(x.shape))), keepdims=True)]


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


@_handles("BatchNormalization")
def _batch_norm(c: _Ctx):
    if int(c.attr("training_mode", 0)):
        raise _Unsupported("training_mode=1 (only inference batch norm is supported)")
    return [composites.batch_norm(c.b, c.x(0), c.x(1), c.x(2), c.x(3), c.x(4),
                                  eps=float(c.attr("epsilon", 1e-5)), source=c.display)]


@_handles("Gemm")
def _gemm(c: _Ctx):
    return [composites.gemm(c.b, c.x(0), c.x(1), c.opt(2), alpha=float(c.attr("alpha", 1.0)),
                            beta=float(c.attr("beta", 1.0)), trans_a=int(c.attr("transA", 0)),
                            trans_b=int(c.attr("transB", 0)), source=c.display)]


@_handles("MatMul")
def _matmul(c: _Ctx):
    return [c.b.matmul(c.x(0), c.x(1))]


# Conv: handlers_nn.py


# -- reductions --------------------------------------------------------------------

_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod",
           "ReduceSumSquare": "reduce_sum_square", "ReduceL1": "reduce_l1",
           "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
           "ReduceLogSumExp": "reduce_log_sum_exp"}
# result of reducing an empty set (static shapes make it a constant); None: undefined
_EMPTY = {"ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
          "ReduceProd": 1.0, "ReduceMax": -math.inf, "ReduceMin": math.inf,
          "ReduceLogSum": -math.inf, "ReduceLogSumExp": -math.inf, "ReduceMean": None}


@_handles(*_REDUCE)
def _reduce(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    # axes: an input (ReduceSum since 13, the others since 18) or an attribute before
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    keep = bool(c.attr("keepdims", 1))
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({_axis(c, a, rank) for a in axes}) if rank else []
    if any(x.shape[a] == 0 for a in axes):
        return [_empty_reduce(c, x, axes, keep)]
    op = _REDUCE[c.node.op_type]
    if op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"):
        return [c.b.op(op, x, axes=axes, keepdims=keep)]
    fn = getattr(composites, op)
    return [fn(c.b, x, axes=axes, keepdims=keep, source=c.display)]


def _empty_reduce(c: _Ctx, x: Tensor, axes, keep) -> np.ndarray:
    fill = _EMPTY[c.node.op_type]
    if fill is None or (math.isinf(fill) and not x.dtype.is_float):
        raise _Unsupported("reduction over an empty set (result undefined)")
    shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    return np.full(shape, fill, dtype=x.dtype.np)


# -- layout ------------------------------------------------------------------------

@_handles("Reshape")
def _reshape(c: _Ctx):
    x = c.x(0)
    target = [int(d) for d in c.const(1, "shape")]
    shape = _reshape_target(x.shape, target, bool(c.attr("allowzero", 0)), c.display)
    return [x if shape == x.shape else c.b.reshape(x, shape=shape)]


def _reshape_target(src, target, allowzero, display) -> tuple[int, ...]:
    """Resolve ONNX Reshape's 0 (copy the input dim) and -1 (infer) entries."""
    out = [src[i] if d == 0 and not allowzero and i < len(src) else d
           for i, d in enumerate(target)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise GraphError(f"Reshape {display!r}: bad target shape {target}")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        total = int(np.prod(src, dtype=np.int64))
        if known == 0 or total % known:
            raise GraphError(f"Reshape {display!r}: cannot reshape {list(src)} to {target}")
        out[out.index(-1)] = total // known
    return tuple(out)


@_handles("Flatten")
def _flatten(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    axis = _axis(c, c.attr("axis", 1), rank, upto=1)
    shape = (int(np.prod(x.shape[:axis], dtype=np.int64)),
             int(np.prod(x.shape[axis:], dtype=np.int64)))
    return [x if shape == x.shape else c.b.reshape(x, shape=shape)]


@_handles("Transpose")
def _transpose(c: _Ctx):
    x = c.x(0)
    perm = c.attr("perm") or list(reversed(range(len(x.shape))))
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(x.shape))):
        raise _malformed(c, f"perm {perm} is not a permutation of the axes "
                            f"0..{len(x.shape) - 1} of its rank-{len(x.shape)} input")
    return [x if perm == sorted(perm) else c.b.transpose(x, perm=perm)]


@_handles("Expand")
def _expand(c: _Ctx):
    x = c.x(0)
    target = [int(d) for d in c.const(1, "shape")]
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(x.shape, tuple(target)))
    except ValueError:
        raise GraphError(f"Expand {c.display!r}: {list(x.shape)} does not broadcast to "
                         f"{target}") from None
    return [x if shape == x.shape else c.b.expand(x, shape=shape)]


@_handles("Tile")
def _tile(c: _Ctx):
    return [composites.tile(c.b, c.x(0), c.ints(1, "repeats"), source=c.display)]


@_handles("Slice")
def _slice(c: _Ctx):
    x = c.x(0)
    starts, ends = c.ints(1, "starts"), c.ints(2, "ends")
    rank = len(x.shape)
    axes = c.ints(3, "axes") or list(range(len(starts)))
    steps = c.ints(4, "steps") or [1] * len(starts)
    s_out, e_out, a_out, st_out = [], [], [], []
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _malformed(c, f"starts, ends, axes and steps differ in length ({len(starts)}, "
                            f"{len(ends)}, {len(axes)}, {len(steps)})")
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise _malformed(c, "step 0")
        a = _axis(c, a, rank)
        d = x.shape[a]
        # ONNX clamps like NumPy; clamp the huge sentinels (INT64_MAX) into range so
        # the attributes stay small and keep their meaning
        s_out.append(max(-d - 1, min(d + 1, s)))
        e_out.append(max(-d - 1, min(d + 1, e)))
        a_out.append(a)
        st_out.append(st)
    full = all(slice(s, e, st).indices(x.shape[a]) == (0, x.shape[a], 1)
               for s, e, a, st in zip(s_out, e_out, a_out, st_out))
    if full:
        return [x]
    return [c.b.slice(x, starts=s_out, ends=e_out, axes=a_out, steps=st_out)]


@_handles("Concat")
def _concat(c: _Ctx):
    xs = c.xs()
    if c.attr("axis") is None:
        raise _malformed(c, "no axis attribute")
    axis = _axis(c, c.attr("axis"), len(xs[0].shape))
    # parts with no elements add nothing (a KV cache with no past); the kernels read
    # every part, so they are dropped -- unless the result itself is empty
    full = [t for t in xs if math.prod(t.shape)]
    if full and len(full) < len(xs) and all(len(t.shape) == len(xs[0].shape) for t in xs):
        xs = full
    return [xs[0] if len(xs) == 1 else c.b.concat(*xs, axis=axis)]


@_handles("Split")
def _split(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    axis = _axis(c, c.attr("axis", 0), rank)
    d = x.shape[axis]
    n = len(c.node.output)
    sizes = c.ints(1, "split") if c.has(1) else c.attr("split")
    if not sizes:
        parts = int(c.attr("num_outputs", n))
        chunk = -(-d // parts)  # opset 18: ceil-sized chunks, the last one smaller
        sizes = [chunk] * (parts - 1) + [d - chunk * (parts - 1)]
        if c.attr("num_outputs") is None and d % parts:
            raise GraphError(f"Split {c.display!r}: {d} does not split into {parts} "
                             "equal parts")
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != d or min(sizes) < 0:
        raise GraphError(f"Split {c.display!r}: sizes {sizes} do not cut {d} into {n} "
                         "outputs")
    if n == 1:
        return [x]
    return list(c.b.split(x, axis=axis, sizes=sizes))


@_handles("Squeeze")
def _squeeze(c: _Ctx):
    x = c.x(0)
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [x if not axes else c.b.squeeze(x, axes=[int(a) for a in axes])]


@_handles("Unsqueeze")
def _unsqueeze(c: _Ctx):
    x = c.x(0)
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    return [c.b.unsqueeze(x, axes=[int(a) for a in axes])]


@_handles("Gather")
def _gather(c: _Ctx):
    data = c.x(0)
    axis = _axis(c, c.attr("axis", 0), len(data.shape))
    idx = c.scope.const(c.node.input[1])
    if idx is not None:  # constant indices: check the range ONNX requires
        n = data.shape[axis]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise GraphError(f"Gather {c.display!r}: indices out of range [-{n}, {n})")
    return [c.b.gather(data, c.x(1), axis=axis)]


# -- values known at import ------------------------------------------------------

@_handles("Shape")
def _shape(c: _Ctx):
    shape = c.shape(0)
    start, end = int(c.attr("start", 0)), c.attr("end")
    return [np.array(shape[start:None if end is None else int(end)], dtype=np.int64)]


@_handles("Size")
def _size(c: _Ctx):
    return [np.array(int(np.prod(c.shape(0), dtype=np.int64)), dtype=np.int64)]


@_handles("Constant")
def _constant(c: _Ctx):
    (key, val), = c.attrs.items()
    if key == "value":
        return [to_array(val)]
    simple = {"value_float": np.float32, "value_floats": np.float32,
              "value_int": np.int64, "value_ints": np.int64}
    if key in simple:
        return [np.array(val, dtype=simple[key])]
    raise _Unsupported(f"attribute {key} (only numeric tensors are supported)")


@_handles("ConstantOfShape")
def _constant_of_shape(c: _Ctx):
    shape = [int(d) for d in c.const(0, "shape").reshape(-1)]
    val = c.attrs.get("value")
    fill = to_array(val).reshape(-1)[0] if val is not None else np.float32(0)
    return [np.full(shape, fill, dtype=fill.dtype)]


@_handles("Range")
def _range(c: _Ctx):
    start, limit, delta = (c.const(i, "range").reshape(()) for i in range(3))
    # ONNX's definition, not np.arange's: n = max(ceil((limit - start) / delta), 0)
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]
