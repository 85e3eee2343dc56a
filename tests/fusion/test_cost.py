"""The cost model: counts agree with codegen, predictions behave like latency
(monotone in bytes, fusion saves, occupancy limits bite), calibration recovers known
factors."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.codegen import lower_group
from workbench.errors import FusionRefused
from workbench.fusion import Plan, make_group, run_planner
from workbench.fusion.cost import CostModel, Factors, Sample, relative_error
from workbench.fusion.features import MEMORY_KEYS, features
from workbench.device import A100, H100, Device, gpu_by_name
from workbench.ir import GraphBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_graphs"))
from make_samples import build_all  # noqa: E402

SAMPLES = build_all()
# a CPU description with round numbers (the measured one is tested in tests/runtime)
CPU = Device("test cpu", "cpu", dram_bandwidth=20e9, launch_overhead=15e-6, units=4,
             peak_flops=100e9, transaction_bytes=64)


def chain(rows: int, cols: int, ops: int = 2):
    b = GraphBuilder("chain")
    x = b.input("x", (rows, cols))
    for i in range(ops):
        x = b.exp(x) if i % 2 else x * 1.5
    b.output(x, "y")
    return b.build()


def softmax(rows: int, cols: int):
    b = GraphBuilder("softmax")
    x = b.input("x", (rows, cols))
    b.output(b.softmax(x, axis=-1), "y")
    return b.build()


@pytest.mark.parametrize("fname", sorted(SAMPLES))
def test_bytes_match_the_kernels(fname):
    """The model counts the same compulsory traffic codegen does, kernel by kernel."""
    g = SAMPLES[fname]
    for planner in ("none", "rules"):
        plan, _ = run_planner(planner, g)
        for gr in plan.groups:
            f = features(g, gr, H100)
            k = lower_group(g, gr, H100)
            assert f.bytes_moved == k.bytes_read + k.bytes_written, (fname, gr.id)


@pytest.mark.parametrize("mapping", ["warp", "block", "split", "thread"])
def test_threads_per_block_match_the_launch(mapping):
    g = softmax(300, 2000)
    gr = make_group(g, [n.id for n in g.nodes], mapping=mapping, device=H100)
    k = lower_group(g, gr, H100)
    f = features(g, gr, H100)
    assert f.threads == k.launch.block
    assert f.barriers == gr.schedule.grid_barriers


@pytest.mark.parametrize("device", [H100, A100, CPU], ids=lambda d: d.name)
def test_more_bytes_take_longer(device):
    m = CostModel.for_device(device)
    small, big = chain(2048, 1024), chain(32768, 1024)
    t_small = m.plan_seconds(run_planner("rules", small)[0])
    t_big = m.plan_seconds(run_planner("rules", big)[0])
    assert t_big > t_small
    # bandwidth-bound at this size: about 16x the bytes, several times the time
    assert t_big > 4 * t_small


@pytest.mark.parametrize("device", [H100, A100, CPU], ids=lambda d: d.name)
def test_fusing_away_an_intermediate_predicts_less(device):
    g = chain(4096, 1024)
    m = CostModel.for_device(device)
    none, rules = Plan.singletons(g, H100), run_planner("rules", g)[0]
    assert len(rules.groups) == 1 and len(none.groups) == 2
    saved = m.plan_seconds(none) - m.plan_seconds(rules)
    # at least the intermediate's write and read back at full bandwidth, plus a launch
    inter = 2 * 4096 * 1024 * 4
    assert saved > inter / device.dram_bandwidth


def test_an_elementwise_epilogue_adds_no_repack_to_a_gemm():
    """A GEMM kernel with an elementwise epilogue is tiled as the product alone is, so
    the cost model charges the epilogue its arithmetic, never repacked panels: fused,
    it predicts less than apart, and stitch joins it. ResNet-50's third-stage 3x3
    convolution (2.4 MB of filters, more than one column tile) stayed apart from its
    ReLU while the epilogue was charged A's repacks per column tile."""
    b = GraphBuilder("conv_relu")
    x = b.input("x", (1, 256, 14, 14))
    w = b.constant(np.random.default_rng(0).standard_normal((256, 256, 3, 3))
                   .astype(np.float32), "w")
    b.output(b.relu(b.op("conv", x, w, pads=[1, 1, 1, 1])), "y")
    g = b.build()
    dev = CPU.with_(vector_bytes=64)
    m = CostModel.for_device(dev)
    fused = make_group(g, ["n0", "n1"], device=dev)
    apart = [make_group(g, [n], device=dev) for n in ("n0", "n1")]
    assert fused.schedule.gemm.col_tiles > 1
    assert fused.schedule.gemm.tiles == apart[0].schedule.gemm.tiles
    assert m.estimate(g, fused).ms < sum(m.estimate(g, k).ms for k in apart)
    plan, _ = run_planner("stitch", g, m)
    assert [k.nodes for k in plan.groups] == [("n0", "n1")]


def test_occupancy_limits_bite():
    g = softmax(8192, 1024)
    plan = run_planner("rules", g)[0]
    e = plan.groups[0].schedule.row_registers[-1]     # exp(x - max), in registers ...
    gr = plan.set_scheme(e, "regional").groups[0]
    assert gr.schedule.row_cached == (e,)             # ... or, asked, in shared memory
    roomy = CostModel.for_device(H100).estimate(g, gr)
    # the same GPU with so little shared memory per SM that one block fits
    tight_dev = H100.with_(shared_per_unit=roomy.features.shared_bytes + 1024)
    tight = CostModel.for_device(tight_dev).estimate(g, gr)
    assert tight.features.occupancy < roomy.features.occupancy
    assert tight.seconds > roomy.seconds
    # ... and with fewer registers than one block needs, it cannot launch at all
    starved = CostModel.for_device(H100.with_(registers_per_unit=1024)).estimate(g, gr)
    assert math.isinf(starved.seconds) and "does not fit one SM" in starved.limiter
    # shared memory beyond the per-block limit is illegal on that device: analysis
    # refuses the kernel with the numbers
    with pytest.raises(FusionRefused, match="KB > 1 KB limit per block"):
        make_group(g, gr.nodes, forced=gr.forced,
                   device=H100.with_(shared_per_block=1024, shared_optin_per_block=0))


def test_too_few_rows_leave_the_gpu_idle():
    """Per byte, 8 long rows (8 blocks on 132 SMs) cost far more than 8192 rows."""
    m = CostModel.for_device(H100)
    few = softmax(8, 65536)
    many = softmax(8192, 64)
    e_few = m.estimate(few, run_planner("rules", few)[0].groups[0])
    e_many = m.estimate(many, run_planner("rules", many)[0].groups[0])
    per_byte = lambda e: e.memory_s / e.features.bytes_moved  # noqa: E731
    assert per_byte(e_few) > 10 * per_byte(e_many)


def test_uncoalesced_mapping_costs_more():
    """A column reduction read by threads of one block (strided) costs more memory time
    than one thread per column (coalesced across threads)."""
    g = SAMPLES["bias_grad.json"]
    nodes = [n.id for n in g.nodes]
    m = CostModel.for_device(H100.with_(units=1))    # same parallelism either way
    thread = m.estimate(g, make_group(g, nodes, mapping="thread", device=H100))
    block = m.estimate(g, make_group(g, nodes, mapping="block", device=H100))
    assert block.memory_s / block.features.efficiency > \
        thread.memory_s / thread.features.efficiency


def test_recomputation_is_counted():
    """GELU's erf feeding LayerNorm is needed by three passes over the row; kept on
    chip it is computed once, recomputed it costs three times the arithmetic."""
    g = SAMPLES["bias_gelu_residual_layernorm.json"]
    nodes = [n.id for n in g.nodes]
    cached = make_group(g, nodes, device=H100)
    assert cached.schedule.row_registers      # GELU(x + b) + residual, in registers
    f_cached = features(g, cached, CPU)
    from dataclasses import replace
    bare = type(cached)(cached.id, cached.nodes, replace(cached.schedule, row_cached=(),
                                                         row_registers=()))
    f_bare = features(g, bare, CPU)
    assert f_bare.flops > 1.5 * f_cached.flops


def test_calibration_recovers_known_factors():
    """Latencies made by a model with known factors are fitted back from the default."""
    truth = Factors(overhead=7e-6,
                    memory=tuple((k, {"elementwise": 1.3, "row_reduce/block": 2.0,
                                      "row_reduce/thread": 5.0, "opaque": 1.1}.get(k, 1.0))
                                 for k in MEMORY_KEYS),
                    compute=1.7, library=2.5, gemm=1.9, barrier=0.0)
    true_model = CostModel(CPU, truth)
    feats = []
    for g in SAMPLES.values():
        # (plans for the default device keep library calls; the CPU's take gemm kernels)
        for planner, device in (("none", None), ("rules", None), ("rules", CPU)):
            for gr in run_planner(planner, g, device=device)[0].groups:
                feats.append(features(g, gr, CPU))
    assert any(f.gemm_s > 0 for f in feats) and any(f.library_s > 0 for f in feats)
    samples = [Sample(f, true_model.estimate_features(f).seconds) for f in feats]
    fitted = CostModel.for_device(CPU).calibrate(samples, prior_weight=1e-8)
    assert fitted.calibrated_on == len(samples)
    got, want = fitted.factors, truth
    assert got.overhead == pytest.approx(want.overhead, rel=0.02)
    # (a library call's memory term is dwarfed by its arithmetic: not identifiable)
    for k in ("elementwise", "row_reduce/block", "row_reduce/thread"):
        assert got.memory_factor(k) == pytest.approx(want.memory_factor(k), rel=0.02), k
    assert got.compute == pytest.approx(want.compute, rel=0.02)
    assert got.library == pytest.approx(want.library, rel=0.02)
    # (the library's calls and the gemm kernels' products each fitted to their own)
    assert got.gemm == pytest.approx(want.gemm, rel=0.02)
    errors = [relative_error(fitted.estimate_features(s.features).seconds, s.seconds)
              for s in samples]
    assert max(errors) < 0.01
    # a factor no sample informs keeps its prior (no split kernels were measured)
    assert got.memory_factor("row_reduce/split") == pytest.approx(
        Factors.default(CPU).memory_factor("row_reduce/split"), rel=1e-3)


def test_calibrate_needs_samples():
    with pytest.raises(ValueError, match="at least one"):
        CostModel.for_device(CPU).calibrate([])


def test_known_gpus_by_name():
    assert gpu_by_name("NVIDIA H100 80GB HBM3").units == 132
    assert gpu_by_name("NVIDIA A100-SXM4-80GB").dram_bandwidth == A100.dram_bandwidth
    assert gpu_by_name("Tesla T4") is None
    with pytest.raises(ValueError, match="gpu or cpu"):
        Device("x", "tpu", 1.0, 0.0, 1, 1.0)


def test_plan_estimate_sums_kernels():
    g = SAMPLES["cross_entropy.json"]
    plan = run_planner("rules", g)[0]
    est = CostModel.for_device(H100).predict(plan)
    assert [k for k, _ in est.groups] == [gr.id for gr in plan.groups]
    assert est.seconds == pytest.approx(sum(e.seconds for _, e in est.groups))
    assert all(e.seconds > 0 and e.limiter for _, e in est.groups)
    assert np.isfinite(est.ms)
