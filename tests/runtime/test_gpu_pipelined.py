"""A GPU GEMM tile's panels in 2 stages (software pipelining, ``BlockTile.stages``): the
next step's elements loaded into registers while the current panels are multiplied,
then stored into a second pair of panels, one barrier a step. Run in the CUDA emulator
(whose shared-memory race check holds the one barrier a step to account) against NumPy
on the CUDA cores, in TF32 and in bfloat16, for GEMM kernels and fused attentions;
compiled by NVRTC with the runtime's options without spills where the plan allows it;
refused with the reason where it would spill; timed by the tuner as a candidate."""
from __future__ import annotations

import os

import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused
from workbench.fusion import Plan
from workbench.device import H100
from workbench.fusion.gemm.gpu_tiles import GPU_GEMM_TILES, PIPELINED_TENSOR_MAX
from workbench.dtypes import DType
from workbench.measure import verify_kernels
from workbench.runtime import gpu_available, random_inputs
from workbench.runtime.cuda_emu import CudaEmuBackend
from workbench.session import Session

import test_gpu_gemm as gpu

EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
needs_emu = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

# the tiles a tensor-core kernel may pipeline (no spills), and every CUDA-core tile
TENSOR_PIPELINED = sorted(t for t in GPU_GEMM_TILES if t[0] * t[1] <= PIPELINED_TENSOR_MAX)


def _half_ffn():
    b = wb.GraphBuilder("bf16_ffn")
    x = b.input("x", (2, 70, 136), dtype="bfloat16")
    p = b.output(b.matmul(x, b.input("w", (136, 200), dtype="bfloat16")), "p")
    b.output(b.gelu(p + b.input("bias", (200,), dtype="bfloat16")), "y")
    return b.build()


def _attention(dtype="float32", n=1, h=2, q=70, keys=90, d=24):
    b = wb.GraphBuilder(f"{dtype}_attention")
    k = b.op("transpose", b.input("k", (n, h, keys, d), dtype=dtype), perm=[0, 1, 3, 2])
    z = b.matmul(b.input("q", (n, h, q, d), dtype=dtype), k) * 0.3
    b.output(b.matmul(b.softmax(z, axis=-1), b.input("v", (n, h, keys, d), dtype=dtype)),
             "o")
    return b.build()


def _pipelined(g, precision="float32", **launch) -> Session:
    s = Session(g, backend="cuda-emu", matmul_precision=precision)
    s.fuse([n.id for n in g.nodes])
    s.set_launch(s.plan.groups[0].id, stages=2, **launch)
    (gr,) = s.plan.groups
    assert gr.schedule.gemm.block.stages == 2
    return s


def _within(s: Session, seeds=(0, 1)) -> None:
    prog = s.program()
    for seed in seeds:
        env = prog.run(random_inputs(s.graph, seed), keep_all=True)
        checks = verify_kernels(prog, env)
        assert all(c.within_tolerance for c in checks), checks


@needs_emu
@pytest.mark.parametrize("tile", [(128, 128), (64, 128)])
@pytest.mark.parametrize("make", gpu.GRAPHS, ids=lambda f: f.__name__.strip("_"))
def test_a_pipelined_cuda_core_gemm_matches_numpy(make, tile):
    """Each GEMM kernel of test_gpu_gemm (ragged tiles, a depth of 257 -- an odd
    number of steps, so the last one reads the second pair of panels -- operands read
    transposed in place) with its panels in 2 stages."""
    _within(_pipelined(make(), tile_m=tile[0], tile_n=tile[1]))


@pytest.mark.slow   # (large tensor-core tiles in the emulator; the fast tier's: test_gpu_tf32.py)
@needs_emu
@pytest.mark.parametrize("tile", TENSOR_PIPELINED)
def test_a_pipelined_tensor_core_gemm_matches_numpy_in_tf32_and_bfloat16(tile):
    _within(_pipelined(gpu._linear_residual(), "tf32", tile_m=tile[0], tile_n=tile[1]),
            seeds=(3,))
    _within(_pipelined(_half_ffn(), tile_m=tile[0], tile_n=tile[1]), seeds=(4,))


@needs_emu
@pytest.mark.parametrize("precision", ["float32", "tf32"])
def test_a_pipelined_fused_attention_matches_numpy(precision):
    """Both products of a fused attention pipelined: the scores' over the head's depth,
    the second over each block of keys (its left operand the probabilities in shared
    memory). (In a half type it is refused: it would spill.)"""
    s = _pipelined(_attention(), precision)
    (gr,) = s.plan.groups
    assert gr.schedule.then.online is not None
    _within(s, seeds=(5,))
    half = _attention("bfloat16")
    plan = Plan.singletons(half, H100).fuse([n.id for n in half.nodes])
    with pytest.raises(FusionRefused, match="stages=2 on a fused attention in a half type"):
        plan.set_launch(plan.groups[0].id, stages=2)


def test_two_stages_on_a_large_tensor_core_tile_are_refused_with_the_reason():
    g = gpu._linear_residual()
    plan = Plan.singletons(g, H100, "tf32").fuse([n.id for n in g.nodes])
    gid = plan.groups[0].id
    with pytest.raises(FusionRefused, match=r"stages=2 on a 128 x 128 tensor-core tile: .* "
                                            r"would spill; pipeline a 128 x 64"):
        plan.set_launch(gid, tile_m=128, tile_n=128, stages=2)
    assert plan.set_launch(gid, tile_m=128, tile_n=64, stages=2).groups[0].schedule.gemm \
        .block.stages == 2
    # (the CUDA cores' 128 x 128 pipelines; the CPU has no stages; 1 or 2 only)
    h100 = Plan.singletons(g, H100).fuse([n.id for n in g.nodes])
    assert h100.set_launch(gid, tile_m=128, tile_n=128, stages=2).groups[0].schedule.gemm \
        .block.shared_bytes == 2 * GPU_GEMM_TILES[128, 128].shared_bytes
    with pytest.raises(FusionRefused, match=r"stages=3 is out of range for a GEMM kernel "
                                            r"\(1 or 2\)"):
        h100.set_launch(gid, stages=3)
    from workbench.device import assumed_cpu
    cpu = assumed_cpu("cpu", 2)
    on_cpu = Plan.singletons(g, cpu).fuse([n.id for n in g.nodes])
    with pytest.raises(FusionRefused, match="stages applies to a GPU's GEMM tile"):
        on_cpu.set_launch(on_cpu.groups[0].id, stages=2)


@pytest.mark.parametrize("dtype, precision", [("float32", "float32"), ("float32", "tf32"),
                                              ("bfloat16", "float32"), ("float16", "float32")],
                         ids=["cuda-cores", "tf32", "bfloat16", "float16"])
def test_pipelined_kernels_compile_without_spills(dtype, precision, nvrtc_toolchain):
    """BERT-base's FFN GEMM kernel under every tile its precision may pipeline, and the
    fused attention, in 2 stages: NVRTC with the runtime's options, no local memory, at
    most 128 registers (two blocks an SM), twice the panels' shared memory."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    from test_gpu_tf32 import _bert_half
    cases = [(_bert_half(dtype, "ffn"), t) for t in GPU_GEMM_TILES
             if not (H100.on_tensor_cores(DType(dtype), precision == "tf32")
                                       and t[0] * t[1] > PIPELINED_TENSOR_MAX)]
    if not DType(dtype).is_half:
        cases.append((_bert_half(dtype, "attention"), None))
    for g, tile in cases:
        plan = Plan.singletons(g, H100, precision).fuse([n.id for n in g.nodes])
        tiles = {} if tile is None else {"tile_m": tile[0], "tile_n": tile[1]}
        plan = plan.set_launch(plan.groups[0].id, stages=2, **tiles)
        (k,) = lower_plan(plan)
        src = render_kernel(k, "cuda")
        assert ", 2>(" in src or ", 2, " in src
        rep = nvrtc.ptxas_report(src, k.name)
        assert rep.spill_bytes == 0 and rep.stack_bytes == 0, (tile, rep.log)
        assert rep.registers <= 128 and rep.shared_bytes == k.launch.shared_bytes, rep.log


def test_the_tuner_times_two_stages_beside_the_other_tiles():
    """(The tuner measures on the device itself, so it is not run here: its candidates
    are -- the other stages, alone and with each other tile in the climb -- and what the
    plan refuses, 2 stages on a 128 x 128 tensor-core tile, is dropped there.)"""
    from workbench.fusion import make_group
    from workbench.measure.tune import candidates, climb
    for precision in ("float32", "tf32"):
        g = gpu._linear_residual()
        plan = Plan.singletons(g, H100, precision).fuse([n.id for n in g.nodes])
        (gr,) = plan.set_launch(plan.groups[0].id, tile_m=128, tile_n=128).groups
        rule, *cands = candidates(gr)
        assert (("stages", 2),) in [c.launch for c in cands]
        made = []
        for c in cands + climb(cands[0], gr):
            try:
                made.append(make_group(g, gr.nodes, device=H100, launch=c.launch,
                                       tf32=precision == "tf32"))
            except FusionRefused as e:
                assert precision == "tf32" and "stages=2 on a 128 x 128" in str(e)
        assert any(m.schedule.gemm.block.stages == 2 for m in made)
    att = _attention()
    plan = Plan.singletons(att, H100).fuse([n.id for n in att.nodes])
    rule, *cands = candidates(plan.groups[0])
    assert [c.launch for c in cands] == [(("stages", 2),)]



@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("make, precision, tile", [
    (gpu._linear_residual, "float32", (128, 128)), (gpu._linear_residual, "tf32", (128, 64)),
    (_half_ffn, "float32", (64, 128)), (_attention, "tf32", None)],
    ids=["cuda-cores", "tf32", "bfloat16", "attention-tf32"])
def test_on_a_gpu_pipelined_tiles_run_within_their_bounds(make, precision, tile):
    """The same kernels on the GPU itself (CuPy, NVRTC): each within its bound."""
    g = make()
    s = Session(g, backend="cupy", matmul_precision=precision)
    s.fuse([n.id for n in g.nodes])
    tiles = {} if tile is None else {"tile_m": tile[0], "tile_n": tile[1]}
    s.set_launch(s.plan.groups[0].id, stages=2, **tiles)
    _within(s)
