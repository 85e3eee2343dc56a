"""Write ONNX training graphs as onnxruntime-training's exporter writes them.

torch.onnx writes forward graphs only; ``onnxruntime.training.artifacts.
generate_artifacts`` takes such a forward graph and writes the training step:
``training_model.onnx`` (forward, loss, backward with ``com.microsoft`` gradient ops,
and an ``InPlaceAccumulatorV2`` per parameter gradient), ``eval_model.onnx`` (forward
and loss) and ``optimizer_model.onnx`` (one ``AdamWOptimizer`` over tensor sequences).
This script writes them for three small models into ``sample_graphs/training/<name>/``
(the ``checkpoint`` with the initial weights is left out: the tests draw their own):

* ``mlp``: Linear(16, 32) - ReLU - Linear(32, 8) on x[4, 16], MSE loss (``Scale``,
  ``ReluGrad``);
* ``norm_gelu``: LayerNorm(32) - Linear(32, 64) - GELU - Linear(64, 10) on x[8, 32],
  cross-entropy loss over labels[8] (``Gelu``, ``GeluGrad``,
  ``LayerNormalizationGrad``, ``SoftmaxCrossEntropyLossGrad``);
* ``norm_gelu_seq``: the same on tokens x[2, 6, 32], logits reshaped to [12, 10]
  (the linears export as MatMul + Add: ``BiasGelu``, ``BiasGeluGrad_dX``,
  ``FusedMatMul``);
* ``attention``: pre-LayerNorm softmax self-attention with a residual on x[2, 6, 32]
  (4 heads, one QKV projection split in three), MSE loss (``SoftmaxGrad_13``; the
  split's, squeezes' and transposes' gradients in the default domain).

onnxruntime-training conflicts with the ``onnxruntime`` package the workbench uses, so
run this in a virtual environment of its own (CI never runs it: the files are data)::

    python3 -m venv /tmp/ortt && /tmp/ortt/bin/pip install onnxruntime-training torch onnx
    /tmp/ortt/bin/python sample_graphs/make_onnx_training.py            # from the repo root

Checked here: each training model, run by onnxruntime-training itself on seeded inputs,
gives torch autograd's loss and gradients (the files mean what the tests assume); and
each gradient op alone, in onnxruntime's kernels, at the attribute values the
workbench's op tests use, gives torch autograd's result (``check_ops``).
"""
from __future__ import annotations

import io
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
OPSET = 17
FILES = ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class NormGelu(nn.Module):
    """LayerNorm, up-projection, GELU, a classifier head; logits [tokens, 10]."""
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.up, self.down = nn.Linear(32, 64), nn.Linear(64, 10)

    def forward(self, x):
        return self.down(F.gelu(self.up(self.ln(x)))).reshape(-1, 10)


class Attention(nn.Module):
    """Pre-LayerNorm softmax self-attention with a residual (no dropout: its masks are
    onnxruntime's random draws)."""
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(self.ln(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        p = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return x + self.out((p @ v).transpose(1, 2).reshape(b, t, d))


# name -> (module, example input, generate_artifacts' loss, torch's loss, targets);
# the tests import the modules and shapes from here (without onnxruntime-training)
def cases():
    g = torch.Generator().manual_seed(0)
    return {
        "mlp": (MLP(), torch.randn(4, 16, generator=g), "MSELoss",
                F.mse_loss, torch.randn(4, 8, generator=g)),
        "norm_gelu": (NormGelu(), torch.randn(8, 32, generator=g),
                      "CrossEntropyLoss", F.cross_entropy,
                      torch.randint(0, 10, (8,), generator=g)),
        "norm_gelu_seq": (NormGelu(), torch.randn(2, 6, 32, generator=g),
                          "CrossEntropyLoss", F.cross_entropy,
                          torch.randint(0, 10, (12,), generator=g)),
        "attention": (Attention(), torch.randn(2, 6, 32, generator=g), "MSELoss",
                      F.mse_loss, torch.randn(2, 6, 32, generator=g)),
    }


def forward_onnx(module: nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    """The forward graph as torch.onnx writes it (weights as initializers)."""
    f = io.BytesIO()
    torch.onnx.export(module, (x,), f, input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=OPSET, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    model = onnx.load_from_string(f.getvalue())
    for node in model.graph.node:
        # torch writes LayerNormalization's one output; onnxruntime's gradient of it
        # reads the saved mean and inverse standard deviation (ONNX's optional outputs
        # 1 and 2), so name them, as onnxruntime's own ORTModule export does
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([f"{node.name}_mean", f"{node.name}_inv_std"])
    return model


def write(name: str, case, out: Path) -> Path:
    module, x, loss_type, loss_fn, target = case
    from onnxruntime.training import artifacts
    model = forward_onnx(module, x)
    params = [t.name for t in model.graph.initializer
              if t.name in dict(module.named_parameters())]
    with tempfile.TemporaryDirectory() as tmp:
        artifacts.generate_artifacts(model, requires_grad=params, frozen_params=[],
                                     loss=getattr(artifacts.LossType, loss_type),
                                     optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=tmp)
        check(name, module, x, loss_fn, target, Path(tmp))
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        for f in FILES:
            shutil.copyfile(Path(tmp) / f, target / f)
    return target


def check(name: str, module, x, loss_fn, target, folder: Path) -> None:
    """onnxruntime-training's own run of the training model against torch autograd."""
    from onnxruntime.training.api import CheckpointState, Module
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    m = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    m.train()
    loss = m(x.numpy(), target.numpy())
    module.zero_grad(set_to_none=True)
    want = loss_fn(module(x), target)
    want.backward()
    want = want.item()
    assert abs(float(loss) - want) <= 1e-5 * max(1.0, abs(want)), (name, loss)
    for k, p in module.named_parameters():
        got = state.parameters[k].grad
        err = np.abs(got - p.grad.numpy()).max() / np.abs(p.grad.numpy()).max()
        assert err <= 1e-5, (name, k, err)


def _one_node(op, inputs: dict, outputs: dict, **attrs) -> dict:
    """onnxruntime's own kernel of one com.microsoft node on NumPy inputs."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
    node = helper.make_node(op, list(inputs), list(outputs), domain="com.microsoft", **attrs)
    g = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, types[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(outputs, sess.run(None, inputs)))


def check_ops() -> dict[str, float]:
    """The gradient ops alone in onnxruntime's kernels against torch autograd, at the
    attribute values tests/frontends/test_onnx_gradient_ops.py holds the workbench's
    definitions to (so agreeing with torch there is agreeing with onnxruntime): the
    worst error relative to the largest element, per case."""
    rng = np.random.default_rng(47)
    f32 = lambda *s, k=1.0: (rng.standard_normal(s) * k).astype(np.float32)  # noqa: E731
    err = lambda got, want: float(np.abs(got - want).max() / np.abs(want).max())  # noqa: E731
    worst = {}
    for shape, axis in [((6, 16), -1), ((2, 3, 8), 1)]:
        x, dy = f32(*shape, k=2.0), f32(*shape)
        norm = shape[axis:]
        xt, st, bt = (torch.tensor(a, requires_grad=True) for a in (x, f32(*norm), f32(*norm)))
        F.layer_norm(xt, norm, st, bt, eps=1e-5).backward(torch.tensor(dy))
        axes = tuple(range(axis % len(shape), len(shape)))
        mean = x.mean(axis=axes, keepdims=True)
        inv = (1 / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)).astype(np.float32)
        got = _one_node("LayerNormalizationGrad",
                        {"dy": dy, "x": x, "s": st.detach().numpy(), "m": mean, "i": inv},
                        {"dx": shape, "ds": norm, "db": norm}, axis=axis, epsilon=1e-5)
        worst[f"LayerNormalizationGrad {shape} axis {axis}"] = max(
            err(got[k], t.grad.numpy()) for k, t in (("dx", xt), ("ds", st), ("db", bt)))
    for reduction, weighted, ignore in [("mean", False, None), ("mean", True, -100),
                                        ("mean", False, 2), ("sum", True, None),
                                        ("none", False, 2), ("none", True, -100)]:
        scores = f32(4, 5, 3, k=2.0)
        labels = rng.integers(0, 5, (4, 3)).astype(np.int64)
        if ignore is not None:
            labels.reshape(-1)[::4] = ignore
        w = rng.uniform(0.2, 2.0, 5).astype(np.float32) if weighted else None
        dy = f32(4, 3) if reduction == "none" else np.asarray(f32(1)[0])
        st = torch.tensor(scores, requires_grad=True)
        F.cross_entropy(st, torch.tensor(labels), None if w is None else torch.tensor(w),
                        ignore_index=-1000 if ignore is None else ignore,
                        reduction=reduction).backward(torch.tensor(dy))
        inputs = {"dy": dy, "logp": torch.log_softmax(torch.tensor(scores), 1).numpy(),
                  "labels": labels, **({"w": w} if weighted else {})}
        attrs = {"reduction": reduction, **({} if ignore is None else {"ignore_index": ignore})}
        got = _one_node("SoftmaxCrossEntropyLossGrad", inputs, {"d": [4, 5, 3]}, **attrs)
        worst[f"SoftmaxCrossEntropyLossGrad {reduction} weights={weighted} "
              f"ignore_index={ignore}"] = err(got["d"], st.grad.numpy())
    x, dy = f32(2, 5, 3, k=2.0), f32(2, 5, 3)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.softmax(xt, dim=1)
    y.backward(torch.tensor(dy))
    worst["SoftmaxGrad_13 axis 1"] = err(_one_node(
        "SoftmaxGrad_13", {"dy": dy, "y": y.detach().numpy()}, {"dx": [2, 5, 3]},
        axis=1)["dx"], xt.grad.numpy())
    for ta, tb, alpha in [(0, 1, 1.0), (1, 0, 0.5), (1, 1, 2.0)]:
        a, b = f32(*((2, 7, 5) if ta else (2, 5, 7))), f32(*((6, 7) if tb else (7, 6)))
        want = alpha * ((np.swapaxes(a, -1, -2) if ta else a) @ (b.T if tb else b))
        worst[f"FusedMatMul transA={ta} transB={tb} alpha={alpha}"] = err(_one_node(
            "FusedMatMul", {"a": a, "b": b}, {"y": [2, 5, 6]}, transA=ta, transB=tb,
            alpha=alpha)["y"], want)
    x, b, dy = f32(3, 8, k=2.0), f32(8), f32(3, 8)
    xt = torch.tensor(x + b, requires_grad=True)
    F.gelu(xt).backward(torch.tensor(dy))
    worst["GeluGrad"] = err(_one_node("GeluGrad", {"dy": dy, "x": x + b}, {"dx": [3, 8]})["dx"],
                            xt.grad.numpy())
    worst["BiasGeluGrad_dX"] = err(_one_node("BiasGeluGrad_dX", {"dy": dy, "x": x, "b": b},
                                             {"dx": [3, 8]})["dx"], xt.grad.numpy())
    return worst


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else HERE / "training"
    torch.manual_seed(0)
    for name, case in cases().items():
        target = write(name, case, out)
        ops = sorted({f"{n.domain}.{n.op_type}" for n in
                      onnx.load(str(target / "training_model.onnx")).graph.node
                      if n.domain == "com.microsoft"})
        print(f"{target}: {', '.join(ops)}")
    for case, e in check_ops().items():
        assert e <= 1e-5, (case, e)
        print(f"{case}: onnxruntime vs torch autograd {e:.1e}")


if __name__ == "__main__":
    main(sys.argv[1:])
