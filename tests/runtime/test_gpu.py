"""The GPU's plans and CUDA kernels against the reference: on a GPU through the cupy
backend, and -- the same plans, the same CUDA source -- in the CUDA emulator on the CPU
(``cuda-emu``, runtime/cuda_emu.py), which runs everywhere. The emulator takes the
shapes of at most EMU_ELEMENTS elements (it runs each GPU thread as a fiber: about a
second per 4M elements) and each plan once; what needs a real GPU (CuPy arrays, 2^31
elements, the driver's register counts) runs on the cupy backend only."""
import math
import os
from pathlib import Path

import pytest

from workbench.runtime import gpu_available
from workbench.runtime.cuda_emu import CudaEmuBackend
from workbench.session import Session

GPU_ONLY = [pytest.mark.gpu,
            pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")]
# (CI sets WB_REQUIRE_CUDA_EMU: there the emulator's tests fail rather than skip)
EMU_MISSING = None if os.environ.get("WB_REQUIRE_CUDA_EMU") else CudaEmuBackend.unavailable()
BACKENDS = [pytest.param("cupy", marks=GPU_ONLY),
            pytest.param("cuda-emu", marks=pytest.mark.skipif(EMU_MISSING is not None,
                                                              reason=str(EMU_MISSING)))]
EMU_ELEMENTS = 300_000

SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def _measure(s, plan=None):
    """The plan run, checked kernel by kernel and timed: on the GPU 3 repeats, in the
    emulator once."""
    if s.backend.name == "cuda-emu":
        return s.measure(plan, warmup=0, repeats=1)
    return s.measure(plan, repeats=3)


def _small_enough(backend, *shape):
    if backend == "cuda-emu" and math.prod(shape) > EMU_ELEMENTS:
        pytest.skip(f"{shape}: more than the emulator's {EMU_ELEMENTS} elements")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("planner", ["none", "xla", "rules", "stitch"])
@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_cupy_matches_reference(path, planner):
    s = Session(str(path), backend="cupy")
    if planner != "none":
        s.auto(planner)
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


def _norm(kind, rows, cols):
    from workbench.ir import GraphBuilder
    b = GraphBuilder(f"{kind}_{rows}x{cols}")
    x = b.input("x", (rows, cols))
    if kind == "layer_norm":
        y = b.layer_norm(x, b.input("gamma", (cols,)), b.input("beta", (cols,)))
    else:
        y = b.softmax(x, axis=-1)
    b.output(y, "y")
    return b.build()


@pytest.mark.parametrize("rows, cols", [
    (3, 33), (1057, 700), (7, 77), (2048, 4096), (64, 32768),
    # (longer rows: seconds to a minute of emulation each under split and thread)
    *(pytest.param(*shape, marks=pytest.mark.slow)
      for shape in ((5, 2501), (19, 1000), (4, 70000), (3, 50257)))])
@pytest.mark.parametrize("kind", ["layer_norm", "softmax"])
@pytest.mark.parametrize("mapping", ["warp", "block", "split", "thread"])
def test_every_thread_mapping(backend, kind, rows, cols, mapping):
    _small_enough(backend, rows, cols)
    s = Session(_norm(kind, rows, cols), backend=backend)
    s.auto("rules")
    s.set_mapping("k0", mapping)
    m = _measure(s)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


@pytest.mark.parametrize("rows, cols", [(37, 45), (4096, 1024), (8, 65536), (3, 20000)])
def test_global_stitch_cooperative_launch(backend, rows, cols):
    # the mean through global memory behind a grid barrier: a cooperative launch
    _small_enough(backend, rows, cols)
    s = Session(_norm("layer_norm", rows, cols), backend=backend)
    s.auto("rules")
    s.set_scheme(s.graph.node("n0").outputs[0], "global")
    assert s.kernels()[0].launch.cooperative
    m = _measure(s)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


@pytest.mark.slow   # (half a minute to a minute each in the emulator)
@pytest.mark.parametrize("name", ["cross_entropy.json", "layernorm_param_grad.json",
                                  "bias_gelu_residual_layernorm.json", "adam.json"])
def test_whole_graph_stitched(backend, name):
    s = Session(f"sample_graphs/{name}", backend=backend)
    if len(s.graph.nodes) > 1:
        s.fuse([n.id for n in s.graph.nodes])
    m = _measure(s)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_offsets_past_2_to_the_31_use_64_bit_indices():
    """An elementwise exp over 2,147,483,644 elements (an int grid-stride loop wrapped
    negative there): every element written and right (checked on the device)."""
    import cupy as cp
    from workbench.ir import GraphBuilder
    from workbench.runtime import Program, get_backend
    from workbench.fusion import run_planner
    n = 2_147_483_644
    if cp.cuda.Device().mem_info[0] < 3 * n * 4:
        pytest.skip("needs 26 GB of free GPU memory")
    b = GraphBuilder("big_exp")
    b.output(b.exp(b.input("x", (n,))), "y")
    g = b.build()
    prog = Program(run_planner("rules", g)[0], get_backend("cupy"))
    x = cp.random.default_rng(1).uniform(-1, 1, n, dtype=cp.float32)
    y = prog.execute({"x": x})["y"]
    assert not bool(cp.isnan(y).any())
    idx = cp.concatenate([cp.arange(1000), cp.arange(n - 1000, n),
                          cp.random.default_rng(2).integers(0, n, 100000)])
    assert float(cp.max(cp.abs(y[idx] - cp.exp(x[idx])) / cp.exp(x[idx]))) < 1e-6
    del x, y
    cp.get_default_memory_pool().free_all_blocks()


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_misaligned_cupy_inputs_are_copied_not_read_as_vectors():
    """16-byte loads need 16-byte-aligned rows: a CuPy view that starts mid-vector is
    copied first, not read out of alignment."""
    import cupy as cp
    import numpy as np
    from workbench.runtime import Program, get_backend, run_reference
    from workbench.fusion import run_planner
    g = _norm("softmax", 64, 1024)
    prog = Program(run_planner("rules", g)[0], get_backend("cupy"))
    base = cp.random.default_rng(3).uniform(-1, 1, 64 * 1024 + 1, dtype=cp.float32)
    x = base[1:].reshape(64, 1024)              # contiguous, 4 bytes past alignment
    assert x.data.ptr % 16 == 4
    y = prog.execute({"x": x})["y"]
    ref = run_reference(g, {"x": cp.asnumpy(x)})["y"]
    np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_row_kernel_compiled_for_the_device_fits_its_registers():
    """The GPU's own compile: the LayerNorm row kept in registers spills nothing, and a
    cooperative kernel's grid is capped to what the compiled kernel lets reside."""
    from workbench.runtime import get_backend
    s = Session(_norm("layer_norm", 32768, 4096), backend="cupy")
    s.auto("rules")
    ck = s.program().compiled[0]
    attrs = s.backend.kernel_attributes(ck)
    assert attrs["local_bytes"] == 0 and attrs["registers"] <= 128
    s.set_mapping("k0", "split")
    be = get_backend("cupy")
    ck = s.program().compiled[0]
    from workbench.fusion.geometry import co_resident_grid
    attrs = be.kernel_attributes(ck)
    # the plan-time estimate, given the compiled kernel's registers, is the driver's
    assert be.co_resident_grid(ck) == co_resident_grid(
        ck.kernel.launch.block, attrs["shared_bytes"], be.device, attrs["registers"])


@pytest.mark.slow   # (every mapping in the emulator; the fast tier's bfloat16 rows:
#                    tests/runtime/test_bfloat16_storage.py)
@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm", "gelu_residual_ln"])
@pytest.mark.parametrize("rows, cols", [(67, 520), (4096, 1024), (64, 32768), (5, 3001)])
def test_bfloat16_rows_under_every_mapping(backend, kind, rows, cols):
    """bfloat16 held as its bits on the GPU: poisoned, launched, read back as
    ml_dtypes' bfloat16 and checked kernel by kernel under every mapping."""
    from test_bfloat16_storage import _mappings, _row_graph

    from workbench.fusion import run_planner
    _small_enough(backend, rows, cols)
    s = Session(_row_graph(kind, rows, cols), backend=backend)
    plan, _ = run_planner("rules", s.graph)
    for label, p in _mappings(plan):
        m = _measure(s, p)
        assert m.within_tolerance and m.max_rel_error <= 2.0 ** -8, (label, m.per_kernel)
        assert s.program(p).run(s.inputs)["y"].dtype.name == "bfloat16"


def test_bfloat16_library_matmul(backend):
    from workbench.ir import GraphBuilder
    b = GraphBuilder("bf16_matmul")
    y = b.gelu(b.matmul(b.input("x", (64, 96), "bfloat16"), b.input("w", (96, 48), "bfloat16")))
    b.output(y, "y")
    s = Session(b.build(), backend=backend)
    for planner in ("none", "rules"):
        s.auto(planner)
        m = _measure(s)
        assert m.within_tolerance, (planner, m.per_kernel)


def _conv_block():
    """A CNN's block: a padded, strided 3 x 3 convolution with its bias and a ReLU, a
    grouped (depthwise) 3 x 3 one, a max pool and a 1 x 1 convolution."""
    import numpy as np

    from workbench.ir import GraphBuilder, composites_nn
    rng = np.random.default_rng(5)
    w = lambda *shape: b.constant(rng.uniform(-0.5, 0.5, shape).astype(np.float32))  # noqa: E731
    b = GraphBuilder("conv_block")
    x = b.input("x", (2, 8, 18, 18))
    h = b.relu(b.op("conv2d", x, w(16, 8, 3, 3), w(16), strides=[2, 2], pads=[1, 1, 1, 1]))
    h = b.relu(b.op("conv2d", h, w(16, 1, 3, 3), w(16), strides=[1, 1], pads=[1, 1, 1, 1],
                    group=16))
    h = composites_nn.max_pool(b, h, [2, 2], [2, 2])
    b.output(b.op("conv2d", h, w(4, 16, 1, 1), w(4), strides=[1, 1], pads=[0, 0, 0, 0]), "y")
    return b.build()


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_a_convolution_block_runs_right(backend, planner):
    """Convolutions on a GPU's plan (the library's, their epilogues and poolings in
    generated kernels), checked kernel by kernel."""
    s = Session(_conv_block(), backend=backend)
    s.auto(planner)
    m = _measure(s)
    assert m.within_tolerance, (planner, m.max_rel_error, m.per_kernel)


@pytest.mark.parametrize("kind, rows, cols", [
    ("layer_norm", 130, 96),
    *(pytest.param(*c, marks=pytest.mark.slow) for c in (      # (longer rows: more candidates)
        ("softmax", 3, 4099), ("layer_norm", 37, 2048), ("softmax", 6, 8192)))])
@pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))
def test_every_tuning_candidate_runs_right(kind, rows, cols):
    """What ``Session.tune`` may launch on a GPU: every candidate of the row kernel
    (threads, rows per block, splits, and the mappings they imply) run in the emulator
    and checked against the reference. The tuner checks only the one it keeps; a
    candidate that faulted or hung on a GPU would take the process with it."""
    from workbench.errors import FusionRefused
    from workbench.fusion import run_planner
    from workbench.measure.tune import _make, candidates
    s = Session(_norm(kind, rows, cols), backend="cuda-emu")
    plan, _ = run_planner("rules", s.graph)
    gr = plan.groups[0]
    ran = set()
    for cand in candidates(gr):
        try:
            tuned = plan._replace({gr.id}, [_make(plan, gr, cand)], "tuned")
        except FusionRefused:
            continue
        m = s.measure(tuned, warmup=0, repeats=1)
        assert m.within_tolerance, (cand.label, m.max_rel_error, m.per_kernel)
        ran.add(cand.label)
    assert len(ran) >= 3, ran
