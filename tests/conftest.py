"""Shared helpers for the test suite.

The central helper is :func:`check_graph`: it runs a graph under a planner on the
cpu backend (C kernels built by the system compiler; every run of the tests is a
checked one, WB_CHECKED_RUNS below: outputs are poisoned before the kernels write
them, so an element a kernel forgets to write fails) and compares every output with
the NumPy reference within the tolerance of its dtype.

Inputs are fresh random data, never zeros; :func:`make_inputs` also keeps inputs in the
domain of the ops that read them (log/sqrt see positive numbers, integer pow sees small
non-negative exponents...) so the comparison tests arithmetic, not NaN agreement.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import os

import numpy as np
import pytest

from workbench.errors import FusionRefused
from workbench.dtypes import DType
from workbench.ir import Graph, GraphBuilder
from workbench.tolerance import max_rel_error, tolerance
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session

# every run of a program in the tests is a checked one (outputs poisoned before the
# kernels write them: runtime/program.py), so any test comparing a run's outputs with
# the reference catches an element a kernel forgets to write; production and timed
# calls poison nothing (tests/runtime/test_outputs.py tests that path with this off)
os.environ.setdefault("WB_CHECKED_RUNS", "1")

# Tests reach these helpers through fixtures (``check_graph``, ``wb``), not by importing
# this module, so another conftest.py elsewhere in tests/ cannot shadow them.

PLANNERS = ("none", "rules")

# ops whose float inputs should be positive (and away from 0) for a meaningful check
_POSITIVE_OPS = {"log", "sqrt", "rsqrt", "reciprocal", "pow"}


def make_inputs(g: Graph, seed: int = 0, positive: Iterable[str] = (),
                overrides: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Random inputs for g (never zeros), kept in the domain of the ops that read them.

    Float inputs read by log/sqrt/rsqrt/reciprocal/pow (or named in ``positive``) are
    drawn from [0.5, 2); integer exponents of pow from [0, 5); integer divisors are
    never 0; everything else comes from :func:`random_inputs`.
    """
    ins = random_inputs(g, seed)
    rng = np.random.default_rng(seed + 1000)
    pos = set(positive)
    small_int = set()
    nonzero_int = set()
    for n in g.nodes:
        if n.op in _POSITIVE_OPS:
            pos.update(n.inputs)
        if n.op == "pow":
            small_int.add(n.inputs[1])
            if g.value(n.inputs[0]).dtype.kind == "i":
                small_int.add(n.inputs[0])
        if n.op == "div":
            nonzero_int.add(n.inputs[1])
    for name in g.inputs:
        v = g.value(name)
        a = ins[name]
        if v.dtype.is_float and name in pos:
            a = rng.uniform(0.5, 2.0, v.shape).astype(v.dtype.np)
        elif v.dtype.kind == "i" and name in small_int:
            a = rng.integers(0, 5, v.shape).astype(v.dtype.np)
        elif v.dtype.kind == "i" and name in nonzero_int:
            a = np.where(a == 0, 7, a).astype(v.dtype.np)
        ins[name] = np.asarray(a, dtype=v.dtype.np).reshape(v.shape)
    if overrides:
        ins.update({k: np.asarray(v) for k, v in overrides.items()})
    return ins


def assert_matches(g: Graph, outs: Mapping[str, np.ndarray],
                   refs: Mapping[str, np.ndarray], context: str = "") -> None:
    """Every output of g within its dtype's tolerance of the reference."""
    bad = []
    for name in g.outputs:
        v = g.value(name)
        out, ref = outs[name], refs[name]
        if tuple(np.shape(out)) != v.shape or np.asarray(out).dtype != v.dtype.np:
            bad.append(f"{name}: got {np.asarray(out).dtype}{list(np.shape(out))}, "
                       f"declared {v.dtype.value}{list(v.shape)}")
            continue
        err = max_rel_error(out, ref)
        if not err <= tolerance(v.dtype):
            bad.append(f"{name} ({v.dtype.value}{list(v.shape)}): max_rel_error {err:.3g} > "
                       f"{tolerance(v.dtype)}\n  got {np.asarray(out).ravel()[:8]}\n"
                       f"  ref {np.asarray(ref).ravel()[:8]}")
    assert not bad, (f"{context} " if context else "") + "\n".join(bad)


def reference(g: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The NumPy reference outputs (run_reference)."""
    return run_reference(g, inputs)


def kernel_count(s: Session) -> int:
    return len(s.plan.groups)


def _check_graph(g: Graph, planner: str = "none", inputs: Mapping[str, np.ndarray] | None = None,
                seed: int = 0, positive: Iterable[str] = ()) -> Session:
    """Build a cpu Session for g, apply the planner, run, and compare every output with
    run_reference (max_rel_error <= tolerance of the output's dtype). Returns the session
    (its current plan is the planner's)."""
    s = Session(g, backend="cpu", seed=seed)
    if planner != "none":
        s.auto(planner)
    ins = inputs if inputs is not None else make_inputs(g, seed, positive)
    refs = reference(g, ins)
    outs = s.run(ins)
    assert_matches(g, outs, refs, f"[graph {g.name}, planner {planner}, "
                                  f"{len(s.plan.groups)} kernels]")
    return s


def check_outputs(s: Session, inputs: Mapping[str, np.ndarray], refs, context: str = ""):
    """Run the session's current plan and compare with precomputed references."""
    assert_matches(s.graph, s.run(inputs), refs, context)


def single_op_graph(op: str, shapes, dtypes, attrs=None, name=None) -> Graph:
    """A graph with one node of op over fresh inputs (bool conditions where needed)."""
    b = GraphBuilder(name or op)
    ins = [b.input(f"x{i}", s, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    out = b.op(op, *ins, **(attrs or {}))
    outs = out if isinstance(out, list) else [out]
    for k, t in enumerate(outs):
        b.output(t, f"y{k}")
    return b.build()


class _Helpers:
    """The helpers as one object: ``wb.check_graph(g, "rules")``, ``wb.make_inputs(g)``."""
    check_graph = staticmethod(_check_graph)
    check_outputs = staticmethod(check_outputs)
    make_inputs = staticmethod(make_inputs)
    reference = staticmethod(reference)
    assert_matches = staticmethod(assert_matches)
    kernel_count = staticmethod(kernel_count)
    single_op_graph = staticmethod(single_op_graph)
    planners = PLANNERS
    dtypes = (DType.float32, DType.float16, DType.int32, DType.int64, DType.bool)
    FusionRefused = FusionRefused


@pytest.fixture(scope="session")
def wb():
    """Test helpers (session scoped, so hypothesis tests may use it too)."""
    return _Helpers


@pytest.fixture(scope="session")
def check_graph():
    """``check_graph(g, planner="none", inputs=None, seed=0)``: run g on the cpu backend
    under the planner and assert every output matches the NumPy reference."""
    return _check_graph


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# -- CUDA compile checks (no GPU needed) ------------------------------------------------
# NVRTC itself, with the options the GPU runtime passes (workbench.runtime.nvrtc), for
# sm_90. Without NVRTC these tests skip -- unless WB_REQUIRE_NVRTC=1 (CI), where that is
# a failure: a check that did not run must not pass.

def nvrtc_or_skip():
    from workbench.errors import BackendUnavailable
    from workbench.runtime import nvrtc
    try:
        return nvrtc.toolchain()
    except BackendUnavailable as e:
        if os.environ.get("WB_REQUIRE_NVRTC"):
            pytest.fail(f"WB_REQUIRE_NVRTC is set but {e}")
        pytest.skip(str(e))


def _compile_cuda(source: str, entries: Iterable[str], stem: str = "k") -> str:
    """Compile CUDA source to PTX with NVRTC for sm_90, the runtime's options; assert it
    compiles and that every named kernel is an entry point. Returns the PTX."""
    nvrtc_or_skip()
    from workbench.runtime import nvrtc
    text = nvrtc.compile_cuda(source, stem, "90", ptx=True).decode()
    for name in entries:
        assert f".entry {name}" in text, name
    return text


@pytest.fixture
def nvrtc_toolchain():
    """The NVRTC toolchain the GPU runtime would use here (skips, or fails under
    WB_REQUIRE_NVRTC, without one)."""
    return nvrtc_or_skip()


def _nvrtc_compile_plans(graphs, planners) -> int:
    """Every generated (non-library) kernel of each graph under each planner, rendered
    for CUDA and compiled by NVRTC for sm_90 as the GPU runtime compiles it; returns
    how many distinct sources there were."""
    from workbench.codegen import lower_plan, render_kernel
    from workbench.fusion import run_planner
    from workbench.runtime import nvrtc
    sources = {}
    for g in graphs:
        for planner in planners:
            plan, _ = run_planner(planner, g)
            for k in lower_plan(plan):
                if k.library is None:
                    sources.setdefault(render_kernel(k, "cuda"), k.name)
    for src, name in sources.items():
        assert nvrtc.compile_cuda(src, name, "90")[:4] == b"\x7fELF", name   # sm_90 cubin
    return len(sources)


@pytest.fixture
def nvrtc_compile_plans(nvrtc_toolchain):
    """``nvrtc_compile_plans(graphs, planners)``: every kernel of those plans compiled
    by NVRTC with the runtime's options (the count of distinct sources returned)."""
    return _nvrtc_compile_plans


@pytest.fixture
def compile_cuda():
    """``compile_cuda(source, entries)``: NVRTC for sm_90 to PTX, as the runtime compiles."""
    return _compile_cuda


@pytest.fixture(params=["packed", "sgemm"])
def packing(request, monkeypatch):
    """Both ways a GEMM kernel's tile is multiplied, whatever this machine's vectors:
    the generated micro-kernel against a constant B packed once, or sgemm per tile.
    True for the first."""
    from workbench.fusion.gemm import tiles
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0 if request.param == "packed"
                        else 1 << 30)
    return request.param == "packed"


# -- the fast tier ------------------------------------------------------------------------
# ``pytest -m "not slow"`` (under 5 minutes on 2 cores, kernel cache cold) is what a
# developer runs while working; CI (.ci/run) runs every test. Whole tests and files that
# take long carry ``pytest.mark.slow`` where they are defined. These parametrized tests
# keep a sample of their cases in the fast tier -- about the number given, one from
# the middle of each run of k cases in collection order, so the sample spans the matrix
# -- and the rest are marked slow here.
FAST_SAMPLE = {
    "tests/test_onnx_conformance.py::test_node_case": 50,
    "tests/ops/test_op_kernels.py::test_binary_op": 30,
    "tests/ops/test_op_kernels.py::test_cast": 27,
    "tests/ops/test_op_kernels.py::test_pad": 9,
    "tests/ops/test_op_kernels.py::test_unary_op": 36,
    "tests/ops/test_op_kernels.py::test_fusion_patterns": 7,
    "tests/ops/test_op_kernels.py::test_row_composites_are_one_kernel": 27,
    "tests/ops/test_nn_ops.py::test_torch_op_matches_torch": 6,
    "tests/ops/test_op_kernels.py::test_reduce_dtypes": 10,
    "tests/ops/test_op_kernels.py::test_reshape": 5,
    "tests/ops/test_op_kernels.py::test_transpose": 5,
    "tests/ops/test_nn_ops.py::test_onnx_conv_transpose": 1,
    "tests/ops/test_nn_ops.py::test_onnx_op_matches_onnxruntime": 8,
    "tests/ops/test_nn_ops.py::test_onnx_group_norm": 1,
    "tests/ops/test_nn_ops.py::test_onnx_resize": 2,
    "tests/ops/test_minifloat.py::test_cuda_kernels_compile": 1,
    "tests/codegen/test_thread_mapping.py::test_every_mapping_matches_reference": 12,
    "tests/fusion/test_stitch_speed.py::test_no_worse_than_the_search_before": 8,
    "tests/frontends/test_nn_models.py::test_model_from_torch_matches_torch": 1,
    "tests/frontends/test_onnx_losses.py::test_softmax_cross_entropy_matches_onnxruntime_and_the_reference": 8,
    "tests/frontends/test_onnx_losses.py::test_torch_losses_exported_match_torch": 2,
            "tests/runtime/test_memory_plan.py::test_programs_share_memory_and_match_one_buffer_per_value": 1,
    "tests/codegen/test_pool_planes.py::test_pooling_a_plane_at_a_time_matches_torch": 5,
    "tests/codegen/test_cuda_compile.py::test_rows_too_long_for_registers_are_kept_in_dynamic_shared_memory": 2,
    "tests/codegen/test_cuda_compile.py::test_rows_no_vector_divides_move_16_bytes_inside_the_row": 4,
    "tests/measure/test_tune.py::test_tune_searches_gemm_kernels_and_caches": 1,
    "tests/fusion/test_key_limit.py::test_the_gpu_kernel_skips_and_checks_in_the_emulator": 1,
    "tests/test_sample_graphs.py::test_json_sample_reference_is_finite_and_matches_numpy": 4,
    "tests/fusion/test_stitch.py::test_stitch_matches_the_reference": 3,
    "tests/fusion/test_key_limit.py::test_a_half_precision_models_attention_skips_in_the_emulator": 1,
    "tests/codegen/test_cuda_compile.py::test_every_kernel_compiles_as_the_runtime_compiles_it": 2,
    "tests/frontends/test_torch.py::test_handlers_match_torch": 1,
    "tests/frontends/test_indexing_frontends.py::test_torch_indexing_ops_match_torch": 1,
    "tests/runtime/test_conv_gemm.py::test_convolution_gemm_matches_reference": 19,
    "tests/runtime/test_conv_gemm.py::test_bfloat16_convolution_gemm_computes_in_float32_and_rounds_once": 10,
    "tests/runtime/test_conv_gemm.py::test_random_direct_convolutions_match_reference": 3,
    "tests/runtime/test_conv_gemm.py::test_blas0_gathers_the_patches_of_a_direct_convolution": 4,
    "tests/runtime/test_conv_gemm.py::test_convolution_patches_gathered_row_major_for_sgemm": 10,
    "tests/runtime/test_gemm_kernel.py::test_gemm_kernel_matches_reference": 10,
    "tests/runtime/test_gemm_kernel.py::test_online_softmax_on_random_shapes": 2,
    "tests/runtime/test_gemm_kernel.py::test_online_softmax_attention_matches_reference": 1,
    "tests/runtime/test_bfloat16_gemm.py::test_bfloat16_gemm_kernels_match_the_reference": 2,
    "tests/runtime/test_bfloat16_storage.py::test_row_workloads_in_bfloat16_under_every_planner_and_mapping": 1,
    "tests/runtime/test_plan_driver.py::test_driver_gives_what_kernels_one_by_one_give": 1,
    "tests/runtime/test_gpu_gemm.py::test_gpu_gemm_kernel_matches_reference_in_the_emulator": 4,
    "tests/runtime/test_gpu_gemm.py::test_gpu_fused_attention_on_random_shapes": 2,
    "tests/runtime/test_gpu_tf32.py::test_tensor_core_gemm_kernels_match_numpy_within_tf32_s_bound": 4,
    "tests/runtime/test_gpu_tf32.py::test_a_half_precision_gemm_kernel_on_tensor_cores_matches_numpy": 2,
    "tests/runtime/test_gpu_tf32.py::test_a_fused_attention_on_tensor_cores_matches_numpy": 1,
    "tests/runtime/test_gpu_pipelined.py::test_a_pipelined_cuda_core_gemm_matches_numpy": 2,
    "tests/runtime/test_gpu_pipelined.py::test_pipelined_kernels_compile_without_spills": 1,
    "tests/runtime/test_cuda_emu_samples.py::test_a_row_too_long_for_registers_is_read_once_from_shared_memory": 1,
    "tests/artifact/test_artifact_load.py::test_a_gpu_plans_shipped_cuda_runs_in_the_emulator": 1,
}


@pytest.hookimpl(tryfirst=True)      # (before -m deselects by the marks)
def pytest_collection_modifyitems(config, items):
    cases: dict[str, list] = {}
    for item in items:
        test = item.nodeid.split("[")[0]
        if test in FAST_SAMPLE:
            cases.setdefault(test, []).append(item)
    for test, its in cases.items():
        step = -(-len(its) // FAST_SAMPLE[test])
        for start in range(0, len(its), step):
            run = its[start:start + step]
            for item in run[:len(run) // 2] + run[len(run) // 2 + 1:]:
                item.add_marker(pytest.mark.slow)
