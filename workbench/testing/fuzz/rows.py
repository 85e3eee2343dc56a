"""Row workloads for the differential fuzzer (``--family rows``).

The kernels a GPU runs most are row kernels -- softmax, LayerNorm, RMSNorm, a
cross-entropy's logsumexp, a bias-GELU-residual-LayerNorm chain, an attention's scaled
and masked softmax -- and their paths turn on the row's length: a warp per row up to
1024 columns, a block per row beyond, rows split across blocks (a grid barrier) when
long rows are few, rows cached in registers, in shared memory or both, 16-byte vectors
with a tail where the length is no multiple, float16 and bfloat16 storage. The mixed
family rarely draws a whole norm at such lengths. This module draws one row workload
from a seed at lengths on either side of each threshold (31-33, 1023-1025, 8192-8193,
up to 16411 columns), in float32, float16 or bfloat16, with inputs of a model's
magnitudes or logits a hundred times larger, rows masked to -inf in part, and in a
tenth of the cases one inf or NaN.
"""
from __future__ import annotations

import math

import numpy as np

from ...dtypes import DType
from ...ir import Graph, GraphBuilder

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
COLS = [1, 7, 31, 32, 33, 255, 1023, 1024, 1025, 2047, 4099, 8192, 8193, 16411]
ROWS = [1, 2, 3, 7, 33, 130]
MOST_ELEMENTS = 1 << 18        # (the emulator runs a GPU thread per fiber: kept quick)
WORKLOADS = ["softmax", "log_softmax", "layer_norm", "rms_norm", "logsumexp",
             "cross_entropy", "bias_gelu_residual_layer_norm", "masked_softmax"]


class _RowDrawer:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder(f"rows{seed}")
        self.dtype = self.pick([F32, F32, F16, BF16])
        self.cols = self.pick(COLS)
        self.rows = self.pick([r for r in ROWS if r * self.cols <= MOST_ELEMENTS])

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def param(self, name: str, low: float, high: float):
        """A constant per column (a norm's scale or bias)."""
        v = self.rng.uniform(low, high, (self.cols,)).astype(self.dtype.np)
        return self.b.constant(v, name)

    def draw(self, x):
        what = self.pick(WORKLOADS)
        b = self.b
        if what == "softmax":
            return b.softmax(x, axis=-1)
        if what == "log_softmax":
            return b.log_softmax(x, axis=-1)
        if what == "layer_norm":
            return b.layer_norm(x, self.param("scale", 0.5, 1.5), self.param("bias", -1, 1))
        if what == "rms_norm":
            return b.rms_norm(x, self.param("scale", 0.5, 1.5))
        if what == "logsumexp":
            return b.reduce_log_sum_exp(x, axes=[1], keepdims=False)
        if what == "cross_entropy":      # logsumexp(logits) - logits[target]
            target = b.input("target", (self.rows, 1), DType.int64)
            picked = b.op("gather_elements", x, target, axis=1)
            return b.reduce_log_sum_exp(x, axes=[1], keepdims=True) - picked
        if what == "bias_gelu_residual_layer_norm":
            h = b.gelu(x + self.param("bias", -1, 1)) + b.input("residual", x.shape, self.dtype)
            return b.layer_norm(h, self.param("scale", 0.5, 1.5), self.param("beta", -1, 1))
        # an attention's scores: scaled, a mask added, softmax
        mask = b.input("mask", (1, self.cols), self.dtype)
        return b.softmax(x * (1.0 / math.sqrt(64.0)) + mask, axis=-1)


def draw_row_graph(seed: int) -> Graph:
    """One row workload (see the module docstring)."""
    d = _RowDrawer(seed)
    x = d.b.input("x", (d.rows, d.cols), d.dtype)
    d.b.output(d.draw(x), "y")
    return d.b.build()


def draw_row_inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    """x uniform in [-4, 4] (a hundred times that in a fifth of the cases: logits far
    apart), the mask 0 with a quarter of the columns -inf (never the first), targets in
    range; one element of x inf or NaN in a tenth of the cases."""
    rng = np.random.default_rng(seed + 7919)
    out = {}
    big = 100.0 if rng.random() < 0.2 else 1.0
    for name in g.inputs:
        v = g.value(name)
        if name == "target":
            out[name] = rng.integers(0, g.value("x").shape[1], v.shape).astype(np.int64)
            continue
        if name == "mask":
            a = np.where(rng.random(v.shape) < 0.25, -np.inf, 0.0)
            a[..., 0] = 0.0
        else:
            a = rng.uniform(-4, 4, v.shape) * (big if name == "x" else 1.0)
            if name == "x" and rng.random() < 0.1 and a.size:
                a.flat[int(rng.integers(a.size))] = rng.choice([np.inf, -np.inf, np.nan])
        out[name] = a.astype(v.dtype.np)
    return out
