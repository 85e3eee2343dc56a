"""Dropout in a training graph, its mask regenerated instead of stored.

``native_dropout(x, p, train)`` in torch's joint graph returns the output and a bool
mask the backward reads. Stored, the mask is a saved activation (a byte per element
written in the forward and read back in the backward); here it is a pure function of
a seed and each element's index -- ``random_uniform(key, counters)`` (Philox-4x32-10,
``ops/random.py``) compared with ``p`` -- made once in the forward, where it scales the
output, and made again in the backward where the gradient reads it, so no mask crosses
from one to the other and the saved-activation table (``training/saved.py``) lists
none.

The key is ``dropout_seed * KEY_STRIDE + k`` for the graph's k-th dropout, so two
dropouts of one step, or one dropout in two steps, draw different masks;
``Session.train_step`` feeds the step count as ``dropout_seed``. The counters are the
element's index along each axis (at most four: Philox's counter words; the leading
axes of a tensor with more share one, their flat index). The numbers are not torch's
(its CPU generator is a Mersenne twister, its CUDA one Philox with other counters), so
a p > 0 step matches torch only given the same mask (:func:`keep_numpy`).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from ..ops.random import MAX_COUNTERS, uniform_reference

SEED = "dropout_seed"      # the graph input: a step's seed (int64 scalar)
KEY_STRIDE = 1 << 16       # dropouts per graph, at most


def counters(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Each element's index along its axes as int32 arrays that broadcast to
    ``shape``: one per axis, the leading axes of a tensor of more than four as one
    (their flat index)."""
    n = len(shape)
    if n == 0:
        return [np.zeros((), np.int32)]
    lead = max(1, n - (MAX_COUNTERS - 1)) if n > MAX_COUNTERS else 1
    groups = [list(range(lead))] + [[a] for a in range(lead, n)]
    out = []
    for gr in groups:
        size = math.prod(shape[a] for a in gr)
        if size >= 1 << 32:
            raise GraphError(f"dropout over {list(shape)}: an index past 2^32 does not fit "
                             "a Philox counter word")
        dims = [shape[a] if a in gr else 1 for a in range(n)]
        out.append(np.arange(size, dtype=np.int64).astype(np.int32).reshape(dims))
    return out


def scale(p: float) -> np.float32:
    """The factor kept elements are multiplied by: torch's 1 / (1 - p), 0 where
    everything is dropped."""
    return np.float32(0.0 if p >= 1.0 else 1.0 / (1.0 - p))


def _check(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise GraphError(f"dropout probability {p} is outside [0, 1]")


def keep(b, shape: tuple[int, ...], seed, index: int, p: float):
    """The bool mask (True: kept) of the ``index``-th dropout over ``shape`` as graph
    ops on builder ``b``: uniform(key, counters) >= p, kept with probability 1 - p."""
    _check(p)
    key = b.op("add", b.op("mul", seed, b.constant(np.int64(KEY_STRIDE))),
               b.constant(np.int64(index)))
    u = b.op("random_uniform", key, *(b.constant(c) for c in counters(shape)))
    return b.op("ge", u, b.constant(np.float32(p)))


def apply(b, x, mask, p: float):
    """torch's output: (x * mask) * 1 / (1 - p), in x's type."""
    kept = b.op("mul", x, b.op("cast", mask, to=x.dtype.value))
    return b.op("mul", kept, b.constant(scale(p).astype(x.dtype.np)))


def keep_numpy(shape: tuple[int, ...], seed: int, index: int, p: float) -> np.ndarray:
    """The same mask in NumPy (the random op's own reference): a test's torch model
    takes it in place of torch's draw."""
    _check(p)
    key = np.int64(seed) * np.int64(KEY_STRIDE) + np.int64(index)
    u = uniform_reference([key, *counters(shape)], {})[0]
    return np.broadcast_to(u, shape) >= np.float32(p)
