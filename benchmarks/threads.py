#!/usr/bin/env python
"""OpenMP and BLAS thread behaviour with and without torch: the CPU the kernels' threads
burn after a call returns, and the call's latency, whatever was imported first.

Four cases, each a fresh process (this script re-runs itself with ``--worker``): the
workbench alone; torch imported first; torch imported after the program's first runs;
torch imported first and torch ops run first (torch's own OpenMP pool started). Each
under two runtimes: ``own`` (the kernels link the workbench's copy of libgomp,
``runtime/openmp.py``) and ``shared`` (``WB_PRIVATE_OPENMP=0``: the compiler's libgomp,
shared with torch's where torch loaded it first, as before issue 44). A worker runs
the program three times, then ``--calls`` times: an idle pause (0.2 s), the call
timed, then the process's CPU time (``time.process_time``: every thread, to the
nanosecond) over a 50 ms idle window -- what the threads left spinning burn there. It
also reports the libgomp files mapped and the BLAS libraries' thread counts inside a
run (threadpoolctl). Processes of the cases alternate, ``--rounds`` times.

Workloads: two samples (``layernorm.json``, ``softmax.json``) and one zoo model
(``--zoo``, size tiny, exported to ONNX by the parent, so a worker of the ``alone``
case never imports torch).

    .venv/bin/python benchmarks/threads.py --rounds 2

Writes ``<out>/threads-<date><tag>.{json,md}``.
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

from harness import RESULTS, ROOT, log, machine_line, write_results

CASES = ("alone", "torch first", "torch after", "torch ops first")
RUNTIMES = {"own": {}, "shared": {"WB_PRIVATE_OPENMP": "0"}}
OPENMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
IDLE_S, PAUSE_S = 0.05, 0.2


def _torch_ops() -> None:
    import torch
    x = torch.randn(256, 256)
    for _ in range(5):                 # intra-op parallel: torch's OpenMP pool starts
        (x @ x).exp_().sum()


def worker(case: str, graph: str, inputs: str, planner: str, calls: int) -> dict:
    if case in ("torch first", "torch ops first"):
        import torch  # noqa: F401  (torch's libgomp loaded before any kernel)
        if case == "torch ops first":
            _torch_ops()
    import numpy as np
    from threadpoolctl import threadpool_info
    from workbench import Session
    from workbench.frontends import load
    s = Session(load(graph), backend="cpu")
    s.auto(planner)
    if inputs:
        with np.load(inputs) as f:
            ins = {k: f[k] for k in f.files}
    else:
        ins = s.inputs
    prog = s.program()
    for _ in range(3):
        prog.run(ins)
    if case == "torch after":
        import torch  # noqa: F401,F811
    if case == "alone":
        assert "torch" not in sys.modules, "the worker loaded torch"
    with s.backend.running():
        blas_in_run = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    lat, after = [], []
    for _ in range(calls):
        time.sleep(PAUSE_S)
        t0 = time.perf_counter()
        prog.run(ins)
        t1 = time.perf_counter()
        c0 = time.process_time()
        time.sleep(IDLE_S)
        after.append(time.process_time() - c0)
        lat.append(t1 - t0)
    with open("/proc/self/maps") as f:
        gomp = sorted({ln.split()[-1] for ln in f if "gomp" in ln.rsplit("/", 1)[-1]})
    return {"latency_ms": float(np.median(lat) * 1e3), "latency_min_ms": float(min(lat) * 1e3),
            "cpu_after_ms": float(np.median(after) * 1e3),
            "cpu_after_max_ms": float(max(after) * 1e3),
            "libgomp_mapped": [Path(p).name for p in gomp], "blas_threads_in_run": blas_in_run}


def _workloads(names: list[str], zoo: str, tmp: Path) -> dict[str, tuple[str, str]]:
    out = {n: (str(ROOT / "sample_graphs" / n), "") for n in names}
    if zoo:
        import numpy as np
        from workbench.testing import zoo as z
        m = z.build(zoo, size="tiny")
        np.savez(tmp / f"{zoo}.npz", **m.numpy_inputs())
        out[f"{zoo} (zoo, tiny)"] = (str(z.export_onnx(m, tmp / f"{zoo}.onnx")),
                                     str(tmp / f"{zoo}.npz"))
    return out


def markdown(res: dict) -> str:
    lines = [f"# OpenMP threads after a call, with and without torch ({res['date']})", "",
             machine_line(res), "",
             f"CPU backend, `{res['planner']}`, BLAS on one thread while a program runs. Per "
             f"process: {res['calls']} calls, each after a {PAUSE_S:.1f} s idle pause; "
             f"**CPU after** = the process's CPU time (every thread) over the {IDLE_S*1e3:.0f}"
             " ms idle window right after the call returns (median over the calls; max in "
             "brackets): the threads left spinning. `own`: the kernels link the workbench's "
             "copy of libgomp (`runtime/openmp.py`); `shared`: `WB_PRIVATE_OPENMP=0`, the "
             "compiler's libgomp, which is torch's where torch loaded it first (the "
             "workbench before issue 44). One cell per round (processes alternated): "
             "`latency ms / CPU after ms`.", "",
             "| workload | case | runtime | libgomp mapped | BLAS threads in a run | "
             + " | ".join(f"round {i}" for i in range(res["rounds"])) + " |",
             "|---|---|---|---|---|" + "---|" * res["rounds"]]
    for wl, per in res["results"].items():
        for case, per_rt in per.items():
            for rt, runs in per_rt.items():
                ok = [r for r in runs if "error" not in r]
                gomp = ", ".join(ok[0]["libgomp_mapped"]) if ok else ""
                blas = ok[0]["blas_threads_in_run"] if ok else ""
                cells = [r["error"][:80] if "error" in r else
                         f"{r['latency_ms']:.2f} / **{r['cpu_after_ms']:.2f}** "
                         f"({r['cpu_after_max_ms']:.2f})" for r in runs]
                lines.append(f"| {wl} | {case} | {rt} | {gomp} | {blas} | "
                             + " | ".join(cells) + " |")
    lines += ["", "Summary (median over rounds of the per-process medians):", "",
              "| workload | runtime | " + " | ".join(f"{c}: CPU after ms" for c in CASES)
              + " | " + " | ".join(f"{c}: latency ms" for c in CASES) + " |",
              "|---|---|" + "---|" * (2 * len(CASES))]
    import numpy as np
    for wl, per in res["results"].items():
        for rt in res["runtimes"]:
            def med(key, case):
                v = [r[key] for r in per.get(case, {}).get(rt, []) if "error" not in r]
                return f"{np.median(v):.2f}" if v else "-"
            lines.append(f"| {wl} | {rt} | " + " | ".join(med("cpu_after_ms", c) for c in CASES)
                         + " | " + " | ".join(med("latency_ms", c) for c in CASES) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", nargs="+", default=["layernorm.json", "softmax.json"])
    ap.add_argument("--zoo", default="bert", help="a zoo model (size tiny); '' for none")
    ap.add_argument("--planner", default="stitch")
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--runtimes", nargs="+", choices=list(RUNTIMES), default=list(RUNTIMES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tag", default="", help="appended to the result files' names")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(*a.worker, a.planner, a.calls)))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="wb-threads-"))
    work = _workloads(a.samples, a.zoo, tmp)
    res = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
           "load_average_at_start": list(os.getloadavg()),
           "planner": a.planner, "calls": a.calls, "rounds": a.rounds,
           "runtimes": a.runtimes, "idle_window_s": IDLE_S, "pause_s": PAUSE_S,
           "results": {}}
    stem = a.out / f"threads-{_dt.date.today().isoformat()}{a.tag}"
    a.out.mkdir(parents=True, exist_ok=True)
    for rnd in range(a.rounds):
        for wl, (graph, inputs) in work.items():
            for case in a.cases:
                for rt in a.runtimes:
                    env = dict(os.environ)
                    for v in (*OPENMP_VARIABLES, "WB_PRIVATE_OPENMP"):
                        env.pop(v, None)
                    env.update(RUNTIMES[rt])
                    r = subprocess.run([sys.executable, __file__, "--worker", case, graph,
                                        inputs, "--planner", a.planner,
                                        "--calls", str(a.calls)],
                                       env=env, capture_output=True, text=True)
                    rec = (json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0
                           else {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]})
                    res["results"].setdefault(wl, {}).setdefault(case, {}).setdefault(
                        rt, []).append(rec)
                    log(f"round {rnd}: {wl} / {case} / {rt}: {rec}")
            write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
