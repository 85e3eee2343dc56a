"""Shapes as the IR holds them: tuples of non-negative ints, checked once where they
enter (a builder, an importer, a graph file, an op's shape rule), with the limits that
keep loading or printing a graph from running out of memory.

Its own module, below both the graph and the op registry: the ops' shape rules check
shapes too, and the graph asks the registry for each node's op.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import GraphError

Shape = tuple[int, ...]

# The most elements one value may hold: 2^35 (128 GiB of float32), more than any GPU
# holds. A shape past it is a typo or an attack; it is refused before anything is
# allocated, so loading or printing a graph can never run out of memory.
MAX_ELEMENTS = 2 ** 35
# The most axes one value may have (NumPy 1 allows 32; models use fewer than 8).
MAX_RANK = 32


def is_int(v: Any) -> bool:
    """A Python or NumPy integer, not a bool (True is an int to Python, not to us)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_shape(shape: Any, what: str) -> Shape:
    """``shape`` as a tuple of non-negative ints holding at most MAX_ELEMENTS elements,
    or a one-line GraphError naming ``what`` and the bad dimension."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (list, tuple, np.ndarray)):
        raise GraphError(f"{what}: shape must be a list of integers, got {shape!r:.80}")
    dims = list(shape.tolist() if isinstance(shape, np.ndarray) else shape)
    if len(dims) > MAX_RANK:
        raise GraphError(f"{what}: shape has {len(dims)} axes, more than the {MAX_RANK} a "
                         "value may have")
    for d in dims:
        if not is_int(d):
            raise GraphError(f"{what}: dimension {d!r:.40} in shape {dims!r:.120} is not an "
                             "integer; dimensions are whole numbers >= 0")
        if d < 0:
            raise GraphError(f"{what}: negative dimension {d} in shape {dims!r:.120}; "
                             "dimensions are whole numbers >= 0")
    numel = math.prod(int(d) for d in dims)
    extents = math.prod(int(d) for d in dims if d)
    if numel == 0 and extents > MAX_ELEMENTS:
        # (an empty value too: no array library holds such extents, their strides
        # overflow 64 bits)
        raise GraphError(f"{what}: shape {dims!r:.120} is empty, but its other extents "
                         f"multiply to {extents}, more than the {MAX_ELEMENTS} (2^35) "
                         "elements one value may hold; check the shape")
    if numel > MAX_ELEMENTS:
        raise GraphError(f"{what}: shape {dims!r:.120} has {numel} elements, more than the "
                         f"{MAX_ELEMENTS} (2^35) one value may hold; check the shape")
    return tuple(int(d) for d in dims)
