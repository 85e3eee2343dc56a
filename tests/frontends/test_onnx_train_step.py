"""Training an onnxruntime-training graph: ``wb.load(training_model.onnx,
optimizer=...)`` appends the optimizer step to the imported gradients and
``Session.train_step`` runs it (the cpu backend's stitch plan, generated kernels).

N steps of the mlp and norm_gelu samples (sample_graphs/training/, their torch modules
from make_onnx_training.py with fresh random weights and batches) against torch's own
loop with torch.optim.AdamW / SGD: every step's loss and every parameter after the
last step within the training bound of docs/training.md (FRAMEWORK_TOLERANCE, 1e-4
relative to the largest element), as tests/training/test_training_loop.py holds the
torch route."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import workbench as wb  # noqa: E402
from workbench.errors import GraphError, WorkbenchError  # noqa: E402
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest  # noqa: E402
from workbench.training import SGD, AdamW, TrainState  # noqa: E402
from workbench.training.phases import phase  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "sample_graphs" / "training"
sys.path.insert(0, str(ROOT / "sample_graphs"))
import make_onnx_training  # noqa: E402  (the modules the files were exported from)

STEPS = 3


def _case(name: str, seed: int):
    """The sample's module with fresh weights, and STEPS fresh batches (the file's
    data input names -> arrays)."""
    torch.manual_seed(seed)
    module, x, _, loss_fn, target = make_onnx_training.cases()[name]
    for p in module.parameters():           # (not the generator's weights)
        torch.nn.init.normal_(p, std=0.5)
    batches = []
    for _ in range(STEPS):
        xb = torch.randn(x.shape)
        yb = torch.randint(0, 10, target.shape) if target.dtype == torch.int64 \
            else torch.randn(target.shape)
        batches.append((xb, yb))
    return module, loss_fn, batches


def _torch_loop(module, loss_fn, opt, batches) -> list[float]:
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_fn(module(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


# (two cases, each optimizer once: each compiles its plan's kernels, seconds apiece)
@pytest.mark.parametrize("name, ours, theirs", [
    ("mlp", SGD(lr=5e-2, momentum=0.9, weight_decay=1e-3),
     lambda p: torch.optim.SGD(p, lr=5e-2, momentum=0.9, weight_decay=1e-3)),
    ("norm_gelu", AdamW(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
     lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.8, 0.99), eps=1e-6,
                                 weight_decay=0.05)),
])
def test_train_steps_of_an_onnx_training_graph_match_torch(name, ours, theirs):
    path = TRAINING / name / "training_model.onnx"
    g = wb.load(path, optimizer=ours)
    data = [i.name for i in onnx.load(str(path)).graph.input][:2]   # x, labels/target
    module, loss_fn, batches = _case(name, seed=len(name) + len(type(ours).__name__))
    start = {k: p.detach().numpy().copy() for k, p in module.named_parameters()}
    state = TrainState.from_module(g, module)
    assert sorted(state.params) == sorted(start)       # every parameter is trained
    assert {phase(n) for n in g.nodes} == {"forward", "backward", "optimizer"}
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    got = [s.train_step(dict(zip(data, (x.numpy(), y.numpy()))), state if i == 0 else None)
           for i, (x, y) in enumerate(batches)]
    want = _torch_loop(module, loss_fn, theirs(module.parameters()), batches)
    assert state.step == STEPS
    for a, b in zip(got, want):
        assert abs(a - b) <= FRAMEWORK_TOLERANCE * abs(b), (got, want)
    for k, p in module.named_parameters():
        err = relative_to_largest(state.params[k], p.detach().numpy())
        assert err <= FRAMEWORK_TOLERANCE, (k, err)
    # the run trained: every parameter moved far beyond the bound
    for k, p0 in start.items():
        assert relative_to_largest(state.params[k], p0) > 100 * FRAMEWORK_TOLERANCE, k


def test_the_gradients_feed_the_updates_inside_the_plan():
    """The gradients are no outputs any more (each update joins the kernel of its
    gradient under stitch); the loss is ``loss``, the state the loop's names."""
    g = wb.load(TRAINING / "mlp" / "training_model.onnx", optimizer=SGD(lr=0.1))
    assert g.outputs == ("loss", "new.fc1.weight", "new.fc1.bias", "new.fc2.weight",
                         "new.fc2.bias")
    assert not any(o.endswith("_grad") for o in g.outputs)
    assert "step" not in g.inputs                           # (SGD counts no steps)


def test_an_optimizer_for_a_graph_without_gradients_is_refused():
    with pytest.raises(GraphError, match="not an onnxruntime-training graph") as e:
        wb.load(TRAINING / "mlp" / "eval_model.onnx", optimizer=AdamW())
    assert "training_model.onnx" in str(e.value)


def test_the_optimizer_file_as_the_optimizer_is_refused_naming_the_way():
    with pytest.raises(WorkbenchError, match="must be workbench.training.SGD or AdamW") \
            as e:
        wb.load(TRAINING / "mlp" / "training_model.onnx",
                optimizer=str(TRAINING / "mlp" / "optimizer_model.onnx"))
    assert "HuggingFace" in str(e.value) and "AdamW(lr=" in str(e.value)


def test_train_step_without_an_optimizer_says_how_to_add_one():
    g = wb.load(TRAINING / "mlp" / "training_model.onnx")
    s = wb.Session(g, backend="reference")
    x = {"x": np.zeros((4, 16), np.float32), "target": np.zeros((4, 8), np.float32)}
    with pytest.raises(WorkbenchError, match=r"wb.load\('training_model.onnx', optimizer="):
        s.train_step(x, TrainState({}))


def test_a_name_the_step_needs_taken_in_the_file_is_refused():
    m = onnx.load(str(TRAINING / "mlp" / "training_model.onnx"))
    old = "target"
    for i in m.graph.input:
        if i.name == old:
            i.name = "step"
    for n in m.graph.node:
        n.input[:] = ["step" if x == old else x for x in n.input]
    with pytest.raises(GraphError, match="already has a value named 'step'"):
        wb.load(m, optimizer=AdamW())
    assert "step" in wb.load(m, optimizer=SGD()).inputs    # (SGD takes no step input)
