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
gives torch autograd's loss and gradients (the files mean what the tests assume).
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


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else HERE / "training"
    torch.manual_seed(0)
    for name, case in cases().items():
        target = write(name, case, out)
        ops = sorted({f"{n.domain}.{n.op_type}" for n in
                      onnx.load(str(target / "training_model.onnx")).graph.node
                      if n.domain == "com.microsoft"})
        print(f"{target}: {', '.join(ops)}")


if __name__ == "__main__":
    main(sys.argv[1:])
