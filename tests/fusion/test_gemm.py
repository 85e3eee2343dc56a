"""The gemm template's legality (each refusal names its rule) and which planners form it."""
import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused
from workbench.fusion import run_planner
from workbench.fusion.analysis import analyze
from workbench.fusion.cost import CostModel
from workbench.device import H100, assumed_cpu
from workbench.fusion.gemm.conv import GPU_REFUSAL
from workbench.fusion.mapping import ScheduleKind
from workbench.runtime import random_inputs, run_reference

CPU = assumed_cpu("test cpu", 2)
RNG = np.random.default_rng(0)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ffn(residual=False, dtype="float32", gelu=True):
    """x[2, 16, 32] @ w[32, 48] + bias (then GELU, or + a residual)."""
    b = wb.GraphBuilder("ffn")
    x = b.input("x", (2, 16, 32), dtype)
    h = b.matmul(x, b.constant(_w(32, 48).astype(dtype), "w"))
    h = h + b.constant(_w(48).astype(dtype), "bias")
    if residual:
        h = h + b.input("r", (2, 16, 48), dtype)
    b.output(b.gelu(h) if gelu else h, "y")
    return b.build()


def _kinds(plan):
    return [gr.schedule.kind for gr in plan.groups]


@pytest.mark.parametrize("planner", ["rules", "stitch"])
@pytest.mark.parametrize("residual", [False, True])
def test_planners_fuse_matmul_with_bias_gelu_or_residual(planner, residual):
    g = _ffn(residual=residual, gelu=not residual)
    plan, log = run_planner(planner, g, device=CPU)
    assert _kinds(plan) == [ScheduleKind.gemm]
    assert any(d.action == "fused" and "into the GEMM of" in d.reason for d in log)


def test_none_and_xla_fuse_no_epilogue():
    # the matmul alone is still a gemm kernel on the CPU (its tiles on the kernels'
    # threads: one thread pool), but these planners join nothing to it
    g = _ffn()
    for planner in ("none", "xla"):
        plan = run_planner(planner, g, device=CPU)[0]
        gemms = [gr for gr in plan.groups if gr.schedule.kind is ScheduleKind.gemm]
        assert [len(gr.nodes) for gr in gemms] == [1]
        assert ScheduleKind.elementwise in _kinds(plan)


def test_a_lone_matmul_is_a_gemm_kernel_on_the_cpu_and_a_library_call_on_the_gpu():
    b = wb.GraphBuilder("mm")
    b.output(b.matmul(b.input("x", (16, 32)), b.input("w", (32, 48))), "y")
    g = b.build()
    nodes = tuple(n.id for n in g.nodes)
    assert analyze(g, nodes, device=CPU).kind is ScheduleKind.gemm
    assert analyze(g, nodes, device=H100).kind is ScheduleKind.opaque
    # float16 (no float32 sgemm) stays the library call
    b = wb.GraphBuilder("mm16")
    b.output(b.matmul(b.input("x", (16, 32), "float16"), b.input("w", (32, 48), "float16")),
             "y")
    g = b.build()
    assert analyze(g, tuple(n.id for n in g.nodes), device=CPU).kind is ScheduleKind.opaque


def test_gpu_rules_plans_keep_cublas_and_the_gpu_template_is_a_block_gemm():
    """``rules`` leaves a GPU's matmuls to cuBLAS (the generated GEMM joins only where a
    cost model says: tests/runtime/test_gpu_gemm.py); the template itself takes the
    group as the GPU's block GEMM. A convolution says why not."""
    g = _ffn()
    plan, log = run_planner("rules", g, device=H100)
    assert _kinds(plan) == [ScheduleKind.opaque, ScheduleKind.elementwise]
    nodes = tuple(n.id for n in g.nodes)
    sched = analyze(g, nodes, device=H100)
    assert sched.kind is ScheduleKind.gemm and sched.gemm.block is not None
    b = wb.GraphBuilder("conv_relu")
    x = b.input("x", (1, 3, 8, 8))
    b.output(b.relu(b.op("conv", x, b.input("w", (4, 3, 3, 3)))), "y")
    g = b.build()
    with pytest.raises(FusionRefused, match=GPU_REFUSAL):
        analyze(g, tuple(n.id for n in g.nodes), device=H100)


def test_float16_keeps_the_library_call_with_a_reason():
    g = _ffn(dtype="float16")
    with pytest.raises(FusionRefused, match="takes float32 and bfloat16"):
        analyze(g, tuple(n.id for n in g.nodes), device=CPU)
    plan, log = run_planner("rules", g, device=CPU)
    assert ScheduleKind.gemm not in _kinds(plan)
    assert any(d.action == "not fused" and "takes float32 and bfloat16" in d.reason
               for d in log)


def _refused(epilogue, match, prologue=lambda b, x: x):
    """x[16, 32] @ w[32, 48], then ``epilogue(b, h)``: analysing every node as one
    group is refused with a reason matching ``match``."""
    b = wb.GraphBuilder("refused")
    x = prologue(b, b.input("x", (16, 32)))
    b.output(epilogue(b, b.matmul(x, b.constant(_w(32, 48), "w"))), "y")
    g = b.build()
    with pytest.raises(FusionRefused, match=match):
        analyze(g, tuple(n.id for n in g.nodes), device=CPU)


def test_an_epilogue_op_of_another_shape_is_refused():
    # a row sum alone leaves no output of the product's shape to hold the product
    _refused(lambda b, h: b.reduce_sum(h, axes=[-1], keepdims=True),
             "no float32 output of the product's shape")
    # a reduction down the columns needs every row: tiles of whole rows do not hold it
    _refused(lambda b, h: h / b.reduce_sum(h, axes=[0], keepdims=True),
             "over its last axis")
    # a layout op reading the product elsewhere than where it is
    _refused(lambda b, h: b.op("transpose", h, perm=[1, 0]) * 2.0, "not elementwise")
    # a reshape that changes the rows (48 columns -> 24)
    _refused(lambda b, h: b.op("reshape", h, shape=[32, 24]) * 2.0, "keeping its rows")
    # the add's output is larger than the product
    _refused(lambda b, h: h + b.input("big", (3, 16, 48)), "is not the matmul's output shape")


def test_a_prologue_a_second_matmul_and_a_bystander_are_refused():
    _refused(lambda b, h: h * 2.0, "reads its operands from memory",
             prologue=lambda b, x: b.relu(x))
    # a transpose, then a reshape merging what it separated: each row of the operand
    # is two runs of x, no strided matrix
    _refused(lambda b, h: h * 2.0, "neither row- nor column-major",
             prologue=lambda b, x: b.op("reshape", b.op("transpose", x, perm=[1, 0]),
                                        shape=[16, 32]))
    # a view giving the operand, read by an epilogue op too (here a slice of it)
    b = wb.GraphBuilder("shared_view")
    xt = b.op("transpose", b.input("x", (32, 16)), perm=[1, 0])
    h = b.matmul(xt, b.constant(_w(32, 48), "w"))
    b.output(h + b.op("slice", xt, starts=[0], ends=[1], axes=[1]), "y")
    g = b.build()
    with pytest.raises(FusionRefused, match="is read by n2"):
        analyze(g, tuple(n.id for n in g.nodes), device=CPU)
    # a second matmul joins only after a row epilogue (attention)
    _refused(lambda b, h: b.matmul(h, b.constant(_w(48, 8), "v")),
             "only after an epilogue reducing rows")


def test_an_epilogue_side_op_reading_no_product_is_computed_per_element():
    # exp(z) reads no product but feeds the epilogue's add (an optimizer's
    # exp_avg * beta1 beside grad * (1 - beta1)): computed per element there; checked
    # against the reference on fresh random inputs, outputs poisoned first
    b = wb.GraphBuilder("side")
    h = b.matmul(b.input("x", (16, 32)), b.input("w", (32, 48)))
    b.output(h + b.exp(b.input("z", (16, 48))), "y")
    g = b.build()
    assert analyze(g, tuple(n.id for n in g.nodes), device=CPU).kind is ScheduleKind.gemm
    s = wb.Session(g, backend="cpu")
    s.fuse([n.id for n in g.nodes])
    assert len(s.plan.groups) == 1
    for seed in (0, 1):
        ins = random_inputs(g, seed)
        got = s.program().run(ins, checked=True)["y"]
        np.testing.assert_allclose(got, run_reference(g, ins)["y"], rtol=1e-5, atol=1e-5)


def test_operands_read_through_views_in_place():
    # Q [2, 4, 10, 8] and Kᵀ [2, 4, 8, 10] out of one [2, 10, 3 x 32] projection (split,
    # heads apart, transposed): the kernel reads both in place, Kᵀ as BLAS's transposed
    # operand, one batch item per (batch, head)
    b = wb.GraphBuilder("heads")
    qkv = b.input("qkv", (2, 10, 96))
    q, k, _ = b.op("split", qkv, axis=2, sizes=[32, 32, 32])
    q = b.op("transpose", b.op("reshape", q, shape=[2, 10, 4, 8]), perm=[0, 2, 1, 3])
    kt = b.op("transpose", b.op("reshape", k, shape=[2, 10, 4, 8]), perm=[0, 2, 3, 1])
    b.output(b.matmul(q, kt) * 0.5, "s")
    g = b.build()
    s = analyze(g, tuple(n.id for n in g.nodes), device=CPU)
    t = s.gemm
    assert (t.batch, t.m, t.n, t.k) == (8, 10, 10, 8)
    assert t.a.value == t.b.value == "qkv" and len(t.views) == 5
    assert not t.a.view.trans and t.a.view.ld == 96 and t.a.view.offset == 0
    assert t.b.view.trans and t.b.view.ld == 96 and t.b.view.offset == 32
    assert t.a.view.batch_offset("bt") == "(bt / 4) * 960 + bt % 4 * 8"


def test_broadcast_batch_dims_read_one_b_per_batch_item():
    b = wb.GraphBuilder("bb")
    a = b.input("a", (4, 8, 16))
    w = b.input("w", (1, 16, 8))
    b.output(b.matmul(a, w) * 2.0, "y")
    g = b.build()
    t = analyze(g, ("n0", "n1"), device=CPU).gemm
    # one B for every batch item: A's batch are more rows
    assert (t.batch, t.m) == (1, 32) and t.b.view.batch_offset("bt") == "0"


def test_a_product_read_outside_is_stored_by_the_kernel():
    b = wb.GraphBuilder("both")
    x = b.input("x", (16, 32))
    h = b.matmul(x, b.constant(_w(32, 48), "w"))
    b.output(b.relu(h), "y")
    b.output(h, "h")
    g = b.build()
    s = analyze(g, ("n0", "n1"), device=CPU)
    assert s.kind is ScheduleKind.gemm and s.gemm.dest == g.node("n0").outputs[0]


def test_cost_model_prices_the_fused_kernel_below_library_plus_epilogue():
    g = _ffn()
    model = CostModel.for_device(CPU)
    fused = run_planner("rules", g, device=CPU)[0]
    apart = run_planner("xla", g, device=CPU)[0]
    f = model.features(g, fused.groups[0])
    assert f.library_flops == 2 * 32 * 48 * 32
    assert f.bytes_moved < sum(model.features(g, gr).bytes_moved for gr in apart.groups)
    assert model.plan_seconds(fused) < model.plan_seconds(apart)


def test_tiles_cover_the_output_and_keep_every_core_busy():
    b = wb.GraphBuilder("down")
    x = b.input("x", (1, 128, 3072))
    b.output(b.matmul(x, b.constant(np.zeros((3072, 768), np.float32), "w")) + 1.0, "y")
    t = analyze(b.build(), ("n0", "n1"), device=CPU).gemm
    assert (t.batch, t.m, t.n, t.k) == (1, 128, 768, 3072)
    assert t.row_tiles * t.tile_m >= t.m and t.col_tiles * t.tile_n >= t.n
    assert t.tiles % CPU.units == 0


@pytest.mark.parametrize("rows,units", [(1278, 2), (128, 2), (1278, 8), (40, 3), (3, 8)])
def test_tiles_of_whole_rows_keep_every_core_busy(rows, units):
    """A GEMM + LayerNorm (tiles of whole rows) is cut into a multiple of the cores'
    tiles where there are rows enough (1278 rows of 256 were 5 tiles on 2 cores), each
    within the whole-row tile cap, the rows evenly shared."""
    from workbench.fusion.gemm.tiles import CPU_TILES
    b = wb.GraphBuilder("ffn_norm")
    x = b.input("x", (1, rows, 1024))
    y = b.matmul(x, b.constant(np.zeros((1024, 256), np.float32), "w"))
    b.output(b.layer_norm(y), "y")
    g = b.build()
    t = analyze(g, tuple(n.id for n in g.nodes), device=assumed_cpu("cores", units)).gemm
    assert t.tile_n == t.n == 256 and t.row_tiles * t.tile_m >= rows
    assert t.tile_m <= max(1, 2 * CPU_TILES.m * CPU_TILES.n // 256)
    assert t.tiles % units == 0 or t.tiles == rows
    assert t.row_tiles * t.tile_m - rows < t.row_tiles      # no tile much shorter


def _attention(probs_out=False, v_inside=False):
    """softmax(q kᵀ / 4 + mask) v over [2, 3] heads."""
    b = wb.GraphBuilder("attention")
    q, kt = b.input("q", (2, 3, 20, 8)), b.input("kt", (2, 3, 8, 12))
    v = b.input("v", (2, 3, 12, 8))
    p = b.softmax(b.matmul(q, kt) * 0.25 + b.constant(_w(2, 1, 1, 12), "mask"), axis=-1)
    if probs_out:
        p = b.output(p, "p")
    b.output(b.matmul(p, b.relu(v) if v_inside else v), "o")
    return b.build()


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_planners_fuse_attention_into_one_gemm_kernel(planner):
    g = _attention()
    plan, log = run_planner(planner, g, device=CPU)
    assert _kinds(plan) == [ScheduleKind.gemm], plan.describe()
    s = plan.groups[0].schedule
    assert s.epilogue is not None and s.then is not None and s.then.n == 8
    assert any(d.action == "fused" and "fused attention" in d.reason for d in log)


def test_attention_refusals_name_their_rule():
    nodes = lambda g: tuple(n.id for n in g.nodes)  # noqa: E731
    g = _attention(probs_out=True)
    with pytest.raises(FusionRefused, match="read outside the kernel too"):
        analyze(g, nodes(g), device=CPU)
    g = _attention(v_inside=True)
    with pytest.raises(FusionRefused, match="computed inside the kernel"):
        analyze(g, nodes(g), device=CPU)
    # a vector V: a matrix-vector product of the probabilities is no GEMM of their rows
    b = wb.GraphBuilder("attention_vec")
    q, kt = b.input("q", (20, 8)), b.input("kt", (8, 12))
    b.output(b.matmul(b.softmax(b.matmul(q, kt), axis=-1), b.input("v", (12,))), "o")
    g = b.build()
    with pytest.raises(FusionRefused, match="is not a matrix product"):
        analyze(g, nodes(g), device=CPU)
    # the probabilities kept as an output: the planners leave the second matmul apart
    plan, log = run_planner("rules", _attention(probs_out=True), device=CPU)
    assert any(d.action == "not fused" and "read outside" in d.reason for d in log)


def test_bfloat16_fuses_on_the_micro_kernel_and_says_why_not_elsewhere():
    """A bfloat16 matmul joins its epilogue where the micro-kernel multiplies it (B
    packed: once for a weight); where the CPU's vectors are too narrow for packing, or
    blas=1 asks for sgemm (float32 only), it stays a library call with the reason."""
    g = _ffn(dtype="bfloat16")
    nodes = tuple(n.id for n in g.nodes)
    wide = CPU.with_(vector_bytes=64)
    sched = analyze(g, nodes, device=wide)
    assert sched.kind is ScheduleKind.gemm and sched.gemm.packed_b == "once"
    plan, _ = run_planner("stitch", g, device=wide)
    assert _kinds(plan) == [ScheduleKind.gemm]
    with pytest.raises(FusionRefused, match="needs 256-bit vectors"):
        analyze(g, nodes, device=CPU)
    with pytest.raises(FusionRefused, match="blas=1 asks for sgemm"):
        analyze(g, nodes, device=wide, launch={"blas": 1})
    plan, log = run_planner("rules", g, device=CPU)
    assert ScheduleKind.gemm not in _kinds(plan)
    assert any(d.action == "not fused" and "only the micro-kernel" in d.reason for d in log)


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_a_weight_after_a_row_epilogue_is_its_own_gemm_not_an_attention(planner):
    """LLaMA's end: the last FFN product, the residual and the RMSNorm (a GEMM with an
    epilogue reducing rows), then the LM head by a constant weight. That is a
    projection, not attention: chained as one (V packed by every run, read by every
    row tile) its 768 x 30522 weight took 66 ms where the two kernels take 33. The
    planners keep the head its own GEMM (its weight packed once), with the reason;
    both plans match the reference."""
    rng = np.random.default_rng(0)
    b = wb.GraphBuilder("lm_end")
    x, h = b.input("x", (1, 24, 96)), b.input("h", (1, 24, 32))
    y = b.matmul(x, b.constant(rng.standard_normal((96, 32)).astype(np.float32), "w2")) + h
    norm = y * b.op("rsqrt", b.reduce_mean(y * y, axes=[-1], keepdims=True) + 1e-6)
    head = b.constant(rng.standard_normal((32, 200)).astype(np.float32), "lm_head")
    b.output(b.matmul(norm, head), "logits")
    g = b.build()
    with pytest.raises(FusionRefused, match="is a constant .* its own GEMM once"):
        analyze(g, tuple(n.id for n in g.nodes), device=CPU)
    plan, log = run_planner(planner, g, device=CPU)
    gemms = [gr.schedule.gemm for gr in plan.groups if gr.schedule.gemm is not None]
    assert len(gemms) == 2 and all(gr.schedule.then is None for gr in plan.groups)
    assert any(d.action == "not fused" and "is a constant" in d.reason for d in log)
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    ins = {"x": rng.standard_normal((1, 24, 96)).astype(np.float32),
           "h": rng.standard_normal((1, 24, 32)).astype(np.float32)}
    want = wb.runtime.run_reference(g, ins)["logits"]
    np.testing.assert_allclose(s.run(ins)["logits"], want, rtol=1e-4, atol=1e-4)
