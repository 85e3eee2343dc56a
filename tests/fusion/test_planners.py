"""The xla baseline planner: a reduction ends its kernel, as in XLA and TVM; its plans
run and match the reference, and `rules`/`stitch` never need more kernels."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.fusion import run_planner
from workbench.ops import Kind, get_op
from workbench.session import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_graphs"))
import make_samples  # noqa: E402

SMALL = {
    "layernorm": lambda: make_samples.layernorm(64, 100),
    "softmax": lambda: make_samples.softmax(33, 70),
    "attention_softmax": lambda: make_samples.attention_softmax(2, 2, 16, 8),
    "bias_gelu_residual_layernorm": lambda: make_samples.bias_gelu_residual_layernorm(40, 96),
    "cross_entropy": lambda: make_samples.cross_entropy(48, 64),
    "layernorm_param_grad": lambda: make_samples.layernorm_param_grad(64, 32),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_xla_plans_end_kernels_at_reductions_and_match_reference(name):
    g = SMALL[name]()
    s = Session(g, backend="cpu", calibrate=False)
    plan = s.auto("xla")
    for gr in plan.groups:
        members = set(gr.nodes)
        for nid in gr.nodes:
            node = g.node(nid)
            if get_op(node.op).kind is Kind.reduce:
                # nothing in the kernel reads what the reduction made
                assert not any(c.id in members for o in node.outputs
                               for c in g.consumers[o]), (gr.id, nid)
    m = s.measure(repeats=1, warmup=1)
    assert m.within_tolerance and m.end_to_end_error < 1e-3
    kernels = {p: len(run_planner(p, g)[0].groups) for p in ("none", "xla", "rules")}
    assert kernels["none"] >= kernels["xla"] >= kernels["rules"]


def test_xla_refusals_name_the_rule():
    g = SMALL["layernorm"]()
    plan, log = run_planner("xla", g)
    assert len(plan.groups) == 3          # mean | centre, square, variance | normalize
    assert any("a reduction ends its kernel" in d.reason for d in log
               if d.action == "not fused")
