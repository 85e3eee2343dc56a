"""Elementwise kernels that move elements (transpose, slice, concat) loop over rows
apart from the last axis on a CPU, so each row's index arithmetic is done once and a
row of a transposed input is read contiguously; pure elementwise kernels and GPU
plans keep one flat loop. The rotary embedding of LLaMA (heads taken apart, the
halves of each head swapped and negated, scaled by cos and sin) is the case that
motivated it."""
import pytest

from workbench.codegen import lower_plan
from workbench.codegen.kir import Loop
from workbench.fusion import H100
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
