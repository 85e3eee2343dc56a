"""What counter-based random numbers cost inside a fused repeat: Pendulum-v1 with and
without Gaussian action noise (``random_normal(key, environment, step)``,
ops/random.py), environments x 256 steps, unfused and fused F steps per call.

Rows timed side by side in one run (alternating, a pause before each; best of
``--rounds``); the check first: every fused F bit for bit equal to the unfused run.

    python benchmarks/repeat_noise.py                    # 4096 and 65536 environments
    python benchmarks/repeat_noise.py --envs 1024 --rounds 1 --out /tmp/n

Writes ``benchmarks/results/repeat-noise-<date>.{json,md}`` (machine, versions, samples).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, SETTLE_S, log, machine_line, write_results

FS = (None, 16, 256)


def programs(n: int, steps: int):
    """(simulator, F) -> (program, inputs, outputs), and the bitwise checks."""
    import workbench as wb
    from workbench.runtime.repeat_program import RepeatProgram
    from workbench.testing.simulators import pendulum
    progs, checks = {}, {}
    for sim, r in (("pendulum", pendulum(n, steps)),
                   ("pendulum + noise", pendulum(n, steps, noise=0.5))):
        ins = wb.RepeatSession(r, seed=1).inputs()
        ref = None
        for f in FS:
            p = RepeatProgram(r, f)
            out = p.run(ins, checked=True)
            if ref is None:
                ref = out
            else:
                checks[f"{sim} x{f} bitwise == unfused"] = all(
                    np.array_equal(out[o].view(np.uint8), ref[o].view(np.uint8))
                    for o in r.outputs)
            progs[(sim, f)] = (p, ins, p.new_outputs())
    return progs, checks


def markdown(res: dict) -> str:
    lines = ["# Random numbers in a fused repeat: Pendulum with and without action noise "
             "(benchmarks/repeat_noise.py)", "",
             machine_line(res) + f"; {res['date']}; threads {res['threads']}.", "",
             f"Best of {res['rounds']} runs, rows alternating with {SETTLE_S} s pauses. "
             "Noise: `0.5 * random_normal(key, env, t)` added to the torque (Philox-4x32-10 "
             "and Box-Muller per environment and step). `x noise` = the noisy row's time "
             "over the noiseless row's of the same form.", ""]
    for case in res["cases"]:
        rows = case["rows"]
        lines += [f"## {case['envs']} environments x {case['steps']} steps", "",
                  "| simulator | form | best ms | M steps/s | x noise |", "|---|---|---|---|---|"]
        for k, r in rows.items():
            sim, form = k.split(" | ")
            plain = rows.get(f"pendulum | {form}")
            ratio = r["best_ms"] / plain["best_ms"] if plain and sim != "pendulum" else None
            lines.append(f"| {sim} | {form} | {r['best_ms']:.2f} | "
                         f"{r['steps_per_s'] / 1e6:.1f} | "
                         + (f"{ratio:.2f}" if ratio else "") + " |")
        lines += [""] + [f"- check, {k}: {v}" for k, v in case["checks"].items()] + [""]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path,
                    default=RESULTS / f"repeat-noise-{dt.date.today().isoformat()}")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)    # (before the first kernel loads)
    res = {"date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "rounds": a.rounds, "threads": a.threads, "cases": [],
           "load_average_at_start": list(os.getloadavg())}
    for n in a.envs:
        log(f"pendulum: {n} environments x {a.steps} steps")
        progs, checks = programs(n, a.steps)
        samples = {k: [] for k in progs}
        for _ in range(a.rounds):
            for k, (p, ins, out) in progs.items():
                time.sleep(SETTLE_S)
                t0 = time.perf_counter()
                p.run(ins, out=out, checked=False)
                samples[k].append(time.perf_counter() - t0)
        label = lambda k: f"{k[0]} | {'unfused' if k[1] is None else f'fuse steps x{k[1]}'}"
        rows = {label(k): {"samples_s": v, "best_ms": min(v) * 1e3,
                           "steps_per_s": n * a.steps / min(v)} for k, v in samples.items()}
        res["cases"].append({"envs": n, "steps": a.steps, "rows": rows, "checks": checks})
        write_results(a.out, res, markdown)
        if not all(checks.values()):
            log("fused and unfused runs differ: see the checks")
            return 1
    log(f"wrote {a.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
