"""ONNX handlers of the layout ops, which move or select elements without computing:
Reshape, Flatten, Transpose, Expand, Tile, Slice, Concat, Split, Squeeze, Unsqueeze and
Gather. Shapes, axes and sizes ONNX passes as inputs must be constants.

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ...ir import composites
from .common import _axis, _Ctx, _handles, _malformed


@_handles("Reshape")
def _reshape(c: _Ctx):
    x = c.x(0)
    target = [int(d) for d in c.const(1, "shape")]
    shape = _reshape_target(x.shape, target, bool(c.attr("allowzero", 0)), c.display)
    return [x if shape == x.shape else c.b.reshape(x, shape=shape)]


def _reshape_target(src, target, allowzero, display) -> tuple[int, ...]:
    """Resolve ONNX Reshape's 0 (copy the input dim) and -1 (infer) entries."""
    out = [src[i] if d == 0 and not allowzero and i < len(src) else d
           for i, d in enumerate(target)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise GraphError(f"Reshape {display!r}: bad target shape {target}")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        total = int(np.prod(src, dtype=np.int64))
        if known == 0 or total % known:
            raise GraphError(f"Reshape {display!r}: cannot reshape {list(src)} to {target}")
        out[out.index(-1)] = total // known
    return tuple(out)


@_handles("Flatten")
def _flatten(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    axis = _axis(c, c.attr("axis", 1), rank, upto=1)
    shape = (int(np.prod(x.shape[:axis], dtype=np.int64)),
             int(np.prod(x.shape[axis:], dtype=np.int64)))
    return [x if shape == x.shape else c.b.reshape(x, shape=shape)]


@_handles("Transpose")
def _transpose(c: _Ctx):
    x = c.x(0)
    perm = c.attr("perm") or list(reversed(range(len(x.shape))))
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(x.shape))):
        raise _malformed(c, f"perm {perm} is not a permutation of the axes "
                            f"0..{len(x.shape) - 1} of its rank-{len(x.shape)} input")
    return [x if perm == sorted(perm) else c.b.transpose(x, perm=perm)]


@_handles("Expand")
def _expand(c: _Ctx):
    x = c.x(0)
    target = [int(d) for d in c.const(1, "shape")]
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(x.shape, tuple(target)))
    except ValueError:
        raise GraphError(f"Expand {c.display!r}: {list(x.shape)} does not broadcast to "
                         f"{target}") from None
    return [x if shape == x.shape else c.b.expand(x, shape=shape)]


@_handles("Tile")
def _tile(c: _Ctx):
    return [composites.tile(c.b, c.x(0), c.ints(1, "repeats"), source=c.display)]


@_handles("Slice")
def _slice(c: _Ctx):
    x = c.x(0)
    starts, ends = c.ints(1, "starts"), c.ints(2, "ends")
    rank = len(x.shape)
    axes = c.ints(3, "axes") or list(range(len(starts)))
    steps = c.ints(4, "steps") or [1] * len(starts)
    s_out, e_out, a_out, st_out = [], [], [], []
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _malformed(c, f"starts, ends, axes and steps differ in length ({len(starts)}, "
                            f"{len(ends)}, {len(axes)}, {len(steps)})")
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise _malformed(c, "step 0")
        a = _axis(c, a, rank)
        d = x.shape[a]
        # ONNX clamps like NumPy; clamp the huge sentinels (INT64_MAX) into range so
        # the attributes stay small and keep their meaning
        s_out.append(max(-d - 1, min(d + 1, s)))
        e_out.append(max(-d - 1, min(d + 1, e)))
        a_out.append(a)
        st_out.append(st)
    full = all(slice(s, e, st).indices(x.shape[a]) == (0, x.shape[a], 1)
               for s, e, a, st in zip(s_out, e_out, a_out, st_out))
    if full:
        return [x]
    return [c.b.slice(x, starts=s_out, ends=e_out, axes=a_out, steps=st_out)]


@_handles("Concat")
def _concat(c: _Ctx):
    xs = c.xs()
    if c.attr("axis") is None:
        raise _malformed(c, "no axis attribute")
    axis = _axis(c, c.attr("axis"), len(xs[0].shape))
    # parts with no elements add nothing (a KV cache with no past); the kernels read
    # every part, so they are dropped -- unless the result itself is empty
    full = [t for t in xs if math.prod(t.shape)]
    if full and len(full) < len(xs) and all(len(t.shape) == len(xs[0].shape) for t in xs):
        xs = full
    return [xs[0] if len(xs) == 1 else c.b.concat(*xs, axis=axis)]


@_handles("Split")
def _split(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    axis = _axis(c, c.attr("axis", 0), rank)
    d = x.shape[axis]
    n = len(c.node.output)
    sizes = c.ints(1, "split") if c.has(1) else c.attr("split")
    if not sizes:
        parts = int(c.attr("num_outputs", n))
        chunk = -(-d // parts)  # opset 18: ceil-sized chunks, the last one smaller
        sizes = [chunk] * (parts - 1) + [d - chunk * (parts - 1)]
        if c.attr("num_outputs") is None and d % parts:
            raise GraphError(f"Split {c.display!r}: {d} does not split into {parts} "
                             "equal parts")
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != d or min(sizes) < 0:
        raise GraphError(f"Split {c.display!r}: sizes {sizes} do not cut {d} into {n} "
                         "outputs")
    if n == 1:
        return [x]
    return list(c.b.split(x, axis=axis, sizes=sizes))


@_handles("Squeeze")
def _squeeze(c: _Ctx):
    x = c.x(0)
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [x if not axes else c.b.squeeze(x, axes=[int(a) for a in axes])]


@_handles("Unsqueeze")
def _unsqueeze(c: _Ctx):
    x = c.x(0)
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    return [c.b.unsqueeze(x, axes=[int(a) for a in axes])]


@_handles("Gather")
def _gather(c: _Ctx):
    data = c.x(0)
    axis = _axis(c, c.attr("axis", 0), len(data.shape))
    idx = c.scope.const(c.node.input[1])
    if idx is not None:  # constant indices: check the range ONNX requires
        n = data.shape[axis]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise GraphError(f"Gather {c.display!r}: indices out of range [-{n}, {n})")
    return [c.b.gather(data, c.x(1), axis=axis)]
