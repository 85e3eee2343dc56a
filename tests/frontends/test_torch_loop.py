"""torch.export graphs holding scan / while_loop as repeats (frontends/torch_loop.py),
checked against torch running the same module, and the loops refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch._higher_order_ops import scan, while_loop  # noqa: E402

from workbench.errors import GraphError  # noqa: E402
from workbench.frontends.torch_loop import repeat_from_torch  # noqa: E402
from workbench.runtime.repeat_program import RepeatProgram  # noqa: E402

N = 50


class Spring(torch.nn.Module):
    def forward(self, x, v, force, k):
        def step(carry, f):
            x, v = carry
            v2 = v + 0.1 * (f - k * x)
            x2 = x + 0.1 * torch.sin(v2)
            return (x2, v2), v2 * v2
        (xf, vf), e = scan(step, (x, v), force)
        return xf, vf, e


class Counted(torch.nn.Module):
    def __init__(self, n=7, reads_counter=False, cond_on_state=False):
        super().__init__()
        self.n, self.reads_counter, self.cond_on_state = n, reads_counter, cond_on_state

    def forward(self, x, v):
        i = torch.zeros((), dtype=torch.int64)

        def cond(i, x, v):
            return (x.sum() > 0) if self.cond_on_state else i < self.n

        def body(i, x, v):
            dx = 0.1 * v + (i * 0.01 if self.reads_counter else 0.0)
            return i + 1, x + dx, v - 0.1 * x
        _, xf, vf = while_loop(cond, body, (i, x, v))
        return xf, vf


def rand(*shape, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, shape)
                            .astype(np.float32))


def test_scan_matches_torch():
    args = (rand(N), rand(N, seed=1), rand(6, N, seed=2), rand(N, seed=3))
    r = repeat_from_torch(Spring(), args)
    assert r.trips == 6 and len(r.carried) == 2 and len(r.stacked_inputs) == 1
    want = [t.numpy() for t in Spring()(*args)]
    ins = dict(zip(r.inputs, (a.numpy() for a in args)))
    for got in (r.reference(ins), RepeatProgram(r, 4).run(ins, checked=True)):
        for o, w in zip(r.outputs, want):
            np.testing.assert_allclose(got[o], w, rtol=4e-6, atol=1e-6)


def test_while_loop_over_a_counter_matches_torch():
    args = (rand(N), rand(N, seed=1))
    r = repeat_from_torch(Counted(7), args)
    assert r.trips == 7 and r.stacked_outputs == ()
    want = [t.numpy() for t in Counted(7)(*args)]
    got = RepeatProgram(r, 3).run(dict(zip(r.inputs, (a.numpy() for a in args))),
                                  checked=True)
    for o, w in zip(r.outputs, want):
        np.testing.assert_allclose(got[o], w, rtol=4e-6, atol=1e-6)


@pytest.mark.parametrize("module, words", [
    (Counted(reads_counter=True), "body reads the counter"),
    (Counted(cond_on_state=True), "condition must read only a counter"),
])
def test_loops_that_cannot_be_taken_are_refused(module, words):
    with pytest.raises(GraphError, match=words):
        repeat_from_torch(module, (rand(N), rand(N, seed=1)))


def test_a_module_with_more_than_the_loop_is_refused():
    class More(Spring):
        def forward(self, x, v, force, k):
            return tuple(torch.relu(t) for t in super().forward(x, v, force, k))
    with pytest.raises(GraphError, match="one scan or while_loop"):
        repeat_from_torch(More(), (rand(N), rand(N), rand(3, N), rand(N)))


def test_cartpole_written_in_torch_imports_as_the_builders_cartpole():
    """CartPole in torch (a scan over the actions) imports as a repeat that fuses and
    agrees bit for bit with the builder's CartPole (the same operations in order)."""
    import workbench as wb
    from workbench.testing.simulators import cartpole, torch_cartpole_step
    step = torch_cartpole_step(torch)

    class Rollout(torch.nn.Module):
        def forward(self, x, xd, th, thd, actions, rx, rxd, rth, rthd):
            def body(carry, a):
                *s, reward, done = step(*carry, a, (rx, rxd, rth, rthd))
                return tuple(s), (reward, done)
            final, (rewards, dones) = scan(body, (x, xd, th, thd), actions)
            return (*final, rewards, dones)

    built = cartpole(64, 12)
    ins = wb.RepeatSession(built, seed=1).inputs()
    order = ("x", "x_dot", "theta", "theta_dot", "action", "x_reset", "x_dot_reset",
             "theta_reset", "theta_dot_reset")
    args = tuple(torch.from_numpy(ins[k]) for k in order)
    r = repeat_from_torch(Rollout(), args, name="cartpole_torch")
    assert r.trips == 12 and len(r.carried) == 4 and len(r.invariant_inputs) == 4
    got = RepeatProgram(r, 5).run(dict(zip(r.inputs, (a.numpy() for a in args))),
                                  checked=True)
    want = RepeatProgram(built, 5).run(ins, checked=True)
    for o, w in zip(r.outputs, built.outputs):
        assert np.array_equal(got[o], want[w]), (o, w)
    assert want["terminated"].any()
