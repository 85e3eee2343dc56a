"""Convolutional-network graphs for the differential fuzzer (``--family convs``).

Neither the mixed family (:mod:`.graphs`) nor the transformer blocks draw a
convolution or a pooling, yet CNNs are what many users bring, and their kernels take
paths of their own on both backends: convolutions as GEMM kernels over gathered
patches, computed directly tap by tap, depthwise a plane at a time, grouped,
transposed; poolings through their stride phases; BatchNorm, activations and residual
adds as epilogues. This module draws such networks from one seed: convolutions of
1-7 taps a side with strides, dilations, symmetric and lopsided padding, groups
(depthwise among them) and bias; BatchNorm with constant statistics; ReLU, ReLU6,
HardSwish, SiLU; max and average pools (padding, ceil mode, count_include_pad);
transposed convolutions; residual adds; a global average pool and a linear head.

Inputs are an image of order one and constant weights by 1/sqrt(fan-in); in a tenth
of the cases one pixel is inf or NaN.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ...dtypes import DType
from ...ir import Graph, GraphBuilder
from ...ir import composites_nn as nn

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
ACTIVATIONS = ["none", "relu", "relu", "relu6", "hardswish", "silu"]


class _ConvDrawer:
    """Draws one convolutional network from a seed (see the module docstring)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder(f"convs{seed}")
        self.dtype = self.pick([F32, F32, F32, BF16, F16])
        self.n_weights = 0

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def weight(self, shape, fan_in: int, low: float = -1.0, high: float = 1.0):
        """A constant (an initialiser); by 1/sqrt(fan-in) unless given its range."""
        w = self.rng.uniform(low, high, shape)
        if low == -1.0 and high == 1.0:
            w = w / math.sqrt(max(fan_in, 1))
        self.n_weights += 1
        return self.b.constant(w.astype(self.dtype.np), f"w{self.n_weights}")

    # -- layers ------------------------------------------------------------------------
    def conv(self, x):
        """A convolution: taps, stride, dilation, padding and groups drawn."""
        c = x.shape[1]
        k = self.pick([1, 3, 3, 5, 7])
        stride = self.pick([1, 1, 2])
        dil = self.pick([1, 1, 1, 2])
        how = self.pick(["same", "same", "none", "lopsided"])
        p = dil * (k - 1) // 2
        pads = {"same": [p, p, p, p], "none": [0, 0, 0, 0],
                "lopsided": [int(self.rng.integers(0, k)) for _ in range(4)]}[how]
        form = self.pick(["dense", "dense", "depthwise", "grouped"])
        if form == "depthwise":
            group, out = c, c * self.pick([1, 1, 2])
        elif form == "grouped" and c % 2 == 0:
            group, out = 2, 2 * self.pick([1, 2, 4])
        else:
            group, out = 1, self.pick([1, 4, 8, 16])
        filters = self.weight((out, c // group, k, k), c // group * k * k)
        ins = [x, filters]
        if self.rng.random() < 0.7:
            ins.append(self.weight((out,), 1))
        return self.b.op("conv2d", *ins, strides=[stride, stride], dilations=[dil, dil],
                         pads=pads, group=group)

    def conv_transpose(self, x):
        c = x.shape[1]
        k, stride = self.pick([2, 3, 4]), self.pick([1, 2])
        out = self.pick([1, 4, 8])
        w = self.weight((c, out, k, k), c * k * k)
        p = self.pick([0, 1]) if k > 1 else 0
        return nn.conv_transpose(self.b, x, w, self.weight((out,), 1),
                                 strides=[stride, stride], pads=[p, p, p, p])

    def batch_norm(self, x):
        c = x.shape[1]
        return self.b.batch_norm(x, self.weight((c,), 1, 0.5, 1.5), self.weight((c,), 1),
                                 self.weight((c,), 1, -0.5, 0.5),
                                 self.weight((c,), 1, 0.5, 1.5))

    def activate(self, x):
        act = self.pick(ACTIVATIONS)
        if act == "relu":
            return self.b.relu(x)
        if act == "relu6":
            return self.b.clip(x, 0.0, 6.0)
        if act == "hardswish":
            return self.b.hard_swish(x)
        if act == "silu":
            return x * self.b.sigmoid(x)
        return x

    def pool(self, x):
        k = self.pick([2, 3])
        stride = self.pick([1, 2, 2])
        p = self.pick([0, 0, 1]) if k > 1 else 0
        ceil = bool(self.rng.random() < 0.3)
        if self.rng.random() < 0.6:
            return nn.max_pool(self.b, x, [k, k], [stride, stride], pads=[p, p, p, p],
                               ceil_mode=ceil)
        return nn.avg_pool(self.b, x, [k, k], [stride, stride], pads=[p, p, p, p],
                           ceil_mode=ceil, count_include_pad=bool(self.rng.random() < 0.5))

    def layer(self, x):
        """conv (+ BN) (+ activation) (+ the input added back), a transposed
        convolution, or a pooling."""
        what = self.pick(["conv", "conv", "conv", "pool", "transpose"])
        if what == "pool":
            return self.pool(x)
        if what == "transpose":
            return self.conv_transpose(x)
        y = self.conv(x)
        if self.rng.random() < 0.5:
            y = self.batch_norm(y)
        y = self.activate(y)
        if y.shape == x.shape and self.rng.random() < 0.5:
            y = self.activate(y + x)
        return y

    def head(self, x):
        """A global average pool, flattened, and a linear layer."""
        n, c = x.shape[:2]
        g = self.b.reshape(self.b.reduce_mean(x, axes=[2, 3], keepdims=True), shape=[n, c])
        return self.b.matmul(g, self.weight((c, self.pick([1, 10])), c))


def draw_conv_graph(seed: int, max_layers: int = 4) -> Graph:
    """One convolutional network (see the module docstring); layers the drawn shapes
    refuse (a window past a small image) are simply not drawn."""
    d = _ConvDrawer(seed)
    x = d.b.input("x", (d.pick([1, 1, 2]), d.pick([1, 3, 4, 8, 16]), d.pick([5, 7, 8, 13, 16]),
                        d.pick([5, 7, 8, 13, 17])), d.dtype)
    y = x
    for _ in range(int(d.rng.integers(1, max_layers + 1))):
        try:
            y = d.layer(y)
        except GraphError:
            continue
    if y is x:
        y = d.b.relu(x)
    if d.rng.random() < 0.3:
        y = d.head(y)
    d.b.output(y, "y")
    return d.b.build()


def draw_conv_inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    """The image uniform in [-1, 1]; one pixel inf or NaN in a tenth of the cases."""
    rng = np.random.default_rng(seed + 7919)
    out = {}
    for name in g.inputs:
        v = g.value(name)
        a = rng.uniform(-1, 1, v.shape)
        if rng.random() < 0.1 and a.size:
            a.flat[int(rng.integers(a.size))] = rng.choice([np.inf, -np.inf, np.nan])
        out[name] = a.astype(v.dtype.np)
    return out
