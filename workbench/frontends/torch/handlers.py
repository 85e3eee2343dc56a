"""The ATen op handlers: one function per core ATen op (or family), each turning an FX
node (seen through a :class:`_Ctx`) into workbench primitives or composites and
returning its result: a Tensor, a NumPy constant, None (no output), or a list for ops
with several outputs.

Shapes and dtypes the handlers need beyond the arguments (a ``view``'s ``-1``, the
result type of mixed-dtype arithmetic) come from ``meta['val']``, the example value
torch.export recorded for every node; the importer checks every result against it.

Importing this module registers every handler with :func:`_handles`.
"""
from __future__ import annotations

import numpy as np

from ...ir import composites
from ...dtypes import DType
from .common import FP8, _Ctx, _handles, _Unsupported, cast, dtype_of, promoted

_INT64_MAX = 2 ** 63 - 1


def _dim(d: int, rank: int) -> int:
    return int(d) % max(rank, 1)


def _dims(c: _Ctx, key: str, rank: int) -> list[int]:
    """A dim / dim-list argument normalized; None or [] means every axis."""
    d = c.v(key)
    if d is None or d == []:
        return list(range(rank))
    return [_dim(a, rank) for a in (d if isinstance(d, (list, tuple)) else [d])]


# -- elementwise ------------------------------------------------------------------

_UNARY = {"abs": "abs", "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt",
          "rsqrt": "rsqrt", "reciprocal": "reciprocal", "tanh": "tanh", "erf": "erf",
          "sigmoid": "sigmoid", "relu": "relu", "sin": "sin", "cos": "cos",
          "floor": "floor", "ceil": "ceil"}


@_handles(*_UNARY)
def _unary(c: _Ctx):
    # an integer input of a float function is converted first, as torch does
    return c.b.op(_UNARY[c.node.target._overloadpacket.__name__],
                  cast(c.b, c.x(), c.out_dtype))


_ARITH = {"add": "add", "sub": "sub", "mul": "mul", "div": "div",
          "maximum": "max", "minimum": "min"}


@_handles(*_ARITH)
def _arith(c: _Ctx):
    name = c.node.target._overloadpacket.__name__
    dt = c.out_dtype  # torch computes in the result type (int / int true-divides in float)
    a, b = c.operand("self", dt), c.operand("other", dt)
    alpha = c.v("alpha", 1)
    if alpha != 1:
        b = b * c.scalar(alpha, dt)
    y = c.b.op(_ARITH[name], a, b)
    mode = c.v("rounding_mode")
    if mode == "trunc" and dt.is_float:
        y = c.b.where(c.b.lt(y, c.scalar(0, dt)), c.b.ceil(y), c.b.floor(y))
    elif mode == "floor":
        if not dt.is_float:
            raise _Unsupported("integer division with rounding_mode='floor'")
        y = c.b.floor(y)
    return y


_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


@_handles(*_COMPARE)
def _compare(c: _Ctx):
    dt = promoted(c, "self", "other")
    return c.b.op(_COMPARE[c.node.target._overloadpacket.__name__],
                  c.operand("self", dt), c.operand("other", dt))


def _as_bool(c: _Ctx, t):
    return t if t.dtype is DType.bool else c.b.ne(t, c.scalar(0, t.dtype))


_LOGICAL = {"logical_and": "and", "logical_or": "or", "logical_xor": "ne",
            "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "ne"}  # (on bool)


@_handles(*_LOGICAL)
def _logical(c: _Ctx):
    if c.out_dtype is not DType.bool:
        raise _Unsupported("bitwise ops on integers")
    a, b = _as_bool(c, c.x("self")), _as_bool(c, c.x("other"))
    return c.b.op(_LOGICAL[c.node.target._overloadpacket.__name__], a, b)


@_handles("logical_not", "bitwise_not")
def _not(c: _Ctx):
    if c.out_dtype is not DType.bool:
        raise _Unsupported("bitwise not on integers")
    return c.b.op("not", _as_bool(c, c.x()))


@_handles("pow")
def _pow(c: _Ctx):
    dt = c.out_dtype
    if c.overload == "Tensor_Scalar" and c.v("exponent") == 2:
        x = c.operand("self", dt)
        return x * x   # exact, and cheaper than powf
    return c.b.pow(c.operand("self", dt), c.operand("exponent", dt))


@_handles("where")
def _where(c: _Ctx):
    dt = c.out_dtype
    return c.b.where(_as_bool(c, c.x("condition")), c.operand("self", dt),
                     c.operand("other", dt))


@_handles("clamp")
def _clamp(c: _Ctx):
    dt = c.out_dtype
    x = cast(c.b, c.x(), dt)
    lo = c.operand("min", dt) if c.args.get("min") is not None else None
    hi = c.operand("max", dt) if c.args.get("max") is not None else None
    return composites.clip(c.b, x, lo, hi)


@_handles("hardtanh")
def _hardtanh(c: _Ctx):
    dt = c.out_dtype
    return composites.clip(c.b, c.x(), c.scalar(c.v("min_val", -1.0), dt),
                           c.scalar(c.v("max_val", 1.0), dt))


@_handles("_to_copy")
def _to_copy(c: _Ctx):
    y = cast(c.b, c.x(), c.out_dtype)
    src = c.meta("self")
    if getattr(src, "dtype", None) is c.out.dtype:
        return y
    if c.out.dtype in FP8:
        fmt, saturate = FP8[c.out.dtype]
        y = c.b.op("round_float", y, format=fmt, saturate=saturate)
    return y


@_handles("clone")
def _identity(c: _Ctx):
    return c.x()


@_handles("_assert_tensor_metadata", "_assert_scalar", "_assert_async",
          "sym_constrain_range", "sym_constrain_range_for_size")
def _assertion(c: _Ctx):
    # checks torch.export made about the example inputs; static shapes make them hold
    return None


# -- activations and normalizations (composites) ------------------------------------

@_handles("gelu")
def _gelu(c: _Ctx):
    return composites.gelu(c.b, c.x(), approximate=c.v("approximate", "none"))


@_handles("leaky_relu")
def _leaky_relu(c: _Ctx):
    return composites.leaky_relu(c.b, c.x(), alpha=float(c.v("negative_slope", 0.01)))


@_handles("elu")
def _elu(c: _Ctx):
    if c.v("scale", 1) != 1 or c.v("input_scale", 1) != 1:
        raise _Unsupported("scale or input_scale other than 1")
    return composites.elu(c.b, c.x(), alpha=float(c.v("alpha", 1.0)))


@_handles("log1p", "expm1")
def _log1p_expm1(c: _Ctx):
    fn = getattr(composites, c.node.target._overloadpacket.__name__)
    return fn(c.b, cast(c.b, c.x(), c.out_dtype))


@_handles("sign")
def _sign(c: _Ctx):
    return composites.sign(c.b, c.x())


@_handles("_softmax", "_log_softmax")
def _softmax(c: _Ctx):
    fn = composites.softmax if c.node.target._overloadpacket.__name__ == "_softmax" \
        else composites.log_softmax
    x = cast(c.b, c.x(), c.out_dtype)  # half_to_float
    return fn(c.b, x, axis=int(c.v("dim")))


@_handles("native_layer_norm")
def _layer_norm(c: _Ctx):
    x = c.x("input")
    axis = -len(c.v("normalized_shape"))
    y, mean, rstd = composites.layer_norm(c.b, x, c.opt("weight"), c.opt("bias"), axis,
                                          float(c.v("eps")), return_stats=True)
    # the statistics of a half x are float32 here; torch records them as it made them
    # (x's type on the CPU)
    return [y] + [cast(c.b, t, dtype_of(o.dtype, f"the result of {c.node.name!r}"))
                  for t, o in zip((mean, rstd), c.out[1:])]


@_handles("_native_batch_norm_legit_no_training")
def _batch_norm(c: _Ctx):
    x = c.x("input")
    ch = x.shape[1]
    ones = lambda v: c.b.constant(np.full((ch,), v, x.dtype.np))
    w = c.opt("weight") or ones(1.0)
    bias = c.opt("bias") or ones(0.0)
    y = composites.batch_norm(c.b, x, w, bias, c.x("running_mean"), c.x("running_var"),
                              float(c.v("eps")))
    # the saved statistics are empty in inference
    return [y] + [np.zeros(tuple(m.shape), dtype_of(m.dtype, "a batch_norm stat").np)
                  for m in c.out[1:]]


# -- reductions ------------------------------------------------------------------

_REDUCE = {"sum": "reduce_sum", "mean": "reduce_mean", "amax": "reduce_max",
           "amin": "reduce_min", "prod": "reduce_prod"}


@_handles(*_REDUCE)
def _reduce(c: _Ctx):
    x = cast(c.b, c.x(), c.out_dtype)  # sum of bool accumulates in int64; dtype=...
    axes = _dims(c, "dim", len(x.shape))  # absent or None: every axis
    return c.b.op(_REDUCE[c.node.target._overloadpacket.__name__], x, axes=axes,
                  keepdims=bool(c.v("keepdim", False)))


@_handles("any")
def _any(c: _Ctx):
    x = c.x()
    ints = cast(c.b, _as_bool(c, x), DType.int32)
    axes = _dims(c, "dim", len(x.shape))
    r = c.b.reduce_max(ints, axes=axes, keepdims=bool(c.v("keepdim", False)))
    return c.b.ne(r, c.scalar(0, DType.int32))


@_handles("var")
def _var(c: _Ctx):
    x = c.x()
    axes = _dims(c, "dim", len(x.shape))
    corr = c.v("correction", 1)
    n = int(np.prod([x.shape[a] for a in axes]))
    with c.b.composite("Variance"):
        d = x - c.b.reduce_mean(x, axes=axes, keepdims=True)
        s = c.b.reduce_sum(d * d, axes=axes, keepdims=bool(c.v("keepdim", False)))
        return s * c.scalar(1.0 / (n - corr) if n > corr else np.nan, x.dtype)


# -- linear algebra ---------------------------------------------------------------

@_handles("mm", "bmm")
def _matmul(c: _Ctx):
    return c.b.matmul(c.x("self"), c.x("mat2" if "mat2" in c.args else "other"))


@_handles("addmm")
def _addmm(c: _Ctx):
    return composites.gemm(c.b, c.x("mat1"), c.x("mat2"), c.x("self"),
                           alpha=float(c.v("alpha", 1)), beta=float(c.v("beta", 1)))


# convolution: handlers_nn.py


# -- layout ----------------------------------------------------------------------

@_handles("view", "squeeze")
def _reshape(c: _Ctx):
    # the shape torch recorded resolves -1 and which axes squeeze drops
    x = c.x()
    if tuple(x.shape) == c.out_shape:
        return x
    return c.b.reshape(x, shape=list(c.out_shape))


@_handles("unsqueeze")
def _unsqueeze(c: _Ctx):
    x = c.x()
    return c.b.unsqueeze(x, axes=[_dim(c.v("dim"), len(x.shape) + 1)])


@_handles("permute")
def _permute(c: _Ctx):
    x = c.x()
    return c.b.transpose(x, perm=[_dim(d, len(x.shape)) for d in c.v("dims")])


@_handles("expand")
def _expand(c: _Ctx):
    x = c.x()
    if tuple(x.shape) == c.out_shape:
        return x
    return c.b.expand(x, shape=list(c.out_shape))


@_handles("slice")
def _slice(c: _Ctx):
    x = c.x()
    axis = _dim(c.v("dim", 0), len(x.shape))
    n = x.shape[axis]
    start, end = int(c.v("start", 0)), int(c.v("end", _INT64_MAX))
    step = int(c.v("step", 1))
    picked = range(*slice(start, end, step).indices(n))  # torch clamps like Python
    if picked == range(n):
        return x
    return c.b.slice(x, starts=[picked.start], ends=[picked.stop], axes=[axis],
                     steps=[step])


@_handles("select")
def _select(c: _Ctx):
    x = c.x()
    axis = _dim(c.v("dim"), len(x.shape))
    i = int(c.v("index")) % x.shape[axis]
    s = c.b.slice(x, starts=[i], ends=[i + 1], axes=[axis], steps=[1])
    return c.b.squeeze(s, axes=[axis])


@_handles("cat")
def _cat(c: _Ctx):
    dt = c.out_dtype
    xs = [cast(c.b, t, dt) for t in c.xs("tensors")]
    # parts with no elements add nothing (torch also takes legacy 1-d empties); the
    # kernels read every part of a concat, so they are dropped
    full = [t for t in xs if int(np.prod(t.shape))]
    if full and len(full) < len(xs):
        xs = full
    if len(xs) == 1:
        return xs[0]
    return c.b.concat(*xs, axis=_dim(c.v("dim", 0), len(c.out_shape)))


@_handles("split_with_sizes")
def _split(c: _Ctx):
    x = c.x()
    axis = _dim(c.v("dim", 0), len(x.shape))
    sizes = [int(s) for s in c.v("split_sizes")]
    if len(sizes) == 1:
        return [x]
    return c.b.split(x, axis=axis, sizes=sizes)


@_handles("index_select")
def _index_select(c: _Ctx):
    x = c.x()
    return c.b.gather(x, c.x("index"), axis=_dim(c.v("dim"), len(x.shape)))


@_handles("embedding")
def _embedding(c: _Ctx):
    return c.b.gather(c.x("weight"), c.x("indices"), axis=0)


@_handles("repeat")
def _repeat(c: _Ctx):
    x = c.x()
    reps = [int(r) for r in c.v("repeats")]
    if len(reps) > len(x.shape):
        x = c.b.reshape(x, shape=[1] * (len(reps) - len(x.shape)) + list(x.shape))
    return composites.tile(c.b, x, reps)


# -- creation (constants; they fold) -------------------------------------------------

def _filled(c: _Ctx, value) -> np.ndarray:
    return np.full(c.out_shape, value, dtype=c.out_dtype.np)


@_handles("full", "full_like")
def _full(c: _Ctx):
    return _filled(c, c.v("fill_value"))


@_handles("scalar_tensor")
def _scalar_tensor(c: _Ctx):
    return _filled(c, c.v("s"))


@_handles("arange")
def _arange(c: _Ctx):
    start = c.v("start", 0) if "start" in c.args else 0
    step = c.v("step", 1) if "step" in c.args else 1
    r = np.arange(start, c.v("end"), step, dtype=np.float64)
    return r.astype(c.out_dtype.np)

