#!/usr/bin/env python
"""How the kernels' OpenMP threads wait between kernels: libgomp's settings against the
workbench's own, for zoo models on the CPU backend (BLAS on one thread).

libgomp reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it loads, so each
measurement is a fresh process (this script re-runs itself with ``--worker``). The
worker loads the model from ONNX and its inputs from ``.npz`` files the parent wrote
and never imports torch, whose own libgomp would otherwise be loaded first with the
environment as it was (the ``workbench`` setting is then what ``cc.load_library``
chooses, as a user's process without torch gets it). Processes of the settings
alternate, ``--rounds`` times; the report gives every round (the first carries the
cold kernel cache). A worker times ``--calls`` whole ``Program.run`` calls after three
warm-up calls and prints the median.

    .venv/bin/python benchmarks/omp_wait_policy.py --models vit bert --rounds 3

Writes ``<out>/omp_wait_policy-<date><tag>.{json,md}``.
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

from harness import RESULTS

TORCH_FIRST = "WB_BENCH_IMPORT_TORCH_FIRST"
# setting -> the environment a worker starts with (every other OpenMP variable unset);
# GOMP_SPINCOUNT spins are PAUSE instructions, about 26 ns each on the Zen 4 measured
SETTINGS = {
    "workbench": {},           # none set: cc.load_library chooses
    "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 3000": {"GOMP_SPINCOUNT": "3000"},
    "spin 10000": {"GOMP_SPINCOUNT": "10000"},
    "spin 30000": {"GOMP_SPINCOUNT": "30000"},
    "spin 100000": {"GOMP_SPINCOUNT": "100000"},
    "libgomp default (spin 300000)": {"GOMP_SPINCOUNT": "300000"},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    # torch imported first (its libgomp loaded with these): the kernels run on their own
    # copy all the same (runtime/openmp.py; WB_PRIVATE_OPENMP=0 shares torch's)
    "torch first, PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE", TORCH_FIRST: "1"},
    "torch first, workbench": {TORCH_FIRST: "1"},
}
OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def worker(onnx: str, inputs: str, planner: str, calls: int) -> None:
    torch_first = os.environ.get(TORCH_FIRST) == "1"
    if torch_first:
        import torch  # noqa: F401  (loads torch's libgomp before any kernel)
    import numpy as np
    from workbench import Session
    from workbench.frontends import load_onnx
    s = Session(load_onnx(onnx), backend="cpu")
    s.auto(planner)
    with np.load(inputs) as f:
        ins = {k: f[k] for k in f.files}
    prog = s.program()
    for _ in range(3):
        prog.run(ins)
    t = []
    for _ in range(calls):
        t0 = time.perf_counter()
        prog.run(ins)
        t.append(time.perf_counter() - t0)
    assert torch_first or "torch" not in sys.modules, "the worker loaded torch's libgomp"
    print(json.dumps(float(np.median(t) * 1e3)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["vit", "bert"])
    ap.add_argument("--planner", default="stitch")
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tag", default="", help="appended to the result files' names")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(*a.worker, a.planner, a.calls)
        return 0
    import numpy as np
    from workbench.testing import zoo
    tmp = Path(tempfile.mkdtemp(prefix="wb-omp-"))
    files = {}
    for name in a.models:
        m = zoo.build(name, size="small")
        np.savez(tmp / f"{name}.npz", **m.numpy_inputs())
        files[name] = (str(zoo.export_onnx(m, tmp / f"{name}.onnx")), str(tmp / f"{name}.npz"))
    res = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "load_average_at_start": list(os.getloadavg()), "cores": os.cpu_count(),
           "planner": a.planner, "calls": a.calls,
           "settings": {k: SETTINGS[k] for k in a.settings}, "ms": {}}
    for rnd in range(a.rounds):
        for model in a.models:
            for name in a.settings:
                env = dict(os.environ, WORKBENCH_CACHE=str(tmp / "cache"))
                for v in OPENMP_VARIABLES:
                    env.pop(v, None)
                env.update(SETTINGS[name])
                r = subprocess.run([sys.executable, __file__, "--worker", *files[model],
                                    "--planner", a.planner, "--calls", str(a.calls)],
                                   env=env, capture_output=True, text=True)
                v = (json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                     else f"failed: {r.stderr.strip().splitlines()[-1][:200]}")
                res["ms"].setdefault(model, {}).setdefault(name, []).append(v)
                print(f"round {rnd}: {model} {name}: {v}", file=sys.stderr, flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"omp_wait_policy-{_dt.date.today().isoformat()}{a.tag}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = [f"# How OpenMP threads wait between kernels ({res['date']})", "",
             f"{res['cores']} cores, load average at start "
             f"{', '.join(f'{x:.1f}' for x in res['load_average_at_start'])}. Zoo size "
             f"small, `{a.planner}`, CPU backend, BLAS on one thread; median ms of "
             f"{a.calls} `Program.run` calls per process (no torch loaded), processes "
             "alternated; one column per round (round 0 compiles into a cold kernel "
             "cache). `workbench`: no OpenMP variable set, so `cc.load_library` chooses; "
             "`torch first`: torch imported before the workbench (its libgomp loaded "
             "first; the kernels run on their own copy, `runtime/openmp.py`).",
             "", "| model | setting | environment | "
             + " | ".join(f"round {i}" for i in range(a.rounds)) + " |",
             "|---|---|---|" + "---|" * a.rounds]
    for model, per in res["ms"].items():
        for name, vs in per.items():
            envs = " ".join(f"{k}={v}" for k, v in SETTINGS[name].items()
                            if k != TORCH_FIRST) or "(none)"
            lines.append(f"| {model} | {name} | {envs} | " + " | ".join(
                f"{v:.2f}" if isinstance(v, float) else str(v) for v in vs) + " |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
