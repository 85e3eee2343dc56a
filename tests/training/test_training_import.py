"""Training graphs from torch (forward + backward in one graph): gradients of real
modules -- an MLP, a LayerNorm + GELU block, softmax attention, transformers' BERT
layer at tiny dims -- run on the cpu backend (generated kernels) under
the planners none, rules and stitch, against torch.autograd on fresh random inputs.

The bound: every output (the loss and each gradient) within FRAMEWORK_TOLERANCE (1e-4)
of torch's, relative to its largest element (``relative_to_largest``): the backward
sums over the batch and the rows in another order than torch's kernels. A gradient
that is zero in exact arithmetic (attention's key bias: softmax ignores a constant
added to a row) is rounding noise in both; it is held to 1e-4 of the model's largest
gradient element instead."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.errors import GraphError, WorkbenchError
from workbench.frontends.torch.training import BACKWARD
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest


def torch_grads(module, args, loss=None, targets=()):
    """torch's loss and parameter gradients (fresh .grad), by autograd."""
    module.zero_grad(set_to_none=True)
    out = module(*args)
    value = loss(out, *targets) if loss is not None else out
    value.backward()
    grads = {k: p.grad.detach().numpy().copy() for k, p in module.named_parameters()}
    return float(value), grads


def feeds(g, module, args, targets=()):
    params = {k: p.detach().numpy() for k, p in module.named_parameters()}
    data = [t.detach().numpy() for t in (*args, *targets)]
    users = [i for i in g.inputs if i not in params]
    assert len(users) == len(data), (users, len(data))
    return {**{k: params[k] for k in g.inputs if k in params}, **dict(zip(users, data))}


def check_grads(module, args, loss=None, targets=(), planners=("none", "rules", "stitch")):
    g = wb.from_torch(module, args, training=True, loss=loss, targets=targets)
    want_loss, want = torch_grads(module, args, loss, targets)
    assert g.outputs == ("loss", *(f"grad.{k}" for k in want))
    fed = feeds(g, module, args, targets)
    for planner in planners:
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run(fed)
        assert relative_to_largest(got["loss"], np.float32(want_loss)) <= FRAMEWORK_TOLERANCE
        largest = max(float(np.abs(w).max()) for w in want.values())
        for k, w in want.items():
            if np.abs(w).max() < 1e-6 * largest:   # zero in exact arithmetic: noise
                err = float(np.abs(got[f"grad.{k}"]).max()) / largest
            else:
                err = relative_to_largest(got[f"grad.{k}"], w)
            assert err <= FRAMEWORK_TOLERANCE, (planner, k, err)
    return g


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class NormGelu(nn.Module):
    """A transformer's MLP half: LayerNorm, up-projection, GELU, down, residual."""
    def __init__(self, d=32):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.ln(x))))


class Attention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((p @ v).transpose(1, 2).reshape(b, t, d))


def test_mlp_gradients_match_autograd():
    torch.manual_seed(0)
    g = check_grads(MLP(), (torch.randn(4, 16),), F.mse_loss, (torch.randn(4, 8),))
    assert g.inputs[-2:] == ("x", "target")
    phases = {n.origin.source.split(".")[0] == BACKWARD for n in g.nodes}
    assert phases == {True, False}, "forward and backward nodes are both marked"


@pytest.mark.slow   # (~10-16 s cold)
def test_layernorm_gelu_block_gradients_match_autograd():
    torch.manual_seed(1)
    x = torch.randn(2, 6, 32)
    check_grads(NormGelu(), (x,), lambda y, t: F.mse_loss(y, t), (torch.randn(2, 6, 32),))


def test_softmax_attention_gradients_match_autograd():
    torch.manual_seed(2)
    check_grads(Attention(), (torch.randn(2, 8, 32),), lambda y: (y * y).mean())


class _Scalar(nn.Module):
    """A transformers layer (its first output) and a squared error against a target
    (not ``(y * y).mean()``: after the final LayerNorm that is ~1 whatever the weights,
    and every gradient but the LayerNorm's would be rounding noise)."""
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, target):
        out = self.layer(x)
        y = out[0] if isinstance(out, tuple) else out
        return F.mse_loss(y, target)


@pytest.mark.slow   # (~10-25 s: the fast tier's transformer-like case is Attention's;
# GPT-2's block: benchmarks/training.py checks its gradients at 768 wide)
def test_bert_layer_gradients_match_autograd():
    pytest.importorskip("transformers")
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer
    torch.manual_seed(3)
    cfg = BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=64,
                     attn_implementation="eager")
    model = _Scalar(BertLayer(cfg)).eval()   # (eval: no dropout draws to match)
    # (op by op its 150-odd kernels compile for most of a minute: the fused plans)
    g = check_grads(model, (torch.randn(2, 8, 32), torch.randn(2, 8, 32)),
                    planners=("rules", "stitch"))
    assert "layer.attention.self.query.weight" in g.inputs
    assert "grad.layer.output.LayerNorm.bias" in g.outputs


class Tied(nn.Module):
    """An encoder and decoder sharing one weight (as an LM head shares the embedding)."""
    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(12, 6, bias=False), nn.Linear(6, 12, bias=False)
        self.dec.weight = nn.Parameter(torch.randn(12, 6))
        self.enc.weight = self.dec.weight   # (enc uses it transposed: [6, 12] needed)

    def forward(self, x):
        return self.dec(torch.tanh(F.linear(x, self.enc.weight.t())))


def test_tied_weights_are_one_input_with_summed_gradient():
    torch.manual_seed(5)
    model = Tied()
    x = torch.randn(3, 12)
    g = wb.from_torch(model, (x,), training=True, loss=lambda y: (y * y).sum())
    # (named by its first name, as named_parameters() lists it once)
    assert g.inputs == ("enc.weight", "x") and g.outputs == ("loss", "grad.enc.weight")
    loss, want = torch_grads(model, (x,), lambda y: (y * y).sum())
    got = wb.Session(g, backend="cpu").run({"enc.weight": model.enc.weight.detach().numpy(),
                                            "x": x.numpy()})
    assert relative_to_largest(got["grad.enc.weight"], want["enc.weight"]) <= FRAMEWORK_TOLERANCE
    assert model.enc.weight is model.dec.weight, "the module itself stays tied"


def test_refusals_name_cause_and_fix():
    with pytest.raises(GraphError, match="scalar"):
        wb.from_torch(nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    with pytest.raises(WorkbenchError, match="loss="):
        wb.from_torch(nn.Linear(4, 2), (torch.randn(3, 4),), training=True,
                      targets=(torch.randn(3, 2),))
    bn = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    with pytest.raises(GraphError, match="eval mode"):
        wb.from_torch(bn, (torch.randn(3, 4),), training=True, loss=lambda y: y.sum())
