"""Resampling (ONNX Resize, torch's upsampling) as a composite: per resized axis a
``gather`` at constant indices (nearest) or two gathers and a lerp with constant weights
(linear), with ONNX's coordinate transformation and nearest modes."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError


COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(n: int, out: int, scale: float, mode: str) -> np.ndarray:
    """Where each of ``out`` resized positions samples an axis of length ``n`` (float64;
    ``scale`` is out / n, or the scale the model gives)."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        # (the resized length as the scale gives it, unrounded: ONNX's definition)
        span = n * scale - 1
        return x * (n - 1) / span if out > 1 and span > 0 else np.zeros(out)
    if mode == "asymmetric":
        return x / scale
    if mode == "half_pixel_symmetric":
        adj = out / (scale * n)
        offset = n / 2 * (1 - adj)
        return offset + (x + 0.5) / scale - 0.5
    raise GraphError(f"Resize coordinate_transformation_mode {mode!r}; supported: "
                     f"{', '.join(COORDINATE_MODES)}")


def _nearest(src: np.ndarray, mode: str, n: int) -> np.ndarray:
    if mode == "round_prefer_floor":
        i = np.ceil(src - 0.5)
    elif mode == "round_prefer_ceil":
        i = np.floor(src + 0.5)
    elif mode == "floor":
        i = np.floor(src)
    elif mode == "ceil":
        i = np.ceil(src)
    else:
        raise GraphError(f"Resize nearest_mode {mode!r}; supported: {', '.join(NEAREST_MODES)}")
    return np.clip(i, 0, n - 1).astype(np.int64)


def resize(b, x, sizes, scales, mode: str = "nearest", coordinate_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", clamp_linear: bool = True,
           source: str = "", kind: str = "Resize"):
    """Resize every axis to ``sizes`` (with ``scales`` the factor each source
    coordinate divides by; None: sizes / input sizes). Nearest: one gather per
    resized axis at constant indices; linear: two gathers and a lerp with constant
    weights per axis -- so the whole resize fuses into one elementwise kernel."""
    if mode not in ("nearest", "linear"):
        raise GraphError(f"Resize mode {mode!r}; supported: nearest, linear")
    with b.composite(kind, source):
        y = x
        for axis, (n, out) in enumerate(zip(x.shape, sizes)):
            scale = float(scales[axis]) if scales is not None else out / n
            if out == n and scale == 1.0:
                continue
            src = source_coordinates(n, out, scale, coordinate_mode)
            if mode == "nearest":
                y = b.gather(y, b.constant(_nearest(src, nearest_mode, n)), axis=axis)
                continue
            if clamp_linear:
                src = np.clip(src, 0, n - 1)
            i0 = np.clip(np.floor(src), 0, n - 1).astype(np.int64)
            i1 = np.minimum(i0 + 1, n - 1)
            frac = (src - i0).astype(x.dtype.np)
            shape = [out if a == axis else 1 for a in range(len(x.shape))]
            lo = b.gather(y, b.constant(i0), axis=axis)
            hi = b.gather(y, b.constant(i1), axis=axis)
            y = lo + (hi - lo) * b.constant(frac.reshape(shape))
        return y
