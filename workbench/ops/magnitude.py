"""First-order error propagation: the magnitude a value's float rounding is bounded by.

A fused kernel and the op-by-op NumPy reference round differently, and the difference
does not stay where it was made: ``sum(x) + max(x*x)`` fused carries the sum's error
(bounded by eps * sum|x|) into the add, where |result| alone is no fair yardstick. So
the checker follows a magnitude M(v) through the kernel's ops, with the error at v
bounded by about eps * M(v):

- a value the kernel received: M = |x| (kernel and reference start from the same numbers);
- an elementwise op: M(y) = |y| + sum_i |dy/dx_i| M(x_i) -- its own rounding, plus each
  input's error scaled by the op's slope there (the op's ``slopes``);
- a reduction or a library op: the same op over the inputs' magnitudes (M summed,
  M_A @ M_B -- the op's ``error_scale``);
- a layout op: moves the magnitudes as it moves the values.

Where a slope is infinite (log at 0) the bound is infinite and the element is not held to
anything; a NaN bound (0 * inf) falls back to |y|.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .registry import Kind, get_op


def exact(x: np.ndarray) -> np.ndarray:
    """The magnitude of a value known exactly: |x| in float64."""
    return np.abs(np.asarray(x, dtype=np.float64))


def propagate(op: str, attrs: Mapping[str, Any], ms: Sequence[np.ndarray],
              xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The magnitudes of an op's outputs ``ys``, given its inputs ``xs`` and their
    magnitudes ``ms`` (all float64-convertible; results broadcast to each output)."""
    od = get_op(op)
    absy = [exact(y) for y in ys]
    with np.errstate(all="ignore"):
        if od.kind is Kind.layout:
            out = _moved(od, attrs, ms, xs, absy)
        elif od.error_scale is not None:
            out = [np.maximum(np.asarray(od.error_scale(list(ms), attrs), np.float64), absy[0])]
        elif od.slopes is not None:
            x64 = [np.asarray(x, dtype=np.float64) for x in xs]
            m = absy[0].copy()
            for s, mi in zip(od.slopes(x64, np.asarray(ys[0], np.float64)), ms):
                m = m + np.abs(s) * mi
            out = [m]
        else:
            out = absy
    res = []
    for m, a in zip(out, absy):
        m = np.broadcast_to(m, a.shape)
        res.append(np.where(np.isnan(m), a, m))
    return res


def _moved(od, attrs, ms, xs, absy) -> list[np.ndarray]:
    """A layout op's output magnitudes: the op run on element positions (int64, which
    every layout op moves like data) picks each output element's source magnitude.
    Float inputs are data; the rest (gather's indices) pass as the values they are."""
    flat, args, off = [], [], 0
    for m, x in zip(ms, xs):
        x = np.asarray(x)
        if x.dtype.kind == "f":
            flat.append(np.broadcast_to(np.asarray(m, np.float64), x.shape).ravel())
            # (from 1: a padding op's fill -- 0, the integer minimum -- is no position)
            args.append(np.arange(off + 1, off + 1 + x.size, dtype=np.int64).reshape(x.shape))
            off += x.size
        else:
            args.append(x)
    if not flat:
        return absy
    pool = np.concatenate(flat)
    out = []
    for p, a in zip(od.reference(args, attrs), absy):
        p = np.asarray(p)
        if p.dtype != np.int64 or not p.size or not pool.size:
            out.append(a)
            continue
        # an element no input position reached (a pad or window fill) is its own |y|
        hit = (p >= 1) & (p <= pool.size)
        out.append(np.where(hit, pool[np.clip(p - 1, 0, pool.size - 1)], a))
    return out
