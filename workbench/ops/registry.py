"""The op registry: every primitive defined once.

An :class:`OpDef` carries everything any stage needs about an op: its shape rule, its
NumPy reference and codegen kind; for elementwise ops a scalar expression every
renderer prints (and the prelude helpers it calls); for layout ops the index rule
lowering follows and whether a row kernel may hold it; for reductions the combiner and
the error bound the checker uses (and for elementwise ops the slopes it propagates
errors by); for library ops their implementation and flops.
Adding an op means adding one definition; no stage has a switch over op names.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from .index import Index


class Kind(enum.Enum):
    """How codegen treats the op."""
    elementwise = "elementwise"   # scalar expression per element (broadcasting)
    reduce = "reduce"             # combines elements over axes
    layout = "layout"             # moves elements: an index transform, no arithmetic
    opaque = "opaque"             # a library call (matmul, conv)


class RowRole(enum.Enum):
    """How an op may take part in a row-reduction kernel (one row per block or warp)."""
    element = "element"     # computed per element of the row, or once per row when its
                            # result is constant along the row (reductions, their users)
    per_row_view = "per_row_view"   # a view that may move per-row results only (reshape)
    never = "never"         # moves elements across rows: ends the row kernel


OutSpec = tuple[tuple[int, ...], DType]
# scalar(args, input dtypes, output dtype, attrs) -> C expression text
Scalar = Callable[[Sequence[str], Sequence[DType], DType, Mapping[str, Any]], str]


class IndexContext(Protocol):
    """What a layout op's index rule may ask of the lowering that calls it."""

    def shape(self, value: str) -> tuple[int, ...]:
        """The static shape of a graph value."""

    def dtype(self, value: str) -> DType:
        """The element type of a graph value."""

    def at(self, value: str, idx: Index) -> str:
        """A C expression (a variable or literal) for ``value`` at ``idx``."""

    def let(self, dtype: DType, expr: str) -> str:
        """Bind ``expr`` (of compute type ``dtype``) to a fresh variable; its name."""

    def part(self, node: str) -> int | None:
        """The input of concat ``node`` that every index of the loop being emitted
        falls in, where the lowering split the loop at the concat's parts; else None."""


# index(ctx, node, k, idx) -> the C expression of the node's output k at idx
IndexRule = Callable[[IndexContext, Any, int, Index], str]


@dataclass(frozen=True)
class Helper:
    """A helper function (or macro block) generated code calls, printed once in the
    prelude of each source that calls it (codegen/render/helpers.py). ``c`` is the C
    text; ``cuda`` the CUDA text when it differs (``""``: none needed on that target,
    e.g. CUDA has ``rsqrtf``). ``WB_FN`` stands for the target's inline-function
    qualifiers. ``calls``: the helpers its text calls, which come with it (each
    registered before it, so the prelude defines them first)."""
    name: str
    c: str
    cuda: str | None = None
    calls: tuple["Helper", ...] = ()

    def body(self, target: str) -> str:
        return self.c if target == "c" or self.cuda is None else self.cuda


@dataclass(frozen=True)
class Combiner:
    """How a reduction's partial results merge: identity per compute kind and a
    binary step (C text; ``{0}`` the accumulator, ``{1}`` the new value)."""
    identity_f: str
    identity_i: str
    combine_f: str
    combine_i: str
    finish_mean: bool = False
    # OpenMP reduction operator (float, integer) under which SIMD lanes may combine
    simd_op: tuple[str, str] = ("", "")

    def identity(self, kind: str, ctype: str) -> str:
        ident = self.identity_f if kind == "f" else self.identity_i
        return ident.replace("ITYPE", ctype)

    def combine(self, kind: str) -> str:
        return self.combine_f if kind == "f" else self.combine_i


# the flop count from which an elementwise op is priced as a transcendental: exp, log,
# sqrt and rsqrt are counted as 4, tanh, erf, sin, cos and pow as 8 (OpDef.flops)
EXPENSIVE_FLOPS = 4


@dataclass(frozen=True)
class OpDef:
    """Everything about one primitive, for every stage (see the module docstring).

    Per kind: elementwise ops have ``scalar`` (and the ``helpers`` it calls) and
    ``slopes``; layout ops an ``index`` rule and a ``row_role``; reductions a
    ``combiner`` and an ``error_scale``; opaque ops a ``library`` implementation,
    ``library_flops`` and an ``error_scale``.
    """
    name: str
    kind: Kind
    arity: tuple[int, int]                 # min, max inputs
    infer: Callable[[Sequence, Mapping[str, Any]], list[OutSpec]]
    reference: Callable[[Sequence[np.ndarray], Mapping[str, Any]], list[np.ndarray]]
    scalar: Scalar | None = None
    doc: str = ""
    flops: int = 1                          # arithmetic per output element (cost model)
    helpers: tuple[Helper, ...] = ()        # prelude helpers its generated code calls
    index: IndexRule | None = None          # layout: where an output element is read
    # layout: output ``k``'s elements as a strided view of the input's (ops/strided.py)
    # given the input's layout, the attrs and the output shape; None where it is not one
    view: Callable[[Any, Mapping[str, Any], int, tuple], Any] | None = None
    row_role: RowRole = RowRole.element     # inside a row-reduction kernel
    combiner: Combiner | None = None        # reduce: identity and combine step
    # reductions and library ops: the magnitude their float rounding is bounded by --
    # the same op over the inputs' magnitudes (|x| summed, |A| @ |B|) -- given the
    # inputs' error magnitudes in float64 (|x| for exact inputs; see ops.magnitude)
    error_scale: Callable[[Sequence[np.ndarray], Mapping[str, Any]], np.ndarray] | None = None
    # elementwise: |dy/dx_i| for each input, from the inputs and the output in float64 --
    # how far an input's rounding error carries into the result (see ops.magnitude)
    slopes: Callable[[Sequence[np.ndarray], np.ndarray], Sequence] | None = None
    # opaque: the op on an array module (NumPy on the CPU, CuPy on the GPU)
    library: Callable[[Any, Sequence, Mapping[str, Any]], list] | None = None
    # opaque: arithmetic from the input shapes, the output shape and the attrs
    library_flops: Callable[[Sequence[tuple], tuple, Mapping[str, Any]], float] | None = None
    # the elements of input ``k`` a generated kernel loads to compute the whole output,
    # per axis of that input (ops/footprint.py: None every index, an array the indices,
    # an int how many, which unknown), given the input shapes, the attrs, k and the
    # inputs' values where they are constants (else None); None: every element
    reads: Callable[[Sequence[tuple], Mapping[str, Any], int, Sequence], tuple] | None = None

    @property
    def expensive(self) -> bool:
        """Transcendental-class arithmetic (exp, log, sqrt, erf, tanh, pow...): what a
        CPU's probe times op by op (Device.op_rates) and what a planner will not
        recompute for every element of a wider loop unless the price says it pays
        (fusion/recompute.py)."""
        return self.kind is Kind.elementwise and self.flops >= EXPENSIVE_FLOPS

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
    if not isinstance(name, str):
        raise GraphError(f"an op is named by a string, not {type(name).__name__} "
                         f"{name!r:.40}; known ops: {', '.join(sorted(_REGISTRY))}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(sorted(_REGISTRY))}") \
            from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def all_helpers() -> tuple[Helper, ...]:
    """Every op's prelude helpers and the helpers they call, each once, in
    registration order (a helper after those it calls)."""
    seen: dict[str, Helper] = {}

    def add(h: Helper) -> None:
        for c in h.calls:
            add(c)
        seen.setdefault(h.name, h)
    for op in _REGISTRY.values():
        for h in op.helpers:
            add(h)
    return tuple(seen.values())


def evaluate_node(node, args: Sequence[np.ndarray], outs: Sequence,
                  half_as_float: bool = False) -> list[np.ndarray]:
    """A node's outputs by its op's NumPy reference, each a C-contiguous array of the
    declared Value's shape and dtype (float16 and bfloat16 kept in float32 with
    half_as_float).

    bfloat16 arguments are widened to float32 first (exactly), so every op computes in
    float32 and rounds its result once, as the kernels do: NumPy has no bfloat16
    arithmetic, and ml_dtypes' ufuncs cover only some ops. float16 keeps NumPy's own
    arithmetic (float32 inside each ufunc, rounded to half).

    References may return scalars or broadcast views; those are coerced here, once,
    for every caller (the reference runtime, per-kernel checks, constant folding).
    """
    args = [widen_bf16(a) for a in args]
    res = []
    for v, arr in zip(outs, get_op(node.op).reference(args, node.attr_map)):
        dt = np.float32 if half_as_float and v.dtype.is_half else v.dtype.np
        a = np.asarray(arr)
        if a.shape != v.shape:
            a = a.reshape(v.shape) if a.size == v.numel else np.broadcast_to(a, v.shape)
        a = np.asarray(a, dtype=dt)
        # (ascontiguousarray would turn 0-d results into 1-d)
        res.append(a if a.flags.c_contiguous and a.flags.writeable else a.copy(order="C"))
    return res


def widen_bf16(a):
    """A bfloat16 array as float32 (exact); anything else as it is."""
    return a.astype(np.float32) if getattr(a, "dtype", None) == BF16_NP else a


BF16_NP = DType.bfloat16.np


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError("shapes " + ", ".join(str(list(s)) for s in shapes)
                         + " do not broadcast") from None


# -- attribute validation: every shape rule checks its attributes with these, so a
# node with an attribute its kernels cannot honour (an axis out of range, a negative
# size, a float where an integer belongs) is refused wherever it is made

_REQUIRED = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def attr_int(attrs: Mapping[str, Any], key: str, default: Any = _REQUIRED) -> int:
    """An integer attribute (not a bool, not 1.0); GraphError naming it otherwise."""
    v = attrs.get(key, default)
    if v is None and default is not _REQUIRED:     # null: the default
        v = default
    if v is _REQUIRED:
        raise GraphError(f"attr {key} is required (an integer)")
    if not _is_int(v):
        raise GraphError(f"attr {key} must be an integer, got {v!r:.60}")
    return int(v)


def attr_ints(attrs: Mapping[str, Any], key: str, default: Any = _REQUIRED
              ) -> tuple[int, ...]:
    """A list-of-integers attribute, as a tuple of ints."""
    v = attrs.get(key, default)
    if v is None and default is not _REQUIRED:     # null: the default
        return default
    if v is _REQUIRED:
        raise GraphError(f"attr {key} is required (a list of integers)")
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise GraphError(f"attr {key} must be a list of integers, got {v!r:.60}")
    bad = [x for x in v if not _is_int(x)]
    if bad:
        raise GraphError(f"attr {key} must be a list of integers, got {list(v)!r:.80} "
                         f"({bad[0]!r:.30} is not an integer)")
    return tuple(int(x) for x in v)


def attr_bool(attrs: Mapping[str, Any], key: str, default: bool) -> bool:
    """A boolean attribute: true/false, or the integers 1/0 (ONNX's spelling)."""
    v = attrs.get(key, default)
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if _is_int(v) and int(v) in (0, 1):
        return bool(v)
    raise GraphError(f"attr {key} must be true or false (or 1 or 0), got {v!r:.60}")


def check_axis(axis: int, rank: int, key: str = "axis") -> int:
    """An axis in [-rank, rank) as its index in [0, rank)."""
    if not -rank <= axis < rank:
        raise GraphError(f"{key} {axis} is out of range for rank {rank} "
                         f"(valid: {-rank} to {rank - 1})" if rank else
                         f"{key} {axis} is out of range: the input is a scalar (rank 0)")
    return axis % rank


def normalize_axes(axes, rank: int, key: str = "axes") -> tuple[int, ...]:
    """Axes (integers in [-rank, rank), none repeated) as sorted indices in [0, rank).

    A rank-0 value has no axes to name; ``axes=[0]`` on it is accepted as "every
    axis" (the ONNX importer's habit), meaning none."""
    if isinstance(axes, range):
        axes = tuple(axes)
    vals = attr_ints({key: axes}, key)
    out = []
    for a in vals:
        if not -rank <= a < max(rank, 1):
            raise GraphError(f"axis {a} in {key} {list(vals)} is out of range for rank "
                             f"{rank} (valid: {-rank} to {rank - 1})" if rank else
                             f"axis {a} in {key} {list(vals)} is out of range for rank 0")
        out.append(a % rank if rank else 0)
    if len(set(out)) != len(out):
        raise GraphError(f"repeated axis in {key} {list(vals)}")
    return tuple(sorted(out)) if rank else ()
