"""Helpers for the artifact tests: a small graph that exercises every kernel kind, with
hostile model names, and a way to re-sign an artifact after a deliberate edit."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.ir.composites import random_array
from workbench.testing.fuzz.artifacts import resign  # noqa: F401  (the tests' helper)

# every model-provided name carries this marker; generated source must never contain it
MARK = "EVILNAME"


def small_graph():
    """matmul (library call: float16, which the CPU's GEMM kernel does not take) ->
    cast -> layer norm (row reduction, constants) -> gelu -> softmax (row reduction)
    and a column sum; names full of C comment and quote text."""
    b = GraphBuilder(f'{MARK} */ graph "x"')
    x = b.input(f'{MARK}/x:0 */ #include', (48, 160), DType.float16)
    w = b.input(f'{MARK} W"', (160, 96), DType.float16)
    gamma = b.constant(random_array((96,), np.float32, 1, 0.5, 1.5), name=f"{MARK}.gamma*/")
    beta = b.constant(random_array((96,), np.float32, 2), name=f"{MARK}.beta\\")
    h = b.op("cast", b.matmul(x, w), to="float32")
    y = b.gelu(b.layer_norm(h, gamma, beta))
    b.output(b.softmax(y), f'{MARK} probs"); /*')
    b.output(b.reduce_sum(y, axes=[0], keepdims=False), f"{MARK}_colsum")
    return b.build()


def conv_graph():
    """GEMM kernels that read through views: a padded 3x3 convolution with its bias
    and a ReLU (implicit im2col), a 1 x 1 one after it (its input read in place), its
    channels moved last (reshape, transpose) and multiplied by a Linear's weight read
    transposed."""
    b = GraphBuilder("conv_views")
    x = b.input("x", (2, 4, 10, 10))
    w = b.constant(random_array((8, 4, 3, 3), np.float32, 3, -0.5, 0.5), name="w")
    bias = b.constant(random_array((8,), np.float32, 4), name="bias")
    h = b.relu(b.op("conv", x, w, bias, pads=[1, 1, 1, 1]))
    w1 = b.constant(random_array((8, 8, 1, 1), np.float32, 8, -0.5, 0.5), name="w1")
    h = b.relu(b.op("conv", h, w1))
    h = b.op("transpose", b.op("reshape", h, shape=[2, 8, 100]), perm=[0, 2, 1])
    lin = b.constant(random_array((6, 8), np.float32, 5, -0.5, 0.5), name="lin")
    b.output(b.matmul(h, b.op("transpose", lin, perm=[1, 0])), "y")
    return b.build()


def packed_graph():
    """A Linear whose weight the GEMM kernel packs into column panels (on a CPU with
    256-bit vectors or wider): 70 columns pad to two panels of 64, so the packed copy,
    a persistent workspace, is larger than any value of the graph; then its result
    times an input ``z`` (70 x 20), which every run packs into one panel (70 x 64),
    again larger than any value."""
    b = GraphBuilder("packed")
    x = b.input("x", (3, 40))
    w = b.constant(random_array((40, 70), np.float32, 6, -0.5, 0.5), name="w")
    bias = b.constant(random_array((70,), np.float32, 7), name="bias")
    y = b.output(b.gelu(b.matmul(x, w) + bias), "y")
    b.output(b.matmul(y, b.input("z", (70, 20))), "yz")
    return b.build()


def attention_graph(dtype: str = "float32"):
    """softmax(q kᵀ / 4) v over 2 x 2 heads of 24 queries and 40 keys: one fused
    attention kernel whose softmax reads the scores from the thread's tile (a register
    copy whose source is that tile, recorded in the manifest: an artifact of it once
    failed to load)."""
    b = GraphBuilder(f"attention_{dtype}")
    z = b.matmul(b.input("q", (2, 2, 24, 16), dtype), b.input("kt", (2, 2, 16, 40), dtype))
    b.output(b.matmul(b.softmax(z * 0.25, axis=-1), b.input("v", (2, 2, 40, 8), dtype)), "o")
    return b.build()


class _Helpers:
    mark = MARK
    small_graph = staticmethod(small_graph)
    conv_graph = staticmethod(conv_graph)
    packed_graph = staticmethod(packed_graph)
    attention_graph = staticmethod(attention_graph)
    resign = staticmethod(resign)


@pytest.fixture(scope="session")
def art():
    return _Helpers


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A fresh, empty WORKBENCH_CACHE for this test; returns its cpu/ directory."""
    root = tmp_path / "wbcache"
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    return root / "cpu"
