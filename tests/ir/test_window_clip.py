"""A hand-written window longer than its map is clipped for the reductions that read it
(ir/window_clip.py), as the pooling composites clip theirs: same results, fewer taps."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.ir import clip_windows
from workbench.runtime import random_inputs, run_reference


def _pool(kernel, strides, pads, fill, reduce, keepdims=False, shape=(2, 3, 7, 7)):
    b = wb.GraphBuilder("pool")
    x = b.input("x", shape)
    w = b.window(x, kernel=kernel, strides=strides, pads=pads, fill=fill)
    taps = [len(shape), len(shape) + 1]
    b.output(getattr(b, reduce)(w, axes=taps, keepdims=keepdims))
    return b.build()


def _windows(g):
    return [(n.attr("kernel"), n.attr("pads")) for n in g.nodes if n.op == "window"]


def test_a_window_far_longer_than_its_map_reduces_over_what_it_reads():
    # EfficientNet's old pooler, written by hand: 64 x 64 taps, 49 of them real
    for fill, reduce in (("zero", "reduce_sum"), ("lowest", "reduce_max")):
        g = _pool([64, 64], [64, 64], [0, 0, 63, 63], fill, reduce)
        c = clip_windows(g)
        assert _windows(c) == [((7, 7), (0, 0, 0, 0))]
        assert [n.id for n in c.nodes] == [n.id for n in g.nodes]
        assert c.value(c.outputs[0]).shape == g.value(g.outputs[0]).shape == (2, 3, 1, 1)
        ins = random_inputs(g, seed=3)
        want = run_reference(g, ins)[g.outputs[0]]
        got = run_reference(c, ins)[c.outputs[0]]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_session_plans_the_clipped_window_and_matches_the_written_one():
    g = _pool([64, 64], [64, 64], [0, 0, 63, 63], "lowest", "reduce_max", keepdims=True)
    s = wb.Session(g, backend="cpu")
    assert _windows(s.graph) == [((7, 7), (0, 0, 0, 0))]
    s.auto("stitch")
    ins = random_inputs(g, seed=5)
    got = s.run(ins)[g.outputs[0]]
    np.testing.assert_array_equal(got, run_reference(g, ins)[g.outputs[0]])


@pytest.mark.parametrize("case", [
    ("zero", "reduce_mean"),        # a mean divides by every tap, padding included
    ("lowest", "reduce_sum"),       # the lowest value is no sum's identity
    ("zero", "reduce_max"),         # nor is zero a max's
])
def test_windows_whose_readers_see_the_padding_stay_as_written(case):
    fill, reduce = case
    g = _pool([64, 64], [64, 64], [0, 0, 63, 63], fill, reduce)
    assert clip_windows(g) is g


def test_a_window_read_otherwise_or_returned_stays_as_written():
    b = wb.GraphBuilder("taps")
    x = b.input("x", (1, 2, 5, 5))
    w = b.window(x, kernel=[9, 9], pads=[4, 4, 4, 4], fill="zero")
    b.output(b.reduce_sum(w, axes=[4], keepdims=False))    # only some of the taps
    b.output(w)                                            # and the window itself
    g = b.build()
    assert clip_windows(g) is g


def test_random_windows_give_the_written_results():
    rng = np.random.default_rng(11)
    clipped = 0
    for _ in range(40):
        n = int(rng.integers(1, 9))
        k = int(rng.integers(1, 14))
        s = int(rng.integers(1, 5))
        pb, pe = int(rng.integers(0, k)), int(rng.integers(0, k))
        if (n + pb + pe - k) < 0:
            continue
        fill, reduce = (("zero", "reduce_sum"), ("lowest", "reduce_max"))[int(rng.integers(2))]
        g = _pool([k, 1], [s, 1], [pb, 0, pe, 0], fill, reduce, shape=(2, n, 3))
        c = clip_windows(g)
        clipped += c is not g
        ins = random_inputs(g, seed=int(rng.integers(1 << 30)))
        np.testing.assert_allclose(run_reference(c, ins)[c.outputs[0]],
                                   run_reference(g, ins)[g.outputs[0]], rtol=1e-5, atol=1e-6)
    assert clipped >= 5
