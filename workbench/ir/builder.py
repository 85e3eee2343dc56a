"""A small Python API for building graphs.

Every registered op is a method (``b.exp(x)``, ``b.reduce_sum(x, axes=[-1])``),
tensors support arithmetic operators, and Python numbers become scalar constants of
the other operand's dtype. Composites (``b.layer_norm``, ``b.softmax``...) decompose
into primitives tagged with their origin.

Example::

    >>> b = GraphBuilder("rmsnorm")
    >>> x = b.input("x", (8, 16))
    >>> w = b.constant(np.ones(16, np.float32), "w")
    >>> ms = b.reduce_mean(x * x, axes=[-1], keepdims=True)
    >>> b.output(x * b.rsqrt(ms + 1e-6) * w, "y")
    >>> b.build().nodes[0].op
    'mul'
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from .graph import Graph, Node, Origin, Value, freeze_attr, infer_node
from ..shapes import check_shape
from ..ops import Kind, all_ops, get_op, normalize_axes
from ..ops.elementwise import cast_target
from ..ops.registry import attr_bool
from . import composites


class Tensor:
    """A handle to a value while a graph is being built."""

    __array_priority__ = 1000  # so ndarray + Tensor defers to Tensor

    def __init__(self, builder: "GraphBuilder", name: str):
        self.b, self.name = builder, name

    @property
    def value(self) -> Value:
        try:
            return self.b._values[self.name]
        except KeyError:
            raise GraphError(f"tensor {self.name!r} was renamed by b.output(); use the "
                             "tensor that b.output() returned") from None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> DType:
        return self.value.dtype

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.dtype.value}{list(self.shape)})"

    def _bin(self, op, other, swap=False):
        other = self.b.as_tensor(other, like=self)
        a, c = (other, self) if swap else (self, other)
        return self.b.op(op, a, c)

    __add__ = lambda s, o: s._bin("add", o)
    __radd__ = lambda s, o: s._bin("add", o, True)
    __sub__ = lambda s, o: s._bin("sub", o)
    __rsub__ = lambda s, o: s._bin("sub", o, True)
    __mul__ = lambda s, o: s._bin("mul", o)
    __rmul__ = lambda s, o: s._bin("mul", o, True)
    __truediv__ = lambda s, o: s._bin("div", o)
    __rtruediv__ = lambda s, o: s._bin("div", o, True)
    __pow__ = lambda s, o: s._bin("pow", o)
    __neg__ = lambda s: s.b.op("neg", s)


class GraphBuilder:
    """Builds a :class:`Graph` op by op; ``build()`` verifies and freezes it."""

    def __init__(self, name: str = "graph", description: str = ""):
        self.name, self.description = name, description
        self._values: dict[str, Value] = {}
        self._nodes: list[Node] = []
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._constants: dict[str, np.ndarray] = {}
        self._ranges: dict[str, tuple[float, float]] = {}
        self._origin: Origin | None = None
        self._scope: Origin | None = None  # the innermost scope(), if any
        self._counter = 0

    @staticmethod
    def extending(g: Graph) -> "GraphBuilder":
        """A builder holding ``g``'s values, nodes (renumbered in order), inputs,
        constants and input ranges, and no outputs: new ops go after ``g``'s (an
        optimizer step appended to an imported training graph)."""
        b = GraphBuilder(g.name, g.description)
        b._values = {v.name: v for v in g.values}
        b._nodes = [Node(f"n{i}", n.op, n.inputs, n.outputs, n.attrs, n.name, n.origin)
                    for i, n in enumerate(g.nodes)]
        b._inputs = list(g.inputs)
        b._constants = dict(g.constants)
        b._ranges = dict(g.input_ranges)
        return b

    # -- names -----------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        while True:
            self._counter += 1
            name = f"{prefix}{self._counter}"
            if name not in self._values:
                return name

    def _define(self, name: str | None, shape, dtype, prefix="t") -> str:
        name = name or self._fresh(prefix)
        if not isinstance(name, str):
            raise GraphError(f"value names are strings, got {name!r:.40}")
        if name in self._values:
            raise GraphError(f"value name {name!r} is used twice")
        self._values[name] = Value(name, check_shape(shape, f"value {name!r}"),
                                   DType.of(dtype))
        return name

    # -- leaves ----------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: Any = "float32",
              range: tuple[float, float] | None = None) -> Tensor:
        """A graph input; ``range=(low, high)`` is where random test inputs are drawn."""
        check_shape(shape, f"input {name!r}")
        if range is not None:
            try:
                lo, hi = (float(r) for r in range)
            except (TypeError, ValueError):
                raise GraphError(f"input {name!r}: range must be two numbers (low, high), "
                                 f"got {range!r:.60}") from None
        self._inputs.append(self._define(name, shape, dtype))
        if range is not None:
            self._ranges[name] = (lo, hi)
        return Tensor(self, name)

    def constant(self, data: Any, name: str | None = None, dtype: Any = None) -> Tensor:
        arr = np.asarray(data, dtype=None if dtype is None else DType.of(dtype).np)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        if not _immutable(arr):
            # (the caller may change its array later; ascontiguousarray would make 0-d
            # arrays 1-d)
            arr = arr.copy(order="C")
        n = self._define(name, arr.shape, DType.of(arr.dtype), "c")
        self._constants[n] = arr
        return Tensor(self, n)

    def as_tensor(self, x: Any, like: Tensor | None = None) -> Tensor:
        """A Tensor as is; a Python or NumPy number as a scalar constant of like's dtype."""
        if isinstance(x, Tensor):
            return x
        dt = like.dtype if like is not None else None
        return self.constant(np.asarray(x, dtype=dt.np if dt else None))

    # -- ops -------------------------------------------------------------------
    def op(self, op: str, *inputs: Any, name: str | None = None,
           out_names: Sequence[str] | None = None, node_name: str = "",
           **attrs: Any) -> Any:
        """Apply a registered op; returns a Tensor, or a list for multi-output ops."""
        od = get_op(op)
        # a Python number takes the dtype of the data operands (not where's condition)
        tensors = [t for t in inputs if isinstance(t, Tensor)]
        like = next((t for t in tensors if t.dtype is not DType.bool), None) or \
            next(iter(tensors), None)
        ts = [self.as_tensor(t, like) for t in inputs]
        od.check_arity(len(ts))
        ins = [t.value for t in ts]
        # attributes as they will be stored (NumPy values as Python ones), validated by
        # the op's shape rule before anything is added
        attrs = {k: freeze_attr(v) for k, v in attrs.items()}
        specs = infer_node(od, ins, attrs)
        if od.kind is Kind.reduce:
            axes = attrs.get("axes")
            attrs["axes"] = normalize_axes(range(len(ins[0].shape)) if axes is None else axes,
                                           len(ins[0].shape))
            attrs["keepdims"] = attr_bool(attrs, "keepdims", True)
        if op == "cast":
            attrs["to"] = cast_target(attrs).value
        names = list(out_names or [])
        if name is not None and len(specs) == 1:
            names = [name]
        outs = [self._define(names[i] if i < len(names) else None, s, d)
                for i, (s, d) in enumerate(specs)]
        node_id = f"n{len(self._nodes)}"
        self._nodes.append(Node.make(node_id, op, [t.name for t in ts], outs, attrs,
                                     node_name or node_id, self._origin))
        res = [Tensor(self, o) for o in outs]
        return res[0] if len(res) == 1 else res

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)
        if op in composites.__all__:
            fn = getattr(composites, op)
            return lambda *a, **k: fn(self, *a, **k)
        if op in all_ops():
            return lambda *a, **k: self.op(op, *a, **k)
        raise AttributeError(f"GraphBuilder has no op or composite {op!r}")

    @contextlib.contextmanager
    def composite(self, kind: str, source: str = ""):
        """Tag every node made inside the block as part of one composite op."""
        outer = self._origin
        if outer is not None and outer is self._scope:
            # directly inside a scope: the composite's own kind, under the scope's namespace
            self._origin = Origin(kind, outer.source)
        else:
            self._origin = outer or Origin(kind, source or f"{kind}_{len(self._nodes)}")
        try:
            yield
        finally:
            self._origin = outer

    @contextlib.contextmanager
    def scope(self, kind: str, source: str):
        """Tag every node made inside the block ``Origin(kind, source)``: a namespace,
        such as a module path. Unlike :meth:`composite` it replaces any enclosing tag,
        and a composite opened directly inside keeps its own kind under this source::

            with b.scope("BertSelfAttention", "attention.self"):
                p = b.softmax(s)       # Origin("Softmax", "attention.self")
                y = b.matmul(p, v)     # Origin("BertSelfAttention", "attention.self")
        """
        outer = self._origin, self._scope
        self._origin = self._scope = Origin(kind, source)
        try:
            yield
        finally:
            self._origin, self._scope = outer

    # -- outputs ---------------------------------------------------------------
    def output(self, t: Tensor, name: str | None = None) -> Tensor:
        """Mark t as a graph output, renaming its value to name if given."""
        if not isinstance(t, Tensor) or t.b is not self:
            raise GraphError(f"b.output() takes a tensor this builder made, got {t!r:.60}")
        if name and name != t.name:
            self._rename(t.name, name)
            t = Tensor(self, name)
        self._outputs.append(t.name)
        return t

    def _rename(self, old: str, new: str) -> None:
        if new in self._values:
            raise GraphError(f"value name {new!r} is used twice")
        if old in self._inputs or old in self._constants:
            raise GraphError(f"cannot rename input or constant {old!r}")
        v = self._values.pop(old)
        self._values[new] = Value(new, v.shape, v.dtype)
        sub = lambda names: tuple(new if n == old else n for n in names)
        self._nodes = [Node(n.id, n.op, sub(n.inputs), sub(n.outputs), n.attrs, n.name,
                            n.origin) for n in self._nodes]
        self._outputs = list(sub(self._outputs))

    def build(self) -> Graph:
        if not self._outputs:
            raise GraphError(f"graph {self.name!r} has no outputs; call b.output(t)")
        used = set(self._inputs) | set(self._outputs)
        for n in self._nodes:
            used.update(n.inputs)
            used.update(n.outputs)
        consts = {k: v for k, v in self._constants.items() if k in used}
        values = tuple(v for k, v in self._values.items() if k in used)
        return Graph(self.name, values, tuple(self._nodes), tuple(self._inputs),
                     tuple(self._outputs), consts, self.description,
                     dict(self._ranges)).verify()


def graph_from_parts(name: str, values: Iterable[Value], nodes: Iterable[Node],
                     inputs, outputs, constants, description: str = "") -> Graph:
    """Assemble and verify a graph from already-made parts (used by importers)."""
    return Graph(name, tuple(values), tuple(nodes), tuple(inputs), tuple(outputs),
                 dict(constants), description).verify()


def _immutable(arr: np.ndarray) -> bool:
    """An array no one can change: a read-only C-ordered view of a ``bytes`` object (an
    ONNX initializer's, as ``numpy_helper.to_array`` reads it), kept as it is rather
    than copied (BERT-base's 440 MB of weights: a second of its import)."""
    if arr.flags.writeable or not arr.flags.c_contiguous:
        return False
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, bytes)
