"""The bytes a group's kernel reads of each value it takes from outside: the elements
its loads touch, each counted once, not the buffer -- the one rule both the cost model
(``features.py``) and the kernel IR (``Kernel.bytes_read``, through
``Buffer.unread``) count by, and that the CUDA emulator's distinct bytes check
(``tests/runtime/test_read_footprint.py``).

A value ``v`` is followed through the group's layout ops that read it in place -- a
reshape, transpose, slice, split or expand (``OpDef.view``, ops/strided.py) -- as a
strided view of ``v``'s buffer; where the walk meets any other op, that op's ``reads``
rule (ops/footprint.py) says which of its input's elements it loads (a gather's rows,
a window's or convolution's positions), and every other op loads all of them. An
input broadcast over another axis (an elementwise op's bias, an expand) is read once
per distinct element: the kernel re-reads it from cache, so its bytes are its own.
The parts are joined exactly (their buffer offsets marked) where the buffer is small
enough, else summed (capped at the buffer): a gather's rows of unknown indices count
at worst as all distinct.

    >>> read_elements(g, ("gather",), "table", ())    # doctest: +SKIP
    98304                                                # 128 rows of 768
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from ..ir import Graph
from ..ops import get_op
from ..ops.strided import Strided

# overlapping parts of a buffer up to this many elements are joined exactly (marked)
MARK_LIMIT = 1 << 24


class _Members(set):
    """The group's nodes, and the values it writes out."""

    def __init__(self, nodes, outputs):
        super().__init__(nodes)
        self.outputs = set(outputs)


class _Whole(Exception):
    """The kernel reads every element of the value (the walk stops early)."""


def read_elements(g: Graph, nodes: Sequence[str], value: str, outputs: Sequence[str],
                  library: bool = False) -> int:
    """Elements of ``value`` (a group input) that the kernel of the group of ``nodes``
    (writing ``outputs``: ``group_io``'s) loads. A library call (``library``) reads its
    inputs whole."""
    numel = g.value(value).numel
    if library or numel == 0:
        return numel
    members = _Members(nodes, outputs)
    # (the planners price many groups: an input every member reads whole -- elementwise
    # ops, reductions -- is settled without a walk)
    if not any(c.id in members and (get_op(c.op).view is not None or
                                    get_op(c.op).reads is not None)
               for c in g.consumers[value]):
        return numel
    parts: list[tuple[Strided, tuple]] = []
    try:
        _walk(g, members, value, Strided.contiguous(g.value(value).shape), parts, numel)
    except _Whole:
        return numel
    return min(numel, _join(parts, numel))


def read_bytes(g: Graph, nodes: Sequence[str], value: str, outputs: Sequence[str],
               library: bool = False) -> int:
    return read_elements(g, nodes, value, outputs, library) * g.value(value).dtype.itemsize


def _walk(g: Graph, members: "_Members", v: str, layout: Strided, parts: list,
          numel: int) -> None:
    """Add the parts of the buffer that the group's readers of ``v`` (``layout``: where
    ``v``'s elements lie in it) load."""
    every = tuple(None for _ in layout.axes)
    if v in members.outputs:
        _add(parts, layout, every, numel)   # a group output: computed, so read, whole
    for c in g.consumers[v]:
        if c.id not in members:
            continue
        op = get_op(c.op)
        for k, i in enumerate(c.inputs):
            if i != v:
                continue
            if op.view is not None:
                views = [_view(c.op, c.attrs, j, layout, g.value(o).shape)
                         for j, o in enumerate(c.outputs)]
                if all(x is not None for x in views):
                    for o, x in zip(c.outputs, views):
                        _walk(g, members, o, x, parts, numel)
                    continue
            axes = every
            if op.reads is not None:
                consts = [g.constants.get(n) for n in c.inputs]
                axes = op.reads([g.value(n).shape for n in c.inputs], c.attr_map, k,
                                consts) or every
            _add(parts, layout, axes, numel)


@lru_cache(maxsize=1 << 14)
def _view(op: str, attrs: tuple, k: int, layout: Strided, shape: tuple) -> Strided | None:
    """A layout op's output ``k`` as a view of its input's layout (``OpDef.view``),
    cached: the planners price the same attention reshapes and transposes in many
    candidate groups, and the view depends on nothing else."""
    return get_op(op).view(layout, dict(attrs), k, shape)


def _add(parts: list, layout: Strided, axes: tuple, numel: int) -> None:
    if all(a is None for a in axes) and _count(layout, axes) >= numel:
        raise _Whole            # the value itself, or a view of all of it
    parts.append((layout, axes))


def _count(layout: Strided, axes: tuple) -> int:
    """Distinct elements of one part: per axis the indices read, an axis whose modes
    are all broadcast (stride 0) counting once. (The views of one buffer through
    reshape, transpose and slice map distinct indices to distinct elements.)"""
    n = 1
    for modes, a, d in zip(layout.axes, axes, layout.shape):
        if all(s == 0 for _, s in modes):
            continue
        n *= d if a is None else (a if isinstance(a, int) else len(a))
    return n


def _offsets(layout: Strided, axes: tuple) -> np.ndarray:
    """The buffer offsets one part reads (indices split over each axis's modes; a
    broadcast axis repeats offsets, which the caller's mask absorbs)."""
    total = np.full(1, layout.offset, dtype=np.int64)
    for modes, a, d in zip(layout.axes, axes, layout.shape):
        idx = np.arange(d, dtype=np.int64) if a is None else np.asarray(a, dtype=np.int64)
        off, inner = np.zeros(len(idx), dtype=np.int64), 1
        for e, s in reversed(modes):
            off += (idx // inner) % e * s
            inner *= e
        total = (total[:, None] + off[None, :]).ravel()
    return total


def _join(parts: list, numel: int) -> int:
    """Distinct elements of the parts together: exact where each part's indices are
    known and the buffer is small enough to mark (a mask of its elements), else the
    parts' sum. (The same view reached twice -- a value two ops read -- counts once.)"""
    whole_views = {p for p, a in parts if all(x is None for x in a)}
    parts = [(p, a) for p, a in parts if not all(x is None for x in a)] + \
        [(p, tuple(None for _ in p.axes)) for p in whole_views]
    counts = [_count(p, a) for p, a in parts]
    if len(parts) <= 1:         # (none: what the group makes of it is never used)
        return sum(counts)
    if any(isinstance(x, int) for _, a in parts for x in a) or numel > MARK_LIMIT:
        return sum(counts)
    mask = np.zeros(numel, dtype=bool)
    for p, a in parts:
        mask[_offsets(p, a)] = True
    return int(mask.sum())


__all__ = ["MARK_LIMIT", "read_bytes", "read_elements"]
