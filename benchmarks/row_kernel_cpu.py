#!/usr/bin/env python
"""The row kernels of ``row_kernels.py`` on one thread, by CPU time: this checkout's
generated kernels beside another checkout's (``--base``), each shape in child
processes that alternate between the two.

    .venv/bin/python benchmarks/row_kernel_cpu.py --base /tmp/base-checkout

Why CPU time: on a host shared with other work, a call's wall time counts the time the
thread waited for a core; the calling thread's CPU time (``time.thread_time_ns``) does
not, so a kernel change shows through the load (cache and memory contention still
count). Each child process runs with ``OMP_NUM_THREADS=1`` (the kernel's parallel loop
on the calling thread), builds the shape's ``stitch`` program, fills its arguments by
one run, then calls the plan driver's native function directly (no Python between the
timer and the kernel) ``--calls`` times; it reports the fastest call and the median.
Rounds alternate base, this, base, this; the result is each side's fastest and the
median of its rounds' medians. Writes ``<out>/row-kernel-cpu-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, log, machine_info, write_results

HERE = Path(__file__).resolve()


def child(name: str, calls: int) -> dict:
    """One side's timing of one shape (run in a child process, this checkout's or the
    base's workbench first on the path)."""
    # (the side's checkout first: importing harness put this one's on the path)
    sys.path.insert(0, os.environ["PYTHONPATH"])
    import numpy as np
    import torch

    import workbench as wb
    from row_kernels import SHAPES, _module
    from workbench.testing.zoo import _quiet
    op, shape = SHAPES[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        with _quiet(), torch.no_grad():
            torch.onnx.export(_module(op, shape[-1]), (torch.zeros(shape),), str(path),
                              input_names=["x"], output_names=["y"], dynamo=False,
                              opset_version=17)
        s = wb.Session(wb.load(path), backend="cpu")
        s.auto("stitch")
    prog = s.program()
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    out = prog.new_outputs()
    for _ in range(3):
        prog.run({"x": x}, out=out)        # (the driver's arguments filled)
    fn, n, fns, nargs, argv = prog._driver()._call
    ts = []
    for _ in range(calls):
        t0 = time.thread_time_ns()
        fn(n, fns, nargs, argv, None)
        ts.append(time.thread_time_ns() - t0)
    ts = np.sort(np.array(ts)) * 1e-6
    return {"best_ms": float(ts[0]), "median_ms": float(np.median(ts)),
            "workbench": str(Path(wb.__file__).parent.parent)}


def run_side(root: Path, name: str, calls: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, str(HERE), "--child", name, "--calls", str(calls)],
                       env=env, capture_output=True, text=True, cwd=str(HERE.parent))
    if r.returncode != 0:
        raise RuntimeError(f"{root}: {r.stderr[-800:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    from row_kernels import SHAPES
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, help="the other checkout (required)")
    ap.add_argument("--models", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.calls)))
        return 0
    if a.base is None:
        ap.error("--base (the checkout to compare with) is required")
    this = HERE.parent.parent
    res = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d"),
           "base": str(a.base), "rounds": a.rounds, "calls": a.calls, "models": []}
    stem = a.out / f"row-kernel-cpu-{res['date']}"
    for name in a.models:
        log(f"one thread, CPU time: {name}")
        sides = {"base": [], "this": []}
        for _ in range(a.rounds):
            for side, root in (("base", a.base), ("this", this)):
                sides[side].append(run_side(root, name, a.calls))
        rec = {"model": name, "load_average": list(os.getloadavg())}
        for side, rs in sides.items():
            rec[side] = {"best_ms": min(r["best_ms"] for r in rs),
                         "median_ms": sorted(r["median_ms"] for r in rs)[len(rs) // 2],
                         "rounds": rs}
        res["models"].append(rec)
        write_results(stem, res, markdown)
    return 0


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Row kernels on one thread, CPU time ({res['date']})", "",
             f"{mi.get('cpu')}, {mi.get('cores')} cores, {mi.get('compiler')}. Base: "
             f"`{res['base']}`; this: the checkout at {mi.get('git_commit', '?')[:10]}. "
             f"{res['rounds']} rounds alternating base, this, each a child process "
             f"(`OMP_NUM_THREADS=1`) timing {res['calls']} calls of the plan driver's "
             "native function by the thread's CPU time; ms: the fastest call (the median "
             "of the rounds' medians in brackets); x = base / this.", "",
             "| shape | load average | base ms | this ms | x fastest | x median |",
             "|---|---|---|---|---|---|"]
    for r in res["models"]:
        b, t = r["base"], r["this"]
        lines.append(f"| {r['model']} | {', '.join(f'{v:.1f}' for v in r['load_average'])} "
                     f"| {b['best_ms']:.3f} ({b['median_ms']:.3f}) "
                     f"| {t['best_ms']:.3f} ({t['median_ms']:.3f}) "
                     f"| {b['best_ms'] / t['best_ms']:.2f}x | {b['median_ms'] / t['median_ms']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
