"""The convolution's three ways to one answer (ops/conv.py): non-overlapping patches
as a reordering of the input, im2col under IM2COL_BYTES, tap by tap above it. Each
case runs every way that applies and compares them with torch's convolution."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.ops import conv

torch = pytest.importorskip("torch")

CASES = [  # input, weight, strides, group, pads (begin..., end...)
    ((2, 3, 64, 64), (32, 3, 8, 8), (8, 8), 1, (0, 0, 0, 0)),     # ViT's patch embedding
    ((2, 4, 30, 31), (8, 2, 4, 4), (4, 4), 2, (0, 0, 0, 0)),      # cropped edges, groups
    ((2, 4, 30, 31), (8, 4, 3, 5), (3, 5), 1, (1, 2, 1, 2)),      # padded patches
    ((1, 6, 20), (6, 1, 4), (4,), 6, (0, 0)),                     # 1-D depthwise
    ((2, 4, 12, 12), (8, 4, 3, 3), (1, 1), 1, (1, 1, 1, 1)),      # overlapping taps
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
@pytest.mark.parametrize("im2col_bytes", [conv.IM2COL_BYTES, 0])
def test_conv_ways_agree_with_torch(case, im2col_bytes, monkeypatch):
    shape, wshape, strides, group, pads = case
    monkeypatch.setattr(conv, "IM2COL_BYTES", im2col_bytes)
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    d = len(strides)
    attrs = {"strides": list(strides), "group": group, "pads": list(pads),
             "dilations": [1] * d}
    y = conv.conv_reference([x, w], attrs)[0]
    xpad = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + d]) for i in range(d)])
    f = (torch.nn.functional.conv1d, torch.nn.functional.conv2d)[d - 1]
    ref = f(torch.from_numpy(xpad), torch.from_numpy(w), stride=strides, groups=group).numpy()
    # float32 sums of C/group x taps products: bounded by their magnitudes
    mag = f(torch.from_numpy(np.abs(xpad)), torch.from_numpy(np.abs(w)), stride=strides,
            groups=group).numpy()
    assert y.shape == ref.shape
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)
