"""The index algebra of workbench/ops/index.py, checked by evaluating the C text it
generates in Python at every index point of small shapes and comparing with NumPy.

Generated expressions use only non-negative loop variables, integer literals, ``+``,
``*``, ``/`` and ``%``; on non-negative operands C's ``/`` and ``%`` are Python's ``//``
and ``%``, so replacing ``/`` by ``//`` makes the text evaluable.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from workbench.ops.index import Index, add, div, mod, mul


def ev(expr: str, **env) -> int:
    assert re.fullmatch(r"[\sA-Za-z0-9_+*/%()\-]*", expr), expr
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, env))


def numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def offsets(idx: Index, var="i", n=None):
    """The offset expression evaluated for var = 0..n-1 (n = numel of idx.shape)."""
    e = idx.offset()
    return [ev(e, **{var: k}) for k in range(numel(idx.shape) if n is None else n)]


SHAPES = [(), (1,), (7,), (3, 5), (1, 4), (4, 1), (2, 3, 4), (2, 1, 3), (1, 1, 1),
          (2, 3, 1, 5)]


# -- the small helpers -----------------------------------------------------------------

def test_helpers_fold_constants_and_identities():
    assert add("0", "x") == "x" and add("x", "0") == "x" and add("2", "-5") == "-3"
    assert mul("x", 0) == "0" and mul("x", 1) == "x" and mul("3", 4) == "12"
    assert mul("0", 9) == "0"
    assert div("x", 1) == "x" and div("0", 5) == "0" and div("17", 5) == "3"
    assert mod("x", 1) == "0" and mod("0", 5) == "0" and mod("17", 5) == "2"
    for a, k in itertools.product(range(0, 30), range(1, 7)):
        assert ev(div("x", k), x=a) == a // k
        assert ev(mod("x", k), x=a) == a % k
        assert ev(mul("x", k), x=a) == a * k
        assert ev(add("x", str(k)), x=a) == a + k


def test_module_docstring_examples():
    assert Index.flat("i", (4, 8)).broadcast_to((8,)).offset() == "(i % 8)"
    assert Index.flat("i", (4, 8)).transpose((1, 0)).offset() == "((i % 8) * 4 + (i / 8))"


# -- flat, digits, offset --------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flat_offset_is_identity(shape):
    idx = Index.flat("i", shape)
    assert offsets(idx) == list(range(numel(shape)))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flat_digits_match_unravel_index(shape):
    ds = Index.flat("i", shape).digits()
    assert len(ds) == len(shape)
    for i in range(numel(shape)):
        got = tuple(ev(d, i=i) for d in ds)
        want = tuple(int(x) for x in np.unravel_index(i, shape)) if shape else ()
        assert got == want, (shape, i, ds)


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (2, 1, 3)], ids=str)
def test_from_digits_offset_matches_ravel_multi_index(shape):
    idx = Index.from_digits([f"d{k}" for k in range(len(shape))], shape)
    e = idx.offset()
    for point in np.ndindex(*shape):
        env = {f"d{k}": v for k, v in enumerate(point)}
        assert ev(e, **env) == np.ravel_multi_index(point, shape)
    assert idx.digits() == [f"d{k}" if shape[k] != 1 else "0" for k in range(len(shape))]


# -- broadcast_to ----------------------------------------------------------------------

def _broadcast_inputs(out_shape):
    """Every shape that broadcasts to out_shape: each trailing dim kept or made 1, of
    every rank up to len(out_shape)."""
    res = set()
    r = len(out_shape)
    for k in range(r + 1):
        tail = out_shape[r - k:]
        for mask in itertools.product([False, True], repeat=k):
            res.add(tuple(1 if m else d for m, d in zip(mask, tail)))
    return sorted(res, key=lambda s: (len(s), s))


BROADCAST_CASES = [(o, i) for o in [(3, 5), (2, 3, 4), (2, 1, 4), (4, 1, 3, 2)]
                   for i in _broadcast_inputs(o)]


@pytest.mark.parametrize("out_shape, in_shape", BROADCAST_CASES, ids=str)
def test_broadcast_to_matches_numpy_broadcasting(out_shape, in_shape):
    idx = Index.flat("i", out_shape).broadcast_to(in_shape)
    assert idx.shape == tuple(in_shape)
    src = np.arange(numel(in_shape)).reshape(in_shape)
    want = np.broadcast_to(src, out_shape).ravel().tolist()
    assert offsets(idx, n=numel(out_shape)) == want, idx


@pytest.mark.parametrize("out_shape, in_shape", [((2, 3, 4), (3, 1)), ((2, 3, 4), (1, 4)),
                                                 ((4, 1, 3, 2), (1, 3, 1))], ids=str)
def test_broadcast_to_from_digit_segments(out_shape, in_shape):
    # an index already split into one segment per dim broadcasts per digit
    idx = Index.flat("i", out_shape).transpose(list(range(len(out_shape))))
    b = idx.broadcast_to(in_shape)
    src = np.arange(numel(in_shape)).reshape(in_shape)
    want = np.broadcast_to(src, out_shape).ravel().tolist()
    assert offsets(b, n=numel(out_shape)) == want


# -- transpose --------------------------------------------------------------------------

TRANSPOSE_CASES = ([((3, 5), p) for p in itertools.permutations(range(2))]
                   + [((2, 3, 4), p) for p in itertools.permutations(range(3))]
                   + [((2, 1, 3), p) for p in itertools.permutations(range(3))]
                   + [((2, 3, 4, 5), (3, 1, 0, 2)), ((2, 3, 4, 5), (0, 2, 3, 1)),
                      ((7,), (0,))])


@pytest.mark.parametrize("in_shape, perm", TRANSPOSE_CASES, ids=str)
def test_transpose_matches_numpy(in_shape, perm):
    src = np.arange(numel(in_shape)).reshape(in_shape)
    out = np.transpose(src, perm)
    idx = Index.flat("i", out.shape).transpose(perm)
    assert idx.shape == tuple(in_shape)
    assert offsets(idx, n=out.size) == out.ravel().tolist()


# -- reshape_to -------------------------------------------------------------------------

RESHAPE_CASES = [((2, 3, 4), (6, 4)), ((2, 3, 4), (4, 6)), ((2, 3, 4), (24,)),
                 ((2, 3, 4), (1, 24, 1)), ((6, 4), (2, 3, 4)), ((24,), (2, 3, 4)),
                 ((3, 5), (5, 3)), ((1,), ()), ((), (1, 1)), ((2, 1, 3), (6,)),
                 ((4, 6), (2, 2, 2, 3))]


@pytest.mark.parametrize("out_shape, in_shape", RESHAPE_CASES, ids=str)
def test_reshape_of_flat_index_is_identity(out_shape, in_shape):
    idx = Index.flat("i", out_shape).reshape_to(in_shape)
    assert idx.shape == tuple(in_shape)
    assert offsets(idx, n=numel(out_shape)) == list(range(numel(out_shape)))


@pytest.mark.parametrize("in_shape, perm, reshaped", [
    ((2, 3, 4), (2, 0, 1), (4, 6)),
    ((2, 3, 4), (1, 0, 2), (3, 8)),
    ((2, 3, 4), (0, 2, 1), (2, 12)),
    ((2, 3, 4), (0, 2, 1), (24,)),
    ((4, 6), (1, 0), (2, 3, 4)),
    ((2, 3, 4, 5), (0, 1, 3, 2), (6, 5, 4)),
    ((2, 3, 4, 5), (2, 3, 0, 1), (20, 6)),
], ids=str)
def test_reshape_after_transpose(in_shape, perm, reshaped):
    # out = reshape(transpose(x, perm), reshaped): the reshape reads a multi-segment
    # index, the hard case for reshape_to
    src = np.arange(numel(in_shape)).reshape(in_shape)
    mid = np.transpose(src, perm)
    out = mid.reshape(reshaped)
    idx = Index.flat("i", reshaped).reshape_to(mid.shape).transpose(perm)
    assert offsets(idx, n=out.size) == out.ravel().tolist()


@pytest.mark.parametrize("in_shape, perm, reshaped", [
    ((6, 4), (2, 0, 1), (2, 3, 4)),    # transpose(reshape(x)): the index is split first
    ((24,), (2, 0, 1), (2, 3, 4)),
    ((4, 6), (1, 0, 2), (2, 2, 6)),
    ((2, 12), (3, 2, 1, 0), (2, 3, 2, 2)),
], ids=str)
def test_transpose_after_reshape(in_shape, perm, reshaped):
    src = np.arange(numel(in_shape)).reshape(in_shape)
    mid = src.reshape(reshaped)
    out = np.transpose(mid, perm)
    idx = Index.flat("i", out.shape).transpose(perm).reshape_to(in_shape)
    assert offsets(idx, n=out.size) == out.ravel().tolist()


# -- slice_of ---------------------------------------------------------------------------

def _slice_params(shape, slices):
    params = []
    for d, sl in zip(shape, slices):
        r = range(*sl.indices(d))
        params.append((r.start if len(r) else 0, sl.step or 1, len(r)))
    return tuple(params)


SLICE_CASES = [((10,), (slice(2, 8),)), ((10,), (slice(8, 1, -1),)),
               ((10,), (slice(None, None, -1),)), ((10,), (slice(9, None, -3),)),
               ((10,), (slice(1, 10, 4),)), ((4, 6), (slice(1, 3), slice(-4, -1))),
               ((4, 6), (slice(None), slice(5, 0, -2))),
               ((4, 6), (slice(None, None, -1), slice(0, 6, 2))),
               ((2, 3, 4), (slice(None), slice(2, None, -1), slice(1, 3))),
               ((3, 1, 5), (slice(2, 0, -2), slice(None), slice(4, None, -4)))]


@pytest.mark.parametrize("in_shape, slices", SLICE_CASES, ids=str)
def test_slice_of_matches_numpy(in_shape, slices):
    src = np.arange(numel(in_shape)).reshape(in_shape)
    out = src[slices]
    params = _slice_params(in_shape, slices)
    assert tuple(n for _, _, n in params) == out.shape
    idx = Index.flat("i", out.shape).slice_of(in_shape, params)
    assert offsets(idx, n=out.size) == out.ravel().tolist()


# -- from_runs: the row/column decomposition of row-reduction kernels -------------------

FROM_RUNS_CASES = [(shape, axes) for shape in [(3, 4, 5), (2, 3, 4, 5), (3, 1, 4)]
                   for r in range(len(shape) + 1)
                   for axes in itertools.combinations(range(len(shape)), r)]


@pytest.mark.parametrize("shape, axes", FROM_RUNS_CASES, ids=str)
def test_from_runs_matches_ravel_multi_index(shape, axes):
    kept = [d for d in range(len(shape)) if d not in axes]
    idx = Index.from_runs(shape, [("row", kept), ("col", list(axes))])
    assert idx.shape == shape
    kshape = [shape[d] for d in kept]
    ashape = [shape[d] for d in axes]
    e = idx.offset()
    digs = idx.digits()
    seen = set()
    for row in range(numel(kshape)):
        for col in range(numel(ashape)):
            point = [0] * len(shape)
            for d, v in zip(kept, np.unravel_index(row, kshape) if kshape else ()):
                point[d] = int(v)
            for d, v in zip(axes, np.unravel_index(col, ashape) if ashape else ()):
                point[d] = int(v)
            off = ev(e, row=row, col=col)
            assert off == np.ravel_multi_index(point, shape), (row, col, e)
            assert [ev(x, row=row, col=col) for x in digs] == point
            seen.add(off)
    assert seen == set(range(numel(shape)))    # a bijection: every element once


@pytest.mark.parametrize("shape, axes", [((3, 4, 5), (2,)), ((3, 4, 5), (0,)),
                                         ((3, 4, 5), (0, 2)), ((3, 4, 5), (1,)),
                                         ((2, 3, 4, 5), (1, 3))], ids=str)
def test_from_runs_then_broadcast_to_per_row_shape(shape, axes):
    # a per-row value (keepdims shape) read inside the column loop ignores col
    kept = [d for d in range(len(shape)) if d not in axes]
    dom = Index.from_runs(shape, [("row", kept), ("col", list(axes))])
    keep_shape = tuple(1 if d in axes else n for d, n in enumerate(shape))
    idx = dom.broadcast_to(keep_shape)
    src = np.arange(numel(keep_shape)).reshape(keep_shape)
    full = np.broadcast_to(src, shape)
    kshape = [shape[d] for d in kept]
    ashape = [shape[d] for d in axes]
    for row in range(numel(kshape)):
        for col in range(numel(ashape)):
            point = [0] * len(shape)
            for d, v in zip(kept, np.unravel_index(row, kshape)):
                point[d] = int(v)
            for d, v in zip(axes, np.unravel_index(col, ashape)):
                point[d] = int(v)
            assert ev(idx.offset(), row=row, col=col) == full[tuple(point)]
    assert "col" not in idx.offset()


# -- random chains of transforms --------------------------------------------------------

def _random_chain(rng, shape, steps):
    """Apply random layout ops forward on an arange; return (final array, list of ops)."""
    a = np.arange(numel(shape)).reshape(shape)
    ops = []
    for _ in range(steps):
        kind = rng.choice(["transpose", "reshape", "slice", "broadcast"])
        if kind == "transpose" and a.ndim >= 2:
            perm = tuple(int(p) for p in rng.permutation(a.ndim))
            ops.append(("transpose", perm, a.shape))
            a = np.transpose(a, perm)
        elif kind == "reshape":
            n = a.size
            divs = [d for d in range(1, n + 1) if n % d == 0]
            d1 = int(rng.choice(divs))
            new = (d1, n // d1) if rng.random() < 0.7 else (n,)
            ops.append(("reshape", new, a.shape))
            a = np.ascontiguousarray(a).reshape(new)
        elif kind == "slice" and a.ndim >= 1:
            sl = []
            for d in a.shape:
                st = int(rng.choice([1, 1, 2, -1, -2]))
                start = int(rng.integers(0, d))
                sl.append(slice(start, None, st) if st > 0 else slice(start, None, st))
            sl = tuple(sl)
            if a[sl].size == 0:
                continue
            ops.append(("slice", _slice_params(a.shape, sl), a.shape))
            a = a[sl]
        elif kind == "broadcast":
            new = (int(rng.integers(1, 3)),) + a.shape
            ops.append(("broadcast", new, a.shape))
            a = np.broadcast_to(a, new)
    return a, ops


@pytest.mark.parametrize("seed", range(40))
def test_random_transform_chains_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 4))))
    out, ops = _random_chain(rng, shape, int(rng.integers(1, 6)))
    idx = Index.flat("i", out.shape)
    for kind, arg, in_shape in reversed(ops):
        if kind == "transpose":
            idx = idx.transpose(arg)
        elif kind == "reshape":
            idx = idx.reshape_to(in_shape)
        elif kind == "slice":
            idx = idx.slice_of(in_shape, arg)
        else:
            idx = idx.broadcast_to(in_shape)
        assert idx.shape == tuple(in_shape)
    assert offsets(idx, n=out.size) == np.ascontiguousarray(out).ravel().tolist(), ops
