"""ONNX importer: an ``onnx.ModelProto`` (or a .onnx file) to a workbench :class:`Graph`.

Contract:

- Default-domain opsets 13 and newer (13-21 reviewed; 22-28 only added element types
  to the ops mapped here). Attribute-vs-input changes between versions (Reduce* axes,
  Split sizes, Squeeze/Unsqueeze axes) are resolved by looking at what the node has.
- Graph inputs need static shapes; ``input_shapes`` fixes dynamic ones. Initializers
  (also those listed as graph inputs) and ``Constant`` nodes become constants.
- A node whose inputs are all constant is evaluated here and becomes a constant --
  with the workbench's own NumPy references, or ``onnx.reference`` for ops the
  workbench lacks (Shape, ConstantOfShape, Range...). ``Shape`` and ``Size`` of any
  value fold too, since every shape is static; so exported shape subgraphs vanish.
- Composites decompose through :mod:`workbench.ir.composites`; every primitive is
  tagged ``Origin(onnx_op_type, onnx_node_name)``.
- Every error is a :class:`WorkbenchError`: one :class:`UnsupportedOpError` listing
  every unsupported op type (or unsupported use of an op) with its nodes, or a
  :class:`GraphError` naming the file, value or node and the fix.
- Each node's output shape and dtype is checked against ONNX's own shape inference
  where that is static, so an importer mistake fails loudly instead of computing
  something else.

Example::

    >>> g = load_onnx("sample_graphs/layernorm_gelu.onnx")     # doctest: +SKIP
    >>> g.nodes[0].origin                                        # doctest: +SKIP
    Origin(composite='LayerNormalization', source='ln')
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import GraphError, UnsupportedOpError, WorkbenchError
from ..ir import Graph, GraphBuilder, Tensor, composites
from ..ir.dtypes import DType

MIN_OPSET = 13

# ONNX element type -> workbench dtype; anything else is refused with the value's name.
_DTYPES = {TensorProto.FLOAT: DType.float32, TensorProto.FLOAT16: DType.float16,
           TensorProto.INT32: DType.int32, TensorProto.INT64: DType.int64,
           TensorProto.BOOL: DType.bool}

# Never folded even with constant inputs: folding would freeze one random draw.
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                     "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}

class _Unsupported(Exception):
    """A handler cannot import this use of an op; the reason (None: the op type itself)
    is collected into the one UnsupportedOpError the import raises."""

    def __init__(self, reason: str | None):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------
# entry point

def load_onnx(model: "str | Path | onnx.ModelProto",
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import an ONNX model as a verified workbench :class:`Graph`.

    ``input_shapes`` maps input names to static shapes and overrides the model's
    (needed when the model has dynamic dimensions such as a batch size).

        >>> g = load_onnx("model.onnx", input_shapes={"x": [8, 128]})  # doctest: +SKIP
    """
    proto, label = _read_model(model)
    opset = _default_opset(proto, label)
    if proto.functions:  # model-local functions: inline them so their nodes import
        proto = onnx.inliner.inline_local_functions(proto)
    return _Importer(proto, label, opset, dict(input_shapes or {})).run()


def _read_model(model) -> tuple[onnx.ModelProto, str]:
    """Parse and check the model; one-line GraphError naming the file if it is bad."""
    if isinstance(model, onnx.ModelProto):
        label, proto = f"model {model.graph.name or '<unnamed>'!r}", model
    else:
        path = Path(model)
        label = str(path)
        if not path.is_file():
            raise WorkbenchError(f"file not found: {path}; check the path")
        try:
            proto = onnx.load(str(path))
        except Exception as e:  # protobuf raises DecodeError, RuntimeWarning...
            raise GraphError(f"{label} is not a readable ONNX model ({_first_line(e)}); "
                             "check the file is complete or re-export it") from None
        if not proto.graph.node and not proto.graph.output:
            raise GraphError(f"{label} holds no ONNX graph (empty or not an ONNX file); "
                             "re-export the model")
    try:
        onnx.checker.check_model(proto)
    except ValueError as e:
        if "2GB" not in str(e):  # models over 2 GB cannot be checked in memory
            raise GraphError(f"{label} fails the ONNX checker ({_first_line(e)}); "
                             "re-export the model") from None
    except onnx.checker.ValidationError as e:
        raise GraphError(f"{label} fails the ONNX checker ({_first_line(e)}); "
                         "re-export the model") from None
    return proto, label


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:200]


def _default_opset(proto: onnx.ModelProto, label: str) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    opset = versions[0] if versions else 1
    if opset < MIN_OPSET:
        raise GraphError(f"{label} uses opset {opset}; the importer reads opset "
                         f"{MIN_OPSET} and newer -- upgrade it with "
                         f"onnx.version_converter.convert_version(model, {MIN_OPSET})")
    return opset


# ---------------------------------------------------------------------------------
# the builder the importer uses

class _Builder(GraphBuilder):
    """A GraphBuilder whose invented names never take a name the model uses, and that
    can give a freshly made value the model's name."""

    def __init__(self, name: str, description: str, reserved: set[str]):
        super().__init__(name, description)
        self._reserved = reserved

    def _fresh(self, prefix: str) -> str:
        while True:
            name = super()._fresh(prefix)
            if name not in self._reserved:
                return name

    def rename_recent(self, old: str, new: str, since: int) -> Tensor:
        """Rename a value made by nodes[since:] (only those can refer to it yet)."""
        from ..ir import Node, Value
        v = self._values.pop(old)
        self._values[new] = Value(new, v.shape, v.dtype)
        sub = lambda names: tuple(new if n == old else n for n in names)
        for i in range(since, len(self._nodes)):
            n = self._nodes[i]
            if old in n.inputs or old in n.outputs:
                self._nodes[i] = Node(n.id, n.op, sub(n.inputs), sub(n.outputs), n.attrs,
                                      n.name, n.origin)
        return Tensor(self, new)

    def made_since(self, name: str, since: int) -> bool:
        return any(name in n.outputs for n in self._nodes[since:])


# ---------------------------------------------------------------------------------
# per-node context handed to handlers

class _Ctx:
    """What a handler sees: the node, its attributes, its inputs as tensors or
    constants, and the builder to emit primitives with."""

    def __init__(self, node: onnx.NodeProto, display: str, scope: "_Scope"):
        self.node, self.display, self.scope, self.b = node, display, scope, scope.b
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def attr(self, key: str, default: Any = None) -> Any:
        v = self.attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    @property
    def n_in(self) -> int:
        return len(self.node.input)

    def x(self, i: int = 0) -> Tensor:
        """Input i as a tensor (a constant is materialized)."""
        return self.scope.tensor(self.node.input[i])

    def xs(self) -> list[Tensor]:
        return [self.x(i) for i in range(self.n_in) if self.has(i)]

    def opt(self, i: int) -> Tensor | None:
        return self.x(i) if self.has(i) else None

    def const(self, i: int, what: str) -> np.ndarray:
        """Input i as a NumPy array; it must be constant (after folding)."""
        arr = self.scope.const(self.node.input[i])
        if arr is None:
            raise _Unsupported(f"non-constant {what} input (data-dependent shapes are "
                               "not supported)")
        return arr

    def ints(self, i: int, what: str) -> list[int] | None:
        """An optional constant int-list input, as Python ints; None when absent."""
        return [int(v) for v in self.const(i, what).reshape(-1)] if self.has(i) else None

    def shape(self, i: int) -> tuple[int, ...]:
        return self.scope.shape(self.node.input[i])

    def scalar(self, value: float, like: Tensor) -> Tensor:
        return self.b.constant(np.asarray(value, dtype=like.dtype.np))


class _Scope:
    """Where a node's inputs come from (the import, or a scratch graph for folding)."""
    b: GraphBuilder

    def tensor(self, name: str) -> Tensor: ...
    def const(self, name: str) -> np.ndarray | None: ...
    def shape(self, name: str) -> tuple[int, ...]: ...
    def dtype(self, name: str) -> DType: ...


# ---------------------------------------------------------------------------------
# handlers: ONNX op type -> function(ctx) -> list of results, one per ONNX output

Handler = Callable[[_Ctx], list]
_HANDLERS: dict[str, Handler] = {}


def _handles(*op_types: str):
    def deco(fn: Handler) -> Handler:
        for t in op_types:
            _HANDLERS[t] = fn
        return fn
    return deco


def supported_op_types() -> list[str]:
    """The ONNX op types the importer maps (others import only when they fold)."""
    return sorted(_HANDLERS)


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
        to = _dtype_of_elem(c.attr("to"), f"Cast {c.display!r} target type")
    else:
        to = c.scope.dtype(c.node.input[1])
    return [x if to is x.dtype else c.b.cast(x, to=to)]


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
    if x.dtype is not DType.float16:
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
    if x.dtype is not DType.float16:
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


@_handles("Conv")
def _conv(c: _Ctx):
    x, w = c.x(0), c.x(1)
    if len(x.shape) != 4:
        raise _Unsupported(f"{len(x.shape) - 2}-D convolution (only 2-D is supported)")
    k = w.shape[2:]
    if c.attr("kernel_shape") is not None and tuple(c.attr("kernel_shape")) != k:
        raise GraphError(f"Conv {c.display!r}: kernel_shape {c.attr('kernel_shape')} "
                         f"differs from the weight's {list(k)}")
    strides = tuple(c.attr("strides", (1, 1)))
    dil = tuple(c.attr("dilations", (1, 1)))
    pads = _conv_pads(c.attr("auto_pad", "NOTSET"), c.attr("pads", (0, 0, 0, 0)),
                      x.shape[2:], k, strides, dil)
    ins = [x, w] + ([c.x(2)] if c.has(2) else [])
    return [c.b.conv2d(*ins, strides=strides, dilations=dil, pads=pads,
                       group=int(c.attr("group", 1)))]


def _conv_pads(auto_pad, pads, size, k, strides, dil) -> tuple[int, ...]:
    """ONNX pads [top, left, bottom, right], resolving auto_pad SAME_* and VALID."""
    if auto_pad in ("NOTSET", ""):
        return tuple(int(p) for p in pads)
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    begin, end = [], []
    for n, kk, s, d in zip(size, k, strides, dil):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (kk - 1) * d + 1 - n)
        lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return tuple(begin + end)


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
    axes = sorted({int(a) % max(rank, 1) for a in axes})
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
    axis = int(c.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    shape = (int(np.prod(x.shape[:axis], dtype=np.int64)),
             int(np.prod(x.shape[axis:], dtype=np.int64)))
    return [x if shape == x.shape else c.b.reshape(x, shape=shape)]


@_handles("Transpose")
def _transpose(c: _Ctx):
    x = c.x(0)
    perm = c.attr("perm") or list(reversed(range(len(x.shape))))
    perm = [int(p) for p in perm]
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
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise GraphError(f"Slice {c.display!r}: step 0")
        a = a % rank
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
    return [xs[0] if len(xs) == 1 else c.b.concat(*xs, axis=int(c.attr("axis")))]


@_handles("Split")
def _split(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    axis = int(c.attr("axis", 0)) % rank
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
    axis = int(c.attr("axis", 0)) % max(len(data.shape), 1)
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
        return [numpy_helper.to_array(val)]
    simple = {"value_float": np.float32, "value_floats": np.float32,
              "value_int": np.int64, "value_ints": np.int64}
    if key in simple:
        return [np.array(val, dtype=simple[key])]
    raise _Unsupported(f"attribute {key} (only numeric tensors are supported)")


@_handles("ConstantOfShape")
def _constant_of_shape(c: _Ctx):
    shape = [int(d) for d in c.const(0, "shape").reshape(-1)]
    val = c.attrs.get("value")
    fill = numpy_helper.to_array(val).reshape(-1)[0] if val is not None else np.float32(0)
    return [np.full(shape, fill, dtype=fill.dtype)]


@_handles("Range")
def _range(c: _Ctx):
    start, limit, delta = (c.const(i, "range").reshape(()) for i in range(3))
    # ONNX's definition, not np.arange's: n = max(ceil((limit - start) / delta), 0)
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]


# ---------------------------------------------------------------------------------
# the import itself

def _dtype_of_elem(elem: int, what: str) -> DType:
    dt = _DTYPES.get(elem)
    if dt is None:
        name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() \
            else str(elem)
        raise GraphError(f"{what} has element type {name}, which the workbench does not "
                         f"support (supported: {', '.join(d.value for d in DType)}); "
                         "convert the model to one of these")
    return dt


def _check_array_dtype(arr: np.ndarray, what: str) -> DType:
    try:
        return DType.of(arr.dtype)
    except ValueError:
        raise GraphError(f"{what} has dtype {arr.dtype}, which the workbench does not "
                         f"support (supported: {', '.join(d.value for d in DType)}); "
                         "convert the model to one of these") from None


class _Importer(_Scope):
    """Walks the ONNX graph once, node by node, in its (topological) order."""

    def __init__(self, proto: onnx.ModelProto, label: str, opset: int,
                 input_shapes: dict[str, Sequence[int]]):
        self.proto, self.label, self.opset = proto, label, opset
        self.g = proto.graph
        self.input_shapes = input_shapes
        reserved = {v for n in self.g.node for v in list(n.input) + list(n.output)}
        reserved |= {v.name for v in self.g.input} | {t.name for t in self.g.initializer}
        self.onnx_names = reserved
        self.b = _Builder(self.g.name or "onnx_model", self._description(), reserved)
        self.env: dict[str, Tensor | np.ndarray] = {}
        self.materialized: dict[str, Tensor] = {}
        self.poisoned: set[str] = set()
        self.unsupported: dict[str, list[str]] = {}
        self.expected: dict[str, tuple[tuple[int, ...], DType]] = {}
        self._start = 0  # index of the first builder node the current ONNX node made

    def _description(self) -> str:
        return (self.g.doc_string or self.proto.doc_string or
                f"imported from {self.label}").strip().splitlines()[0][:200]

    # -- scope ----------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        v = self.env[name]
        if isinstance(v, Tensor):
            return v
        t = self.materialized.get(name)
        if t is None:
            _check_array_dtype(v, f"constant {name!r}")
            t = self.materialized[name] = self.b.constant(v, name=name)
        return t

    def const(self, name: str) -> np.ndarray | None:
        v = self.env[name]
        return v if isinstance(v, np.ndarray) else None

    def shape(self, name: str) -> tuple[int, ...]:
        v = self.env[name]
        return tuple(v.shape)

    def dtype(self, name: str) -> DType:
        v = self.env[name]
        return v.dtype if isinstance(v, Tensor) else _check_array_dtype(v, repr(name))

    # -- steps ----------------------------------------------------------------------
    def run(self) -> Graph:
        self._leaves()
        self._expectations()
        for i, node in enumerate(self.g.node):
            self._node(node, node.name or f"{node.op_type}_{i}")
        if self.unsupported:
            raise UnsupportedOpError(self.unsupported)
        self._outputs()
        try:
            return self.b.build()
        except GraphError as e:
            raise GraphError(f"{self.label}: {e}") from None

    def _leaves(self) -> None:
        """Initializers become constants; the other graph inputs need static shapes."""
        inits = {t.name: t for t in self.g.initializer}
        for name, t in inits.items():
            self.env[name] = numpy_helper.to_array(t)
        inputs = [v for v in self.g.input if v.name not in inits]
        unknown = sorted(set(self.input_shapes) - {v.name for v in inputs})
        if unknown:
            raise GraphError(f"input_shapes names {unknown}, which are not inputs of "
                             f"{self.label}; its inputs are {[v.name for v in inputs]}")
        dynamic = []
        shapes = {}
        for v in inputs:
            shapes[v.name], dyn = self._input_shape(v)
            dynamic += dyn
        if dynamic:
            raise GraphError(f"{self.label} has dynamic input dimensions: "
                             f"{'; '.join(dynamic)} -- pass static shapes with "
                             "load_onnx(..., input_shapes={'NAME': [d0, d1, ...]})")
        for v in inputs:
            dt = _dtype_of_elem(v.type.tensor_type.elem_type, f"input {v.name!r}")
            self.env[v.name] = self.b.input(v.name, shapes[v.name], dt)

    def _input_shape(self, v: onnx.ValueInfoProto) -> tuple[list[int], list[str]]:
        """The static shape of one input and, if any, its dynamic dims described."""
        if not v.type.HasField("tensor_type"):
            raise GraphError(f"input {v.name!r} of {self.label} is not a tensor "
                             f"({v.type.WhichOneof('value')}); only tensors are supported")
        tt = v.type.tensor_type
        override = self.input_shapes.get(v.name)
        if not tt.HasField("shape"):
            if override is None:
                return [], [f"input {v.name!r} has unknown rank"]
            return [int(d) for d in override], []
        dims = list(tt.shape.dim)
        if override is not None:
            override = [int(d) for d in override]
            fixed = [(i, d.dim_value) for i, d in enumerate(dims) if d.HasField("dim_value")]
            if len(override) != len(dims) or any(override[i] != d for i, d in fixed):
                raise GraphError(f"input_shapes[{v.name!r}] = {override} does not fit the "
                                 f"model's shape {_dims_text(dims)}")
            return override, []
        dyn = [f"input {v.name!r} dim {i} ({d.dim_param or '?'})"
               for i, d in enumerate(dims) if not d.HasField("dim_value")]
        return [d.dim_value for d in dims], dyn

    def _expectations(self) -> None:
        """ONNX's own inferred static types, to check each imported node against."""
        model = onnx.ModelProto()
        model.CopyFrom(self.proto)
        for v in model.graph.input:  # give inference the shapes we use
            t = self.env.get(v.name)
            if isinstance(t, Tensor):
                v.type.tensor_type.ClearField("shape")
                v.type.tensor_type.shape.SetInParent()
                for d in t.shape:
                    v.type.tensor_type.shape.dim.add().dim_value = d
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False,
                                                         data_prop=True)
        except Exception:  # inference is a cross-check only; its absence is no error
            return
        for v in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
            if tt is None or not tt.HasField("shape") or tt.elem_type not in _DTYPES:
                continue
            if all(d.HasField("dim_value") for d in tt.shape.dim):
                self.expected[v.name] = (tuple(d.dim_value for d in tt.shape.dim),
                                         _DTYPES[tt.elem_type])

    def _node(self, node: onnx.NodeProto, display: str) -> None:
        outs = [o for o in node.output if o]
        if any(i in self.poisoned for i in node.input if i):
            if node.op_type not in _HANDLERS:
                self._refuse(node, display, None)
            self.poisoned.update(outs)
            return
        try:
            results = self._results(node, display)
        except _Unsupported as e:
            self._refuse(node, display, e.reason)
            self.poisoned.update(outs)
            return
        except GraphError as e:
            if self.unsupported:  # the more basic problem: report that first
                raise UnsupportedOpError(self.unsupported) from e
            raise GraphError(f"ONNX node {display!r} ({node.op_type}): {e}") from None
        for name, r in zip(node.output, results):
            if name and r is not None:
                self._bind(name, r, node, display)
        for name in node.output[len(results):]:
            if name:  # an optional output the workbench cannot produce
                self._refuse(node, display, f"output {len(results)}+ is not supported")
                self.poisoned.add(name)

    def _refuse(self, node: onnx.NodeProto, display: str, reason: str | None) -> None:
        key = node.op_type if node.domain in ("", "ai.onnx") else \
            f"{node.domain}.{node.op_type}"
        if reason:
            key = f"{key} [{reason}]"
        self.unsupported.setdefault(key, []).append(display)

    def _results(self, node: onnx.NodeProto, display: str) -> list:
        """The node's outputs: folded to constants when its inputs are all constant."""
        self._start = len(self.b._nodes)
        if node.domain not in ("", "ai.onnx"):
            raise _Unsupported(None)
        handler = _HANDLERS.get(node.op_type)
        ins = [i for i in node.input if i]
        foldable = node.op_type not in _NONDETERMINISTIC and not _has_subgraph(node)
        if foldable and all(self.const(i) is not None for i in ins):
            return _fold(node, display, handler, {i: self.env[i] for i in ins}, self.opset)
        if handler is None:
            raise _Unsupported(None)
        with self.b.composite(node.op_type, display):
            return handler(_Ctx(node, display, self))

    def _bind(self, name: str, r, node: onnx.NodeProto, display: str) -> None:
        """Record an ONNX value; a value this node made takes the ONNX name."""
        if isinstance(r, Tensor) and r.name not in self.onnx_names \
                and self.b.made_since(r.name, self._start):
            r = self.b.rename_recent(r.name, name, self._start)
        self._check_expected(name, r, node, display)
        self.env[name] = r

    def _check_expected(self, name: str, r, node: onnx.NodeProto, display: str) -> None:
        """Fail loudly where ONNX's shape inference disagrees with the import."""
        exp = self.expected.get(name)
        if exp is None:
            return
        if isinstance(r, Tensor):
            got = (tuple(r.shape), r.dtype)
        else:
            try:
                got = (tuple(r.shape), DType.of(r.dtype))
            except ValueError:
                return  # an unsupported dtype is reported if the value is ever used
        if got != exp:
            raise GraphError(
                f"ONNX node {display!r} ({node.op_type}) output {name!r} imports as "
                f"{got[1].value}{list(got[0])} but ONNX infers {exp[1].value}{list(exp[0])}; "
                "this is an importer bug -- please report it with the model")

    def _outputs(self) -> None:
        """Mark the graph outputs under their ONNX names (copying where a value is an
        input, another output, or already named otherwise)."""
        done: set[str] = set()
        for v in self.g.output:
            if v.name not in self.env:
                raise GraphError(f"{self.label}: graph output {v.name!r} is never computed")
            t = self.tensor(v.name)
            if t.name != v.name or t.name in done:
                with self.b.composite("Identity", v.name):
                    t = self.b.reshape(t, shape=list(t.shape), name=v.name)
            self.b.output(t)
            done.add(v.name)


def _dims_text(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else
                           repr(d.dim_param or "?") for d in dims) + "]"


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)


# ---------------------------------------------------------------------------------
# constant folding

class _Scratch(_Scope):
    """A throwaway graph holding one node whose inputs are all known, for folding."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.b = GraphBuilder("fold")
        self.feeds: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            arr = self.arrays[name]
            dt = _check_array_dtype(arr, f"constant {name!r}")
            self.tensors[name] = self.b.input(name, arr.shape, dt)
            self.feeds[name] = arr
        return self.tensors[name]

    def const(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name].shape)

    def dtype(self, name: str) -> DType:
        return _check_array_dtype(self.arrays[name], repr(name))


def _fold(node, display, handler, arrays, opset) -> list:
    """Evaluate a node on constant inputs: by the workbench's own definitions where it
    has them (so folding agrees with what the graph would compute), else by ONNX's."""
    if handler is not None:
        try:
            return _fold_with_workbench(node, display, handler, arrays)
        except (WorkbenchError, _Unsupported):
            pass  # e.g. a float64 step in a shape computation: ONNX's evaluator takes it
    return _fold_with_onnx(node, arrays, opset)


def _fold_with_workbench(node, display, handler, arrays) -> list:
    from ..ops import get_op
    scope = _Scratch(arrays)
    results = handler(_Ctx(node, display, scope))
    env = dict(scope.feeds)
    g = scope.b
    for n in g._nodes:  # the nodes just made, evaluated with each op's reference
        vals = get_op(n.op).reference([env[i] for i in n.inputs], n.attr_map)
        for o, a in zip(n.outputs, vals):
            v = g._values[o]
            # (np.array, not ascontiguousarray, which turns 0-d results 1-d)
            env[o] = np.array(np.broadcast_to(np.asarray(a), v.shape), dtype=v.dtype.np)
    return [env[r.name] if isinstance(r, Tensor) else r for r in results]


def _fold_with_onnx(node, arrays, opset) -> list:
    from onnx.reference import ReferenceEvaluator
    try:
        ev = ReferenceEvaluator(node, opsets={"": opset})
        outs = ev.run(None, arrays)
    except Exception as e:  # the evaluator lacks the op, or the op needs something else
        raise _Unsupported(None) from e
    return [None if o is None else np.asarray(o) for o in outs]
