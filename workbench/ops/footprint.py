"""What part of an input a kernel reads: an op's ``reads`` rule (``OpDef.reads``) in the
terms it is written in, and the per-axis position sets the window ops share.

A rule gives, per axis of the input, the indices the op's generated code loads when it
computes its whole output: ``None`` (every index), an integer array (those indices,
sorted and distinct) or an ``int`` (that many indices, which ones known only at run
time: a gather's table rows). The element set is their product: the ops here read a
box of their input (a slice, the rows an embedding lookup selects, the positions a
pooling window or a convolution's taps reach). ``fusion/footprint.py`` joins the
rules of a group's consumers of one value into the bytes the kernel reads -- the one
count the cost model (``fusion/features.py``) and the kernel IR (``Kernel.bytes_read``)
both use.

    >>> window_positions(7, 3, 3, 2, 1, 0, clamp=True).tolist()
    [0, 1, 2, 3, 4, 5, 6]
    >>> window_positions(8, 4, 1, 2, 1, 0, clamp=True).tolist()     # stride > window
    [0, 2, 4, 6]
"""
from __future__ import annotations

import numpy as np

AxisReads = "None | np.ndarray | int"


def window_positions(n: int, out: int, kernel: int, stride: int, dilation: int,
                     pad: int, clamp: bool) -> np.ndarray:
    """The input positions along one axis of length ``n`` that ``out`` windows of
    ``kernel`` taps (``stride``, ``dilation``, ``pad`` before the axis) load: a position
    in the padding is read at the clamped one by a branch-free kernel (``clamp``: the
    window and pad ops select the fill afterwards) and not at all by a guarded one
    (a convolution's patches, which test the bounds first). Positions no window
    reaches -- between windows whose stride passes their extent, or past the last
    window -- are never read."""
    o = np.arange(out, dtype=np.int64)[:, None] * stride
    t = np.arange(kernel, dtype=np.int64)[None, :] * dilation
    pos = (o + t - pad).ravel()
    pos = np.clip(pos, 0, n - 1) if clamp else pos[(pos >= 0) & (pos < n)]
    return np.unique(pos)


def whole_axis(positions: np.ndarray, n: int):
    """``None`` where the positions are the whole axis (the cheap common case), else
    the positions."""
    return None if len(positions) == n else positions


__all__ = ["AxisReads", "window_positions", "whole_axis"]
