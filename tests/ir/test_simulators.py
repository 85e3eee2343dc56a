"""The classic-control samples (testing/simulators.py) against gymnasium's own step.

For each simulator: many environments from random states (wider than gymnasium's
resets, never zeros), random actions, many steps; at every step gymnasium's step is
run from our float32 state (widened to float64) with the same action, and our float32
step must agree within float32 rounding: |ours - gym| <= 8 eps32 (|gym| + 1), eps32 =
2^-23 (one step's float32 arithmetic on numbers of order one, against float64's), with
termination masks equal (and the reset state carried where gym terminated).
"""
from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from workbench.runtime import run_reference
from workbench.testing.simulators import (acrobot_step, cartpole, cartpole_step,
                                          mountain_car, mountain_car_step, pendulum_step)

EPS32 = float(np.finfo(np.float32).eps)
BOUND = 8 * EPS32
N, STEPS = 48, 60


def close(ours, gym_value):
    return abs(float(ours) - float(gym_value)) <= BOUND * (abs(float(gym_value)) + 1)


def run_against_gym(env_id, graph, state_names, draw_state, draw_action, gym_state,
                    rng, terminates=True, angles=(), bound=BOUND):
    envs = [gym.make(env_id).unwrapped for _ in range(N)]
    for e in envs:
        e.reset(seed=0)
    state = {s: draw_state(s, rng) for s in state_names}
    resets = {f"{s}_reset": draw_state(s, rng) for s in state_names} if terminates else {}
    checked = done_seen = 0
    for _ in range(STEPS):
        action = draw_action(rng)
        act_name = "u" if env_id.startswith("Pendulum") else "action"
        res = run_reference(graph, {**state, **resets, act_name: action})
        for i, e in enumerate(envs):
            e.state = np.array([np.float64(state[s][i]) for s in state_names])
            e.steps_beyond_terminated = None    # (CartPole: a fresh episode's step)
            a = action[i] if act_name == "action" else np.array([action[i]], np.float32)
            _, reward, term, _, _ = e.step(int(a) if act_name == "action" else a)
            gym_next = gym_state(e)
            assert close(res["reward"][i], reward), (i, res["reward"][i], reward)
            if terminates:
                assert bool(res["terminated"][i]) == bool(term), (i, state, gym_next)
                done_seen += bool(term)
            for s, g in zip(state_names, gym_next):
                want = resets[f"{s}_reset"][i] if terminates and term else g
                got = float(res[f"{s}_next"][i])
                if s in angles:     # the same angle either side of the wrap at +-pi
                    got = want + (got - want + np.pi) % (2 * np.pi) - np.pi
                assert abs(got - float(want)) <= bound * (abs(float(want)) + 1), \
                    (s, i, got, want)
                checked += 1
        state = {s: res[f"{s}_next"] for s in state_names}
    return checked, done_seen


def test_cartpole_matches_gymnasium():
    rng = np.random.default_rng(0)
    wide = {"x": 2.4, "x_dot": 2.0, "theta": 0.21, "theta_dot": 2.0}
    checked, done = run_against_gym(
        "CartPole-v1", cartpole_step(N), tuple(wide),
        lambda s, r: r.uniform(-wide[s], wide[s], N).astype(np.float32),
        lambda r: r.integers(0, 2, N).astype(np.int32),
        lambda e: e.state, rng)
    assert checked == N * STEPS * 4 and done > 20     # resets were exercised


def test_pendulum_matches_gymnasium():
    rng = np.random.default_rng(1)
    checked, _ = run_against_gym(
        "Pendulum-v1", pendulum_step(N), ("th", "thdot"),
        lambda s, r: r.uniform(-np.pi if s == "th" else -8, np.pi if s == "th" else 8,
                               N).astype(np.float32),
        lambda r: r.uniform(-3, 3, N).astype(np.float32),   # clipped to +-2 by the step
        lambda e: e.state, rng, terminates=False)
    assert checked == N * STEPS * 2


def test_mountain_car_matches_gymnasium():
    rng = np.random.default_rng(2)
    lo = {"position": -1.2, "velocity": -0.07}
    hi = {"position": 0.6, "velocity": 0.07}
    checked, done = run_against_gym(
        "MountainCar-v0", mountain_car_step(N), ("position", "velocity"),
        lambda s, r: r.uniform(lo[s], hi[s], N).astype(np.float32),
        lambda r: r.integers(0, 3, N).astype(np.int32),
        lambda e: e.state, rng)
    assert checked == N * STEPS * 2 and done > 5


def test_acrobot_matches_gymnasium():
    # RK4's four evaluations, over terms up to (9 pi)^2 that cancel: 64 eps32 (|x| + 1)
    rng = np.random.default_rng(3)
    hi = {"theta1": np.pi, "theta2": np.pi, "dtheta1": 4 * np.pi, "dtheta2": 9 * np.pi}
    checked, done = run_against_gym(
        "Acrobot-v1", acrobot_step(N), tuple(hi),
        lambda s, r: r.uniform(-hi[s], hi[s], N).astype(np.float32),
        lambda r: r.integers(0, 3, N).astype(np.int32),
        lambda e: e.state, rng, angles=("theta1", "theta2"), bound=64 * EPS32)
    assert checked == N * STEPS * 4 and done > 5


def test_rollouts_are_repeats_of_the_steps():
    r = cartpole(8, 12)
    assert r.trips == 12 and r.stacked_inputs == ("action",)
    assert r.stacked_outputs == ("reward", "terminated")
    m = mountain_car(8, 3)
    assert m.carried == (("position", "position_next"), ("velocity", "velocity_next"))


def test_the_json_samples_are_the_builders(tmp_path):
    """sample_graphs/repeats/ is what make_repeat_samples.py writes today, and loads."""
    import importlib.util
    from pathlib import Path
    from workbench.ir.repeat import load_repeat
    here = Path(__file__).resolve().parents[2] / "sample_graphs"
    spec = importlib.util.spec_from_file_location("mrs", here / "make_repeat_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path)
    for p in sorted((here / "repeats").glob("*.json")):
        assert p.read_text() == (tmp_path / p.name).read_text(), \
            "run `python sample_graphs/make_repeat_samples.py`"
        r = load_repeat(p)
        assert r.trips == mod.STEPS and r.batch == mod.ENVS
    assert sorted(p.name for p in (here / "repeats").glob("*.json")) == \
        sorted(p.name for p in tmp_path.glob("*.json"))
