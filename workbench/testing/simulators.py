"""Classic-control simulators as step graphs, for repeats (``ir/repeat.py``).

Each function builds gymnasium's own classic-control step (``gymnasium/envs/
classic_control/*.py``: the same constants, the same order of operations) over ``n``
environments in float32, one array of shape (n,) per state variable, and returns it as
a :class:`~workbench.ir.repeat.Repeat` of ``steps`` steps. Gymnasium computes in
float64; ``tests/ir/test_simulators.py`` checks these against its step on the same
states and actions.

Terminations and resets are masks, as vectorized environments do them: where a step
terminates, the state carried on is the environment's reset state (body inputs
``*_reset``, one per environment, invariant over the steps) -- gymnasium's vector
environments reset in the step after (``autoreset_mode="next_step"``); here the reset
happens in the same step, so no step is wasted. Actions are stacked inputs (one per
environment and step); rewards and termination masks are stacked outputs.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import GraphBuilder
from ..ir.repeat import Repeat, repeat

# gymnasium's CartPole-v1 constants (cartpole.py)
CARTPOLE = dict(gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, force_mag=10.0,
                tau=0.02, theta_threshold=12 * 2 * math.pi / 360, x_threshold=2.4)
# Pendulum-v1 (pendulum.py)
PENDULUM = dict(max_speed=8.0, max_torque=2.0, dt=0.05, g=10.0, m=1.0, l=1.0)
# MountainCar-v0 (mountain_car.py)
MOUNTAIN_CAR = dict(min_position=-1.2, max_position=0.6, max_speed=0.07,
                    goal_position=0.5, goal_velocity=0.0, force=0.001, gravity=0.0025)


def _f32(b, v):
    """A float32 scalar constant (a where's branches take no dtype from a bool mask)."""
    return b.constant(np.float32(v))


def _reset(b, done, stepped, names, n, ranges):
    """The state carried on: each variable's reset value where ``done``."""
    out = []
    for name, v in zip(names, stepped):
        r = b.input(f"{name}_reset", (n,), range=ranges[name])
        out.append(b.output(b.where(done, r, v), f"{name}_next"))
    return out


def cartpole_step(n: int, *, resets: bool = True):
    """One CartPole-v1 step (Euler integrator, reward 1 per step, the default)."""
    c = CARTPOLE
    b = GraphBuilder("cartpole", "gymnasium CartPole-v1 step over n environments")
    names = ("x", "x_dot", "theta", "theta_dot")
    # random test states: the whole region an episode lives in (never zeros)
    wide = {"x": 2.4, "x_dot": 2.0, "theta": 0.2, "theta_dot": 2.0}
    x, x_dot, theta, theta_dot = (b.input(s, (n,), range=(-wide[s], wide[s])) for s in names)
    action = b.input("action", (n,), "int32", range=(0, 2))
    total_mass = c["masspole"] + c["masscart"]
    polemass_length = c["masspole"] * c["length"]
    force = b.where(b.eq(action, 1), _f32(b, c["force_mag"]), _f32(b, -c["force_mag"]))
    costheta, sintheta = b.cos(theta), b.sin(theta)
    temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
    thetaacc = (c["gravity"] * sintheta - costheta * temp) / (
        c["length"] * (4.0 / 3.0 - c["masspole"] * (costheta * costheta) / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    tau = c["tau"]
    stepped = (x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot,
               theta_dot + tau * thetaacc)
    nx, nth = stepped[0], stepped[2]
    th = c["theta_threshold"]
    done = b.op("or", b.op("or", b.lt(nx, -c["x_threshold"]), b.gt(nx, c["x_threshold"])),
                b.op("or", b.lt(nth, -th), b.gt(nth, th)))
    if resets:
        _reset(b, done, stepped, names, n, dict.fromkeys(names, (-0.05, 0.05)))
    else:
        for name, v in zip(names, stepped):
            b.output(v, f"{name}_next")
    b.output(b.where(done, _f32(b, 1.0), _f32(b, 1.0)), "reward")
    b.output(done, "terminated")
    return b.build()


def pendulum_step(n: int, noise: float = 0.0):
    """One Pendulum-v1 step: state (th, thdot), torque u clipped to +-2; reward -cost.
    (It never terminates: the time limit is a wrapper's.) With ``noise`` > 0 the
    action gets Gaussian noise of that standard deviation before the clip, drawn by the
    counter-based ``random_normal`` from (``key``, environment ``env``, step ``t``) --
    inputs the repeat fills (``pendulum(..., noise=)``) -- so every fused form draws
    the same numbers."""
    c = PENDULUM
    b = GraphBuilder("pendulum" if not noise else "noisy_pendulum",
                     "gymnasium Pendulum-v1 step over n environments"
                     + (f", N(0, {noise}^2) action noise" if noise else ""))
    th = b.input("th", (n,), range=(-math.pi, math.pi))
    thdot = b.input("thdot", (n,), range=(-c["max_speed"], c["max_speed"]))
    u = b.input("u", (n,), range=(-3, 3))
    if noise:
        key = b.input("key", (), "uint32", range=(0, 2 ** 31))
        z = b.op("random_normal", key, b.input("env", (n,), "int32"), b.input("t", (), "int32"))
        u = u + noise * z
    u = b.clip(u, -c["max_torque"], c["max_torque"])
    norm = b.mod(th + math.pi, 2 * math.pi) - math.pi          # angle_normalize
    costs = norm * norm + 0.1 * (thdot * thdot) + 0.001 * (u * u)
    newthdot = thdot + (3 * c["g"] / (2 * c["l"]) * b.sin(th)
                        + 3.0 / (c["m"] * c["l"] ** 2) * u) * c["dt"]
    newthdot = b.clip(newthdot, -c["max_speed"], c["max_speed"])
    b.output(th + newthdot * c["dt"], "th_next")
    b.output(newthdot, "thdot_next")
    b.output(-costs, "reward")
    return b.build()


def mountain_car_step(n: int, *, resets: bool = True):
    """One MountainCar-v0 step: action 0/1/2 pushes left/none/right; reward -1."""
    c = MOUNTAIN_CAR
    b = GraphBuilder("mountain_car", "gymnasium MountainCar-v0 step over n environments")
    pos = b.input("position", (n,), range=(c["min_position"], c["max_position"]))
    vel = b.input("velocity", (n,), range=(-c["max_speed"], c["max_speed"]))
    action = b.input("action", (n,), "int32", range=(0, 3))
    push = b.cast(action - 1, to="float32") * c["force"]
    vel = vel + (push + b.cos(3.0 * pos) * (-c["gravity"]))
    vel = b.clip(vel, -c["max_speed"], c["max_speed"])
    pos = b.clip(pos + vel, c["min_position"], c["max_position"])
    vel = b.where(b.op("and", b.eq(pos, c["min_position"]), b.lt(vel, 0.0)), 0.0, vel)
    done = b.op("and", b.ge(pos, c["goal_position"]), b.ge(vel, c["goal_velocity"]))
    if resets:
        # gymnasium's reset: position in [-0.6, -0.4), velocity 0 (here near 0)
        _reset(b, done, (pos, vel), ("position", "velocity"), n,
               {"position": (-0.6, -0.4), "velocity": (-1e-3, 1e-3)})
    else:
        b.output(pos, "position_next")
        b.output(vel, "velocity_next")
    b.output(b.where(done, _f32(b, -1.0), _f32(b, -1.0)), "reward")
    b.output(done, "terminated")
    return b.build()


# Acrobot-v1 (acrobot.py; book dynamics, no torque noise)
ACROBOT = dict(dt=0.2, l1=1.0, m1=1.0, m2=1.0, lc1=0.5, lc2=0.5, moi=1.0, g=9.8,
               max_vel_1=4 * math.pi, max_vel_2=9 * math.pi)


def _acrobot_dsdt(b, s, torque):
    """gymnasium's ``AcrobotEnv._dsdt`` (the "book" dynamics) on tensors."""
    c = ACROBOT
    m1, m2, l1, lc1, lc2, i1, i2, g = (c["m1"], c["m2"], c["l1"], c["lc1"], c["lc2"],
                                       c["moi"], c["moi"], c["g"])
    theta1, theta2, dtheta1, dtheta2 = s
    cos2, sin2 = b.cos(theta2), b.sin(theta2)
    d1 = m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * cos2) + i1 + i2
    d2 = m2 * (lc2 ** 2 + l1 * lc2 * cos2) + i2
    phi2 = m2 * lc2 * g * b.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * b.cos(theta1 - math.pi / 2) + phi2)
    ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin2
                - phi2) / (m2 * lc2 ** 2 + i2 - (d2 * d2) / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def acrobot_step(n: int, *, resets: bool = True):
    """One Acrobot-v1 step: RK4 over dt = 0.2 with torque -1/0/+1 (action 0/1/2), the
    angles wrapped to [-pi, pi] (once: one step moves an angle less than 2 pi), the
    velocities bounded; terminated when the tip is above the bar; reward -1, 0 there."""
    c = ACROBOT
    b = GraphBuilder("acrobot", "gymnasium Acrobot-v1 step over n environments")
    names = ("theta1", "theta2", "dtheta1", "dtheta2")
    wide = {"theta1": math.pi, "theta2": math.pi, "dtheta1": c["max_vel_1"],
            "dtheta2": c["max_vel_2"]}
    y0 = [b.input(s, (n,), range=(-wide[s], wide[s])) for s in names]
    action = b.input("action", (n,), "int32", range=(0, 3))
    torque = b.cast(action - 1, to="float32")               # AVAIL_TORQUE[a]
    dt = c["dt"]
    k1 = _acrobot_dsdt(b, y0, torque)
    k2 = _acrobot_dsdt(b, [y + dt / 2.0 * k for y, k in zip(y0, k1)], torque)
    k3 = _acrobot_dsdt(b, [y + dt / 2.0 * k for y, k in zip(y0, k2)], torque)
    k4 = _acrobot_dsdt(b, [y + dt * k for y, k in zip(y0, k3)], torque)
    ns = [y + dt / 6.0 * (a1 + 2 * a2 + 2 * a3 + a4)
          for y, a1, a2, a3, a4 in zip(y0, k1, k2, k3, k4)]
    two_pi, pi = _f32(b, 2 * math.pi), math.pi
    for i in (0, 1):                                         # wrap(x, -pi, pi)
        x = ns[i]
        x = b.where(b.gt(x, pi), x - two_pi, x)
        ns[i] = b.where(b.lt(x, -pi), x + two_pi, x)
    ns[2] = b.clip(ns[2], -c["max_vel_1"], c["max_vel_1"])
    ns[3] = b.clip(ns[3], -c["max_vel_2"], c["max_vel_2"])
    done = b.gt(-b.cos(ns[0]) - b.cos(ns[1] + ns[0]), 1.0)
    if resets:
        _reset(b, done, ns, names, n, dict.fromkeys(names, (-0.1, 0.1)))
    else:
        for name, v in zip(names, ns):
            b.output(v, f"{name}_next")
    b.output(b.where(done, _f32(b, 0.0), _f32(b, -1.0)), "reward")
    b.output(done, "terminated")
    return b.build()


def particles_step(n: int, k: int = 16):
    """A memory-heavier step (not a gymnasium environment): ``k`` particles per
    environment on damped springs under gravity, bouncing off the floor at 0
    (semi-implicit Euler, dt = 0.01). Its state is 2k floats per environment against
    CartPole's 4, and it streams nothing per step: the traffic fusing saves is all of
    it (the issue: the gain grows with the memory a simulator moves)."""
    b = GraphBuilder("particles", f"{k} bouncing particles per environment")
    x = b.input("x", (n, k), range=(0.1, 2.0))
    v = b.input("v", (n, k), range=(-1.0, 1.0))
    dt, spring, damping, g = 0.01, 4.0, 0.1, 9.8
    a = -spring * (x - 1.0) - damping * v - g
    v2 = v + dt * a
    x2 = x + dt * v2
    below = b.lt(x2, 0.0)
    b.output(b.where(below, -x2, x2), "x_next")
    b.output(b.where(below, -0.9 * v2, v2), "v_next")
    return b.build()


def particles(n: int, steps: int, k: int = 16) -> Repeat:
    return _rollout(particles_step(n, k), ("x", "v"), (), steps)


def _rollout(step, state: tuple[str, ...], stacked: tuple[str, ...], steps: int) -> Repeat:
    return repeat(step, steps, {s: f"{s}_next" for s in state}, stacked=stacked,
                  name=f"{step.name}_x{steps}")


def cartpole(n: int, steps: int, *, resets: bool = True) -> Repeat:
    """``steps`` CartPole steps over ``n`` environments, actions stacked."""
    return _rollout(cartpole_step(n, resets=resets), ("x", "x_dot", "theta", "theta_dot"),
                    ("action",), steps)


def pendulum(n: int, steps: int, *, noise: float = 0.0) -> Repeat:
    """``steps`` Pendulum steps over ``n`` environments, torques stacked; ``noise`` > 0:
    Gaussian action noise keyed by (key, environment, step) (see pendulum_step)."""
    step = pendulum_step(n, noise)
    if not noise:
        return _rollout(step, ("th", "thdot"), ("u",), steps)
    return repeat(step, steps, {"th": "th_next", "thdot": "thdot_next"}, stacked=("u",),
                  name=f"{step.name}_x{steps}", step_input="t", index_input="env")


def mountain_car(n: int, steps: int, *, resets: bool = True) -> Repeat:
    return _rollout(mountain_car_step(n, resets=resets), ("position", "velocity"),
                    ("action",), steps)


def acrobot(n: int, steps: int, *, resets: bool = True) -> Repeat:
    return _rollout(acrobot_step(n, resets=resets),
                    ("theta1", "theta2", "dtheta1", "dtheta2"), ("action",), steps)


def torch_cartpole_step(torch):
    """The same CartPole step written in torch (float32, resets as masks), for the
    benchmarks' torch rows and the torch importer's check: ``step(x, x_dot, theta,
    theta_dot, action, resets) -> (x, x_dot, theta, theta_dot, reward, terminated)``.
    (``torch`` is passed in: this module imports no torch.)"""
    c = CARTPOLE
    total, pml = c["masspole"] + c["masscart"], c["masspole"] * c["length"]

    def step(x, x_dot, th, th_dot, action, resets):
        force = torch.where(action == 1, c["force_mag"], -c["force_mag"])
        cos, sin = torch.cos(th), torch.sin(th)
        temp = (force + pml * (th_dot * th_dot) * sin) / total
        thacc = (c["gravity"] * sin - cos * temp) / (
            c["length"] * (4.0 / 3.0 - c["masspole"] * (cos * cos) / total))
        xacc = temp - pml * thacc * cos / total
        nx, nxd = x + c["tau"] * x_dot, x_dot + c["tau"] * xacc
        nth, nthd = th + c["tau"] * th_dot, th_dot + c["tau"] * thacc
        done = (nx < -c["x_threshold"]) | (nx > c["x_threshold"]) | \
            (nth < -c["theta_threshold"]) | (nth > c["theta_threshold"])
        new = [torch.where(done, r, v) for r, v in zip(resets, (nx, nxd, nth, nthd))]
        return (*new, torch.ones_like(nx), done)
    return step


SIMULATORS = {"cartpole": cartpole, "pendulum": pendulum, "mountain_car": mountain_car,
              "acrobot": acrobot}
