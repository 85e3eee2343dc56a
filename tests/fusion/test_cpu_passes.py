"""The CPU's passes priced at their roofline (fusion/cpu_passes.py): a fused kernel's
transcendentals cost what they cost, a row kernel's passes run one after another, a
column reduction's strip read again from DRAM, and no prediction beats the roofline."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.device import H100, Device
from workbench.fusion import make_group, run_planner
from workbench.fusion.cost import CostModel, Factors, Sample
from workbench.fusion.cpu_passes import CPU_CORE_CACHE, COMPENSATED_FLOPS
from workbench.fusion.features import MEMORY_KEYS, features
from workbench.fusion.geometry import CPU_ROW_TILE
from workbench.ir import GraphBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_graphs"))
from make_samples import build_all  # noqa: E402

# round numbers, with the expensive ops timed as the probe times them (elements a
# second on every core): an erf or tanh costs about 20 flops at the peak here
CPU = Device("test cpu", "cpu", dram_bandwidth=20e9, launch_overhead=5e-6, units=4,
             peak_flops=100e9, transaction_bytes=64,
             op_rates=(("erf", 5e9), ("exp", 8e9), ("tanh", 5e9)))


def _one_kernel(g, planner="rules"):
    plan, _ = run_planner(planner, g, device=CPU)
    assert len(plan.groups) == 1, [gr.nodes for gr in plan.groups]
    return plan, plan.groups[0]


def _gelu(rows, cols, erfs):
    """x * 0.5 * (1 + erf(...erf(x / sqrt 2))): ``erfs`` erfs in one fused kernel."""
    b = GraphBuilder("gelu")
    x = b.input("x", (rows, cols))
    t = x * 0.7071067811865476
    for _ in range(erfs):
        t = b.erf(t)
    b.output(x * 0.5 * (t + 1.0), "y")
    return b.build()


def _softmax_of_tanh(rows, cols, tanhs):
    b = GraphBuilder("softmax_tanh")
    x = b.input("x", (rows, cols))
    for _ in range(tanhs):
        x = b.tanh(x)
    b.output(b.softmax(x, axis=-1), "y")
    return b.build()


@pytest.mark.parametrize("build", [_gelu, _softmax_of_tanh])
def test_prediction_rises_with_the_transcendentals(build):
    """Each further transcendental costs its measured rate: the prediction never falls,
    and rises once the kernel's arithmetic outweighs its bytes."""
    model = CostModel.for_device(CPU)
    ms = []
    for k in range(1, 6):
        g = build(512, 1024, k)
        _, gr = _one_kernel(g)
        ms.append(model.estimate(g, gr).seconds)
    assert all(b >= a for a, b in zip(ms, ms[1:])), ms
    assert ms[-1] > 1.5 * ms[0], ms
    # past the point where arithmetic dominates, each one adds its own time
    per_op = 512 * 1024 / 5e9
    assert ms[-1] - ms[-2] == pytest.approx(per_op, rel=0.35), (ms, per_op)


def test_an_elementwise_pass_costs_its_larger_bound():
    """One pass overlaps its loads with its arithmetic: max(bytes, compute) + a call,
    not their sum (an exp kernel alone ran at its exps, 0.59 ms for 4M floats, where
    the sum was priced at 1.87)."""
    g = _gelu(1024, 1024, 3)
    _, gr = _one_kernel(g)
    f = features(g, gr, CPU)
    assert f.passes == ((f.memory_s, f.compute_s),)
    est = CostModel.for_device(CPU).estimate_features(f)
    assert est.seconds == pytest.approx(CPU.launch_overhead + max(f.memory_s, f.compute_s))


def test_row_passes_run_one_after_another():
    """A softmax's three passes: the max reads the row (bytes), the sum computes the
    exps (arithmetic, the row in a core's cache), the last writes the row: their
    bounds add; a GPU's kernel keeps the additive model (no passes)."""
    g = _softmax_of_tanh(2048, 1024, 0)
    _, gr = _one_kernel(g)
    f = features(g, gr, CPU)
    assert len(f.passes) == 3
    (m0, c0), (m1, c1), (m2, c2) = f.passes
    assert m0 == pytest.approx(2048 * 1024 * 4 / CPU.dram_bandwidth)   # x, read once
    assert m1 == 0.0 and c1 > c0                 # the exps: the row re-read from cache
    assert m2 == pytest.approx(m0)               # y written
    est = CostModel.for_device(CPU).estimate_features(f)
    assert est.seconds == pytest.approx(
        CPU.launch_overhead + sum(max(m, c) for m, c in f.passes))
    assert features(g, gr, H100).passes == ()


def _column_sums(rows, cols):
    """LayerNorm's parameter gradients: two column reductions, one reading both inputs."""
    b = GraphBuilder("param_grad")
    dy = b.input("dy", (rows, cols))
    xhat = b.input("xhat", (rows, cols))
    b.output(b.reduce_sum(dy * xhat, axes=[0]), "dgamma")
    b.output(b.reduce_sum(dy, axes=[0]), "dbeta")
    return b.build()


def test_a_column_strip_beyond_a_core_cache_is_read_again():
    """A thread sums a strip of 64 columns down every row, once per reduction: at 4,096
    rows the strip (2 MB) outgrows a core's cache and the second pass reads dy from
    DRAM again; at 256 rows (128 KB) it stays. Each column is summed with compensation."""
    for rows, again in ((4096, True), (256, False)):
        g = _column_sums(rows, 1024)
        nodes = [n.id for n in g.nodes]     # the product and both sums, one kernel
        f = features(g, make_group(g, nodes, mapping="thread", device=CPU), CPU)
        assert (CPU_ROW_TILE * rows * 8 > CPU_CORE_CACHE) is again
        once = (f.bytes_read + f.bytes_written) / CPU.dram_bandwidth
        dy = rows * 1024 * 4 / CPU.dram_bandwidth
        assert f.memory_s == pytest.approx(once + dy if again else once), rows
        # both sums compensated: COMPENSATED_FLOPS an element where a plain sum takes 1
        plain = features(g, make_group(g, nodes, mapping="block", device=CPU), CPU)
        assert f.flops - plain.flops == pytest.approx(2 * (COMPENSATED_FLOPS - 1)
                                                      * rows * 1024)


SAMPLES = build_all()


@pytest.mark.parametrize("device", [CPU, H100], ids=["cpu", "h100"])
def test_no_prediction_beats_the_roofline(device):
    """Whatever the factors (here a fit that priced everything 10x too cheap), every
    kernel of every sample, fused or not, takes at least its bytes at the DRAM
    bandwidth and its arithmetic at the peak rates."""
    cheap = Factors(1e-7, tuple((k, 0.1) for k in MEMORY_KEYS), 0.1, 0.1, 0.1, 0.0)
    for model in (CostModel.for_device(device), CostModel(device, cheap)):
        for g in SAMPLES.values():
            for planner in ("none", "stitch"):
                plan, _ = run_planner(planner, g, model=CostModel.for_device(device))
                for gr in plan.groups:
                    e = model.estimate(g, gr)
                    f = e.features
                    floor = max(f.bytes_moved / device.dram_bandwidth,
                                f.compute_s + f.library_s + f.gemm_s)
                    assert e.seconds >= floor * (1 - 1e-12), (g.name, gr.id)


def test_calibration_fits_through_the_passes_bounds():
    """Latencies made with known factors by the per-pass roofline are fitted back from
    the default (which bound each pass reaches moves with the factors: refitted).
    (Factors of 1 or more: below, a kernel's prediction stops at its bytes at the
    DRAM bandwidth, which no factor reproduces.)"""
    truth = Factors(5e-6, tuple((k, {"elementwise": 1.4, "row_reduce/block": 1.2}
                                     .get(k, 1.0)) for k in MEMORY_KEYS), 1.6, 1.0, 1.0,
                    5e-6)
    true_model = CostModel(CPU, truth)
    feats = []
    for k in range(0, 6):
        for g in (_gelu(512, 1024, k), _softmax_of_tanh(512, 1024, k)):
            for planner in ("none", "rules"):
                feats += [features(g, gr, CPU)
                          for gr in run_planner(planner, g, device=CPU)[0].groups]
    samples = [Sample(f, true_model.estimate_features(f).seconds) for f in feats]
    fitted = CostModel.for_device(CPU).calibrate(samples, prior_weight=1e-8)
    for s in samples:
        assert fitted.estimate_features(s.features).seconds == pytest.approx(s.seconds,
                                                                             rel=0.02)
    assert fitted.factors.compute == pytest.approx(1.6, rel=0.02)
    assert fitted.factors.memory_factor("elementwise") == pytest.approx(1.4, rel=0.02)
    assert fitted.factors.memory_factor("row_reduce/block") == pytest.approx(1.2, rel=0.02)
