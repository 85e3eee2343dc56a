"""What the ONNX importer and its op handlers share: constants, the dtype table and
dtype checks, an exception's first line for messages, the ``_Unsupported`` signal,
the builder, the per-node context handed to handlers, the model's faults and axes
(``_malformed``, ``_axis``), and the handler registry."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...errors import GraphError, shown
from ...ir import GraphBuilder, Tensor
from ...dtypes import DType
from ..importing import ImportBuilder as _Builder  # noqa: F401 (used by the importer)
from ..importing import Unsupported as _Unsupported
from ..importing import data_dependent

MIN_OPSET = 13
# the newest default-domain opset reviewed (13-21 in full; 22-28 only added element
# types to the ops mapped here): a newer model may use semantics the importer does not
# know, so it is refused rather than guessed at
MAX_OPSET = 28

# ONNX element type -> workbench dtype; anything else is refused with the value's name.
_DTYPES = {TensorProto.FLOAT: DType.float32, TensorProto.FLOAT16: DType.float16,
           TensorProto.INT8: DType.int8, TensorProto.INT16: DType.int16,
           TensorProto.INT32: DType.int32, TensorProto.INT64: DType.int64,
           TensorProto.UINT8: DType.uint8, TensorProto.UINT16: DType.uint16,
           TensorProto.UINT32: DType.uint32, TensorProto.UINT64: DType.uint64,
           TensorProto.BOOL: DType.bool, TensorProto.BFLOAT16: DType.bfloat16}

# Element types with no storage type of their own, held in a wider one that holds each
# of their values exactly: the FP8/FP4 formats in float32 (a Cast to one rounds:
# workbench.ops.minifloat), the 2- and 4-bit integers in int8/uint8 (a Cast to one
# wraps, as ml_dtypes' casts do). Values widen on the way in (``widened``);
# onnx_backend narrows an output declared as one on the way out. (bfloat16 has its
# own: DType.bfloat16.)
# (ONNX type -> the round_float format)
HELD_FLOATS = {}
HELD_INTS = {}        # ONNX type -> (bits, signed)
for _name, _fmt in [("FLOAT8E4M3FN", "float8e4m3fn"), ("FLOAT8E4M3FNUZ", "float8e4m3fnuz"),
                    ("FLOAT8E5M2", "float8e5m2"), ("FLOAT8E5M2FNUZ", "float8e5m2fnuz"),
                    ("FLOAT4E2M1", "float4e2m1"), ("FLOAT8E8M0", "float8e8m0")]:
    if hasattr(TensorProto, _name):          # (newer onnx releases add formats)
        HELD_FLOATS[getattr(TensorProto, _name)] = _fmt
for _name, _bits, _signed in [("INT4", 4, True), ("UINT4", 4, False), ("INT2", 2, True),
                              ("UINT2", 2, False)]:
    if hasattr(TensorProto, _name):
        HELD_INTS[getattr(TensorProto, _name)] = (_bits, _signed)
_DTYPES.update({t: DType.float32 for t in HELD_FLOATS})
_DTYPES.update({t: DType.int8 if signed else DType.uint8
                for t, (_, signed) in HELD_INTS.items()})
# ml_dtypes' names of the held types -> the NumPy type holding them
_HOLDER = {helper.tensor_dtype_to_np_dtype(t).name: _DTYPES[t].np
           for t in (*HELD_FLOATS, *HELD_INTS)}

# Never folded even with constant inputs: folding would freeze one random draw.
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                     "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}


# ---------------------------------------------------------------------------------
# dtype checks

def widened(arr: np.ndarray) -> np.ndarray:
    """An ONNX array as the workbench holds it: FP8 and FP4 (ml_dtypes) as float32,
    2- and 4-bit integers as int8/uint8 (each value exactly)."""
    holder = _HOLDER.get(arr.dtype.name)
    return arr.astype(holder) if holder is not None else arr


def held_elem_types() -> set[int]:
    """The ONNX element types held in a wider type (see HELD_FLOATS)."""
    return set(HELD_FLOATS) | set(HELD_INTS)


def to_array(t: onnx.TensorProto) -> np.ndarray:
    """A TensorProto's values (held types widened)."""
    from onnx import numpy_helper
    return widened(numpy_helper.to_array(t))


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


def first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return shown(text.splitlines()[0][:200])


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
            raise _Unsupported(data_dependent(f"{what} input"))
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

    def elem_type(self, name: str) -> int | None:
        """The ONNX element type the model declares for a value, where it does."""
        return None


# ---------------------------------------------------------------------------------
# what handlers share: the model's faults, and axes

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


def handler_key(node: onnx.NodeProto) -> str:
    """The registry's key of a node's op: its type in the default domain,
    ``<domain>.<type>`` in another (``com.microsoft.Gelu``: :mod:`.handlers_gradients`)."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type
    return f"{node.domain}.{node.op_type}"


def supported_op_types() -> list[str]:
    """The ONNX op types the importer maps (others import only when they fold)."""
    return sorted(_HANDLERS)
