"""The optimizer step in the graph and the training loop: N steps of a small model by
``Session.train_step`` (forward, backward and the update compiled into one program on
the cpu backend) against torch's own loop (``loss.backward(); opt.step()``) with
torch.optim.AdamW / SGD: the same losses and parameters within the bound stated below.

The bound: each step's loss and each parameter after the last step within 1e-4 of
torch's, relative to its largest element -- the gradients' float32 rounding (see
test_training_import) carried through a few steps of the update; lr is small enough
(1e-2) that AdamW's normalized step does not amplify a difference in a tiny second
moment into a different sign."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest
from workbench.training import SGD, AdamW, TrainState
from workbench.training.loop import parameter_names, state_names

STEPS = 5


def small_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))


def batches(seed: int, n: int):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 16, generator=gen), torch.randn(4, 8, generator=gen))
            for _ in range(n)]


def torch_loop(model, opt, data):
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("ours, theirs, planner", [
    (AdamW(lr=1e-2, weight_decay=0.05),
     lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05), "stitch"),
    (SGD(lr=5e-2, momentum=0.9, weight_decay=1e-3),
     lambda p: torch.optim.SGD(p, lr=5e-2, momentum=0.9, weight_decay=1e-3), "rules"),
])
def test_train_steps_match_torch_loop(ours, theirs, planner):
    data = batches(1, STEPS)
    model = small_model(0)
    x0, y0 = data[0]
    g = wb.from_torch(model, (x0,), training=True, loss=F.mse_loss, targets=(y0,),
                      optimizer=ours)
    state = TrainState.from_module(g, model)
    held = state.params["0.weight"]           # (updated in place, step after step)
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    got = [s.train_step({"input": x.numpy(), "target": y.numpy()}, state if i == 0 else None)
           for i, (x, y) in enumerate(data)]
    want = torch_loop(model, theirs(model.parameters()), data)
    assert state.step == STEPS and state.params["0.weight"] is held
    for a, b in zip(got, want):
        assert abs(a - b) <= FRAMEWORK_TOLERANCE * abs(b)
    for k, p in model.named_parameters():
        err = relative_to_largest(state.params[k], p.detach().numpy())
        assert err <= FRAMEWORK_TOLERANCE, (k, err)
    # and the run really trained: the parameters moved far beyond the bound
    start = dict(small_model(0).named_parameters())["0.weight"].detach().numpy()
    assert relative_to_largest(state.params["0.weight"], start) > 100 * FRAMEWORK_TOLERANCE


def test_optimizer_state_is_named_and_fused_with_the_backward():
    model = small_model(2)
    x, y = batches(2, 1)[0]
    g = wb.from_torch(model, (x,), training=True, loss=F.mse_loss, targets=(y,),
                      optimizer=AdamW())
    params = [k for k, _ in model.named_parameters()]
    assert parameter_names(g) == params
    assert state_names(g) == [f"{s}.{p}" for p in params for s in ("exp_avg", "exp_avg_sq")]
    assert "step" in g.inputs and all(f"new.{p}" in g.outputs for p in params)
    # the stitch planner joins each parameter's update with the kernel computing its
    # gradient (a bias's column sum) or, here, with the bias corrections every update
    # shares (a weight gradient is a GEMM's result, written once): no update runs as a
    # kernel of its own
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    source = lambda n: g.node_map[n].origin.source  # noqa: E731
    updating = [{source(n).split(".")[0] if source(n) != "optimizer" else "shared"
                 for n in gr.nodes} for gr in s.plan.groups
                if any(source(n).startswith("optimizer") for n in gr.nodes)]
    assert updating and all("backward" in p or "shared" in p for p in updating), updating
    assert len(s.plan.groups) < len(g.nodes) / 5


def test_train_step_refusals():
    model = small_model(3)
    x, y = batches(3, 1)[0]
    plain = wb.from_torch(model, (x,), training=True, loss=F.mse_loss, targets=(y,))
    with pytest.raises(WorkbenchError, match="optimizer="):
        wb.Session(plain, backend="cpu").train_step({"input": x.numpy()})
    g = wb.from_torch(model, (x,), training=True, loss=F.mse_loss, targets=(y,),
                      optimizer=SGD(lr=0.1))
    s = wb.Session(g, backend="cpu")
    with pytest.raises(WorkbenchError, match="TrainState.from_module"):
        s.train_step({"input": x.numpy(), "target": y.numpy()})
    with pytest.raises(WorkbenchError, match="no values for the parameters"):
        TrainState.from_arrays(g, {})
    with pytest.raises(WorkbenchError, match="lr must be > 0"):
        AdamW(lr=0)


def test_a_weight_update_in_its_gradients_gemm_epilogue_matches_torch():
    # AdamW's exp_avg * beta1 and p * (1 - lr * wd) read no gradient: side ops of the
    # GEMM epilogue (fusion/gemm/legality.py), computed per element there
    data = batches(2, 3)
    model = small_model(4)
    x0, y0 = data[0]
    opt = AdamW(lr=1e-2, weight_decay=0.05)
    g = wb.from_torch(model, (x0,), training=True, loss=F.mse_loss, targets=(y0,),
                      optimizer=opt)
    update = [n.id for n in g.nodes if n.origin.source == "optimizer.3.weight"]
    grad = g.producer[next(i for n in g.nodes if n.id in update for i in n.inputs
                           if g.producer.get(i) is not None
                           and g.producer[i].op == "matmul")]
    s = wb.Session(g, backend="cpu")
    fused = s.fuse([grad.id, *update])
    gemm = fused.group(grad.id)
    assert gemm.schedule.kind.value == "gemm" and set(update) <= set(gemm.nodes)
    state = TrainState.from_module(g, model)
    got = [s.train_step({"input": x.numpy(), "target": y.numpy()}, state if i == 0 else None)
           for i, (x, y) in enumerate(data)]
    want = torch_loop(model, torch.optim.AdamW(model.parameters(), lr=1e-2,
                                               weight_decay=0.05), data)
    for a, b in zip(got, want):
        assert abs(a - b) <= FRAMEWORK_TOLERANCE * abs(b)
    for k, p in model.named_parameters():
        assert relative_to_largest(state.params[k], p.detach().numpy()) <= FRAMEWORK_TOLERANCE, k


def test_steps_across_a_plan_change_match_torch():
    # train_step writes into output arrays it keeps for the current plan's program:
    # after a plan change (another program) the steps must still be torch's
    data = batches(2, 4)
    model = small_model(1)
    g = wb.from_torch(model, (data[0][0],), training=True, loss=F.mse_loss,
                      targets=(data[0][1],), optimizer=AdamW(lr=1e-2, weight_decay=0.05))
    state = TrainState.from_module(g, model)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    got = []
    for i, (x, y) in enumerate(data):
        if i == 2:
            s.auto("rules")
        got.append(s.train_step({"input": x.numpy(), "target": y.numpy()}, state))
    assert len(s.history) == 3
    want = torch_loop(model, torch.optim.AdamW(model.parameters(), lr=1e-2,
                                               weight_decay=0.05), data)
    for a, b in zip(got, want):
        assert abs(a - b) <= FRAMEWORK_TOLERANCE * abs(b)
    for k, p in model.named_parameters():
        assert relative_to_largest(state.params[k], p.detach().numpy()) \
            <= FRAMEWORK_TOLERANCE, k
