"""Elementwise kernels that move elements (transpose, slice, concat) loop over rows
apart from the last axis on a CPU, so each row's index arithmetic is done once and a
row of a transposed input is read contiguously; pure elementwise kernels and GPU
plans keep one flat loop. The rotary embedding of LLaMA (heads taken apart, the
halves of each head swapped and negated, scaled by cos and sin) is the case that
motivated it.

A concat joined along an axis before the last, whose result the rest of the kernel
reads elementwise, splits the CPU loop at its parts: a row per index up to the axis,
each row computed by its part's loop reading that input alone (DenseNet: a concat of
up to 32 parts, then BatchNorm and ReLU, read every part for every element)."""
import pytest

from workbench.codegen import lower_plan
import numpy as np

from workbench.codegen.kir import If, Let, Loop
from workbench.device import H100
from workbench.fusion.planners import run_planner
from workbench.ir import GraphBuilder
from workbench.session import Session

B, S, H, D = 2, 24, 3, 32


def _rope():
    b = GraphBuilder("rope")
    x = b.input("x", (B, S, H * D))
    cos, sin = b.input("cos", (S, D)), b.input("sin", (S, D))
    q = b.op("transpose", b.op("reshape", x, shape=[B, S, H, D]), perm=[0, 2, 1, 3])
    lo = b.op("slice", q, starts=[0], ends=[D // 2], axes=[3])
    hi = b.op("slice", q, starts=[D // 2], ends=[D], axes=[3])
    rot = b.op("concat", b.op("neg", hi), lo, axis=3)
    b.output(q * cos + rot * sin, "y")
    return b.build()


def _loops(plan):
    (k,) = lower_plan(plan)
    return k, [s for s in k.body if isinstance(s, Loop)]


def test_a_kernel_moving_elements_loops_over_rows_on_a_cpu(check_graph):
    g = _rope()
    s = Session(g, backend="cpu")
    s.auto("rules")
    k, (outer,) = _loops(s.plan)
    assert outer.bind == "grid" and outer.extent == B * H * S
    (inner,) = outer.body
    assert isinstance(inner, Loop) and inner.bind == "block" and inner.extent == D
    # the per-row part of the index is the row's; within a row the offsets step by one
    src = s.source("n0", target="c")
    assert "% 32" not in src and "/ 32" not in src, src
    # against NumPy on fresh random inputs, outputs poisoned
    check_graph(g, "rules")


def test_gpu_plans_and_plain_elementwise_keep_one_flat_loop():
    plan, _ = run_planner("rules", _rope(), device=H100)
    _, loops = _loops(plan)
    assert [lp.bind for lp in loops] == ["flat"]
    b = GraphBuilder("plain")
    x = b.input("x", (B, S, H * D))
    b.output(b.tanh(x) * 2.0, "y")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    _, loops = _loops(s.plan)
    assert [lp.bind for lp in loops] == ["flat"]


@pytest.mark.parametrize("last", [1, 7, 16])
def test_short_rows_keep_one_flat_loop_and_all_are_right(last, check_graph):
    b = GraphBuilder(f"t{last}")
    x = b.input("x", (5, last, 6))
    b.output(b.op("transpose", x, perm=[0, 2, 1]) + 1.0, "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("rules")
    _, loops = _loops(s.plan)
    assert [lp.bind for lp in loops] == (["grid"] if last >= 16 else ["flat"])
    check_graph(g, "rules")


def _dense(parts=(5, 3, 4, 2, 6), axis=1, then=None):
    """Parts joined along ``axis`` of [2, c, 7, 9], less a per-channel mean, times a
    per-channel scale, ReLU (DenseNet's concat then BatchNorm then ReLU)."""
    b = GraphBuilder(f"dense{axis}")
    shapes = [[2, 4, 7, 9] for _ in parts]
    for sh, c in zip(shapes, parts):
        sh[axis] = c
    xs = [b.input(f"x{k}", tuple(sh)) for k, sh in enumerate(shapes)]
    y = b.op("concat", *xs, axis=axis)
    per = [1, 1, 1, 1]
    per[axis] = y.shape[axis]
    rng = np.random.default_rng(axis)
    mean = b.constant(rng.standard_normal(per).astype(np.float32), "mean")
    scale = b.constant(rng.random(per).astype(np.float32) + 0.5, "scale")
    y = b.relu((y - mean) * scale)
    b.output(then(b, y) if then else y, "y")
    return b.build()


@pytest.mark.parametrize("axis", [1, 2, 0])
def test_a_concat_splits_the_loop_at_its_parts_each_read_once(axis, check_graph):
    g = _dense(axis=axis)
    s = Session(g, backend="cpu")
    s.auto("stitch")
    k, (outer,) = _loops(s.plan)
    shape = g.value(g.outputs[0]).shape
    assert outer.bind == "grid" and outer.extent == int(np.prod(shape[:axis + 1]))
    assert isinstance(outer.body[0], Let)
    parts = outer.body[1:]
    assert len(parts) == 5 and all(isinstance(p, If) for p in parts)
    for p in parts:
        (inner,) = p.body
        assert inner.bind == "block" and inner.extent == int(np.prod(shape[axis + 1:]))
    src = s.source(k.group, target="c")
    body = src[src.index(f"void {k.name}("):]
    for i in range(5):       # each part's input read in one place, with no clamp
        assert body.count(f"in{i}[") == 1, body
    assert "wb_clampi" not in body
    check_graph(g, "stitch")


def test_a_concat_read_otherwise_or_on_a_gpu_keeps_the_select(check_graph):
    """A transpose after the concat reads it at another index, and a GPU's threads
    stay together: the loop is not split; each element picks its part."""
    g = _dense(then=lambda b, y: b.op("transpose", y, perm=[0, 2, 1, 3]))
    s = Session(g, backend="cpu")
    s.fuse([n.id for n in g.nodes])
    k, _ = _loops(s.plan)
    assert not any(isinstance(x, If) for lp in k.body for x in getattr(lp, "body", ()))
    assert "wb_clampi" in s.source(k.group, target="c")
    check_graph(g, "stitch")
    plan, _ = run_planner("stitch", _dense(), device=H100)
    _, loops = _loops(plan)
    assert [lp.bind for lp in loops] == ["flat"]


def test_a_concat_before_a_chain_of_diamonds_is_split_and_lowered_at_once(check_graph):
    """x * sigmoid(x) forty times after the concat: each op of the chain is read twice,
    so walking its readers path by path would take 2^40 steps; each op is looked at
    once."""
    b = GraphBuilder("diamonds")
    y = b.op("concat", *[b.input(f"x{i}", (2, 3, 4, 8)) for i in range(3)], axis=1)
    for _ in range(40):
        y = y * b.sigmoid(y)
    b.output(y, "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.fuse([n.id for n in g.nodes])
    k, (outer,) = _loops(s.plan)
    assert sum(isinstance(p, If) for p in outer.body) == 3
    check_graph(g, "stitch")
