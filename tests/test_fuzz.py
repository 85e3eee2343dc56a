"""The differential fuzzer (workbench.testing.fuzz) on a fixed, bounded set of seeds, and the
bugs its longer runs found, each pinned by a small case.

Each seed draws a graph of mixed dtypes with boundary-valued inputs and a sequence of
plan edits (fusions, splits, schemes, mappings, planners); every accepted plan is
compiled and every kernel checked against NumPy, and its CUDA compiled by NVRTC. The
longer run is ``python -m workbench.testing.fuzz --seconds N --cuda`` (benchmarks/results)."""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest

from workbench.testing import fuzz
from workbench.testing.fuzz import processes
from workbench.errors import FusionRefused
from workbench.fusion.analysis import analyze
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.runtime import run_reference
from workbench.session import Session
from workbench.device import H100

from budget import sample

# the fixed run's seeds; CI checks a seeded sample of them on each backend (tests/
# budget.py; WB_FULL_TESTS=1: all), seed 37 (below) always among them
ALL_SEEDS = range(40)
SEEDS = sample(ALL_SEEDS, 24, "fuzz", keep=(37,))
EMU_SEEDS = sample(ALL_SEEDS, 16, "fuzz-emu", keep=(37,))


def _runs(seeds, sample: int, chunk: int) -> list:
    """The seeds of one fuzz run as test parameters: the first ``sample`` in the fast
    tier (``pytest -m "not slow"``), the rest in chunks of ``chunk`` marked slow (CI
    runs them all; xdist's workers share the chunks). Every seed in exactly one."""
    seeds = tuple(seeds)
    parts = [seeds[:sample]] + [seeds[i:i + chunk] for i in range(sample, len(seeds), chunk)]
    assert sum(parts, ()) == seeds
    # (the id lists the seeds: CI's are a sample, not a range)
    return [pytest.param(p, id="seeds" + ",".join(map(str, p)),
                         marks=[pytest.mark.slow] if k else [])
            for k, p in enumerate(parts) if p]


def _clean(rep, seeds):
    """Every seed ran -- no time budget: a slow machine takes longer, it does not check
    fewer seeds -- and none failed."""
    assert rep.cases == len(seeds), f"{rep.cases} of {len(seeds)} seeds ran"
    assert not rep.failures, "\n".join(
        f"seed {f.seed} after {f.action}: {f.message}" for f in rep.failures)
    assert rep.plans >= rep.cases


@pytest.mark.parametrize("seeds", _runs(SEEDS, 4, 12))
def test_fuzz_fixed_seeds(seeds, nvrtc_toolchain):
    _clean(fuzz.fuzz(seeds, cuda=True), seeds)


@pytest.mark.parametrize("seeds", _runs(EMU_SEEDS, 2, 10))
def test_fuzz_fixed_seeds_in_the_cuda_emulator(seeds):
    """The same seeds on the GPU's plans, their CUDA kernels run in the CUDA emulator
    (runtime/cuda_emu.py) and checked kernel by kernel. Seed 37 found an integer max
    whose combiner called __shfl_down_sync in one arm of ?:, so that only some lanes
    of the warp called it (undefined with a full mask): the emulator reported the
    lanes waiting for each other."""
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    _clean(fuzz.fuzz(seeds, backend="cuda-emu"), seeds)


def test_the_seeds_hold_seed_37():
    """Seed 37 found the shuffle called by only some lanes (above): it stays among the
    seeds, each of which runs in full in one of the chunks."""
    assert 37 in SEEDS and 37 in EMU_SEEDS


def test_drawn_cases_reach_what_they_are_meant_to():
    """The generator is not quietly narrow: over the test seeds it draws every dtype,
    empty tensors, long rows, casts, gathers, matmuls, and boundary input values."""
    ops, dtypes, empty, long_rows, specials = set(), set(), False, False, False
    for seed in ALL_SEEDS:
        g = fuzz.draw_graph(seed)
        ins = fuzz.draw_inputs(g, seed)
        ops |= {n.op for n in g.nodes}
        for v in list(g.inputs) + [o for n in g.nodes for o in n.outputs]:
            val = g.value(v)
            dtypes.add(val.dtype)
            empty |= val.numel == 0
            long_rows |= bool(val.shape) and val.shape[-1] >= 128
        for x in ins.values():
            if DType.of(x.dtype).is_float:
                specials |= bool(np.isnan(x).any() or np.isinf(x).any())
    assert dtypes == {DType.float32, DType.float16, DType.bfloat16, DType.int32, DType.int64,
                      DType.int8, DType.uint8, DType.uint64, DType.bool}
    assert {"cast", "gather", "matmul", "where", "concat", "split", "div"} <= ops, ops
    assert empty and long_rows and specials


# the families of graphs users bring (workbench/testing/fuzz/blocks.py, convs.py,
# rows.py): seeds on the CPU (every plan's CUDA compiled by NVRTC too) and in the
# CUDA emulator -- transformer blocks in TF32 there (tensor-core GEMM tiles, fused
# attention; their half-type graphs on their own tensor-core tiles)
ALL_FAMILY_SEEDS = {"blocks": range(10), "convs": range(12), "rows": range(6)}
FAMILY_SEEDS = {f: sample(s, {"blocks": 6, "convs": 8, "rows": 4}[f], f"fuzz-{f}")
                for f, s in ALL_FAMILY_SEEDS.items()}
EMULATED = {"blocks": (6, "tf32"), "convs": (6, "float32"), "rows": (4, "float32")}
EMULATED_SEEDS = {f: sample(ALL_FAMILY_SEEDS[f][:n], {"blocks": 3, "convs": 3, "rows": 3}[f],
                            f"fuzz-emu-{f}") for f, (n, _) in EMULATED.items()}
BLOCK_SEEDS = ALL_FAMILY_SEEDS["blocks"]
# (each family's seeds: the fast tier's sample, then chunks marked slow; blocks and the
# emulator's all slow -- the fast tier's GEMM and attention cases are the mixed seeds')
FAMILY_SAMPLE = {"blocks": (0, 3), "convs": (2, 5), "rows": (2, 4)}
EMULATED_SAMPLE = {"blocks": (0, 2), "convs": (0, 2), "rows": (0, 2)}


@pytest.mark.parametrize("family, seeds", [
    pytest.param(family, *p.values, id=f"{family}-{p.id}", marks=p.marks)
    for family in sorted(FAMILY_SEEDS)
    for p in _runs(FAMILY_SEEDS[family], *FAMILY_SAMPLE[family])])
def test_fuzz_family(family, seeds, nvrtc_toolchain):
    """blocks: linear layers with constant weights, epilogues, norms, masked attention;
    convs: convolutions of every form, poolings, BatchNorm, heads; rows: softmax,
    norms, logsumexp, a cross-entropy at lengths either side of each row mapping's
    threshold. Every plan checked kernel by kernel, its CUDA compiled by NVRTC."""
    _clean(fuzz.fuzz(seeds, cuda=True, family=family), seeds)


@pytest.mark.parametrize("family, seeds", [
    pytest.param(family, *p.values, id=f"{family}-{p.id}", marks=p.marks)
    for family in sorted(EMULATED)
    for p in _runs(EMULATED_SEEDS[family], *EMULATED_SAMPLE[family])])
def test_fuzz_family_in_the_cuda_emulator(family, seeds):
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    _clean(fuzz.fuzz(seeds, backend="cuda-emu", precision=EMULATED[family][1],
                     family=family), seeds)


def test_block_cases_reach_epilogues_attention_and_masks():
    """The blocks family is not quietly narrow: over its test seeds, stitch plans on
    the CPU and on a GPU hold GEMM kernels with epilogues (some reducing rows: a norm
    after the GEMM, on the CPU) and fused attention (on the CPU with K and V packed
    for the micro-kernel too); the graphs hold transposed constant weights,
    half types, padding masks at the dtype's lowest value and causal masks."""
    from workbench.fusion.mapping import ScheduleKind
    seen = set()
    for seed in BLOCK_SEEDS:
        g, ins = fuzz.draw_case(seed, "blocks")
        seen |= {d.value for d in (g.value(v).dtype for v in g.inputs)}
        seen |= {"where" for n in g.nodes if n.op == "where"}
        seen |= {"transposed weight" for n in g.nodes if n.op == "transpose"
                 and n.inputs[0] in g.constants and len(g.value(n.inputs[0]).shape) == 2}
        seen |= {"lowest mask" for k, v in ins.items() if k.startswith("mask")
                 and (v.astype(np.float32) < -6e4).any()}
        for backend in ("cpu", "cuda-emu"):
            s = Session(g, backend=backend)
            s.auto("stitch")
            for gr in s.plan.groups:
                sc = gr.schedule
                if sc.kind is ScheduleKind.gemm:
                    if sc.then is not None:
                        seen.add(f"attention {backend}")
                        seen |= {"packed attention"} if sc.then.packed else set()
                    elif sc.epilogue is not None:
                        seen.add(f"row epilogue {backend}")
                    elif sc.gemm.epilogue_ops:
                        seen.add(f"epilogue {backend}")
    assert {"float32", "float16", "bfloat16", "where", "transposed weight", "lowest mask",
            "attention cpu", "attention cuda-emu", "packed attention", "row epilogue cpu",
            "epilogue cpu", "epilogue cuda-emu"} - seen == set()
    # (a GPU's GEMM tile takes no row-reducing epilogue but the online softmax: a norm
    # after a GEMM is a kernel of its own there)


def test_conv_cases_reach_the_cpus_convolution_kernels():
    """The convs family is not quietly narrow: over 16 seeds the CPU's stitch plans
    hold convolutions whose patches are gathered per tile, 1 x 1s read in place,
    convolutions computed directly with the filters in the lanes, and poolings in
    kernels of their own; the graphs hold strided, dilated, grouped and lopsidedly
    padded convolutions and all three float types."""
    from workbench.fusion.mapping import ScheduleKind
    seen = set()
    for seed in range(16):
        g, _ = fuzz.draw_case(seed, "convs")
        seen.add(g.value("x").dtype.value)
        for n in g.nodes:
            if n.op == "conv2d":
                a = n.attr_map
                seen |= {k for k, hit in (("strided", max(a["strides"]) > 1),
                                          ("dilated", max(a["dilations"]) > 1),
                                          ("grouped", a["group"] > 1),
                                          ("lopsided", len(set(a["pads"])) > 1)) if hit}
        s = Session(g, backend="cpu")
        s.auto("stitch")
        for gr in s.plan.groups:
            sc = gr.schedule
            if sc.kind is ScheduleKind.gemm and sc.gemm.im2col is not None:
                seen.add("in place" if sc.gemm.in_place else sc.gemm.packed_b)
            elif any(g.node(n).op == "window" for n in gr.nodes):
                seen.add("pooling")
    assert {"float32", "float16", "bfloat16", "strided", "dilated", "grouped", "lopsided",
            "per tile", "in place", "direct, filters in lanes", "pooling"} - seen == set()


def test_row_cases_reach_every_gpu_row_form():
    """The rows family is not quietly narrow: over 24 seeds the GPU's stitch plans hold
    rows a block each with the row in registers at vectors of 1, 4 and 8 elements,
    rows split across blocks, and the graphs all three float types."""
    seen = set()
    for seed in range(24):
        g, _ = fuzz.draw_case(seed, "rows")
        seen.add(g.value("x").dtype.value)
        s = Session(g, backend="cuda-emu")
        s.auto("stitch")
        for gr in s.plan.groups:
            sc = gr.schedule
            if sc.kind.value == "row_reduce":
                seen.add(f"{sc.mapping.value} v{sc.vector}" + (" registers" if sc.row_registers
                                                                else ""))
    assert {"float32", "float16", "bfloat16", "block v1 registers", "block v4 registers",
            "block v8 registers", "split v1"} - seen == set()


def test_a_per_row_result_of_one_value_is_not_stored_per_row():
    """Found by the fuzzer: fusing tanh of a [1, 1] input into a 16-row reduction
    kernel stored it at out[row] for every row -- 15 floats past the end (heap
    corruption under stitch). A per-row output must hold one value per row."""
    b = GraphBuilder("one_value")
    x0, x1 = b.input("x0", (16, 1)), b.input("x1", (1, 1))
    b.output(b.op("reduce_min", x0, axes=[1], keepdims=True), "y0")
    b.output(b.op("tanh", x1), "y1")
    g = b.build()
    with pytest.raises(FusionRefused, match="not one per row"):
        analyze(g, ("n0", "n1"), device=H100)
    s = Session(g, backend="cpu")
    s.fuse(["n0", "n1"])         # stitched instead: the tanh in a phase of its own
    assert s.plan.groups[0].schedule.kind == "stitched"
    ins = fuzz.draw_inputs(g, 0)
    assert fuzz.check_plan(s, ins, run_reference(g, ins)) is None


def test_a_library_result_nobody_reads_still_has_a_buffer():
    """Found by the fuzzer: a dead matmul (its result neither read nor an output)
    failed to lower (KeyError) under every planner."""
    b = GraphBuilder("dead")
    x, w = b.input("x", (4, 3)), b.input("w", (3, 2))
    b.op("matmul", x, w)
    b.output(b.op("exp", x), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    ins = fuzz.draw_inputs(g, 1)
    assert fuzz.check_plan(s, ins, run_reference(g, ins)) is None


def test_magnitudes_move_through_layout_ops_inside_a_kernel():
    """Found by the fuzzer: checking a kernel holding a layout op (unsqueeze) raised
    in the checker itself (it ran the op's reference on float64 magnitudes)."""
    b = GraphBuilder("moved")
    x = b.input("x", (3, 5))
    s_ = b.op("reduce_sum", x, axes=[1], keepdims=False)
    u = b.op("unsqueeze", s_, axes=[1])
    b.output(b.op("add", u, b.op("max", x, x)), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    ins = fuzz.draw_inputs(g, 2)
    assert fuzz.check_plan(s, ins, run_reference(g, ins)) is None


def test_a_row_kernel_over_empty_rows_compiles_for_cuda(compile_cuda):
    """Found by the fuzzer: rows of 0 columns kept "in registers" declared a
    zero-length register array, which NVRTC refuses."""
    b = GraphBuilder("empty_rows")
    x = b.input("x", (0, 0, 1024))
    m = b.op("reduce_mean", x, axes=[0, 2], keepdims=False)
    b.output(m, "m")
    b.output(b.op("exp", x), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    s.fuse(["n0", "n1"])        # x read by two passes: kept in registers, if it had columns
    for gr in s.plan.groups:
        k = s.kernel(gr.id)
        compile_cuda(s.source(gr.id, "cuda"), [k.name])
    ins = fuzz.draw_inputs(g, 3)
    assert fuzz.check_plan(s, ins, run_reference(g, ins)) is None


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_prod"])
def test_a_reduction_with_no_results_is_empty_not_an_error(op):
    """Found by the fuzzer: max over an empty axis of a [0, 0] input has nothing to
    compute (its result is empty, so the verifier allows it), but the reference raised
    NumPy's 'zero-size array to reduction operation maximum'."""
    b = GraphBuilder("nothing")
    x = b.input("x", (0, 0))
    b.output(b.op(op, x, axes=[1], keepdims=False), "y")
    g = b.build()
    assert run_reference(g, {"x": np.zeros((0, 0), np.float32)})["y"].shape == (0,)
    s = Session(g, backend="cpu")
    ins = {"x": np.zeros((0, 0), np.float32)}
    assert fuzz.check_plan(s, ins, run_reference(g, ins)) is None


def test_a_uint64_power_past_2_to_the_53_is_exact_in_the_reference():
    """Found by the fuzzer (seed 694 once bfloat16 joined the draws): the reference's
    integer power mixed uint64 with -1 for negative exponents, which NumPy promotes to
    float64, so every uint64 power past 2^53 was rounded; the kernel's wrapped one was
    right and the check called it wrong."""
    b = GraphBuilder("u64_pow")
    b.output(b.op("pow", b.input("a", (3,), "uint64"), b.input("e", (3,), "uint64")), "y")
    g = b.build()
    a = np.array([2 ** 64 - 75, 3, 2 ** 40 + 1], np.uint64)
    e = np.array([43, 41, 2], np.uint64)
    want = [pow(int(x), int(k), 2 ** 64) for x, k in zip(a, e)]
    assert [int(v) for v in run_reference(g, {"a": a, "e": e})["y"]] == want
    s = Session(g, backend="cpu")
    assert [int(v) for v in s.run({"a": a, "e": e})["y"]] == want
    assert s.measure(warmup=1, repeats=1).within_tolerance


def test_a_matmul_of_an_empty_batch_stays_a_library_call():
    """Found by the fuzzer (seed 158): the GEMM kernel's tiles over an empty batch
    divided by zero while the session was built."""
    b = GraphBuilder("empty_batch")
    b.output(b.abs(b.matmul(b.input("x", (0, 7, 2)), b.input("w", (2, 8)))), "y")
    g = b.build()
    s = Session(g, backend="cpu")
    assert s.plan.groups[0].schedule.kind.value == "opaque"     # the library call
    for planner in ("rules", "stitch"):
        s.auto(planner)
        assert s.run(s.inputs)["y"].shape == (0, 7, 8)
        assert s.measure(warmup=1, repeats=1).within_tolerance


@pytest.mark.parametrize("backend", ["cpu", "cuda-emu"])
def test_a_one_element_constant_a_gemm_reads_has_a_buffer(backend):
    """Found by the convs family (seed 5): a 1 x 1 convolution of one channel into one
    has a one-element constant filter, which lowering made a literal (as it does an
    elementwise op's scalar) while the GEMM kernel read it as an array (KeyError) under
    every planner. So did a matmul by a [1, 1] constant weight."""
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if backend == "cuda-emu" and CudaEmuBackend.unavailable() \
            and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    b = GraphBuilder("one_element_operands")
    x = b.input("x", (2, 1, 5, 5))
    y = b.op("conv2d", x, b.constant(np.full((1, 1, 1, 1), 0.75, np.float32)),
             b.constant(np.full((1,), 0.5, np.float32)), strides=[1, 1], pads=[0, 0, 0, 0])
    b.output(b.relu(y), "y")
    z = b.matmul(b.input("v", (6, 1)), b.constant(np.full((1, 1), -1.5, np.float32)))
    b.output(b.exp(z), "z")
    g = b.build()
    ins = fuzz.draw_inputs(g, 3)
    refs = run_reference(g, ins)
    s = Session(g, backend=backend)
    for planner in ("none", "rules", "stitch"):
        s.auto(planner)
        assert fuzz.check_plan(s, ins, refs) is None, planner


def test_a_pooling_a_plane_at_a_time_is_the_cpus_form_only(nvrtc_toolchain):
    """Found by the convs family (seeds 40009, 40018): the CPU's max pool a plane at a
    time rendered as CUDA used its plane buffer undeclared (NVRTC: "identifier wb_xp
    is undefined"). It is a form of the CPU's, as its GEMM kernels are: host only, its
    CUDA view says so, and a GPU's plan pools rows instead."""
    from workbench.ir import composites_nn
    b = GraphBuilder("pool_planes")
    x = b.input("x", (1, 1, 5, 5))
    b.output(composites_nn.max_pool(b, x, [2, 2], [2, 2], pads=[0, 0, 1, 1]), "y")
    g = b.build()
    ins = fuzz.draw_inputs(g, 2)
    s = Session(g, backend="cpu")
    s.auto("xla")
    (gr,) = s.plan.groups
    assert s.kernel(gr.id).host_only and "pooled a plane at a time" in s.kernel(gr.id).schedule
    assert "runs on the host only" in s.source(gr.id, "cuda")
    assert fuzz.check_plan(s, ins, run_reference(g, ins), cuda=True) is None


def _batch_dying_at_seed_4(end, first, count, *args):
    """The long run's batch of seeds in a child process (fuzz's ``processes._batch``),
    but none at or past ``end``, no time budget, and the process dies (abort: as heap
    corruption ends one) when it reaches seed 4."""
    def starting(seed):
        processes._mark(args[-1], seed)
        if seed == 4:
            os.abort()
    return fuzz.fuzz(range(first, min(first + count, end)), None, *args[1:3], None,
                     *args[3:7], starting)


def _batch_below(end, first, count, *args):
    """The long run's batch of seeds in a child process (``processes._batch``), but none
    at or past ``end`` and no time budget: a fixed number of seeds, however slow the
    machine."""
    return processes._batch(first, max(0, min(count, end - first)), None, *args[1:])


# (the long run's own budget: a guard the fixed seeds never reach, so that a run cut
# short shows as fewer cases than seeds)
GUARD_S = 600


@pytest.mark.slow   # (three child processes; the fast tier has the next test's)
def test_a_case_that_kills_its_process_is_a_failure_and_the_run_goes_on():
    """A kernel corrupting the heap killed the child process of a long run, and the
    whole run ended in a BrokenProcessPool traceback without its report (found by the
    convs family). Now the dead seed is a failure and the run goes on after it."""
    rep = processes.fuzz_in_processes(2, seconds=GUARD_S, per_process=3,
                                      batch=functools.partial(_batch_dying_at_seed_4, 7))
    assert [f.seed for f in rep.failures] == [4], rep.failures
    assert "process running it died" in rep.failures[0].message
    assert rep.cases == 5     # seeds 2-4 (4 dead), then 5 and 6 in a fresh process


def test_a_long_run_starts_a_fresh_process_per_batch_of_seeds():
    """One process maps every kernel library it loads; ~1800 graphs exhaust Linux's
    memory maps ("failed to map segment from shared object", found by a 900 s run), so
    a long run takes its seeds in batches, each in a new process."""
    rep = processes.fuzz_in_processes(0, seconds=GUARD_S, per_process=3, cuda=False,
                                      batch=functools.partial(_batch_below, 7))
    assert rep.cases == 7 and not rep.failures, rep.failures
    assert len(rep.processes) == -(-rep.cases // 3) and os.getpid() not in rep.processes
