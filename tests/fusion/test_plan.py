"""Plans: legality, refusals with reasons, kernel counts per planner."""
import re

import numpy as np
import pytest

import workbench as wb
from workbench.device import H100
from workbench.errors import FusionRefused
from workbench.fusion import Plan, StitchScheme, run_planner
from workbench.ir import load_json


def _ln(rows=8, cols=16):
    b = wb.GraphBuilder("ln")
    x = b.input("x", (rows, cols))
    g = b.constant(np.random.default_rng(0).random(cols, dtype=np.float32), "gamma")
    be = b.constant(np.random.default_rng(1).random(cols, dtype=np.float32), "beta")
    b.output(b.layer_norm(x, g, be), "y")
    return b.build()


@pytest.mark.parametrize("name", ["layernorm", "softmax", "rmsnorm"])
def test_rules_makes_norms_one_kernel(name):
    g = load_json(f"sample_graphs/{name}.json")
    plan, log = run_planner("rules", g)
    assert len(plan.groups) == 1
    assert plan.groups[0].schedule.kind == "row_reduce"
    assert plan.groups[0].schedule.mapping == "block"
    none, _ = run_planner("none", g)
    assert len(none.groups) == len(g.nodes)


def test_plan_is_a_partition_and_immutable():
    g = _ln()
    p0 = Plan.singletons(g, H100)
    p1 = p0.fuse(["n0", "n1"])
    assert len(p0.groups) == len(g.nodes)        # old plan untouched
    assert len(p1.groups) == len(g.nodes) - 1
    covered = sorted(n for gr in p1.groups for n in gr.nodes)
    assert covered == sorted(n.id for n in g.nodes)
    assert p1.split(p1.group("n0").id) == p0


def test_cycle_is_refused_with_the_node_named():
    # a -> b -> c and a -> c: fusing a and c without b would need b inside
    b = wb.GraphBuilder("diamond")
    x = b.input("x", (4, 4))
    a = b.exp(x)             # n0
    m = b.neg(a)             # n1
    c = b.add(a, m)          # n2
    b.output(c, "y")
    p = Plan.singletons(b.build(), H100)
    with pytest.raises(FusionRefused, match="cycle through n1"):
        p.fuse(["n0", "n2"])
    assert len(p.fuse(["n0", "n1", "n2"]).groups) == 1


def test_library_op_refuses_company():
    # a matmul shares its kernel only with its epilogue (the GEMM template): not with
    # what computes its operand, not with a second library call
    b = wb.GraphBuilder("mm")
    x = b.input("x", (4, 8))
    w = b.input("w", (8, 3))
    y = b.exp(b.matmul(b.exp(x), w))
    b.output(b.matmul(y, b.input("w2", (3, 5))), "y")
    p = Plan.singletons(b.build(), H100)
    with pytest.raises(FusionRefused, match="library call"):
        p.fuse(["n0", "n1"])
    with pytest.raises(FusionRefused, match="library call"):
        p.fuse(["n1", "n2", "n3"])
    assert p.fuse(["n1", "n2"]).group("n1").schedule.gemm.block is not None


def test_reductions_over_different_domains_refused():
    b = wb.GraphBuilder("two")
    x = b.input("x", (4, 8))
    s1 = b.reduce_sum(x, axes=[1])
    s0 = b.reduce_sum(x, axes=[0], keepdims=True)
    b.output(s1, "a")
    b.output(s0, "b")
    p = Plan.singletons(b.build(), H100)
    with pytest.raises(FusionRefused, match="one reduction domain"):
        p.fuse(["n0", "n1"], stitch=False)
    # by default the fusion falls back to a stitched kernel, and says so
    assert p.fuse(["n0", "n1"]).groups[0].schedule.kind == "stitched"


def test_layout_op_refused_in_reduction_kernel():
    b = wb.GraphBuilder("t")
    x = b.input("x", (4, 8))
    t = b.transpose(x, perm=[1, 0])
    b.output(b.reduce_sum(t, axes=[1]), "y")
    p = Plan.singletons(b.build(), H100)
    with pytest.raises(FusionRefused, match="moves elements"):
        p.fuse(["n0", "n1"], stitch=False)
    assert p.fuse(["n0", "n1"]).groups[0].schedule.describe().startswith("stitched 2 phases")


def _max_then_avg_pool():
    """Inception's stem: a max pool, then a 3 x 3 average pool over its result."""
    from workbench.ir import composites_nn
    b = wb.GraphBuilder("pools")
    x = b.input("x", (2, 3, 11, 11))
    m = composites_nn.max_pool(b, x, (3, 3), (2, 2), None, [0, 0, 0, 0])
    b.output(composites_nn.avg_pool(b, m, (3, 3), (1, 1), None, [1, 1, 1, 1],
                                    count_include_pad=True), "y")
    return b.build()


def test_a_window_over_a_reduction_of_its_kernel_is_refused_or_phased():
    """The average pool's window reads the max of neighbouring rows: one row kernel
    cannot have them (it read its own row's max at every tap, 8x off in Inception v3),
    so the fusion is refused or stitched into phases, and every plan is exact."""
    from workbench.runtime.reference import run_reference
    g = _max_then_avg_pool()
    nodes = [n.id for n in g.nodes]
    assert [g.node(n).op for n in nodes] == ["window", "reduce_max", "window", "reduce_mean"]
    p = Plan.singletons(g, H100)
    with pytest.raises(FusionRefused, match="per-row result .* at other rows' positions"):
        p.fuse(nodes[1:], stitch=False)
    assert p.fuse(nodes[1:]).group(nodes[1]).schedule.kind == "stitched"
    x = np.random.default_rng(3).standard_normal((2, 3, 11, 11)).astype(np.float32)
    want = run_reference(g, {"x": x})["y"]
    for planner in ("rules", "stitch", "xla"):
        s = wb.Session(g, backend="cpu")
        s.auto(planner)
        np.testing.assert_allclose(s.program().run({"x": x})["y"], want, rtol=1e-6,
                                   err_msg=planner)


def test_refusals_and_empty_selection_messages():
    p = Plan.singletons(_ln(), H100)
    with pytest.raises(FusionRefused, match="nothing selected"):
        p.fuse([])
    with pytest.raises(FusionRefused, match="already one kernel"):
        p.fuse(["n0"])
    with pytest.raises(FusionRefused, match="no group or node 'n999'"):
        p.fuse(["n0", "n999"])
    with pytest.raises(FusionRefused, match="nothing to split"):
        p.split("n0")


def test_stitch_schemes_mark_per_row_broadcast_regional():
    plan, _ = run_planner("rules", _ln())
    gr = plan.groups[0]
    schemes = dict(gr.schemes)
    mean = plan.graph.node("n0").outputs[0]
    assert schemes[mean] is StitchScheme.regional      # mean read by every thread of the row
    diff = plan.graph.node("n1").outputs[0]
    assert schemes[diff] is StitchScheme.local


def test_column_reduction_uses_thread_per_row():
    g = load_json("sample_graphs/bias_grad.json")
    plan, _ = run_planner("rules", g)
    reds = [gr for gr in plan.groups if gr.schedule.kind == "row_reduce"]
    assert reds and all(gr.schedule.mapping == "thread" for gr in reds)


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_pooling_reduces_with_a_thread_per_output_position(planner):
    """A max-pool's 3 x 3 window (its taps on three input rows, gathered under every
    mapping) is reduced by a thread per output position under both planners, and a
    cost model offers no other mapping for it; its kernel matches NumPy."""
    from workbench.fusion import candidate_mappings
    from workbench.device import H100, assumed_cpu
    from workbench.ir.composites_nn import max_pool
    CPU = assumed_cpu("test cpu", 2)
    from workbench.runtime import random_inputs, run_reference
    b = wb.GraphBuilder("pool")
    x = b.input("x", (2, 8, 20, 19))
    b.output(b.relu(max_pool(b, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])), "y")
    g = b.build()
    for device in (CPU, H100):
        plan, _ = run_planner(planner, g, device=device)
        # (stitch may run the ReLU after it as a second phase of one kernel)
        (sched,) = [x for gr in plan.groups
                    for x in ([p.schedule for p in gr.schedule.phases]
                              if gr.schedule.kind == "stitched" else [gr.schedule])
                    if x.kind == "row_reduce"]
        assert sched.gathered and not sched.innermost
        assert sched.mapping == "thread"
        assert candidate_mappings(sched, device) == (sched.mapping,)
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    ins = random_inputs(g, 0)
    np.testing.assert_array_equal(s.program().run(ins)["y"], run_reference(g, ins)["y"])


def test_rules_decisions_have_reasons():
    g = load_json("sample_graphs/bert_chain.json")
    _, log = run_planner("rules", g)
    assert any(d.action == "fused" for d in log)
    assert all(d.reason for d in log)


def test_softmax_keeps_its_row_and_exp_in_registers():
    # x is read by the max, sum and write passes and exp(x - max) by the sum and write
    # passes: each thread keeps its columns of both in registers (GPU), so x is read
    # from memory once and exp computed once; on the CPU one thread owns the row, so it
    # keeps exp in a row array and reads x again (its caches hold it). Kept in the
    # thread that made it, the edge is local.
    from workbench.codegen import lower_plan
    g = load_json("sample_graphs/softmax.json")
    plan, _ = run_planner("rules", g)
    gr = plan.groups[0]
    exp_out = next(g.node(n).outputs[0] for n in gr.nodes if g.node(n).op == "exp")
    assert gr.schedule.row_registers == ("x", exp_out) and gr.schedule.row_cached == ()
    assert gr.scheme(exp_out) is StitchScheme.local
    k = lower_plan(plan)[0]
    assert [(s.value, s.space) for s in k.scratch] == [("x", "register"),
                                                        (exp_out, "register")]
    assert k.shared_bytes == 2 * 33 * 8        # only the two block-reduction slots
    from workbench.codegen import RENDERERS
    assert "float wb_reg1[8];" in RENDERERS["cuda"].kernel(k)   # 1024 / 128 threads
    from workbench.codegen import render_kernel
    body = render_kernel(k, "c").split(f"void {k.name}(")[1]
    # (an exp pass over a row is one wb_expf_shift_n call: c_exp_rows.py)
    assert len(re.findall(r"expf(?:_n|_shift_n)?\(", body)) == 1      # not recomputed


def test_a_cpu_row_keeps_costly_results_not_its_inputs():
    """On a CPU a later pass reads an input row again from the cache the first pass
    brought it into, so the register budget goes to costly results only: a softmax
    over 32,000 columns (one value's row fits the budget, two do not) keeps exp(x -
    max) rather than x, computes exp once per element and reads x from memory in one
    kernel -- where the GPU's choice (x first) left exp recomputed and made the stitch
    planner split the max into a kernel of its own (x read from memory twice)."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.device import assumed_cpu
    from workbench.fusion.cost import CostModel
    from workbench.ir import GraphBuilder
    b = GraphBuilder("softmax_32000")
    b.output(b.softmax(b.input("x", (512, 32000)), axis=-1), "y")
    g = b.build()
    cpu = assumed_cpu("cpu2", 2)
    exp_out = next(n.outputs[0] for n in g.nodes if n.op == "exp")
    for planner in ("rules", "stitch"):
        plan, _ = run_planner(planner, g, model=CostModel.for_device(cpu))
        (gr,) = plan.groups
        assert gr.schedule.row_registers == (exp_out,), planner
        (k,) = lower_plan(plan)
        body = render_kernel(k, "c").split(f"void {k.name}(")[1]
        # (the pass one wb_expf_shift_n call, into the output's row: c_exp_rows.py)
        assert len(re.findall(r"expf(?:_n|_shift_n)?\(", body)) == 1
    gpu, _ = run_planner("rules", g, model=CostModel.for_device(H100))
    assert gpu.groups[0].schedule.row_registers == ("x",)     # the GPU's choice stays
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    assert len(s.plan.groups) == 1
    x = np.random.default_rng(7).standard_normal((512, 32000)).astype(np.float32) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    from workbench.tolerance import relative_to_largest
    assert relative_to_largest(s.run({"x": x})["y"], e / e.sum(axis=1, keepdims=True)) < 1e-5


def test_cheap_values_are_recomputed_not_cached():
    g = load_json("sample_graphs/layernorm.json")
    plan, _ = run_planner("rules", g)
    assert plan.groups[0].schedule.row_cached == ()   # x - mean is one subtraction


def test_plan_identity_includes_user_schemes_and_mappings():
    # caches (compiled programs, measurements) key on the plan: a re-schemed or
    # re-mapped plan must not be mistaken for the original
    plan, _ = run_planner("rules", _ln())
    warp = plan.set_mapping("k0", "warp")
    assert warp != plan and hash(warp) != hash(plan)
    assert warp.set_mapping("k0", "warp") == warp
    mean = plan.graph.node("n0").outputs[0]
    assert plan.set_scheme(mean, "regional") != plan      # recorded, though unchanged
    assert plan.set_scheme(mean, "regional").groups[0].schemes == plan.groups[0].schemes


def test_describe_has_one_line_per_kernel_then_its_edges():
    plan, _ = run_planner("rules", _ln())
    lines = plan.describe().splitlines()
    assert lines[0].startswith("k0: row_reduce rows=8 cols=16 block per row")
    assert len(lines) == 1 + len(plan.groups[0].schemes)
    assert all(" -> " in x for x in lines[1:])
