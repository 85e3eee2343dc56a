"""The dataflow graph: values with static shapes, nodes in topological order.

A :class:`Graph` is immutable. Nodes refer to values by name; value names are the
model's own text and are for display only -- generated code never uses them (codegen
gives every buffer a sanitized identifier).

Example::

    >>> from workbench.ir import GraphBuilder
    >>> b = GraphBuilder("tiny")
    >>> x = b.input("x", (4, 8))
    >>> b.output(b.exp(x), "y")
    >>> g = b.build(); len(g.nodes)
    1
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from ..errors import GraphError, shown
from ..dtypes import DType
from ..shapes import Shape, check_shape
from ..ops import get_op
from .printer import format_graph


def freeze_attr(v: Any) -> Any:
    """Attributes are stored hashable: lists become tuples, numpy scalars Python ones."""
    if isinstance(v, (list, tuple)):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return tuple(freeze_attr(x) for x in v.tolist())
    return v


class LazyConstants(Mapping):
    """Constant data made on first use: ``makers`` maps a name to (shape, numpy dtype,
    make), ``make()`` returning the array. The JSON format's ``fill`` and ``random``
    constants are held this way, so loading, verifying and printing a graph allocate
    nothing; reading ``g.constants[name]`` makes the array once."""

    def __init__(self, arrays: Mapping[str, np.ndarray] | None = None,
                 makers: Mapping[str, tuple[Shape, np.dtype, Callable[[], np.ndarray]]]
                 | None = None, order: Iterable[str] | None = None):
        self._arrays = dict(arrays or {})
        self._makers = dict(makers or {})
        names = list(order) if order is not None else [*self._arrays, *self._makers]
        self._order = [n for n in names if n in self._arrays or n in self._makers]

    def __getitem__(self, name: str) -> np.ndarray:
        a = self._arrays.get(name)
        if a is None:
            make = self._makers[name][2]
            a = self._arrays[name] = make()
        return a

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._arrays or name in self._makers

    def spec(self, name: str) -> tuple[Shape, np.dtype]:
        """Shape and dtype of a constant, without making it."""
        if name in self._makers:
            shape, dt, _ = self._makers[name]
            return tuple(shape), np.dtype(dt)
        a = self._arrays[name]
        return tuple(a.shape), a.dtype


def constant_spec(constants: Mapping[str, np.ndarray], name: str) -> tuple[Shape, np.dtype]:
    """A constant's (shape, numpy dtype), without making lazy data."""
    if isinstance(constants, LazyConstants):
        return constants.spec(name)
    a = constants[name]
    dt = a.dtype if isinstance(a, np.ndarray) else np.asarray(a).dtype
    return tuple(np.shape(a)), dt


@dataclass(frozen=True)
class Value:
    """A tensor flowing along an edge: its name, static shape and element type."""
    name: str
    shape: Shape
    dtype: DType

    @property
    def numel(self) -> int:
        return math.prod(self.shape)   # (np.prod is ~20x slower on small tuples)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True)
class Origin:
    """Where a primitive came from: the composite it was decomposed from and the
    model node that held it (e.g. ``Origin("LayerNormalization", "encoder/ln1")``)."""
    composite: str
    source: str


@dataclass(frozen=True)
class Node:
    """One primitive op application.

    ``id`` is stable and sanitized (``n12``); ``name`` is the model's own name, for
    display. ``attrs`` is a sorted tuple of (key, value) pairs so nodes are hashable.
    """
    id: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    name: str = ""
    origin: Origin | None = None

    @staticmethod
    def make(id: str, op: str, inputs: Iterable[str], outputs: Iterable[str],
             attrs: Mapping[str, Any] | None = None, name: str = "",
             origin: Origin | None = None) -> "Node":
        items = tuple(sorted((k, freeze_attr(v)) for k, v in (attrs or {}).items()))
        return Node(id, op, tuple(inputs), tuple(outputs), items, name or id, origin)

    @cached_property
    def attr_map(self) -> dict[str, Any]:
        return dict(self.attrs)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attr_map.get(key, default)


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable dataflow graph.

    ``values`` holds every value (inputs, constants, node outputs); ``constants``
    maps constant value names to their data; ``nodes`` is in topological order.
    """
    name: str
    values: tuple[Value, ...]
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    description: str = ""
    # optional (low, high) per input: the range measurements draw random inputs from,
    # for inputs that must be, say, non-negative (Adam's second moment under a sqrt)
    input_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @cached_property
    def value_map(self) -> dict[str, Value]:
        return {v.name: v for v in self.values}

    @cached_property
    def node_map(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def position(self) -> dict[str, int]:
        """node id -> its index in the topological order (kernel ids and group order
        are derived from it; cached because planners ask for it at every merge)."""
        return {n.id: i for i, n in enumerate(self.nodes)}

    @cached_property
    def producer(self) -> dict[str, Node]:
        """value name -> the node that produces it (absent for inputs and constants)."""
        return {o: n for n in self.nodes for o in n.outputs}

    @cached_property
    def consumers(self) -> dict[str, tuple[Node, ...]]:
        """value name -> nodes that read it, in topological order."""
        out: dict[str, list[Node]] = {v.name: [] for v in self.values}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out[i].append(n)
        return {k: tuple(v) for k, v in out.items()}

    def value(self, name: str) -> Value:
        try:
            return self.value_map[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no value {name!r}") from None

    def node(self, node_id: str) -> Node:
        try:
            return self.node_map[node_id]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no node {node_id!r}; "
                             f"node ids are n0..n{len(self.nodes) - 1}") from None

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes, inputs={list(self.inputs)}, "
                f"outputs={list(self.outputs)})")

    def __str__(self) -> str:
        return format_graph(self)

    def verify(self) -> "Graph":
        """Check the graph is well formed; raise :class:`GraphError` naming the fault.

        Checks: the parts' types, every shape (integers >= 0, at most MAX_ELEMENTS
        elements), unique names, at least one node and one output, every input defined
        before use, topological order, constant data matching declared shape and dtype,
        every node's arity and attributes (its op's shape rule validates them, so no
        kernel can read or write out of bounds) and its output shapes and dtypes
        agreeing with the rule, and outputs that are computed, listed once and are
        neither inputs nor constants. Iterative: a graph of any depth verifies.
        """
        if self.__dict__.get("_verified"):     # a Graph is immutable: once is enough
            return self
        for v in self.values:
            if not isinstance(v, Value) or not isinstance(v.name, str):
                raise GraphError(f"graph {self.name!r}: values must be Values named by "
                                 f"strings, got {v!r:.80}")
            if not isinstance(v.dtype, DType):
                raise GraphError(f"value {v.name!r} has dtype {v.dtype!r:.40}, not a DType")
            if not isinstance(v.shape, tuple):
                raise GraphError(f"value {v.name!r}: shape must be a tuple, got "
                                 f"{v.shape!r:.80}")
            check_shape(v.shape, f"value {v.name!r}")
        names = [v.name for v in self.values]
        if len(set(names)) != len(names):
            seen: set[str] = set()
            dup = sorted({n for n in names if n in seen or seen.add(n)})
            raise GraphError(f"value names defined twice: {dup}")
        for what, group in (("node", self.nodes), ("input", self.inputs),
                            ("output", self.outputs)):
            for x in group:
                if what == "node" and not isinstance(x, Node) or \
                        what != "node" and not isinstance(x, str):
                    raise GraphError(f"graph {self.name!r}: {what}s must be "
                                     f"{'Nodes' if what == 'node' else 'value names'}, "
                                     f"got {x!r:.80}")
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise GraphError("node ids are not unique")
        if not self.nodes:
            raise GraphError(f"graph {self.name!r} has no nodes: there is nothing to compute; "
                             "add at least one op")
        if not self.outputs:
            raise GraphError(f"graph {self.name!r} has no outputs; name at least one "
                             "computed value as an output")
        both = sorted(set(self.inputs) & set(self.constants))
        if both or len(set(self.inputs)) != len(self.inputs):
            raise GraphError(f"graph {self.name!r}: {both or 'an input'} is defined twice "
                             "(an input and a constant, or two inputs)")
        defined = set(self.inputs) | set(self.constants)
        for name in defined:
            if name not in self.value_map:
                raise GraphError(f"input or constant {name!r} has no value entry")
        for name in self.constants:
            v = self.value_map[name]
            shape, dt = constant_spec(self.constants, name)
            try:
                cdt = DType.of(dt)
            except ValueError:
                cdt = None
            if shape != v.shape or cdt is not v.dtype:
                raise GraphError(f"constant {name!r} data is {dt}{list(shape)}"
                                 f" but declared {v.dtype.value}{list(v.shape)}")
        for n in self.nodes:
            op = get_op(n.op)  # raises for unknown ops
            for i in n.inputs:
                if i not in defined:
                    raise GraphError(f"node {n.name!r} ({n.op}) reads {i!r} before it is "
                                     "defined: the nodes are not in topological order or "
                                     "the value does not exist")
            ins = [self.value_map[i] for i in n.inputs]
            expect = infer_node(op, ins, n.attr_map, f"node {n.name!r} ({n.op})")
            if len(expect) != len(n.outputs):
                raise GraphError(f"node {n.name!r} ({n.op}) has {len(n.outputs)} outputs, "
                                 f"its op defines {len(expect)}")
            for o, (shape, dtype) in zip(n.outputs, expect):
                v = self.value_map.get(o)
                if v is None:
                    raise GraphError(f"node {n.name!r} output {o!r} has no value entry")
                if v.shape != shape or v.dtype is not dtype:
                    raise GraphError(
                        f"node {n.name!r} ({n.op}) output {o!r} is declared "
                        f"{v.dtype.value}{list(v.shape)} but its inputs give "
                        f"{dtype.value}{list(shape)}")
                if o in defined:
                    raise GraphError(f"value {o!r} is defined twice")
                defined.add(o)
        for name, rng in self.input_ranges.items():
            ok = (isinstance(rng, tuple) and len(rng) == 2
                  and all(isinstance(r, (int, float)) and math.isfinite(r) for r in rng))
            if name not in self.inputs or not ok or not rng[0] < rng[1]:
                raise GraphError(f"input range for {name!r} must name an input and be two "
                                 f"finite numbers low < high, got {rng!r:.80}")
        listed: set[str] = set()
        for o in self.outputs:
            if o in listed:
                raise GraphError(f"graph output {o!r} is listed twice; list it once, or "
                                 "output a copy (an identity reshape) under another name")
            listed.add(o)
            for kind, names_ in (("an input", self.inputs), ("a constant", self.constants)):
                if o in names_:
                    raise GraphError(f"graph output {o!r} is {kind}: outputs are computed "
                                     "by ops; drop it, or output a copy (an identity "
                                     "reshape) under another name")
            if o not in defined:
                raise GraphError(f"graph output {o!r} is never computed")
        self.__dict__["_verified"] = True
        return self


# what a shape rule may raise on attributes it did not expect (the rules validate their
# attributes with GraphErrors; this is the net under them)
_ATTR_FAULTS = (KeyError, TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError,
                AttributeError)


def infer_node(op, ins, attrs: Mapping[str, Any], where: str | None = None) -> list:
    """``op.infer(ins, attrs)`` with arity checked and any fault as one GraphError
    prefixed by ``where`` (the node; None: the op's name, unless the message starts
    with it): the verifier, the JSON loader and the builder all pass every node
    through here."""
    try:
        op.check_arity(len(ins))
        return op.infer(ins, attrs)
    except GraphError as e:
        if where is None and str(e).startswith((op.name, f"op {op.name}")):
            raise GraphError(str(e)) from None
        raise GraphError(f"{where or op.name}: {e}") from None
    except _ATTR_FAULTS as e:
        text = shown(str(e).strip().splitlines()[0][:160]) if str(e).strip() else ""
        raise GraphError(f"{where or op.name}: bad attributes {dict(attrs)!r:.160} "
                         f"({type(e).__name__}{': ' + text if text else ''}); see the op's "
                         "doc (workbench.ops.get_op(name).doc)") from None
