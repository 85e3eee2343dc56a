#!/usr/bin/env python
"""The OpenMP wait policy with one BLAS thread: PASSIVE against libgomp's default, for
zoo models under ``rules`` on the CPU backend.

libgomp reads ``OMP_WAIT_POLICY`` once, when it loads, so each measurement is a fresh
process (this script re-runs itself with ``--worker``); processes of the two policies
alternate, ``--rounds`` times, and the report gives every round (the first carries
the cold kernel cache). A worker times ``--calls`` whole ``Program.run`` calls (BLAS
at the default one thread) after three warm-up calls and prints the median.

    .venv/bin/python benchmarks/omp_wait_policy.py --models gpt2 vit --rounds 3

Writes ``<out>/omp_wait_policy-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("PASSIVE", "default")


def worker(name: str, calls: int, folder: str) -> None:
    import numpy as np
    sys.path.insert(0, str(ROOT))
    from workbench import Session, zoo
    from workbench.frontends import load_onnx
    m = zoo.build(name, size="small")
    s = Session(load_onnx(zoo.export_onnx(m, Path(folder) / f"{name}.onnx")), backend="cpu")
    s.auto("rules")
    prog, ins = s.program(), m.numpy_inputs()
    for _ in range(3):
        prog.run(ins)
    t = []
    for _ in range(calls):
        t0 = time.perf_counter()
        prog.run(ins)
        t.append(time.perf_counter() - t0)
    print(json.dumps(float(np.median(t) * 1e3)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "vit"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="wb-omp-")
    if a.worker:
        worker(a.worker, a.calls, tmp)
        return 0
    res = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "load_average_at_start": list(os.getloadavg()), "cores": os.cpu_count(),
           "calls": a.calls, "ms": {}}
    for rnd in range(a.rounds):
        for model in a.models:
            for pol in POLICIES:
                env = dict(os.environ, WORKBENCH_CACHE=str(Path(tmp) / "cache"))
                env.pop("OMP_WAIT_POLICY", None)
                if pol != "default":
                    env["OMP_WAIT_POLICY"] = pol
                r = subprocess.run([sys.executable, __file__, "--worker", model, "--calls",
                                    str(a.calls)], env=env, capture_output=True, text=True)
                v = (json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                     else f"failed: {r.stderr.strip().splitlines()[-1][:200]}")
                res["ms"].setdefault(model, {}).setdefault(pol, []).append(v)
                print(f"round {rnd}: {model} {pol}: {v}", file=sys.stderr, flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"omp_wait_policy-{_dt.date.today().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = [f"# OpenMP wait policy, BLAS on one thread ({res['date']})", "",
             f"{res['cores']} cores, load average at start "
             f"{', '.join(f'{x:.1f}' for x in res['load_average_at_start'])} (the machine "
             "was shared with other jobs). Zoo size small, `rules`, CPU backend; median ms "
             f"of {a.calls} `Program.run` calls per process, processes alternated; one "
             "column per round (round 0 compiles into a cold kernel cache).", "",
             "| model | policy | " + " | ".join(f"round {i}" for i in range(a.rounds)) + " |",
             "|---|---|" + "---|" * a.rounds]
    for model, per in res["ms"].items():
        for pol, vs in per.items():
            lines.append(f"| {model} | {pol} | " + " | ".join(
                f"{v:.2f}" if isinstance(v, float) else str(v) for v in vs) + " |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
