"""TF32 as an explicit option (``matmul_precision="tf32"``): float32 matmuls on a GPU's
tensor cores. The generated GEMM tiles (``wb_gemm_tile_tc``: WMMA m16n16k8 fragments,
operands rounded to TF32) run in the CUDA emulator, whose WMMA rounds as the hardware
does, and are checked against NumPy within TF32's bound (``measure.verify``: |A| @ |B|
grown by TF32_PRODUCT_ERROR) -- and shown to have rounded: each product is NumPy's of
the operands rounded to TF32, not float32's. The check itself is shown to hold TF32
products to TF32's bound and to refuse them float32's. NVRTC compiles the tensor-core
kernels with the runtime's options without spills; the planners, the session, the CLI
and a CPU (which computes float32 whatever is asked) are checked too."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.fusion import Plan, run_planner
from workbench.fusion.cost import CostModel
from workbench.device import H100
from workbench.fusion.gemm.gpu_tiles import GPU_TENSOR_TILES
from workbench.fusion.mapping import ScheduleKind
from workbench.dtypes import DType
from workbench.tolerance import HALF_PRODUCT_ERROR, TF32_PRODUCT_ERROR
from workbench.measure import verify_kernels
from workbench.measure.verify import check_kernel
from workbench.runtime import gpu_available, random_inputs
from workbench.runtime.cuda_emu import CudaEmuBackend
from workbench.session import Session

import test_gpu_gemm as gpu

EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
needs_emu = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))



def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 as __float_to_tf32 does (PTX cvt.rna.tf32.f32: to
    nearest, ties away from zero, 10 mantissa bits), as float64."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(finite, rounded, x).astype(np.float64)


def _tf32_session(make, tile=None) -> Session:
    g = make()
    s = Session(g, backend="cuda-emu", matmul_precision="tf32")
    s.fuse([n.id for n in g.nodes])
    if tile is not None:
        s.set_launch(s.plan.groups[0].id, tile_m=tile[0], tile_n=tile[1])
    (gr,) = s.plan.groups
    assert gr.schedule.gemm.block is GPU_TENSOR_TILES[(gr.schedule.gemm.tile_m,
                                                       gr.schedule.gemm.tile_n)]
    return s


def _all_within(s: Session, seed: int) -> dict:
    prog = s.program()
    env = prog.run(random_inputs(s.graph, seed), keep_all=True)
    checks = verify_kernels(prog, env)
    assert all(c.within_tolerance for c in checks), checks
    assert all(ck.kernel.tf32 and ck.kernel.tensor_cores for ck in prog.compiled)
    return env


@needs_emu
@pytest.mark.parametrize("tile", sorted(GPU_TENSOR_TILES))
@pytest.mark.parametrize("make", gpu.GRAPHS, ids=lambda f: f.__name__.strip("_"))
def test_tensor_core_gemm_kernels_match_numpy_within_tf32_s_bound(make, tile):
    """Each GEMM kernel of test_gpu_gemm (ragged tiles, depth 257, operands read
    transposed in place, a B per batch item, the product an output) on tensor cores."""
    s = _tf32_session(make, tile)
    _all_within(s, seed=7)


@needs_emu
@pytest.mark.parametrize("tile", sorted(GPU_TENSOR_TILES))
def test_the_tensor_core_product_is_numpy_s_of_the_operands_rounded_to_tf32(tile):
    """The product itself (an output of _linear_residual): within float32's rounding of
    NumPy's product of the TF32-rounded operands, and off the float32 product by far
    more -- the tensor cores' rounding happened, in the kernel the GPU would run."""
    s = _tf32_session(gpu._linear_residual, tile)
    env = _all_within(s, seed=3)
    x, w = env["x"], s.graph.constants["w"]
    mags = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    tf32 = to_tf32(x) @ to_tf32(w).T
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    got = env["p"].astype(np.float64)
    assert np.max(np.abs(got - tf32) / mags) < 300 * 2.0 ** -24       # float32 sums
    assert np.max(np.abs(got - exact) / mags) > 2.0 ** -14            # TF32's rounding


@needs_emu
@pytest.mark.parametrize("shape", [(1, 2, 5, 135, 12, 20), (2, 1, 70, 90, 72, 16),
                                   (1, 1, 33, 64, 128, 64)])
def test_a_fused_attention_on_tensor_cores_matches_numpy(shape):
    """softmax(q kᵀ x scale + mask) v as one kernel, both products on tensor cores (the
    second accumulating into the output rows through wb_gemm_tile_tc's handover), a
    mask of -inf at random: within TF32's bound carried through the softmax."""
    n, h, q, keys, d, dk = shape
    rng = np.random.default_rng(sum(shape))
    mask = np.where(rng.random((n, 1, q, keys)) < 0.2, -np.inf, 0).astype(np.float32)

    def attention():
        b = wb.GraphBuilder("tf32_attention")
        k = b.op("transpose", b.input("k", (n, h, keys, dk)), perm=[0, 1, 3, 2])
        z = b.matmul(b.input("q", (n, h, q, dk)), k) * 0.3 + b.constant(mask, "mask")
        b.output(b.matmul(b.softmax(z, axis=-1), b.input("v", (n, h, keys, d))), "o")
        return b.build()

    g = attention()
    s = Session(g, backend="cuda-emu", matmul_precision="tf32")
    s.fuse([x.id for x in g.nodes])
    (gr,) = s.plan.groups
    assert gr.schedule.then.online is not None and gr.schedule.gemm.block.tensor
    _all_within(s, seed=1)


def test_the_check_holds_tf32_products_to_tf32_s_bound_and_no_looser():
    """check_kernel on a matmul kernel's real inputs and an output made as a tensor core
    makes it (operands rounded to TF32): refused under float32's bound at a small depth,
    accepted under TF32's; an output off by 1% of its magnitude refused under both."""
    from workbench.codegen import lower_group
    b = wb.GraphBuilder("small_depth")
    b.output(b.matmul(b.input("a", (64, 8)), b.input("b", (8, 48))), "c")
    g = b.build()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 8)).astype(np.float32)
    bb = rng.standard_normal((8, 48)).astype(np.float32)
    c = (to_tf32(a) @ to_tf32(bb)).astype(np.float32)
    (gr,) = Plan.singletons(g, H100, "tf32").groups
    k = lower_group(g, gr, H100)
    assert k.tf32 and k.library is not None        # (a lone matmul: cuBLAS, in TF32)
    assert k.product_error == TF32_PRODUCT_ERROR
    env = {"a": a, "b": bb, "c": c}
    assert check_kernel(g, k, gr.nodes, env).within_tolerance
    from dataclasses import replace
    assert not check_kernel(g, replace(k, product_error=0.0), gr.nodes, env).within_tolerance
    mags = np.abs(a) @ np.abs(bb)
    off = {**env, "c": (c + 0.01 * mags * np.sign(rng.standard_normal(c.shape))
                        ).astype(np.float32)}
    assert not check_kernel(g, k, gr.nodes, off).within_tolerance


def test_another_framework_s_tf32_output_is_held_to_the_whole_graph_s_tf32_bound():
    """graph_magnitudes: the bound torch's outputs are held to in benchmarks/gpu.py
    --matmul-precision tf32 -- a two-matmul chain computed with TF32-rounded operands
    passes under it and fails float32's; one off by 1% fails both."""
    from workbench.tolerance import max_rel_error, tolerance
    from workbench.measure.verify import graph_magnitudes
    b = wb.GraphBuilder("chain")
    h = b.relu(b.matmul(b.input("a", (32, 8)), b.input("b", (8, 24))))
    b.output(b.matmul(h, b.input("c", (24, 16))), "y")
    g = b.build()
    rng = np.random.default_rng(9)
    ins = {k: rng.standard_normal(g.value(k).shape).astype(np.float32) for k in g.inputs}
    exact = np.maximum(ins["a"].astype(np.float64) @ ins["b"], 0) @ ins["c"]
    t = np.maximum(to_tf32(ins["a"]) @ to_tf32(ins["b"]), 0).astype(np.float32)
    got = (to_tf32(t) @ to_tf32(ins["c"])).astype(np.float32)
    tol = tolerance(DType.float32)
    assert max_rel_error(got, exact, graph_magnitudes(g, ins, tf32=True)["y"]) <= tol
    assert max_rel_error(got, exact, graph_magnitudes(g, ins)["y"]) > tol
    mags = graph_magnitudes(g, ins, tf32=True)["y"]
    assert max_rel_error(got + 0.01 * np.abs(exact).max(), exact, mags) > tol


@pytest.mark.parametrize("tile", sorted(GPU_TENSOR_TILES))
@pytest.mark.parametrize("make", [gpu._linear_residual, gpu._bert_ffn],
                         ids=lambda f: f.__name__.strip("_"))
def test_tensor_core_kernels_compile_without_spills(make, tile, nvrtc_toolchain):
    """NVRTC with the runtime's options: no local memory, at most 128 registers (two
    blocks an SM), the panels (and the handover in their place) as geometry says."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    g = make()
    plan = Plan.singletons(g, H100, "tf32").fuse([n.id for n in g.nodes])
    (k,) = lower_plan(plan.set_launch(plan.groups[0].id, tile_m=tile[0], tile_n=tile[1]))
    src = render_kernel(k, "cuda")
    assert "wmma::mma_sync" in src and "#include <mma.h>" in src
    rep = nvrtc.ptxas_report(src, k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0, rep.log
    assert rep.registers <= 128, rep.log
    assert rep.shared_bytes == GPU_TENSOR_TILES[tile].shared_bytes == k.launch.shared_bytes


def test_a_tensor_core_kernel_is_refused_with_the_reason_on_a_gpu_before_sm80(
        nvrtc_toolchain):
    """An artifact's tensor-core kernel on an older GPU: NVRTC itself refuses WMMA's
    TF32 there, so the backend says why first (nvrtc.require_arch) instead of showing
    NVRTC's log as a workbench bug."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    g = gpu._linear_residual()
    (k,) = lower_plan(Plan.singletons(g, H100, "tf32").fuse([n.id for n in g.nodes]))
    assert k.tensor_cores
    with pytest.raises(nvrtc.NvrtcError):
        nvrtc.compile_cuda(render_kernel(k, "cuda"), k.name, "75")
    with pytest.raises(WorkbenchError, match="compute capability 8.0 or newer; this GPU is "
                                             "sm_75. Plan it on this GPU"):
        nvrtc.require_arch(k, "75")
    nvrtc.require_arch(k, "80")
    (k32,) = lower_plan(Plan.singletons(g, H100).fuse([n.id for n in g.nodes]))
    nvrtc.require_arch(k32, "75")          # (the CUDA cores' GEMM runs anywhere)


def test_bert_s_attention_in_tf32_is_one_tensor_core_kernel_that_compiles(nvrtc_toolchain):
    """BERT-base's attention on the H100 with TF32 allowed: stitch's one kernel, both
    products on tensor cores, predicted faster than rules' five (cuBLAS in TF32), and
    faster than the float32 plan; NVRTC compiles it without spills."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.runtime import nvrtc
    g = gpu._bert_attention()
    model = CostModel.for_device(H100)
    stitch = run_planner("stitch", g, device=H100, matmul_precision="tf32")[0]
    rules = run_planner("rules", g, device=H100, matmul_precision="tf32")[0]
    (gr,) = stitch.groups
    assert gr.schedule.gemm.block.tensor and gr.schedule.then is not None
    assert model.plan_seconds(stitch) < model.plan_seconds(rules)
    assert model.plan_seconds(stitch) < model.plan_seconds(
        run_planner("stitch", g, device=H100)[0])
    assert all(k.tf32 for k in lower_plan(rules) if k.library is not None)
    (k,) = lower_plan(stitch)
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0 and rep.registers <= 128, rep.log
    assert rep.shared_bytes == k.launch.shared_bytes, rep.log


def test_float32_stays_the_exact_default_and_plans_are_keyed_by_precision():
    g = gpu._bert_scores()
    f32 = run_planner("stitch", g, device=H100)[0]
    t32 = run_planner("stitch", g, device=H100, matmul_precision="tf32")[0]
    assert f32 != t32 and f32.key[:2] == (H100.name, "float32")
    assert t32.key[:2] == (H100.name, "tf32") and t32.tf32 and not f32.tf32
    assert not f32.groups[0].schedule.gemm.block.tensor
    assert t32.groups[0].schedule.gemm.block.tensor


def test_a_cpu_computes_float32_whatever_is_asked_and_says_so():
    g = gpu._ffn_gelu()
    with pytest.warns(UserWarning, match="no TF32 tensor cores"):
        s = Session(g, backend="cpu", matmul_precision="tf32")
    assert not s.tf32
    s.auto("rules")
    assert not any(k.tf32 for k in (ck.kernel for ck in s.program().compiled))
    with pytest.raises(WorkbenchError, match="matmul_precision must be one of"):
        Session(g, backend="cpu", matmul_precision="fp16")


@pytest.mark.slow   # (the CLI in a subprocess on every sample graph, emulated)
@needs_emu
def test_the_main_job_with_tf32_as_a_user_runs_it(tmp_path):
    """``workbench optimize ... --matmul-precision tf32`` in a subprocess, on the GPU's
    plans in the emulator: every step within its bound, the rows and the closing line
    say TF32; an unknown precision is one error line and exit 2."""
    import json
    import subprocess
    import sys
    cli = [sys.executable, "-m", "workbench.cli"]
    out = tmp_path / "rows.json"
    r = subprocess.run(cli + ["optimize", "sample_graphs/layernorm_gelu.onnx", "--planner",
                              "stitch", "--backend", "cuda-emu", "--matmul-precision", "tf32",
                              "--repeats", "1", "--warmup", "0", "--json", str(out), "-q"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert rows and all(row["ok"] and row["matmul_precision"] == "tf32" for row in rows)
    assert "float32 matmuls in TF32" in r.stdout
    bad = subprocess.run(cli + ["show", "sample_graphs/bert_chain.json", "plan",
                                "--matmul-precision", "bf16"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error:"), bad.stderr
    assert "invalid choice: 'bf16'" in bad.stderr


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda-emu", marks=needs_emu)])
def test_a_tf32_plan_s_artifact_runs_without_the_workbench_s_session(backend, tmp_path):
    """Exported from a TF32 plan for the H100: the CUDA source on the emulator rounds
    as tensor cores do (the manifest keeps the kernel's tf32), the C rendering on a CPU
    computes float32; either within TF32's bound of the product."""
    from workbench.artifact import export_plan, load_artifact
    plan = Plan.singletons(gpu._linear_residual(), H100, "tf32")
    plan = plan.fuse([n.id for n in plan.graph.nodes])
    path = export_plan(plan, tmp_path / "tf32")
    model = load_artifact(path, backend=backend)
    ins = random_inputs(plan.graph, 4)
    got = model(**ins)["p"].astype(np.float64)
    x, w = ins["x"], plan.graph.constants["w"]
    mags = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    err = np.max(np.abs(got - exact) / mags)
    assert err <= 2.0 ** -9
    assert (err > 2.0 ** -14) == (backend == "cuda-emu"), err


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_on_a_gpu_cublas_and_the_tensor_core_kernels_run_tf32_within_its_bound(planner):
    """On the device itself: cuBLAS's matmuls (rules) and the generated tensor-core
    kernels (stitch) in TF32, every kernel within TF32's bound, the product off the
    float32 one by TF32's rounding (so TF32 really ran); float32 plans stay exact."""
    for precision in ("float32", "tf32"):
        s = Session(gpu._linear_residual(), backend="cupy", matmul_precision=precision)
        s.auto(planner)
        env = s.program().run(random_inputs(s.graph, 2), keep_all=True)
        assert all(c.within_tolerance for c in verify_kernels(s.program(), env))
        x, w = env["x"], s.graph.constants["w"]
        mags = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
        err = np.max(np.abs(env["p"] - x.astype(np.float64) @ w.astype(np.float64).T) / mags)
        assert (err > 2.0 ** -14) == (precision == "tf32"), (precision, err)


# -- bfloat16 and float16: on tensor cores whatever the precision option (exact in TF32) --
HALVES = ["bfloat16", "float16"]


def _half_ffn(dtype):
    b = wb.GraphBuilder(f"{dtype}_ffn")
    x = b.input("x", (2, 70, 136), dtype=dtype)
    p = b.output(b.matmul(x, b.input("w", (136, 200), dtype=dtype)), "p")
    b.output(b.gelu(p + b.input("bias", (200,), dtype=dtype)), "y")
    return b.build()


@pytest.mark.parametrize("dtype", HALVES)
def test_a_half_precision_matmul_is_planned_on_tensor_cores_without_the_option(dtype):
    """bfloat16 and float16 matmuls run on tensor cores under the default precision: a
    GEMM kernel takes tiles of the half type (m16n16k16, 16 deep, priced at twice TF32's
    rate; a computed operand would be rounded into it: HALF_PRODUCT_ERROR), a library
    matmul runs cuBLAS (float16 as it is, at its rate; bfloat16 widened to float32, in
    TF32); float32 stays on the CUDA cores; a GPU without tensor cores (and a CPU)
    keeps the old ways."""
    from workbench.codegen import lower_group
    from workbench.fusion import analyze
    g = _half_ffn(dtype)
    half = DType(dtype)
    members = tuple(n.id for n in g.nodes)
    sched = analyze(g, members, device=H100)
    block = sched.gemm.block
    assert block.tensor and block.operands is half and block.depth == 16
    assert block.fragment_k == 16
    (gr,) = Plan.singletons(g, H100).fuse(members).groups
    fused = lower_group(g, gr, H100)
    assert fused.tensor_cores and fused.product_error == HALF_PRODUCT_ERROR[half]
    (mm,) = [n for n in g.nodes if n.op == "matmul"]
    lone = Plan.singletons(g, H100).group_of[mm.id]
    k = lower_group(g, lone, H100)
    assert k.library is not None and k.tf32 and k.product_error == TF32_PRODUCT_ERROR
    assert lone.schedule.tensor_cores
    assert H100.on_tensor_cores(half, tf32=False)
    assert not H100.on_tensor_cores(DType.float32, tf32=False)
    assert H100.tensor_rate(half) == 2 * H100.tensor_flops
    assert H100.matmul_rate(half, lone.schedule.tensor_cores) == (
        2 if half is DType.float16 else 1) * H100.tensor_flops
    assert not H100.with_(tensor_flops=0.0).on_tensor_cores(half, tf32=True)


@needs_emu
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("tile", sorted(GPU_TENSOR_TILES))
def test_a_half_precision_gemm_kernel_on_tensor_cores_matches_numpy(tile, dtype):
    """The product of half-precision operands on tensor cores is float32's (nothing
    rounded on the way in): the stored product is NumPy's float64 product rounded once
    to the half type, to within an ulp, and the GELU after it within its bound."""
    g = _half_ffn(dtype)
    s = Session(g, backend="cuda-emu")
    s.fuse([n.id for n in g.nodes])
    s.set_launch(s.plan.groups[0].id, tile_m=tile[0], tile_n=tile[1])
    env = _all_within(s, seed=2)
    x, w = (np.asarray(env[v]).astype(np.float64) for v in ("x", "w"))
    exact = x @ w
    got = np.asarray(env["p"]).astype(np.float64)
    mags = np.abs(x) @ np.abs(w)
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    assert np.max(np.abs(got - exact) / np.maximum(np.abs(exact), 1e-3 * mags)) <= ulp


@needs_emu
@pytest.mark.parametrize("dtype", HALVES)
def test_a_half_precision_fused_attention_runs_on_tensor_cores(dtype):
    n, h, q, keys, d = 1, 2, 40, 96, 32
    b = wb.GraphBuilder(f"{dtype}_attention")
    k = b.op("transpose", b.input("k", (n, h, keys, d), dtype=dtype), perm=[0, 1, 3, 2])
    z = b.matmul(b.input("q", (n, h, q, d), dtype=dtype), k) * 0.2
    b.output(b.matmul(b.softmax(z, axis=-1), b.input("v", (n, h, keys, d), dtype=dtype)),
             "o")
    g = b.build()
    s = Session(g, backend="cuda-emu")
    s.fuse([x.id for x in g.nodes])
    (gr,) = s.plan.groups
    assert gr.schedule.then.online is not None and gr.schedule.gemm.block.tensor
    _all_within(s, seed=5)


@needs_emu
def test_the_onnx_backend_takes_the_precision_too():
    """onnx_backend.prepare(..., matmul_precision="tf32"): before, its **kwargs took the
    argument and dropped it silently."""
    from workbench import onnx_backend
    rep = onnx_backend.prepare("sample_graphs/layernorm_gelu.onnx", planner="stitch",
                               backend="cuda-emu", matmul_precision="tf32")
    assert rep.session.tf32
    assert any(k.tf32 for k in rep.session.kernels())
    with pytest.raises(WorkbenchError, match="matmul_precision must be one of"):
        onnx_backend.prepare("sample_graphs/layernorm_gelu.onnx", backend="cpu",
                             matmul_precision="half")


def _bert_half(dtype, part):
    """BERT-base's FFN (8 x 512 x 768 by 768 x 3072, bias, GELU) or attention (8 x 12
    heads of 512 x 64, scale, mask, softmax) in a half type."""
    b = wb.GraphBuilder(f"bert_{part}_{dtype}")
    if part == "ffn":
        x = b.input("x", (8, 512, 768), dtype=dtype)
        h = b.matmul(x, b.input("w", (768, 3072), dtype=dtype))
        b.output(b.gelu(h + b.input("bias", (3072,), dtype=dtype)), "y")
        return b.build()
    q, k, v = (b.input(x, (8, 12, 512, 64), dtype=dtype) for x in "qkv")
    z = (b.matmul(q, b.op("transpose", k, perm=[0, 1, 3, 2])) * 0.125
         + b.input("mask", (8, 1, 1, 512), dtype=dtype))
    b.output(b.matmul(b.softmax(z, axis=-1), v), "o")
    return b.build()


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("tile", sorted(GPU_TENSOR_TILES) + [None])
def test_half_tensor_core_kernels_compile_without_spills(dtype, tile, nvrtc_toolchain):
    """BERT-base's FFN GEMM kernel (each tile) and its fused attention (tile None), in
    bfloat16 and float16: panels of the half type (the tile's operand in the source),
    NVRTC with the runtime's options leaves no local memory and at most 128 registers
    (two blocks an SM), its shared memory what geometry says."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.codegen.render.cuda import TENSOR_OPERANDS
    from workbench.runtime import nvrtc
    half = DType(dtype)
    g = _bert_half(dtype, "ffn" if tile else "attention")
    plan = Plan.singletons(g, H100).fuse([n.id for n in g.nodes])
    if tile:
        plan = plan.set_launch(plan.groups[0].id, tile_m=tile[0], tile_n=tile[1])
    (k,) = lower_plan(plan)
    block = plan.groups[0].schedule.gemm.block
    assert block.tensor and block.operands is half and k.product_error == HALF_PRODUCT_ERROR[half]
    src = render_kernel(k, "cuda")
    assert f", 1, {TENSOR_OPERANDS[half]}>(" in src      # (1 stage, panels of the half type)
    rep = nvrtc.ptxas_report(src, k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0 and rep.registers <= 128, rep.log
    assert rep.shared_bytes == k.launch.shared_bytes, rep.log
    if tile:
        assert rep.shared_bytes == block.shared_bytes


def test_a_half_plan_is_priced_at_twice_tf32_s_tensor_rate():
    """The same attention and FFN kernels in bfloat16 on m16n16k16 are predicted faster
    than in float32 with TF32: twice the tensor rate, half the bytes."""
    model = CostModel.for_device(H100)
    for part in ("ffn", "attention"):
        g16, g32 = _bert_half("bfloat16", part), _bert_half("float32", part)
        p16 = Plan.singletons(g16, H100).fuse([n.id for n in g16.nodes])
        p32 = Plan.singletons(g32, H100, "tf32").fuse([n.id for n in g32.nodes])
        (gr16,), (gr32,) = p16.groups, p32.groups
        assert model.estimate(g16, gr16).ms < model.estimate(g32, gr32).ms


def test_a_bfloat16_library_matmul_is_priced_with_its_widening_copies():
    """No library here computes in bfloat16: a bfloat16 matmul's operands are widened to
    float32 copies before the call and its result rounded after (Backend.widen, hold),
    4x each value's bytes more and a copy each; float16 goes to cuBLAS as it is. So on
    the H100 ``stitch`` takes BERT's bfloat16 FFN GEMM with its bias and GELU as one
    tensor-core kernel (predicted faster than rules' library call and epilogue), and
    leaves the float16 one to cuBLAS."""
    from workbench.fusion.features import features
    model = CostModel.for_device(H100)
    for dtype in HALVES:
        g = _bert_half(dtype, "ffn")
        (mm,) = [n for n in g.nodes if n.op == "matmul"]
        lone = Plan.singletons(g, H100).group(mm.id)
        f = features(g, lone, H100)
        values = (*mm.inputs, *mm.outputs)
        own = sum(g.value(v).nbytes for v in values)
        widened = 4 * own if dtype == "bfloat16" else 0
        assert f.memory_s == pytest.approx((own + widened) / H100.dram_bandwidth)
        assert f.launches == 1 + (len(values) if dtype == "bfloat16" else 0)
        stitch = run_planner("stitch", g, device=H100)[0]
        rules = run_planner("rules", g, device=H100)[0]
        fused = [gr for gr in stitch.groups if gr.schedule.kind is ScheduleKind.gemm]
        if dtype == "bfloat16":
            assert len(stitch.groups) == 1 and fused[0].schedule.gemm.block.tensor
            assert model.plan_seconds(stitch) < model.plan_seconds(rules)
        else:
            assert not fused and len(stitch.groups) == 2


@needs_emu
def test_a_tf32_step_s_output_error_is_measured_against_tf32_s_whole_graph_bound():
    """The step table's end-to-end error of a TF32 plan: its outputs against the
    reference within the whole graph's TF32 bound (verify.graph_magnitudes) -- against
    |ref| alone, as for float32, every TF32 plan would read as off."""
    from workbench.tolerance import check_outputs, tolerance
    g = gpu._linear_residual()
    s = _tf32_session(gpu._linear_residual)
    m = s.measure(warmup=0, repeats=1)
    assert m.within_tolerance and m.end_to_end_error <= tolerance(DType.float32)
    env = s.program().run(s.inputs)
    bare, _ = check_outputs(g, env, s.reference)
    assert bare > tolerance(DType.float32)        # (what it said before)
    assert s.table()["end_to_end_error"].iloc[-1] == m.end_to_end_error
