"""The op registry: every primitive defined once.

An :class:`OpDef` carries everything any stage needs about an op -- its shape rule,
its NumPy reference, its DNNFusion mapping type, its codegen kind and, for
elementwise ops, a scalar expression every renderer prints. Adding an op means adding
one definition; no renderer has a switch over op names.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import GraphError
from ..ir.dtypes import DType


class Mapping_(enum.Enum):
    """DNNFusion's mapping types: how output elements depend on input elements."""
    one_to_one = "one-to-one"
    one_to_many = "one-to-many"
    many_to_many = "many-to-many"
    reorganize = "reorganize"
    shuffle = "shuffle"


class Kind(enum.Enum):
    """How codegen treats the op."""
    elementwise = "elementwise"   # scalar expression per element (broadcasting)
    reduce = "reduce"             # combines elements over axes
    layout = "layout"             # moves elements: an index transform, no arithmetic
    opaque = "opaque"             # a library call (matmul, conv)


OutSpec = tuple[tuple[int, ...], DType]
# scalar(args, input dtypes, output dtype, attrs) -> C expression text
Scalar = Callable[[Sequence[str], Sequence[DType], DType, Mapping[str, Any]], str]


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: Kind
    mapping: Mapping_
    arity: tuple[int, int]                 # min, max inputs
    infer: Callable[[Sequence, Mapping[str, Any]], list[OutSpec]]
    reference: Callable[[Sequence[np.ndarray], Mapping[str, Any]], list[np.ndarray]]
    scalar: Scalar | None = None
    doc: str = ""
    flops: int = 1                          # arithmetic per output element (cost model)

    def check_arity(self, n: int) -> None:
        lo, hi = self.arity
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise GraphError(f"op {self.name} takes {want} inputs, got {n}")


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name} registered twice")
    _REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(sorted(_REGISTRY))}") \
            from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def evaluate_node(node, args: Sequence[np.ndarray], outs: Sequence,
                  half_as_float: bool = False) -> list[np.ndarray]:
    """A node's outputs by its op's NumPy reference, each a C-contiguous array of the
    declared Value's shape and dtype (float16 kept in float32 with half_as_float).

    References may return scalars or broadcast views; those are coerced here, once,
    for every caller (the reference runtime, per-kernel checks, constant folding).
    """
    res = []
    for v, arr in zip(outs, get_op(node.op).reference(args, node.attr_map)):
        dt = np.float32 if half_as_float and v.dtype is DType.float16 else v.dtype.np
        a = np.asarray(arr)
        if a.shape != v.shape:
            a = a.reshape(v.shape) if a.size == v.numel else np.broadcast_to(a, v.shape)
        a = np.asarray(a, dtype=dt)
        # (ascontiguousarray would turn 0-d results into 1-d)
        res.append(a if a.flags.c_contiguous and a.flags.writeable else a.copy(order="C"))
    return res


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError("shapes " + ", ".join(str(list(s)) for s in shapes)
                         + " do not broadcast") from None


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < max(rank, 1):
            raise GraphError(f"axis {a} is out of range for rank {rank}")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise GraphError(f"repeated axis in {list(axes)}")
    return tuple(sorted(out))
