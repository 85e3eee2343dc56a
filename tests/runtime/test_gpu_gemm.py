"""The GPU's GEMM kernel (a thread block per tile, each thread's part of the product in
registers, the elementwise epilogue applied there): planned for the H100, its CUDA
source run in the CUDA emulator (which also checks the block's shared-memory
barriers) and checked against the NumPy reference on fresh random inputs with the
outputs poisoned -- ragged tiles, depths that are no multiple of the panel, operands
transposed through views, batches with a B each, the product itself an output --
under both block tiles; the same kernel's C rendering (an artifact planned for a GPU
and run on a CPU); what the planners do with it; and NVRTC's compile of it with the
runtime's options (no spills, registers within two blocks an SM)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused
from workbench.fusion import Plan, analyze, run_planner
from workbench.fusion.cost import CostModel
from workbench.device import H100
from workbench.fusion.gemm.gpu_tiles import GPU_GEMM_TILES
from workbench.fusion.mapping import ScheduleKind
from workbench.dtypes import DType
from workbench.runtime.cuda_emu import CudaEmuBackend, counting
from workbench.session import Session

import test_gemm_kernel
from plan_checks import check_plan

EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
needs_emu = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

RNG = np.random.default_rng(11)
# (the CPU GEMM kernel's own: 2 x 70 rows and 300 columns, ragged tiles on both edges)
_ffn_gelu = test_gemm_kernel._ffn_gelu


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _linear_residual():
    # nn.Linear's weight [out, in] read transposed in place; a depth of 257 (the last
    # panel one deep); the product itself an output beside the finished one
    b = wb.GraphBuilder("linear_residual")
    x = b.input("x", (1, 33, 257))
    p = b.matmul(x, b.op("transpose", b.constant(_w(72, 257), "w"), perm=[1, 0]))
    p = b.output(p, "p")
    b.output(p + b.constant(_w(72), "bias") + b.input("res", (1, 33, 72)), "y")
    return b.build()


def _scores():
    # attention scores: [B, H, M, K] @ K transposed in place, a B per batch item,
    # scaled, a mask broadcast over the heads and queries
    b = wb.GraphBuilder("scores")
    q, k = b.input("q", (2, 3, 40, 16)), b.input("k", (2, 3, 24, 16))
    s = b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * 0.25
    mask = np.where(RNG.random((2, 1, 1, 24)) < 0.3, -1e4, 0).astype(np.float32)
    b.output(s + b.constant(mask, "mask"), "s")
    return b.build()


def _transposed_a():
    # A read transposed in place (its rows are columns in memory), ReLU after
    b = wb.GraphBuilder("transposed_a")
    x = b.input("x", (50, 130))
    b.output(b.relu(b.matmul(b.op("transpose", x, perm=[1, 0]), b.input("w", (50, 20)))), "y")
    return b.build()


GRAPHS = [_ffn_gelu, _linear_residual, _scores, _transposed_a]


def _fused(make, tile=None) -> Session:
    """A CUDA-emulator session (H100 plans) with every node of the graph in one GEMM
    kernel, under block tile ``tile`` (the rule's where None)."""
    g = make()
    s = Session(g, backend="cuda-emu")
    s.fuse([n.id for n in g.nodes])
    if tile is not None:
        s.set_launch(s.plan.groups[0].id, tile_m=tile[0], tile_n=tile[1])
    (gr,) = s.plan.groups
    assert gr.schedule.kind is ScheduleKind.gemm and gr.schedule.gemm.block is not None
    return s


def _fused_plan(make, tile):
    """The same plan made without a session: the H100's, every node in one kernel."""
    g = make()
    plan = Plan.singletons(g, H100).fuse([n.id for n in g.nodes])
    return plan.set_launch(plan.groups[0].id, tile_m=tile[0], tile_n=tile[1])


@needs_emu
@pytest.mark.parametrize("tile", sorted(GPU_GEMM_TILES))
@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__.strip("_"))
def test_gpu_gemm_kernel_matches_reference_in_the_emulator(make, tile):
    s = _fused(make, tile)
    (gr,) = s.plan.groups
    t = gr.schedule.gemm
    assert (t.tile_m, t.tile_n) == tile
    trans = {"_linear_residual": (False, True), "_scores": (False, True),
             "_transposed_a": (True, False)}.get(make.__name__, (False, False))
    assert (t.a.view.trans, t.b.view.trans) == trans      # (read in place: no copy kernel)
    prog = s.program()
    (ck,) = prog.compiled
    # the product is stored only where it is an output: the kernel writes the graph's
    # outputs and nothing else
    assert sorted(b.value for b in ck.kernel.outputs) == sorted(s.graph.outputs)
    assert not ck.kernel.workspace
    check_plan(s, (lambda ins: _magnitudes(s.graph, ins)) if make is _linear_residual
               else None)
    assert counting() or not os.environ.get("WB_REQUIRE_CUDA_EMU")
    if counting():
        _check_accesses(gr, ck.kernel, ck.accesses)


def _check_accesses(gr, k, accesses):
    """The global accesses the emulator counted against the cost model's account
    (features._block_gemm_features): every output byte written once, in coalesced stores
    (two rows' runs a warp);
    every input byte read; A's rows read once per column tile and B's columns once per
    row tile, nothing more (the panels hold zeros past the edges, never read there)."""
    t = gr.schedule.gemm
    by_value = {b.value: (b, a) for b, a in zip(k.params, accesses)}
    for b, a in by_value.values():
        if b.is_output:
            assert a.written == a.written_distinct == b.nbytes, (b.value, a)
            # (a warp's store spans two rows of the tile, 16 neighbouring elements
            # each: at most one sector more than their bytes need, per row)
            assert a.store_sectors <= -(-a.written // 32) + 2 * a.store_requests, (
                b.value, a)
        else:
            assert a.read_distinct == b.read_bytes, (b.value, a)
    (ba, aa), (bb, ab) = by_value[t.a.value], by_value[t.b.value]
    assert aa.read == ba.nbytes * t.col_tiles, aa
    assert ab.read == bb.nbytes * t.row_tiles, ab


def _magnitudes(g, ins) -> dict:
    """_linear_residual's outputs bounded by the magnitudes summed (the product's
    signed terms cancel: its rounding is float32's of |x| @ |w|ᵀ, not of |p|)."""
    mags = np.abs(ins["x"]) @ np.abs(g.constants["w"]).T
    return {"p": mags, "y": mags + np.abs(g.constants["bias"]) + np.abs(ins["res"])}


@needs_emu
def test_the_rule_picks_the_small_tile_for_few_tiles_and_runs_it():
    s = _fused(_ffn_gelu)
    (gr,) = s.plan.groups
    assert (gr.schedule.gemm.tile_m, gr.schedule.gemm.tile_n) == (64, 64)
    assert "15 tiles of 64x64" in gr.schedule.describe()
    check_plan(s, seeds=(3,))


def test_a_gpu_plan_s_gemm_kernel_runs_on_the_cpu_too(tmp_path):
    """An artifact exported from a GPU plan, loaded and run where there is no GPU: the
    kernel's C rendering computes the whole tile in one thread."""
    from workbench.artifact import export_plan, load_artifact
    from workbench.runtime import random_inputs, run_reference
    from workbench.tolerance import max_rel_error, tolerance
    plan = _fused_plan(_linear_residual, (64, 64))
    model = load_artifact(export_plan(plan, tmp_path / "gpu_gemm"), backend="cpu")
    ins = random_inputs(plan.graph, 5)
    got, want = model(**ins), run_reference(plan.graph, ins)
    mags = _magnitudes(plan.graph, ins)
    for o in plan.graph.outputs:
        assert max_rel_error(got[o], want[o], mags[o]) <= tolerance(DType.float32), o


def _bert_scores():
    b = wb.GraphBuilder("bert_scores")
    q, k = b.input("q", (8, 12, 512, 64)), b.input("k", (8, 12, 512, 64))
    s = b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * 0.125
    b.output(s + b.input("mask", (8, 1, 1, 512)), "s")
    return b.build()


def _bert_ffn():
    b = wb.GraphBuilder("bert_ffn")
    x = b.input("x", (8, 512, 768))
    h = b.matmul(x, b.input("w", (768, 3072))) + b.input("bias", (3072,))
    b.output(b.gelu(h), "y")
    return b.build()


def test_stitch_joins_a_gpu_gemm_only_where_its_epilogue_s_round_trip_costs_more():
    """On the H100, BERT-base shapes: the attention scores (a depth of 64: the product's
    100 MB round trip outweighs the generated GEMM's slower arithmetic) become one GEMM
    kernel with K's transpose read in place; the FFN's GEMM (a depth of 768) stays
    cuBLAS's. ``rules`` leaves every GPU matmul to cuBLAS."""
    model = CostModel.for_device(H100)
    for make, fused in ((_bert_scores, True), (_bert_ffn, False)):
        g = make()
        plans = {p: run_planner(p, g, device=H100)[0] for p in ("rules", "stitch")}
        kinds = {p: [gr.schedule.kind for gr in plan.groups] for p, plan in plans.items()}
        assert ScheduleKind.gemm not in kinds["rules"], make.__name__
        assert (kinds["stitch"] == [ScheduleKind.gemm]) == fused, (make.__name__, kinds)
        assert model.plan_seconds(plans["stitch"]) <= model.plan_seconds(plans["rules"])
    (gr,) = run_planner("stitch", _bert_scores(), device=H100)[0].groups
    t = gr.schedule.gemm
    assert (t.block, t.b.view.trans) == (GPU_GEMM_TILES[(128, 128)], True)


def _refusal(make, device=H100, **launch) -> str:
    g = make()
    with pytest.raises(FusionRefused) as e:
        analyze(g, tuple(n.id for n in g.nodes), device=device, launch=launch)
    return str(e.value)


def test_what_the_gpu_gemm_kernel_does_not_take_is_refused_with_the_reason():
    def layer_norm():
        b = wb.GraphBuilder("ffn_ln")
        x = b.input("x", (4, 64))
        h = b.matmul(x, b.input("w", (64, 32)))
        b.output(b.layer_norm(h, b.constant(_w(32), "g"), b.constant(_w(32), "b")), "y")
        return b.build()

    def half():
        b = wb.GraphBuilder("half")
        x = b.input("x", (4, 64), dtype="bfloat16")
        b.output(b.relu(b.matmul(x, b.input("w", (64, 32), dtype="bfloat16"))), "y")
        return b.build()

    assert "elementwise epilogue only" in _refusal(layer_norm)
    # (bfloat16 runs on tensor cores, exactly: test_gpu_tf32; a GPU without any refuses)
    assert "bfloat16 on tensor cores, which this GPU has not" in _refusal(
        half, H100.with_(tensor_flops=0.0))
    assert "applies to the CPU's GEMM kernel" in _refusal(_ffn_gelu, blas=1)
    assert "128 x 128 or 64 x 64" in _refusal(_ffn_gelu, tile_m=96, tile_n=96)


@pytest.mark.parametrize("tile", sorted(GPU_GEMM_TILES))
@pytest.mark.parametrize("make", [_linear_residual, _transposed_a, _bert_ffn],
                         ids=lambda f: f.__name__.strip("_"))
def test_gpu_gemm_kernels_compile_without_spills(make, tile, nvrtc_toolchain):
    """NVRTC with the runtime's options: no local memory, registers within what two
    256-thread blocks an SM leave (128 a thread: left to itself ptxas took 150 for
    BERT's FFN at 128 x 128), the block's panels in shared memory."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    (k,) = lower_plan(_fused_plan(make, tile))
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    blk = GPU_GEMM_TILES[tile]
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0, rep.log
    assert rep.registers <= 128 and rep.shared_bytes == blk.shared_bytes, rep.log


def test_the_tuner_s_candidates_for_a_gpu_gemm_kernel_are_the_other_block_tiles():
    """(Tuning measures on the device itself, so it is not run here: the candidates
    it would time are -- every other block tile, the oblong ones too -- and each makes
    a legal kernel.)"""
    from workbench.fusion import make_group
    from workbench.measure.tune import candidates, climb
    assert {(128, 64), (64, 128)} <= set(GPU_GEMM_TILES)
    for tile in GPU_GEMM_TILES:
        plan = _fused_plan(_scores, tile)
        (gr,) = plan.groups
        rule, stages, *cands = candidates(gr)
        assert rule.launch == () and stages.launch == (("stages", 2),)   # (test_gpu_pipelined)
        others = {(dict(c.launch)["tile_m"], dict(c.launch)["tile_n"]) for c in cands}
        assert others == set(GPU_GEMM_TILES) - {tile}
        for cand in cands:
            other = dict(cand.launch)
            made = make_group(plan.graph, gr.nodes, device=H100, launch=cand.launch)
            assert made.schedule.gemm.block is GPU_GEMM_TILES[other["tile_m"], other["tile_n"]]
            # (a tile's neighbours in the climb: the other tiles again, and 2 stages)
            assert {dict(c.launch).get("stages", 1) for c in climb(cand, made)} == {1, 2}


# -- fused attention on the GPU (FlashAttention's online softmax) ---------------------
@needs_emu
@pytest.mark.parametrize("seed,shape", list(enumerate([
    (2, 3, 1, 1, 1, 8), (1, 2, 5, 135, 12, 20), (2, 1, 70, 90, 24, 16),
    (1, 1, 62, 257, 128, 57), (1, 2, 89, 200, 72, 7), (2, 1, 130, 129, 64, 64)])))
def test_gpu_fused_attention_on_random_shapes(seed, shape):
    """softmax(q kᵀ x scale + mask) v as one kernel on the emulated H100, shapes
    (batch, heads, queries, keys, values, depth) from one key to several blocks of
    64, ragged everything, K read transposed in place where the seed is even, the
    heads merged back after it where it is 2 or 3; masks -inf at random and (odd seeds)
    over the first half of the keys (blocks with no finite logit before the first one)
    and over every key of one query (its softmax is 0/0): NaNs where NumPy has them,
    the rest within float32's bound of the magnitudes summed. Scores and probabilities
    are never written: the kernel's only output is the attention's."""
    from workbench.tolerance import max_rel_error, tolerance
    from workbench.runtime import random_inputs, run_reference
    rng = np.random.default_rng(200 + seed)
    n, h, q, keys, d, dk = shape
    scale = float(rng.uniform(0.05, 1.0))
    mask = np.where(rng.random((n, 1, q, keys)) < 0.2, -np.inf, 0).astype(np.float32)
    if seed % 2:
        mask[..., : keys // 2] = -np.inf
        mask[0, :, q // 2, :] = -np.inf         # (a query masked on every key: NaN)
    b = wb.GraphBuilder("attention_shapes")
    if seed % 2 == 0:
        k = b.op("transpose", b.input("k", (n, h, keys, dk)), perm=[0, 1, 3, 2])
    else:
        k = b.input("kt", (n, h, dk, keys))
    z = b.matmul(b.input("q", (n, h, q, dk)), k) * scale + b.constant(mask, "mask")
    o = b.matmul(b.softmax(z, axis=-1), b.input("v", (n, h, keys, d)))
    merged = seed in (2, 3)
    if merged:
        o = b.op("reshape", b.op("transpose", o, perm=[0, 2, 1, 3]), shape=[n, q, h * d])
    b.output(o, "o")
    g = b.build()
    s = Session(g, backend="cuda-emu")
    s.fuse([x.id for x in g.nodes])
    (gr,) = s.plan.groups
    assert gr.schedule.then.online is not None and gr.schedule.gemm.block is not None
    (ck,) = s.program().compiled
    assert [x.value for x in ck.kernel.outputs] == ["o"] and not ck.kernel.workspace
    ins = random_inputs(g, seed)
    got, want = s.program().run(ins)["o"], run_reference(g, ins)["o"]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    kt = ins["kt"] if "kt" in ins else ins["k"].transpose(0, 1, 3, 2)
    zz = (ins["q"].astype(np.float64) @ kt) * scale + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(zz - zz.max(axis=-1, keepdims=True))
        mags = (e / e.sum(axis=-1, keepdims=True)) @ np.abs(ins["v"])
    if merged:
        mags = mags.transpose(0, 2, 1, 3).reshape(n, q, h * d)
    ok = ~np.isnan(want)
    assert np.isnan(want).any() or seed % 2 == 0
    if ok.any():
        assert max_rel_error(got[ok], want[ok], mags[ok]) <= tolerance(DType.float32)
    if counting():       # the reads the cost model prices (features._block_gemm_features):
        t = gr.schedule.gemm
        by_value = {x.value: a for x, a in zip(ck.kernel.params, ck.accesses)}
        key_blocks = -(-t.n // t.block.n)
        # Q's panels staged again for each block of keys; K and V read by each tile
        # of queries
        assert by_value["q"].read == ins["q"].nbytes * key_blocks
        kv = "kt" if "kt" in ins else "k"
        assert by_value[kv].read == ins[kv].nbytes * t.row_tiles
        assert by_value["v"].read == ins["v"].nbytes * t.row_tiles


def _bert_attention(n=8, h=12, s=512, d=64):
    b = wb.GraphBuilder("bert_attention")
    q, k, v = (b.input(x, (n, h, s, d)) for x in "qkv")
    z = (b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * 0.125
         + b.input("mask", (n, 1, 1, s)))
    o = b.matmul(b.softmax(z, axis=-1), v)
    b.output(b.op("reshape", b.op("transpose", o, perm=[0, 2, 1, 3]), shape=[n, s, h * d]),
             "o")
    return b.build()


def test_stitch_fuses_bert_s_attention_into_one_gpu_kernel_that_compiles(nvrtc_toolchain):
    """BERT-base's attention on the H100: ``stitch`` takes the scores' GEMM, the
    softmax kernel and the second product as one kernel (the heads merged back by its
    stores), predicted faster than ``rules``' five; NVRTC compiles it with the
    runtime's options within 128 registers, no spills, its shared memory (two
    products' panels and the probabilities) as geometry says."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    g = _bert_attention()
    model = CostModel.for_device(H100)
    stitch, log = run_planner("stitch", g, device=H100)
    rules, _ = run_planner("rules", g, device=H100)
    (gr,) = stitch.groups
    assert gr.schedule.then.online is not None and gr.schedule.then.out is not None
    assert any("as one fused attention" in str(d) for d in log)
    assert model.plan_seconds(stitch) < model.plan_seconds(rules)
    assert len(rules.groups) == 5
    (k,) = lower_plan(stitch)
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0 and rep.registers <= 128, rep.log
    assert rep.shared_bytes == k.launch.shared_bytes, rep.log
