"""The indexing ops (ops/indexing.py, ops/ordering.py): each reference against an
independent computation (torch, or NumPy written another way) on fresh random inputs
with indices at the edges (negative, the last, out of range: clamped, never read or
written outside the input); each kernel against the reference under planners none,
rules and stitch, fused with elementwise neighbours; the CUDA of every kernel compiled
by NVRTC as the GPU runtime compiles it; and the shape rules' refusals.
"""
from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import GraphError
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.ops import get_op

torch = pytest.importorskip("torch")

F32, F16, I32, I64, B = DType.float32, DType.float16, DType.int32, DType.int64, DType.bool
PLANNERS = ("none", "rules", "stitch")


def _edge_indices(rng, shape, n):
    """Indices into an axis of length n: every in-range value incl. negative ones, plus
    a few out of range (the kernels clamp them)."""
    a = rng.integers(-n, n, shape)
    flat = a.reshape(-1)
    if flat.size >= 4:
        flat[:4] = [-n, n - 1, n + 3, -n - 5]   # first, last, past the end, before the start
    return a


def _clamped(a, n):
    a = np.asarray(a, np.int64)
    return np.clip(np.where(a < 0, a + n, a), 0, n - 1)


def _ref(op, xs, **attrs):
    return get_op(op).reference(xs, attrs)


# -- references against independent computations -------------------------------------

def test_gather_elements_reference_is_torch_gather():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    for axis in range(3):
        shape = [3, 4, 2]
        shape[axis] = 7
        idx = _edge_indices(rng, shape, x.shape[axis])
        want = torch.gather(torch.from_numpy(x), axis,
                            torch.from_numpy(_clamped(idx, x.shape[axis]))).numpy()
        np.testing.assert_array_equal(_ref("gather_elements", [x, idx], axis=axis)[0], want)


def test_gather_nd_reference_matches_advanced_indexing():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5, 2)).astype(np.float32)
    idx = np.stack([_edge_indices(rng, (6,), 3), _edge_indices(rng, (6,), 4)], -1)
    want = x[_clamped(idx[:, 0], 3), _clamped(idx[:, 1], 4)]
    np.testing.assert_array_equal(_ref("gather_nd", [x, idx])[0], want)
    # batch_dims=1: each batch row picks in its own slice
    bidx = np.stack([_edge_indices(rng, (3, 2), 4), _edge_indices(rng, (3, 2), 5)], -1)
    got = _ref("gather_nd", [x, bidx], batch_dims=1)[0]
    want = np.stack([x[b][_clamped(bidx[b, :, 0], 4), _clamped(bidx[b, :, 1], 5)]
                     for b in range(3)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reference_is_torch_scatter(reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    upd = rng.standard_normal((3, 4)).astype(np.float32)
    # distinct rows per column, so "none" has one answer (torch leaves repeats undefined)
    idx = np.stack([rng.permutation(5)[:3] - 5 * (c % 2) for c in range(4)], 1)
    t = torch.from_numpy(x.copy())
    ti = torch.from_numpy(_clamped(idx, 5))
    if reduction == "none":
        want = t.scatter(0, ti, torch.from_numpy(upd))
    else:
        red = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
        want = t.scatter_reduce(0, ti, torch.from_numpy(upd), red, include_self=True)
    got = _ref("scatter_elements", [x, idx, upd], axis=0, reduction=reduction)[0]
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


def test_scatter_nd_reference_accumulates_repeats_and_clamps():
    x = np.zeros((4, 3), np.float32)
    idx = np.array([[1], [-1], [1], [9]])       # 9 clamps to the last row, -1 is it too
    upd = np.arange(12, dtype=np.float32).reshape(4, 3)
    got = _ref("scatter_nd", [x, idx, upd], reduction="add")[0]
    want = np.zeros((4, 3), np.float32)
    want[1] = upd[0] + upd[2]
    want[3] = upd[1] + upd[3]
    np.testing.assert_array_equal(got, want)
    # reduction none: the last update written wins
    got = _ref("scatter_nd", [x, idx, upd], reduction="none")[0]
    np.testing.assert_array_equal(got[1], upd[2])


def test_ordering_references_match_torch():
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 3, (4, 9)).astype(np.float32)   # many ties
    t = torch.from_numpy(x)
    for axis in (0, 1):
        np.testing.assert_array_equal(_ref("argmax", [x], axis=axis, keepdims=False)[0],
                                      np.argmax(x, axis))
        last = _ref("argmin", [x], axis=axis, keepdims=True, select_last_index=True)[0]
        n = x.shape[axis]
        np.testing.assert_array_equal(
            last, n - 1 - np.argmin(np.flip(x, axis), axis=axis, keepdims=True))
        for largest in (True, False):
            v, i = _ref("topk", [x], k=3, axis=axis, largest=largest)
            tv, _ = torch.topk(t, 3, dim=axis, largest=largest, sorted=True)
            np.testing.assert_array_equal(v, tv.numpy())
            # ties: the lower index first (ONNX's rule), and the indices pick the values
            np.testing.assert_array_equal(np.take_along_axis(x, i, axis), v)
            order = np.argsort(-x if largest else x, axis=axis, kind="stable")
            np.testing.assert_array_equal(i, np.take(order, range(3), axis=axis))
        for exclusive in (False, True):
            for reverse in (False, True):
                got = _ref("cumsum", [x], axis=axis, exclusive=exclusive, reverse=reverse)[0]
                y = np.flip(x, axis) if reverse else x
                c = np.cumsum(y, axis) - (y if exclusive else 0)
                np.testing.assert_allclose(got, np.flip(c, axis) if reverse else c)
    # integers wrap in their own type (NumPy would widen int32 to int64)
    big = np.array([2 ** 31 - 1, 1], np.int32)
    assert _ref("cumsum", [big], axis=0)[0].tolist() == [2 ** 31 - 1, -2 ** 31]


def test_trilu_reference_is_torch():
    x = np.random.default_rng(5).standard_normal((2, 5, 7)).astype(np.float32)
    for k in (-2, 0, 3, 9):
        np.testing.assert_array_equal(_ref("trilu", [x], k=k, upper=True)[0],
                                      torch.triu(torch.from_numpy(x), k).numpy())
        np.testing.assert_array_equal(_ref("trilu", [x], k=k, upper=False)[0],
                                      torch.tril(torch.from_numpy(x), k).numpy())


# -- kernels against the reference, fused, under every planner --------------------------

def _graph():
    b = GraphBuilder("indexing")
    x = b.input("x", (4, 6, 5), F32)
    h = b.input("h", (3, 8), F16)
    ie = b.input("ie", (4, 3, 5), I64)
    ind = b.input("ind", (2, 3, 2), I32)
    si = b.input("si", (4, 6, 2), I64)
    m = b.input("m", (3, 8), B)
    sn = b.input("sn", (3, 1), I64)
    e = b.exp(x)
    b.output(b.gather_elements(e, ie, axis=1) * 2.0, "ge")
    b.output(b.gather_nd(e, ind) + 1.0, "gnd")
    # batch_dims=2: x[b0, b1, si[b0, b1, 0]]
    b.output(b.gather_nd(b.tanh(x), b.slice(si, starts=[0], ends=[1], axes=[2]),
                         batch_dims=2), "gnd_batch")
    b.output(b.trilu(e, k=1, upper=False) - 1.0, "tril")
    b.output(b.trilu(b.neg(h), k=-2, upper=True), "triu_f16")
    b.output(b.gather_nd(m, b.slice(ind, starts=[0], ends=[1], axes=[2])), "gnd_bool")
    b.output(b.cumsum(e, axis=1, exclusive=True, reverse=True), "cumsum")
    b.output(b.argmax(e, axis=2, keepdims=False), "argmax")
    b.output(b.argmin(h, axis=0, keepdims=True, select_last_index=True), "argmin")
    v, i = b.topk(e, k=2, axis=-1, largest=False)
    b.output(v * 3.0, "topk_v")
    b.output(i, "topk_i")
    upd = b.gather_elements(x, ie, axis=1)
    b.output(b.scatter_elements(b.sigmoid(x), ie, upd, axis=1, reduction="add"), "scatter")
    b.output(b.scatter_nd(x, sn, b.slice(e, starts=[0], ends=[3], axes=[0]),
                          reduction="max"), "scatter_nd")
    return b.build()


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((4, 6, 5)).astype(np.float32),
            "h": rng.standard_normal((3, 8)).astype(np.float16),
            "ie": _edge_indices(rng, (4, 3, 5), 6).astype(np.int64),
            "ind": np.stack([_edge_indices(rng, (2, 3), 4), _edge_indices(rng, (2, 3), 6)],
                            -1).astype(np.int32),
            "si": _edge_indices(rng, (4, 6, 2), 5).astype(np.int64),
            "m": rng.random((3, 8)) < 0.5,
            "sn": _edge_indices(rng, (3, 1), 4).astype(np.int64)}


@pytest.mark.parametrize("planner", PLANNERS)
def test_kernels_match_the_reference(wb, planner):
    g = _graph()
    for seed in (0, 1):
        s = wb.check_graph(g, planner, inputs=_inputs(seed))
    if planner != "none":   # the index rules fused into their neighbours' kernels
        assert len(s.plan.groups) < len(g.nodes)


def test_every_kernel_compiles_with_nvrtc(nvrtc_compile_plans):
    assert nvrtc_compile_plans([_graph()], PLANNERS) >= 6


# -- shape rules: refusals in one line -------------------------------------------------

@pytest.mark.parametrize("build, match", [
    (lambda b, x, i: b.gather_elements(x, b.cast(i, to="float32"), axis=0),
     "indices must be int32 or int64"),
    (lambda b, x, i: b.gather_elements(x, b.reshape(i, shape=[6]), axis=0),
     "must have the rank"),
    (lambda b, x, i: b.gather_nd(x, b.reshape(i, shape=[2, 3]), batch_dims=2),
     "batch_dims 2"),
    (lambda b, x, i: b.gather_nd(x, b.reshape(i, shape=[1, 6])), "positions of length 6"),
    (lambda b, x, i: b.trilu(b.reshape(x, shape=[6])), "rank >= 2"),
    (lambda b, x, i: b.topk(x, k=4, axis=0), "k=4 must be in"),
    (lambda b, x, i: b.cumsum(b.cast(x, to="bool"), axis=0), "cast them"),
    (lambda b, x, i: b.scatter_elements(x, i, x, axis=0, reduction="mean"),
     "reduction 'mean'"),
    (lambda b, x, i: b.scatter_nd(x, b.reshape(i, shape=[6, 1]), x), "updates"),
    (lambda b, x, i: b.argmax(b.slice(x, starts=[0], ends=[0], axes=[1]), axis=1),
     "length 0"),
])
def test_bad_attributes_are_refused(build, match):
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3), F32)
    i = b.input("i", (2, 3), I64)
    with pytest.raises(GraphError, match=match) as e:
        build(b, x, i)
    assert "\n" not in str(e.value)
