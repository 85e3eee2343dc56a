"""Dropout in train mode: the mask regenerated from the counter-based generator in the
forward and again in the backward, never stored (``training/dropout.py``).

p = 0 against torch's own dropout; p > 0 against torch given the same mask (torch's
generator differs: the mask is ``keep_numpy``, the random op's NumPy reference), both
within the training tests' bound (FRAMEWORK_TOLERANCE relative to the largest
element), run on the cpu backend under none and stitch."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn

import workbench as wb
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest
from workbench.training import AdamW, TrainState
from workbench.training.dropout import SEED, keep_numpy, scale
from workbench.training.phases import phase


class Net(nn.Module):
    """Linear -> GELU -> dropout -> Linear -> dropout: two dropouts, one of 3 axes."""

    def __init__(self, p: float):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 6)
        self.d1, self.d2 = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x):
        return self.d2(self.fc2(self.d1(nn.functional.gelu(self.fc1(x))))).square().mean()


class Masked(nn.Module):
    """Net with its dropouts replaced by given masks (the workbench's draw)."""

    def __init__(self, net: Net, masks, p: float):
        super().__init__()
        self.net, self.masks, self.s = net, [torch.from_numpy(m) for m in masks], float(scale(p))

    def forward(self, x):
        n = self.net
        h = nn.functional.gelu(n.fc1(x)) * self.masks[0] * self.s
        return (n.fc2(h) * self.masks[1] * self.s).square().mean()


def _run(g, net, x, seed, planner):
    s = wb.Session(g, backend="cpu")
    if planner != "none":
        s.auto(planner)
    params = {k: p.detach().numpy() for k, p in net.named_parameters()}
    return s.run({**params, "x": x.numpy(), SEED: np.int64(seed)})


def _check(got, module, x):
    module.zero_grad(set_to_none=True)
    loss = module(x)
    loss.backward()
    assert relative_to_largest(got["loss"], np.float32(float(loss.detach()))) <= FRAMEWORK_TOLERANCE
    for k, p in module.named_parameters():
        k = k.removeprefix("net.")
        err = relative_to_largest(got[f"grad.{k}"], p.grad.numpy())
        assert err <= FRAMEWORK_TOLERANCE, (k, err)


# (stitch only: every planner's kernels are the training tests'; these check dropout)
@pytest.mark.parametrize("planner", ["stitch"])
def test_p_zero_matches_torchs_dropout(planner):
    torch.manual_seed(0)
    net = Net(0.0).train()
    x = torch.randn(2, 5, 12)
    g = wb.from_torch(net, (x,), training=True)
    _check(_run(g, net, x, 3, planner), net, x)


@pytest.mark.parametrize("planner", ["stitch"])
def test_p_positive_matches_torch_given_the_same_mask(planner):
    torch.manual_seed(1)
    p = 0.3
    net = Net(p).train()
    x = torch.randn(2, 5, 12)
    g = wb.from_torch(net, (x,), training=True)
    for seed in (0, 7):                  # each seed its own masks
        masks = [keep_numpy((2, 5, 24), seed, 0, p), keep_numpy((2, 5, 6), seed, 1, p)]
        assert 0.5 < masks[0].mean() < 0.9           # about 1 - p kept
        _check(_run(g, net, x, seed, planner), Masked(net, masks, p), x)
    a, b = keep_numpy((2, 5, 24), 0, 0, p), keep_numpy((2, 5, 24), 7, 0, p)
    assert (a != b).any()


def test_the_mask_is_made_twice_and_never_saved():
    net = Net(0.25).train()
    g = wb.from_torch(net, (torch.randn(2, 5, 12),), training=True)
    draws = [n for n in g.nodes if n.op == "random_uniform"]
    # each dropout's mask once in the forward, once in the backward
    assert sorted(phase(n) for n in draws) == ["backward", "backward", "forward", "forward"]
    s = wb.Session(g, backend="cpu")
    made_by = {o: n.op for n in g.nodes for o in n.outputs}
    saved = s.saved()
    assert len(saved) and not any(made_by.get(v) in ("random_uniform", "ge")
                                  or g.value(v).dtype.value == "bool" for v in saved["value"])


def test_train_step_draws_each_step_its_own_masks():
    torch.manual_seed(2)
    p = 0.3
    net = Net(p).train()
    ref = Net(p)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(2, 5, 12)
    g = wb.from_torch(net, (x,), training=True, optimizer=AdamW(lr=1e-2))
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    state = TrainState.from_module(g, net)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for step in range(2):          # train_step feeds the step count as the seed
        masks = [keep_numpy((2, 5, 24), step, 0, p), keep_numpy((2, 5, 6), step, 1, p)]
        opt.zero_grad()
        want = Masked(ref, masks, p)(x)
        want.backward()
        opt.step()
        got = s.train_step({"x": x.numpy()}, state)
        want = float(want.detach())
        assert abs(got - want) <= FRAMEWORK_TOLERANCE * abs(want)
    for k, prm in ref.named_parameters():
        assert relative_to_largest(state.params[k], prm.detach().numpy()) <= 1e-4, k
