"""Multi-step (simulator) fusion on the CPU: CartPole (and a memory-heavier simulator),
environments x 256 steps.

Rows, timed side by side in one run (alternating, a pause before each): the workbench's
repeat unfused (the step kernel once per step) and fused F steps per call
(``RepeatSession.fuse_steps(F)``, F in 1, 4, 16, 64, 256); torch eager and
``torch.compile`` of the same step in a host loop (one compiled call per step: the
form ``torch.compile`` takes; its ``scan`` needs ``capture_scalar_outputs`` and runs a
host loop too); gymnasium's own vectorized CartPole (NumPy, ``make_vec(...,
"vector_entry_point")``) and EnvPool (C++ threads), where installed. Every row is steps
per second (environments x steps / seconds); the slow ones (gymnasium, EnvPool) are
timed over fewer steps, said in their row. Each method's best of ``--rounds`` runs.

    python benchmarks/temporal.py                 # 4096 and 65536 environments
    python benchmarks/temporal.py --envs 1024 --steps 16 --rounds 1 --out /tmp/t

Writes ``benchmarks/results/temporal-<date>.{json,md}`` (machine, versions, every
sample). Checks first: every fused F bit for bit equal to the unfused run, and torch's
final state within float32 rounding of the workbench's.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, SETTLE_S, first_line, log, machine_line, write_results

from workbench.testing.simulators import torch_cartpole_step

FS = (1, 4, 16, 64, 256)


def torch_rollout(torch, step, ins, steps):
    names = ("x", "x_dot", "theta", "theta_dot")
    state = [torch.from_numpy(ins[n]) for n in names]
    resets = [torch.from_numpy(ins[f"{n}_reset"]) for n in names]
    actions = torch.from_numpy(ins["action"])
    reward = torch.empty(actions.shape)
    done = torch.empty(actions.shape, dtype=torch.bool)

    def run():
        s = state
        for t in range(steps):
            *s, reward[t], done[t] = step(*s, actions[t], resets)
        return s
    return run


def workbench_calls(r, steps: int) -> tuple[dict, dict, dict]:
    """Repeat ``r``'s inputs (its session's, seed 0) and workbench forms, unfused and
    fused xF (F in FS up to ``steps``): name -> (call, steps it runs), and the checks
    that each fused form's outputs equal the unfused one's bit for bit (checked runs,
    poisoned outputs)."""
    import workbench as wb
    s = wb.RepeatSession(r, seed=0)
    ins = s.inputs()
    calls, checks = {}, {}
    unfused = s.program(None)
    out_u = unfused.new_outputs()
    calls["workbench unfused"] = (lambda: unfused.run(ins, out=out_u, checked=False), steps)
    want = unfused.run(ins, checked=True)
    for f in [f for f in FS if f <= steps]:
        prog = s.program(f)
        got = prog.run(ins, checked=True)
        checks[f"fused x{f} bitwise = unfused"] = all(
            np.array_equal(got[o].view(np.uint8), want[o].view(np.uint8)) for o in r.outputs)
        out = prog.new_outputs()
        calls[f"workbench fused x{f}"] = (lambda p=prog, o=out: p.run(ins, out=o,
                                                                       checked=False), steps)
    return ins, calls, checks


def methods_for(n: int, steps: int, a) -> tuple[dict, dict, dict]:
    """name -> (call, steps it runs), and the checks' results."""
    from workbench.testing.simulators import cartpole
    r = cartpole(n, steps)
    (ins, calls, checks), notes = workbench_calls(r, steps), {}
    try:
        import torch
        torch.set_num_threads(a.threads)
        step = torch_cartpole_step(torch)
        eager = torch_rollout(torch, step, ins, steps)
        calls["torch eager"] = (eager, steps)
        if not a.no_compile:
            t0 = time.perf_counter()
            compiled = torch_rollout(torch, torch.compile(step, fullgraph=True), ins, steps)
            try:
                compiled()
                notes["torch.compile"] = f"compiled in {time.perf_counter() - t0:.1f} s"
                calls["torch.compile (step, host loop)"] = (compiled, steps)
            except Exception as e:      # (a compile failure is a row's note, not a crash)
                notes["torch.compile"] = first_line(e)
        short = cartpole(n, min(8, steps))
        sh = {k: (v[:short.trips] if k == "action" else v) for k, v in ins.items()}
        ref = short.reference(sh)
        tor = torch_rollout(torch, step, sh, short.trips)()
        checks["torch eager max |state - reference| (8 steps)"] = float(max(
            np.abs(t.numpy() - ref[f"{k}_next"]).max()
            for t, k in zip(tor, ("x", "x_dot", "theta", "theta_dot"))))
    except ImportError:
        notes["torch"] = "not installed"
    slow = max(1, min(steps, a.slow_steps))
    try:
        import gymnasium
        venv = gymnasium.make_vec("CartPole-v1", num_envs=n,
                                  vectorization_mode="vector_entry_point")
        venv.reset(seed=0)
        acts = ins["action"][:slow]
        calls["gymnasium vector (NumPy)"] = (
            lambda: [venv.step(acts[t]) for t in range(slow)], slow)
    except Exception as e:
        notes["gymnasium"] = first_line(e)
    try:
        import envpool
        pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=n, batch_size=n,
                            num_threads=a.threads, seed=0)
        pool.reset()
        acts = ins["action"][:slow]
        calls[f"EnvPool ({a.threads} threads)"] = (
            lambda: [pool.step(acts[t]) for t in range(slow)], slow)
    except Exception as e:
        notes["EnvPool"] = first_line(e)
    return calls, notes, checks


def particle_methods(n: int, steps: int, a) -> tuple[dict, dict, dict]:
    """The memory-heavier simulator (testing/simulators.py ``particles``, 16 per
    environment): the workbench's forms beside torch eager and torch.compile."""
    from workbench.testing.simulators import particles
    r = particles(n, steps)
    (ins, calls, checks), notes = workbench_calls(r, steps), {}
    try:
        import torch
        torch.set_num_threads(a.threads)

        def step(x, v):
            v2 = v + 0.01 * (-4.0 * (x - 1.0) - 0.1 * v - 9.8)
            x2 = x + 0.01 * v2
            below = x2 < 0.0
            return torch.where(below, -x2, x2), torch.where(below, -0.9 * v2, v2)

        def rollout(fn):
            x0, v0 = torch.from_numpy(ins["x"]), torch.from_numpy(ins["v"])

            def run():
                x, v = x0, v0
                for _ in range(steps):
                    x, v = fn(x, v)
                return x, v
            return run
        calls["torch eager"] = (rollout(step), steps)
        if not a.no_compile:
            compiled = rollout(torch.compile(step, fullgraph=True))
            try:
                compiled()
                calls["torch.compile (step, host loop)"] = (compiled, steps)
            except Exception as e:
                notes["torch.compile"] = first_line(e)
    except ImportError:
        notes["torch"] = "not installed"
    return calls, notes, checks


def time_side_by_side(calls: dict, rounds: int) -> dict[str, list[float]]:
    samples = {k: [] for k in calls}
    for fn, _ in calls.values():
        fn()                                   # warm-up
    for _ in range(rounds):
        for k, (fn, _) in calls.items():
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
    return samples


def markdown(res: dict) -> str:
    lines = ["# Multi-step fusion: CartPole on the CPU (benchmarks/temporal.py)", "",
             machine_line(res) + f"; {res['date']}; threads {res['threads']}.", "",
             "Steps per second = environments x steps / seconds (best of "
             f"{res['rounds']} runs, methods alternating with {SETTLE_S} s pauses). `x` "
             "= the row's steps/s over torch.compile's and EnvPool's. The particles "
             "simulator (testing/simulators.py) has 32 floats of state per environment "
             "against CartPole's 4 and streams nothing per step: it shows fusing's "
             "gain as a step's memory traffic grows.", ""]
    for case in res["cases"]:
        rows = case["rows"]
        base = {k: rows[k]["steps_per_s"] for k in rows
                if k.startswith(("torch.compile", "EnvPool"))}
        what = {"cartpole": "CartPole", "particles": "particles (16 per environment, "
                "the memory-heavier simulator)"}[case.get("sim", "cartpole")]
        lines += [f"## {what}: {case['envs']} environments x {case['steps']} steps", "",
                  "| method | steps timed | best ms | M steps/s | " +
                  " | ".join(f"x {k.split(' ')[0]}" for k in base) + " |",
                  "|---|---|---|---|" + "---|" * len(base)]
        for k, r in rows.items():
            lines.append(f"| {k} | {r['steps']} | {r['best_ms']:.2f} | "
                         f"{r['steps_per_s'] / 1e6:.2f} | " +
                         " | ".join(f"{r['steps_per_s'] / b:.2f}" for b in base.values())
                         + " |")
        lines += [""] + [f"- {k}: {v}" for k, v in case["notes"].items()]
        lines += [f"- check, {k}: {v}" for k, v in case["checks"].items()] + [""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    # one thread each by default, as the issue measured: on the shared 2-core VM a
    # second thread waits at every barrier for a core another job holds
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--slow-steps", type=int, default=16,
                    help="steps gymnasium and EnvPool are timed over")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--particle-envs", type=int, nargs="*", default=[65536],
                    help="environments of the memory-heavier simulator (16 particles "
                         "each); none to leave it out")
    ap.add_argument("--out", type=Path,
                    default=RESULTS / f"temporal-{dt.date.today().isoformat()}")
    a = ap.parse_args(argv)
    import os
    # (read by the OpenMP runtime when the first kernel library loads, after this)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    res = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "rounds": a.rounds, "threads": a.threads, "cases": [],
           "load_average_at_start": list(os.getloadavg())}
    cases = [("cartpole", n) for n in a.envs] + \
        ([("particles", n) for n in a.particle_envs] if a.particle_envs else [])
    for sim, n in cases:
        log(f"{sim}: {n} environments x {a.steps} steps")
        calls, notes, checks = (methods_for if sim == "cartpole" else
                                particle_methods)(n, a.steps, a)
        samples = time_side_by_side(calls, a.rounds)
        rows = {k: {"steps": calls[k][1], "samples_s": v, "best_ms": min(v) * 1e3,
                    "steps_per_s": n * calls[k][1] / min(v)} for k, v in samples.items()}
        res["cases"].append({"sim": sim, "envs": n, "steps": a.steps, "rows": rows,
                             "notes": notes, "checks": checks})
        write_results(a.out, res, markdown)
        if not all(v is True for k, v in checks.items() if "bitwise" in k):
            log("fused and unfused runs differ: see the checks")
            return 1
    log(f"wrote {a.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
