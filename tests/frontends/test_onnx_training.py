"""ONNX training graphs as onnxruntime-training's generate_artifacts writes them
(sample_graphs/training/, written by sample_graphs/make_onnx_training.py): imported,
their backward marked, their gradients outputs under the file's names, and the loss and
every gradient equal to torch autograd's for the same module, weights and inputs (fresh
random ones, fed to both), on the reference backend and on the cpu backend's stitch
plan (generated kernels; the suite's runs are checked: outputs poisoned first).

The bound is the training bound of docs/training.md: FRAMEWORK_TOLERANCE (1e-4) of
torch's value, relative to its largest element."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import workbench as wb  # noqa: E402
from workbench.errors import GraphError, UnsupportedOpError  # noqa: E402
from workbench.frontends.onnx import supported_op_types  # noqa: E402
from workbench.frontends.onnx.training import unwrap  # noqa: E402
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest  # noqa: E402
from workbench.training.phases import phase  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "sample_graphs" / "training"
sys.path.insert(0, str(ROOT / "sample_graphs"))
import make_onnx_training  # noqa: E402  (the modules the files were exported from)

# the com.microsoft ops each file holds (as the generator printed them)
OPS = {"mlp": {"Scale", "ReluGrad"},
       "norm_gelu": {"Gelu", "GeluGrad", "LayerNormalizationGrad",
                     "SoftmaxCrossEntropyLossGrad"},
       "norm_gelu_seq": {"BiasGelu", "BiasGeluGrad_dX", "FusedMatMul",
                         "LayerNormalizationGrad", "SoftmaxCrossEntropyLossGrad"},
       "attention": {"Scale", "FusedMatMul", "LayerNormalizationGrad", "SoftmaxGrad_13"}}


def _torch_step(name: str, seed: int):
    """The file's module with fresh weights, fresh inputs, and torch's loss and
    gradients by autograd."""
    torch.manual_seed(seed)
    module, x, _, loss_fn, target = make_onnx_training.cases()[name]
    for p in module.parameters():           # (not the generator's weights)
        torch.nn.init.normal_(p, std=0.5)
    x = torch.randn(x.shape)
    if target.dtype == torch.int64:          # (class labels: the samples have 10)
        target = torch.randint(0, 10, target.shape)
    else:
        target = torch.randn(target.shape)
    loss = loss_fn(module(x), target)
    loss.backward()
    grads = {k: p.grad.numpy().copy() for k, p in module.named_parameters()}
    params = {k: p.detach().numpy().copy() for k, p in module.named_parameters()}
    return params, x.numpy(), target.numpy(), loss.item(), grads


@pytest.mark.parametrize("name", sorted(OPS))
def test_imported_gradients_match_torch_autograd(name):
    path = TRAINING / name / "training_model.onnx"
    file = onnx.load(str(path))
    assert {n.op_type for n in file.graph.node if n.domain == "com.microsoft"} == \
        OPS[name] | {"InPlaceAccumulatorV2"}
    g = wb.load(path)
    params, x, target, want_loss, want = _torch_step(name, seed=len(name))
    loss_name = file.graph.output[0].name                  # the file's names
    assert g.outputs == (loss_name, *(f"{k}_grad" for k in want))
    data = [i for i in g.inputs if i not in params]
    assert data == [file.graph.input[0].name, file.graph.input[1].name]
    phases = {phase(n) for n in g.nodes}
    assert phases == {"forward", "backward"}
    made_by = {o: n for n in g.nodes for o in n.outputs}
    assert not any(n.op == "transpose" and getattr(made_by.get(n.inputs[0]), "op", "")
                   == "transpose" for n in g.nodes), "t(t(W)) composed, as from torch"
    feeds = {**params, data[0]: x, data[1]: target}
    for backend, planner in (("reference", None), ("cpu", "stitch")):
        s = wb.Session(g, backend=backend)
        if planner:
            s.auto(planner)
        got = s.run(feeds)
        assert relative_to_largest(got[loss_name], np.float32(want_loss)) \
            <= FRAMEWORK_TOLERANCE, (backend, "loss")
        for k, w in want.items():
            err = relative_to_largest(got[f"{k}_grad"], w)
            assert err <= FRAMEWORK_TOLERANCE, (backend, k, err)


def test_backward_nodes_are_the_ones_the_loss_does_not_need():
    g = wb.load(TRAINING / "mlp" / "training_model.onnx")
    by_phase: dict[str, set] = {}
    for n in g.nodes:
        by_phase.setdefault(phase(n), set()).add(n.origin.composite)
    # the forward's ops, and onnxruntime's gradient ops under backward/<its scope>
    # (its Scale of the loss's seed gradient 1 by 1/32 reads constants only: folded)
    assert {"Gemm", "Relu", "Sub", "Pow", "ReduceMean"} <= by_phase["forward"]
    assert {"ReluGrad", "Gemm", "Mul"} <= by_phase["backward"]
    assert "Scale" not in by_phase["backward"]
    grad = next(n for n in g.nodes if n.origin.composite == "ReluGrad")
    assert grad.origin.source == "backward/Relu_Grad/ReluGrad_0"
    assert all(not n.origin.source.startswith("backward") for n in g.nodes
               if n.origin.composite == "ReduceMean")


def test_unwrap_blanks_a_gradient_nothing_reads():
    """LayerNormalizationGrad's dX (x_grad: x is data) is read by no node: unwrap makes
    it absent, so the import does not compute it (test_onnx_gradient_ops checks the
    handler then makes no dX)."""
    file = onnx.load(str(TRAINING / "norm_gelu" / "training_model.onnx"))
    ln = next(n for n in file.graph.node if n.op_type == "LayerNormalizationGrad")
    assert ln.output[0] == "x_grad"
    unwrapped, info = unwrap(file, "norm_gelu")
    ln = next(n for n in unwrapped.graph.node if n.op_type == "LayerNormalizationGrad")
    assert list(ln.output) == ["", "ln.weight_grad", "ln.bias_grad"]
    assert info.gradients["ln.weight"] == "ln.weight_grad"
    assert not any(i.name.endswith("accumulation.buffer") or i.name == "lazy_reset_grad"
                   for i in unwrapped.graph.input)


def test_the_gradient_ops_are_registered_under_their_domain():
    ops = set(supported_op_types())
    assert {f"com.microsoft.{op}" for s in OPS.values() for op in s} <= ops
    assert "Gelu" in ops and "com.microsoft.Gelu" in ops     # two handlers


def _with_node(path: Path, op_type: str) -> onnx.ModelProto:
    """The MLP's training graph with its ReluGrad renamed to another gradient op."""
    m = onnx.load(str(path))
    node = next(n for n in m.graph.node if n.op_type == "ReluGrad")
    node.op_type = op_type
    return m


def test_a_gradient_op_the_workbench_lacks_is_refused_naming_it():
    m = _with_node(TRAINING / "mlp" / "training_model.onnx", "DropoutGrad")
    with pytest.raises(UnsupportedOpError) as e:
        wb.load(m)
    text = str(e.value)
    assert "com.microsoft.DropoutGrad" in text and "/Relu_Grad/ReluGrad_0" in text
    assert "training=True" in text         # the way around it


def test_the_optimizer_graph_is_refused_with_the_reason():
    with pytest.raises(GraphError, match="AdamWOptimizer over tensor sequences"):
        wb.load(TRAINING / "mlp" / "optimizer_model.onnx")


def test_the_eval_graph_imports_as_the_training_graphs_forward():
    """eval_model.onnx (forward + loss, no com.microsoft op) gives the training graph's
    loss for the same weights and inputs."""
    train = wb.load(TRAINING / "norm_gelu" / "training_model.onnx")
    evaluation = wb.load(TRAINING / "norm_gelu" / "eval_model.onnx")
    params, x, target, want_loss, _ = _torch_step("norm_gelu", seed=5)
    feeds = {**params, "x": x, "labels": target}
    a = wb.Session(train, backend="reference").run(feeds)[train.outputs[0]]
    b = wb.Session(evaluation, backend="reference").run(feeds)[evaluation.outputs[0]]
    assert relative_to_largest(a, b) <= 1e-6
    assert relative_to_largest(a, np.float32(want_loss)) <= FRAMEWORK_TOLERANCE


def test_saved_activations_of_the_imported_backward_are_plan_choices():
    """The forward values onnxruntime's backward reads (LayerNorm's saved statistics,
    the loss's log_prob...) are Session.saved()'s; recomputing them gives the same
    loss and gradients."""
    g = wb.load(TRAINING / "norm_gelu" / "training_model.onnx")
    s = wb.Session(g, backend="reference")
    saved = s.saved()
    values = set(saved["value"])
    assert {"/ln/LayerNormalization_mean", "/ln/LayerNormalization_inv_std"} <= values
    assert any(v.startswith("onnx::log_prob") for v in values)
    params, x, target, _, _ = _torch_step("norm_gelu", seed=9)
    feeds = {**params, "x": x, "labels": target}
    before = s.run(feeds)
    s.recompute(*(v for v, r in zip(saved["value"], saved["refused"]) if not r))
    after = s.run(feeds)
    for k in g.outputs:
        assert relative_to_largest(after[k], before[k]) <= 1e-6, k
