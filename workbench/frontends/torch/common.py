"""What the PyTorch importer and its ATen handlers share: the dtype table, the
``_Unsupported`` signal, the builder, the per-node context handed to handlers, and the
handler registry."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx

from ...errors import GraphError
from ...ir import GraphBuilder, Tensor
from ...dtypes import DType
from ..importing import ImportBuilder as _Builder  # noqa: F401 (used by the importer)
from ..importing import Unsupported as _Unsupported
from ..importing import data_dependent

# torch dtype -> workbench dtype; anything else is refused with the value's name.
_DTYPES = {torch.float32: DType.float32, torch.float16: DType.float16,
           torch.int8: DType.int8, torch.int16: DType.int16, torch.int32: DType.int32,
           torch.int64: DType.int64, torch.uint8: DType.uint8, torch.bool: DType.bool,
           torch.bfloat16: DType.bfloat16}
# FP8 is held in float32 too (workbench.ops.minifloat): torch dtype -> (round_float
# format, whether torch's cast to it saturates: e4m3fn's does, inf included; the
# others overflow to inf or NaN)
FP8 = {getattr(torch, name): (fmt, sat) for name, fmt, sat in [
    ("float8_e4m3fn", "float8e4m3fn", True), ("float8_e5m2", "float8e5m2", False),
    ("float8_e4m3fnuz", "float8e4m3fnuz", False), ("float8_e5m2fnuz", "float8e5m2fnuz", False)]
    if hasattr(torch, name)}
_DTYPES.update({t: DType.float32 for t in FP8})
# held in float32 on the way in (NumPy has none of these)
WIDENED = set(FP8)

# Never folded even with constant inputs: folding would freeze one random draw, or read
# uninitialized memory.
NONDETERMINISTIC = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
                    "randperm", "bernoulli", "normal", "uniform", "native_dropout",
                    "dropout", "empty", "empty_like", "empty_strided", "new_empty",
                    "new_empty_strided"}


def tensor_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a NumPy array of their own (bfloat16 as ml_dtypes'
    bfloat16, by its bits: NumPy has none of its own)."""
    t = t.detach().cpu().contiguous()
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(DType.bfloat16.np).copy()
    return t.numpy().copy()


def numpy_tensor(a: np.ndarray) -> torch.Tensor:
    """The inverse of :func:`tensor_numpy`: a NumPy array as a tensor of its own."""
    if a.dtype == DType.bfloat16.np:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def dtype_of(tdt: torch.dtype, what: str) -> DType:
    """The workbench dtype of a torch dtype, or a GraphError naming the value."""
    dt = _DTYPES.get(tdt)
    if dt is None:
        raise GraphError(f"{what} has dtype {tdt}, which the workbench does not support "
                         f"(supported: {', '.join(str(t) for t in _DTYPES)}); convert the "
                         "module and inputs, e.g. module.float() and x.float()")
    return dt


# ---------------------------------------------------------------------------------
# per-node context handed to handlers

class _Scope:
    """Where a node's inputs come from (the import, or a scratch graph for folding)."""
    b: GraphBuilder

    def value(self, name: str) -> Any: ...       # Tensor, np.ndarray or a Python value
    def tensor(self, name: str) -> Tensor: ...   # the value as a tensor (materialized)


def bind_arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by their schema names, with the schema's defaults."""
    schema = node.target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


class _Ctx:
    """What a handler sees: the FX node, its arguments by schema name (tensors through
    the scope), the expected output (``meta['val']``) and the builder."""

    def __init__(self, node: torch.fx.Node, scope: _Scope):
        self.node, self.scope, self.b = node, scope, scope.b
        self.args = bind_arguments(node)
        self.overload = node.target._overloadname   # "Tensor", "Scalar", "default"...

    # -- arguments --------------------------------------------------------------
    def v(self, key: str, default: Any = None) -> Any:
        """A non-tensor argument (int, float, list of ints, dtype...) as given."""
        a = self.args.get(key)
        if isinstance(a, torch.fx.Node):
            val = self.scope.value(a.name)
            if isinstance(val, (Tensor, np.ndarray)):
                raise _Unsupported(data_dependent(f"{key!r} argument"))
            return val
        return default if a is None else a

    def is_tensor(self, key: str) -> bool:
        return isinstance(self.args.get(key), torch.fx.Node)

    def x(self, key: str = "self") -> Tensor:
        """A tensor argument as a Tensor (a constant is materialized)."""
        a = self.args.get(key)
        if not isinstance(a, torch.fx.Node):
            raise _Unsupported(f"non-tensor {key!r} argument {a!r}")
        return self.scope.tensor(a.name)

    def opt(self, key: str) -> Tensor | None:
        return self.x(key) if self.is_tensor(key) else None

    def xs(self, key: str) -> list[Tensor]:
        """A Tensor[] argument as Tensors."""
        return [self.scope.tensor(a.name) for a in self.args[key]]

    def meta(self, key: str) -> Any:
        """The example value torch recorded for an argument (a FakeTensor), or the
        argument itself when it is a Python number."""
        a = self.args.get(key)
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

    def operand(self, key: str, dtype: DType) -> Tensor:
        """A tensor or Python-number argument as a Tensor of dtype (torch's promotion:
        operands are converted to the computation type)."""
        if self.is_tensor(key):
            return cast(self.b, self.x(key), dtype)
        return self.b.constant(np.asarray(self.args[key], dtype=dtype.np))

    # -- the expected output ----------------------------------------------------
    @property
    def out(self) -> Any:
        return self.node.meta.get("val")

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.out.shape)

    @property
    def out_dtype(self) -> DType:
        return dtype_of(self.out.dtype, f"the result of {self.node.name!r}")

    def scalar(self, value: Any, dtype: DType) -> Tensor:
        return self.b.constant(np.asarray(value, dtype=dtype.np))


def cast(b: GraphBuilder, t: Tensor, dtype: DType) -> Tensor:
    return t if t.dtype is dtype else b.cast(t, to=dtype)


def promoted(c: _Ctx, *keys: str) -> DType:
    """The dtype torch computes a binary op in (tensor ranks and Python numbers take
    part in the promotion as torch's rules say)."""
    protos = []
    for k in keys:
        m = c.meta(k)
        if isinstance(m, torch.Tensor):
            # an empty stand-in of the same rank and dtype (FakeTensors stay out of it)
            protos.append(torch.empty([0] * m.dim(), dtype=m.dtype) if m.dim()
                          else torch.zeros((), dtype=m.dtype))
        else:
            protos.append(m)
    return dtype_of(torch.result_type(*protos), f"the operands of {c.node.name!r}")


# ---------------------------------------------------------------------------------
# handlers: ATen op name (the overload packet, e.g. "add") -> function(ctx) -> result
# (a Tensor, a NumPy constant, None, or a list of those for multi-output ops)

Handler = Callable[[_Ctx], Any]
_HANDLERS: dict[str, Handler] = {}


def _handles(*names: str):
    def deco(fn: Handler) -> Handler:
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return deco


def op_name(target: Any) -> str:
    """The ATen overload packet name of a call target ("add" for aten.add.Tensor)."""
    packet = getattr(target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(target, "__name__", str(target))


def supported_aten_ops() -> list[str]:
    """The ATen ops (overload packets) the importer maps."""
    return sorted(_HANDLERS)
