"""The stitch planner gives the same plan, decisions and estimates for a graph in every
process: ties between equal gains (kernels of one shape are priced alike) are broken
by graph order, never by the hash order of sets of names, which ``PYTHONHASHSEED``
changes. Each check plans in fresh interpreters under different hash seeds
(:mod:`workbench.testing.plan_seeds`)."""
import pytest

from workbench.testing.plan_seeds import differing, fingerprints, load_spec, plan_text

# each planned differently under hash seeds 0 and 1 before ties were broken by graph
# order: the bf16 sample (which cast joins the GELU kernel first), the ONNX BERT chain
# (equal-gain merges in identical layers), fuzz graph 10 (which op joins `ceil` first)
SEED_SENSITIVE = ["sample:bias_gelu_residual_layernorm_bf16.json",
                  "sample:bert_chain.onnx", "fuzz:10"]


def test_plans_are_the_same_under_two_hash_seeds():
    fp = fingerprints(SEED_SENSITIVE, seeds=(0, 1))
    assert differing(fp) == []
    # (and the fingerprint is of a real plan: the bf16 sample keeps 3 kernels on the CPU)
    assert fp[0]["sample:bias_gelu_residual_layernorm_bf16.json"]["kernels"] == 3


def test_fingerprint_sees_a_different_plan():
    # the check can fail: two graphs' plan texts differ
    a, _ = plan_text(load_spec("fuzz:10"))
    b, _ = plan_text(load_spec("fuzz:11"))
    assert a != b


@pytest.mark.slow
def test_samples_fuzz_graphs_and_a_zoo_model_plan_alike_under_four_hash_seeds():
    pytest.importorskip("torch")
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "sample_graphs"
    specs = ([f"sample:{p.name}" for p in sorted(root.glob("*.json"))]
             + [f"sample:{p.name}" for p in sorted(root.glob("*.onnx"))]
             + [f"fuzz:{s}" for s in range(40)] + ["zoo:bert"])
    assert differing(fingerprints(specs, seeds=(0, 1, 2, 3))) == []
