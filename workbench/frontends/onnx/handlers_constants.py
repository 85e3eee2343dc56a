"""ONNX handlers of the values known at import, which become constants: Shape and Size
(every shape is static), Constant, ConstantOfShape and Range.

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

import math

import numpy as np

from .budget import check_made
from .common import _Ctx, _handles, _malformed, _Unsupported, to_array


@_handles("Shape")
def _shape(c: _Ctx):
    shape = c.shape(0)
    start, end = int(c.attr("start", 0)), c.attr("end")
    return [np.array(shape[start:None if end is None else int(end)], dtype=np.int64)]


@_handles("Size")
def _size(c: _Ctx):
    return [np.array(int(np.prod(c.shape(0), dtype=np.int64)), dtype=np.int64)]


@_handles("Constant")
def _constant(c: _Ctx):
    (key, val), = c.attrs.items()
    if key == "value":
        return [to_array(val)]
    simple = {"value_float": np.float32, "value_floats": np.float32,
              "value_int": np.int64, "value_ints": np.int64}
    if key in simple:
        return [np.array(val, dtype=simple[key])]
    raise _Unsupported(f"attribute {key} (only numeric tensors are supported)")


@_handles("ConstantOfShape")
def _constant_of_shape(c: _Ctx):
    shape = [int(d) for d in c.const(0, "shape").reshape(-1)]
    val = c.attrs.get("value")
    fill = to_array(val).reshape(-1)[0] if val is not None else np.float32(0)
    if any(d < 0 for d in shape):
        raise _malformed(c, f"shape {shape[:8]} has a negative dimension")
    check_made(f"ConstantOfShape {c.display!r}", shape, fill.dtype)
    return [np.full(shape, fill, dtype=fill.dtype)]


@_handles("Range")
def _range(c: _Ctx):
    start, limit, delta = (c.const(i, "range").reshape(()) for i in range(3))
    # ONNX's definition, not np.arange's: n = max(ceil((limit - start) / delta), 0)
    n = (float(limit) - float(start)) / float(delta) if float(delta) else math.inf
    if not math.isfinite(n):
        raise _malformed(c, f"range from {start} to {limit} by {delta} has no end")
    n = max(int(math.ceil(n)), 0)
    check_made(f"Range {c.display!r}", (n,), start.dtype)
    return [(start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)]
