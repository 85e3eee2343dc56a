"""A pooling window larger than its map is lowered clipped to the taps that read the
input (``ops.window.clip_taps``): the same results as every tap of the window as given,
for every small geometry (sizes, kernels, strides, dilations, pads, ceil_mode), and a
pool whose one window holds the whole map is a plain reduction over the spatial axes.
The pools are compared with a direct NumPy pooling (each output position's taps
listed one by one) on fresh random inputs, compiled on the cpu backend."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import workbench as wb
from workbench.errors import GraphError
from workbench.ir import GraphBuilder, composites_nn
from workbench.ops.window import pool_geometry, window_out
from workbench.tolerance import relative_to_largest


def _taps_1d(x, kernel, s, dl, pb, out):
    """The values each of ``out`` windows reads along the last axis of x (NaN where
    it reads padding): [..., out, kernel]."""
    n = x.shape[-1]
    pos = np.arange(out)[:, None] * s + np.arange(kernel)[None, :] * dl - pb
    inside = (pos >= 0) & (pos < n)
    vals = x[..., np.clip(pos, 0, n - 1)]
    return np.where(inside, vals, np.nan)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_the_clipped_window_reads_what_the_whole_window_reads(ceil_mode):
    rng = np.random.default_rng(0)
    cut = 0
    for n, k, s, dl, pb, pe in itertools.product(range(1, 8), range(1, 11), range(1, 4),
                                                 range(1, 4), range(4), range(4)):
        try:
            geo = pool_geometry((n,), (k,), (s,), (dl,), (pb, pe), ceil_mode)
        except GraphError:
            continue
        (o,), (kk,), (b, e) = geo.out, geo.window_kernel, geo.window_pads
        assert window_out(n, kk, s, dl, b, e) == o, geo
        cut += kk < k
        x = rng.standard_normal(n)
        whole, clipped = _taps_1d(x, k, s, dl, pb, o), _taps_1d(x, kk, s, dl, b, o)
        np.testing.assert_allclose(np.nansum(clipped, -1), np.nansum(whole, -1),
                                   rtol=1e-12, err_msg=str(geo))
        np.testing.assert_array_equal(np.nanmax(np.nan_to_num(clipped, nan=-np.inf), -1),
                                      np.nanmax(np.nan_to_num(whole, nan=-np.inf), -1))
    assert cut > 500       # (the sweep does reach the windows the clip cuts)


def test_a_window_that_cuts_nothing_is_lowered_as_given():
    geo = pool_geometry((112, 112), (3, 3), (2, 2), None, (1, 1, 1, 1))
    assert geo.window_kernel == (3, 3) and geo.window_pads == (1, 1, 1, 1)


def _pool_numpy(x, kind, kernel, strides, dil, pads, ceil_mode, count_include_pad):
    """Pooling by its definition, over the trailing two axes, each window's taps
    listed: the average over the taps counted (the input, and with count_include_pad
    its given padding, never what ceil_mode adds), the max over the input's."""
    geo = pool_geometry(x.shape[-2:], kernel, strides, dil, pads, ceil_mode)
    (oh, ow), (kh, kw) = geo.out, kernel
    hs = np.arange(oh)[:, None] * strides[0] + np.arange(kh)[None] * dil[0] - pads[0]
    ws = np.arange(ow)[:, None] * strides[1] + np.arange(kw)[None] * dil[1] - pads[1]
    h_in = (hs >= 0) & (hs < x.shape[-2])
    w_in = (ws >= 0) & (ws < x.shape[-1])
    vals = x[..., np.clip(hs, 0, x.shape[-2] - 1)[:, None, :, None],
             np.clip(ws, 0, x.shape[-1] - 1)[None, :, None, :]]   # [..., oh, ow, kh, kw]
    inside = h_in[:, None, :, None] & w_in[None, :, None, :]
    if kind == "max":
        return np.where(inside, vals, -np.inf).max(axis=(-2, -1))
    total = np.where(inside, vals, 0).sum(axis=(-2, -1), dtype=np.float64)
    if count_include_pad:
        h_cnt = ((hs >= -pads[0]) & (hs < x.shape[-2] + pads[2])).sum(1)
        w_cnt = ((ws >= -pads[1]) & (ws < x.shape[-1] + pads[3])).sum(1)
        count = h_cnt[:, None] * w_cnt[None, :]
    else:
        count = inside.sum(axis=(-2, -1))
    return (total / np.maximum(count, 1)).astype(x.dtype)


# (kind, input, kernel, strides, dilations, pads, ceil_mode, count_include_pad)
CASES = {
    "effnet_pooler": ("avg", (1, 64, 7, 7), (1280, 1280), (1280, 1280), (1, 1),
                      (0, 0, 0, 0), True, True),
    "avg_pad_incl": ("avg", (2, 8, 4, 5), (20, 20), (2, 3), (1, 1), (10, 10, 10, 10),
                     True, True),
    "avg_pad_excl": ("avg", (1, 8, 7, 7), (16, 16), (16, 16), (1, 1), (8, 8, 8, 8),
                     True, False),
    "avg_floor": ("avg", (1, 4, 6, 9), (9, 30), (2, 5), (1, 1), (3, 0, 5, 21), False,
                  False),
    "max_pad": ("max", (1, 8, 4, 4), (20, 20), (2, 2), (1, 1), (10, 10, 10, 10), True,
                False),
    "max_dilated": ("max", (1, 4, 6, 6), (7, 5), (3, 2), (2, 3), (4, 6, 4, 6), True,
                    False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pools_larger_than_their_map_match_their_definition(name):
    kind, shape, kernel, strides, dil, pads, ceil_mode, cip = CASES[name]
    b = GraphBuilder(name)
    x = b.input("x", shape)
    if kind == "avg":
        y = composites_nn.avg_pool(b, x, kernel, strides, dil, pads, ceil_mode, cip)
    else:
        y = composites_nn.max_pool(b, x, kernel, strides, dil, pads, ceil_mode)
    b.output(y, "y")
    g = b.build()
    feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
    want = _pool_numpy(feeds["x"], kind, kernel, strides, dil, pads, ceil_mode, cip)
    geo = pool_geometry(shape[-2:], kernel, strides, dil, pads, ceil_mode)
    # what the kernels reduce: the clipped window (every case here has taps to cut), or
    # the map itself
    windows = [n.attr_map["kernel"] for n in g.nodes if n.op == "window"]
    assert windows == ([] if geo.covers(shape[-2:]) else [geo.window_kernel])
    assert np.prod(geo.window_kernel) < np.prod(kernel), geo
    for planner in ("none", "stitch"):
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run(feeds)["y"]       # a checked run: outputs poisoned first
        assert got.shape == want.shape, (name, planner)
        assert relative_to_largest(got, want) <= 1e-6, (name, planner)


def test_a_pool_over_the_whole_map_is_the_global_pools_reduction():
    b = GraphBuilder("pooler")
    x = b.input("x", (1, 32, 7, 7))
    b.output(composites_nn.avg_pool(b, x, (1280, 1280), (1280, 1280), ceil_mode=True), "y")
    g = b.build()
    (node,) = g.nodes
    assert node.op == "reduce_mean" and node.attr_map["axes"] == (2, 3)
    assert node.origin.composite == "AveragePool"
