"""A repeat on the CPU (runtime/repeat_program.py, codegen/repeat_c.py): fused F steps
per call agree bit for bit with the unfused program (one step per call) for every F,
and both with the NumPy reference; the CUDA form compiles with NVRTC and runs in the
CUDA emulator; the session step "fuse steps xF", its refusals and its cost model."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.device import Device
from workbench.errors import FusionRefused, GraphError
from workbench.codegen.repeat_c import fused_cuda_source, refusal
from workbench.fusion.repeat_cost import choose_steps, repeat_cost
from workbench.runtime.repeat_program import RepeatProgram
from workbench.testing.simulators import (acrobot, cartpole, mountain_car, particles,
                                          pendulum)

EPS32 = float(np.finfo(np.float32).eps)
TRIPS = 23                      # not a multiple of 2 or 7: every F leaves a remainder
# envs: more than one tile, and a last tile that is not whole
SIMS = {"cartpole": lambda t=TRIPS: cartpole(1000, t),
        "pendulum": lambda t=TRIPS: pendulum(777, t),
        "mountain_car": lambda t=TRIPS: mountain_car(1000, t),
        "acrobot": lambda t=TRIPS: acrobot(500, t),
        "particles": lambda t=TRIPS: particles(130, t, k=7),
        # Gaussian action noise from random_normal(key, environment, step)
        "noisy_pendulum": lambda t=TRIPS: pendulum(777, t, noise=0.5)}
# Acrobot from random states is chaotic and its RK4 cancels terms up to (9 pi)^2: the
# C's rounding (FMA contraction, libmvec's sinf) and NumPy's differ by up to ~230 eps32
# (|x| + 1) after one step and by 1e-2 after 23, so it is compared over one step
# within 512 eps32 (its steps are checked against gymnasium's in tests/ir)
REFERENCE_STEPS = {"acrobot": 1}
REFERENCE_EPS = {"acrobot": 512}


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def reference_close(r, got, want, steps, eps=64):
    """Within float32 rounding of the reference, grown by the steps it compounds over:
    |got - want| <= eps eps32 steps (|want| + 1) (eps 64 unless said); masks equal."""
    for o in r.outputs:
        g, w = got[o], want[o]
        if g.dtype == bool:
            assert np.array_equal(g, w), o
            continue
        err = np.abs(g.astype(np.float64) - w) / (np.abs(w.astype(np.float64)) + 1)
        assert err.max() <= eps * EPS32 * steps, (o, err.max() / EPS32)


@pytest.mark.parametrize("sim", sorted(SIMS))
def test_fused_agrees_bitwise_with_unfused_for_every_f(sim):
    r = SIMS[sim]()
    s = wb.RepeatSession(r, seed=3)
    ins = s.inputs()
    assert all(np.any(a != 0) for a in ins.values())
    unfused = RepeatProgram(r).run(ins, checked=True)
    for f in (1, 2, 7, TRIPS):
        fused = RepeatProgram(r, f).run(ins, checked=True)
        for o in r.outputs:
            assert np.array_equal(bits(fused[o]), bits(unfused[o])), (sim, f, o)
    # the state moved: the check compares arithmetic, not copies of the inputs
    assert not np.array_equal(unfused[r.carried_outputs[0]], ins[r.carried_inputs[0]])
    if "terminated" in r.outputs:
        assert unfused["terminated"].any()        # resets taken on the way


@pytest.mark.parametrize("sim", sorted(SIMS))
def test_agrees_with_the_numpy_reference(sim):
    steps = REFERENCE_STEPS.get(sim, TRIPS)
    r = SIMS[sim](steps)
    ins = wb.RepeatSession(r, seed=5).inputs()
    got = RepeatProgram(r, min(7, steps)).run(ins, checked=True)
    reference_close(r, got, r.reference(ins), steps, REFERENCE_EPS.get(sim, 64))


def test_tile_size_does_not_change_a_bit():
    r = cartpole(300, 9)
    ins = wb.RepeatSession(r, seed=1).inputs()
    a = RepeatProgram(r, 4, tile=64).run(ins, checked=True)
    b = RepeatProgram(r, 9, tile=4096).run(ins, checked=True)
    for o in r.outputs:
        assert np.array_equal(bits(a[o]), bits(b[o])), o


def mixing_body(n=64):
    """A step that reads the mean over the environments: not independent along them."""
    b = wb.GraphBuilder("mixing")
    x = b.input("x", (n,))
    b.output(x - b.reduce_mean(x, axes=[0], keepdims=True), "x_next")
    return wb.repeat(b.build(), 4, {"x": "x_next"})


def test_a_reduction_across_environments_is_refused_with_the_reason():
    r = mixing_body()
    assert "reduces across the batch axis 0" in refusal(r)
    s = wb.RepeatSession(r)
    with pytest.raises(FusionRefused, match="grid-wide barrier"):
        s.fuse_steps(2)
    assert all(not a.legal and "batch axis" in a.reason for a in s.actions()[1:])
    with pytest.raises(GraphError, match="cannot fuse"):
        RepeatProgram(r, 2)


def test_array_constants_inline_only_when_uniform():
    def body(values):
        b = wb.GraphBuilder("c")
        x = b.input("x", (4,))
        b.output(x * b.constant(np.array(values, np.float32)), "x_next")
        return wb.repeat(b.build(), 3, {"x": "x_next"})
    assert refusal(body([2.0] * 4)) is None        # a folded full_like: one literal
    r = body([2.0] * 4)
    ins = {"x": np.array([1, -2, 3, 0.5], np.float32)}
    assert np.array_equal(RepeatProgram(r, 3).run(ins, checked=True)["x_next"], ins["x"] * 8)
    assert "array of different values" in refusal(body([1.0, 2.0, 3.0, 4.0]))


def test_session_steps_actions_and_undo():
    r = cartpole(512, 64)
    s = wb.RepeatSession(r)
    labels = [a.label for a in s.actions()]
    assert labels[0] == "unfused" and "fuse steps x16" in labels and labels[-1] == "fuse steps x64"
    x16 = next(a for a in s.actions() if a.label == "fuse steps x16")
    assert s.apply(x16) == 16 and s.history == ["unfused", "fuse steps x16"]
    assert s.undo() is None and s.redo() == 16
    with pytest.raises(wb.WorkbenchError, match="F .steps per kernel call"):
        s.fuse_steps(65)
    src = s.source("c")
    assert "#pragma omp simd" in src and "for (int64_t t = t0; t < t0 + steps; t++)" in src


def test_a_repeat_given_to_the_graph_session_says_where_it_opens():
    # wb.Session(repeat) is its RepeatSession (tests/ui/test_repeat_app.py); the graph
    # loader still says where a repeat opens
    with pytest.raises(wb.WorkbenchError, match=r"wb.Session\(r\)"):
        wb.load(cartpole(8, 4))
    with pytest.raises(wb.WorkbenchError, match="takes a Repeat"):
        wb.RepeatSession(cartpole(8, 4).body)


def test_cost_model_moves_the_state_once_per_call():
    r = cartpole(65536, 256)
    # a fixed, memory-bound device: the machine's calibrated one can be compute-bound
    # for CartPole (a CI runner was), where every F past a few costs the same
    dev = Device("test cpu", "cpu", dram_bandwidth=20e9, launch_overhead=15e-6, units=4,
                 peak_flops=100e9)
    un, f16, f256 = (repeat_cost(r, f, dev) for f in (None, 16, 256))
    state = sum(r.body.value(i).nbytes for i in r.carried_inputs)
    fixed = sum(r.body.value(i).nbytes for i in r.invariant_inputs)
    # unfused: 256 x (state in and out + invariants); fused x16: 16 calls' worth
    assert un.bytes - f16.bytes == (256 - 16) * (2 * state + fixed)
    assert un.calls == 256 and f16.calls == 16 and f256.calls == 1
    assert un.seconds > f16.seconds > f256.seconds
    assert choose_steps(r, dev) in (64, 128, 256)
    # compute-bound: the state's traffic hides under the arithmetic, so a short F is
    # within the slack of the fastest and is chosen
    slow = Device("test cpu", "cpu", dram_bandwidth=60e9, launch_overhead=4e-6, units=2,
                  peak_flops=50e9)
    assert choose_steps(r, slow) < 64


def test_cuda_form_compiles_with_nvrtc(compile_cuda):
    r = cartpole(1000, TRIPS)
    compile_cuda(fused_cuda_source(r, "wb_repeat_cartpole"), ["wb_repeat_cartpole"],
                 stem="repeat_cartpole")


def test_cuda_form_runs_in_the_emulator():
    from workbench.runtime import cuda_emu
    if cuda_emu.find_cxx() is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    r = pendulum(300, 6)
    ins = wb.RepeatSession(r, seed=2).inputs()
    fn = cuda_emu.build("wb_repeat_pendulum", fused_cuda_source(r, "wb_repeat_pendulum"))
    out = {o: np.full(r.value(o).shape, np.nan, np.float32) for o in r.outputs}
    args = [ins[i] for i in r.carried_inputs] + [out[o] for o in r.carried_outputs] \
        + [ins[s] for s in r.stacked_inputs] + [out[o] for o in r.stacked_outputs] \
        + [ins[s] for s in r.invariant_inputs]
    # two launches of 3 steps each, the state through memory between them
    mid = {o: np.full(r.value(o).shape, np.nan, np.float32) for o in r.carried_outputs}
    first = [ins[i] for i in r.carried_inputs] + [mid[o] for o in r.carried_outputs] + args[4:]
    cuda_emu.run(fn, 2, 128, [*first, np.array(0, np.int64), np.array(3, np.int64)])
    second = [mid[o] for o in r.carried_outputs] + args[2:]
    cuda_emu.run(fn, 2, 128, [*second, np.array(3, np.int64), np.array(3, np.int64)])
    reference_close(r, out, r.reference(ins), 6)


def _random_walk(n, trips):
    """x_next = x + (u - 0.5), u = random_uniform(key, environment, step): additions of
    exact numbers, so every form -- NumPy, C unfused and fused, CUDA -- gives the same
    bits, and the numbers drawn are compared exactly."""
    b = wb.GraphBuilder("walk")
    x = b.input("x", (n,))
    u = b.op("random_uniform", b.input("key", (), "int64", range=(-2 ** 40, 2 ** 40)),
             b.input("env", (n,), "int32"), b.input("t", (), "int32"))
    b.output(x + (u - 0.5), "x_next")
    b.output(u, "u")
    return wb.repeat(b.build(), trips, {"x": "x_next"}, step_input="t", index_input="env")


def test_random_numbers_agree_bit_for_bit_in_every_form():
    from workbench.runtime import cuda_emu
    r = _random_walk(1000, TRIPS)
    ins = wb.RepeatSession(r, seed=4).inputs()
    want = r.reference(ins)
    for f in (None, 1, 2, 7, TRIPS):
        got = RepeatProgram(r, f).run(ins, checked=True)
        for o in r.outputs:
            assert np.array_equal(bits(got[o]), bits(want[o])), (f, o)
    # each environment and step drew its own number
    assert len(np.unique(want["u"])) > 0.99 * want["u"].size
    if cuda_emu.find_cxx() is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    r = _random_walk(300, 5)
    ins = wb.RepeatSession(r, seed=6).inputs()
    want = r.reference(ins)
    fn = cuda_emu.build("wb_repeat_walk", fused_cuda_source(r, "wb_repeat_walk"))
    out = {o: np.full(r.value(o).shape, np.nan, np.float32) for o in r.outputs}
    cuda_emu.run(fn, 2, 128, [ins["x"], out["x_next"], out["u"], ins["key"],
                              np.array(0, np.int64), np.array(5, np.int64)])
    for o in r.outputs:
        assert np.array_equal(bits(out[o]), bits(want[o])), o
