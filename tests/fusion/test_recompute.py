"""Fusion never recomputes an expensive value per element of a wider loop unless the
price says it pays (fusion/recompute.py; issue 44's selective scan: softplus fused into
a loop 16x wider ran 17x slower): the greedy planners refuse the fusion with the
reason, the cost model prices the recomputation at the device's measured op rates."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.device import assumed_cpu
from workbench.fusion import run_planner
from workbench.fusion.cost import CostModel
from workbench.fusion.plan import make_group
from workbench.ir import GraphBuilder
from workbench.runtime.reference import run_reference

# a CPU whose numbers do not move with the load on this machine: exp and log at the
# rates a 2-core Zen 4 measures (ops/registry.py: EXPENSIVE_FLOPS)
CPU = assumed_cpu("test CPU", 2).with_(dram_bandwidth=20e9, launch_overhead=5e-6,
                                       op_rates=(("exp", 4e9), ("log", 5e9)))


def _scan(tokens: int, state: int):
    """softplus(u) per (token, channel), broadcast over ``state`` elements of h."""
    b = GraphBuilder("scan")
    u = b.input("u", (tokens, 64))
    h = b.input("h", (tokens, 64, state))
    sp = b.op("log", b.op("add", b.op("exp", u), 1.0))
    y = b.op("mul", b.op("unsqueeze", sp, axes=[2]), h)
    b.output(y, "y")
    return b.build()


def _groups_of(plan, op):
    return [gr for gr in plan.groups
            if any(plan.graph.node(n).op == op for n in gr.nodes)]


@pytest.mark.parametrize("planner", ["rules", "xla"])
def test_an_expensive_producer_is_not_recomputed_per_state_element(planner):
    g = _scan(4096, 16)
    plan, log = run_planner(planner, g, device=CPU)
    (exp_group,), (mul_group,) = _groups_of(plan, "exp"), _groups_of(plan, "mul")
    assert exp_group is not mul_group
    refused = [d for d in log if d.action == "not fused" and "computed 16x" in d.reason]
    assert refused and "us of recomputation against" in refused[0].reason


def test_a_recomputation_that_costs_less_than_a_kernel_is_fused():
    """4 tokens x 64 channels x 2: recomputing 256 softplus values costs less than the
    launch and the round trip the fusion saves."""
    g = _scan(4, 2)
    plan, log = run_planner("rules", g, device=CPU)
    assert len(plan.groups) == 1
    assert not any("computed" in d.reason for d in log)


def test_the_cost_model_prices_recomputation_at_the_measured_rates():
    """The fused kernel's arithmetic is 16 evaluations of exp and log per softplus
    value at the device's rates, not their nominal 4 flops at the peak."""
    g = _scan(4096, 16)
    fused = make_group(g, [n.id for n in g.nodes], device=CPU)
    est = CostModel.for_device(CPU).estimate(g, fused)
    n = 4096 * 64 * 16
    assert est.compute_s == pytest.approx(n / 4e9 + n / 5e9 + 2 * n / CPU.peak_flops,
                                          rel=1e-6)
    nominal = CostModel.for_device(CPU.with_(op_rates=())).estimate(g, fused)
    assert est.compute_s > 3 * nominal.compute_s


def test_the_split_plan_computes_what_the_graph_computes():
    g = _scan(256, 16)
    plan, _ = run_planner("rules", g, device=CPU)
    assert len(plan.groups) == 2
    import workbench as wb
    s = wb.Session(g, backend="cpu")
    rng = np.random.default_rng(7)
    inputs = {"u": rng.standard_normal((256, 64), dtype=np.float32),
              "h": rng.standard_normal((256, 64, 16), dtype=np.float32)}
    got = s.program(plan.remade(s.device, "float32")).run(inputs)
    ref = run_reference(g, inputs)
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-5, atol=1e-6)
