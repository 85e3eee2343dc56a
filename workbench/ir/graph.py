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
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import GraphError
from .dtypes import DType

Shape = tuple[int, ...]


def freeze_attr(v: Any) -> Any:
    """Attributes are stored hashable: lists become tuples, numpy scalars Python ones."""
    if isinstance(v, (list, tuple)):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return tuple(freeze_attr(x) for x in v.tolist())
    return v


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
        from .printer import format_graph
        return format_graph(self)

    def verify(self) -> "Graph":
        """Check the graph is well formed; raise :class:`GraphError` naming the fault.

        Checks: unique names, every input defined before use, topological order,
        constant data matching declared shape and dtype, and every node's output
        shapes and dtypes agreeing with its op's shape rule.
        """
        from ..ops import get_op
        names = [v.name for v in self.values]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise GraphError(f"value names defined twice: {dup}")
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise GraphError("node ids are not unique")
        defined = set(self.inputs) | set(self.constants)
        for name in defined:
            if name not in self.value_map:
                raise GraphError(f"input or constant {name!r} has no value entry")
        for name, data in self.constants.items():
            v = self.value_map[name]
            if tuple(data.shape) != v.shape or DType.of(data.dtype) is not v.dtype:
                raise GraphError(f"constant {name!r} data is {data.dtype}{list(data.shape)}"
                                 f" but declared {v.dtype.value}{list(v.shape)}")
        for n in self.nodes:
            op = get_op(n.op)  # raises for unknown ops
            for i in n.inputs:
                if i not in defined:
                    raise GraphError(f"node {n.name!r} ({n.op}) reads {i!r} before it is "
                                     "defined: the nodes are not in topological order or "
                                     "the value does not exist")
            ins = [self.value_map[i] for i in n.inputs]
            try:
                expect = op.infer(ins, n.attr_map)
            except GraphError as e:
                raise GraphError(f"node {n.name!r} ({n.op}): {e}") from None
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
        for name, (lo, hi) in self.input_ranges.items():
            if name not in self.inputs or not lo < hi:
                raise GraphError(f"input range for {name!r} must name an input and have "
                                 f"low < high, got [{lo}, {hi}]")
        for o in self.outputs:
            if o not in defined:
                raise GraphError(f"graph output {o!r} is never computed")
        return self
