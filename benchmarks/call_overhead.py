"""A step's time against the sum of its kernels' own times: the call overhead.

For every sample graph (``sample_graphs/``) under planners ``none`` and ``stitch``,
backend ``cpu`` (and two large row workloads of issue 44: LayerNorm 2048x4096, softmax
512x32000), each call is timed three ways, alternating, one call at a time after an
idle pause (``--pause``, 0.2 s: a thread pool still spinning from the previous call
cannot land on the next):

- ``before`` -- the call as every call was before issue 44: graph outputs new and
  NaN-filled (poisoned) on every call (``run(x, checked=True)``, what checked runs
  still do);
- ``fresh`` -- the default call now: outputs new, not filled (``run(x)``);
- ``out`` -- outputs written into the caller's arrays, reused call after call
  (``run(x, out=outs)``, as ``Session.measure`` times a step).

Each call also records its kernels' own times (taken inside the native call by the
plan driver, ``Program.execute(kernel_ns=...)``), so per way: the step ms (median of
calls), the kernels' sum ms (median), the call overhead (their difference) and the
ratio step / kernels; the issue's target is a ratio <= 1.2 on every sample. Beside
them, ``Session.measure``'s own figures (step, kernels' sum, overhead), what the step
table shows.

    python benchmarks/call_overhead.py [--repeats 9] [--pause 0.2] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, log, machine_line, write_results

import workbench as wb  # noqa: E402  (harness put this checkout on the path)
from workbench.runtime import random_inputs  # noqa: E402

PLANNERS = ("none", "stitch")
WAYS = ("before", "fresh", "out")


def row_workloads() -> dict:
    """The issue's two large row workloads, built here."""
    b = wb.GraphBuilder("layernorm_2048x4096")
    b.output(b.layer_norm(b.input("x", (2048, 4096))), "y")
    ln = b.build()
    b = wb.GraphBuilder("softmax_512x32000")
    b.output(b.softmax(b.input("x", (512, 32000))), "y")
    return {"layernorm_2048x4096": ln, "softmax_512x32000": b.build()}


def cases() -> dict:
    samples = sorted((ROOT / "sample_graphs").glob("*.json"))
    samples += sorted((ROOT / "sample_graphs").glob("*.onnx"))
    out = {p.name: str(p) for p in samples}
    out.update(row_workloads())
    return out


def time_ways(prog, x, repeats: int, pause: float) -> dict:
    """Per way: (call seconds, kernels' summed seconds) of each timed call."""
    outs = prog.new_outputs()
    kw = {"before": {"checked": True}, "fresh": {}, "out": {"out": outs}}
    ns = np.zeros(len(prog.compiled), np.int64)
    for way in WAYS:                       # warm-up: the first calls allocate and load
        prog.execute(x, **kw[way])
        prog.execute(x, **kw[way])
    got = {w: [] for w in WAYS}
    for _ in range(repeats):
        for way in WAYS:
            time.sleep(pause)
            t0 = time.perf_counter()
            prog.execute(x, kernel_ns=ns, **kw[way])
            got[way].append((time.perf_counter() - t0, ns.sum() * 1e-9))
    return got


def summary(calls: list) -> dict:
    """Medians of the calls' step and kernels' ms, and -- more robust on a shared
    machine, the kernels and their call timed together -- the medians of each call's
    overhead and step / kernels ratio; every call kept (``calls``)."""
    step = float(np.median([c for c, _ in calls])) * 1e3
    kern = float(np.median([k for _, k in calls])) * 1e3
    return {"step_ms": step, "kernels_ms": kern,
            "overhead_ms": float(np.median([c - k for c, k in calls])) * 1e3,
            "ratio": float(np.median([c / k for c, k in calls])),
            "calls_ms": [[c * 1e3, k * 1e3] for c, k in calls]}


def run_case(name, source, planner: str, repeats: int, pause: float) -> dict:
    s = wb.Session(source, backend="cpu")
    if planner != "none":
        s.auto(planner)
    prog = s.program()
    x = random_inputs(s.graph, 1)
    rec = {"sample": name, "planner": planner, "kernels": len(prog.compiled),
           "plan_driver": prog._driver() is not None}
    ways = time_ways(prog, x, repeats, pause)
    rec.update({w: summary(ways[w]) for w in WAYS})
    m = s.measure(repeats=repeats)
    rec["measure"] = {"step_ms": m.latency_ms, "kernels_ms": m.kernels_ms,
                      "overhead_ms": m.overhead_ms, "ratio": m.latency_ms / m.kernels_ms,
                      "within_tolerance": m.within_tolerance}
    return rec


def markdown(res: dict) -> str:
    lines = [f"# Call overhead: a step's time against its kernels' own ({res['date']})", "",
             machine_line(res), "",
             f"Backend `cpu`; {res['repeats']} calls per way, alternating, each after a "
             f"{res['pause_s']} s idle pause. `before`: outputs new and NaN-filled every "
             "call (as before issue 44); `fresh`: new, unfilled (`run(x)`); `out`: the "
             "caller's arrays reused (`run(x, out=...)`). step = median call ms, kernels "
             "= median of the kernels' own summed ms (timed inside the call), overhead and "
             "x = medians over the calls of each call's step - kernels and step / kernels "
             "(target x <= 1.2). `measure`: `Session.measure` (calls back to back, what "
             "the step table shows: median call / sum of the kernels' medians).", "",
             "| sample | planner | kernels | before step | before x | fresh step | fresh x "
             "| out step | kernels | overhead | out x | measure step | measure kernels "
             "| measure x |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        if "error" in r:
            lines.append(f"| {r['sample']} | {r['planner']} | failed: {r['error']} |")
            continue
        b, f, o, m = r["before"], r["fresh"], r["out"], r["measure"]
        lines.append(
            f"| {r['sample']} | {r['planner']} | {r['kernels']} | {b['step_ms']:.3f} | "
            f"{b['ratio']:.2f} | {f['step_ms']:.3f} | {f['ratio']:.2f} | "
            f"{o['step_ms']:.3f} | {o['kernels_ms']:.3f} | {o['overhead_ms']:.3f} | "
            f"{o['ratio']:.2f} | {m['step_ms']:.3f} | {m['kernels_ms']:.3f} | "
            f"{m['ratio']:.2f} |")
    ok = [r for r in res["cases"] if "error" not in r]
    if ok:
        worst = max(ok, key=lambda r: r["out"]["ratio"])
        worst_b = max(ok, key=lambda r: r["before"]["ratio"])
        worst_m = max(ok, key=lambda r: r["measure"]["ratio"])
        over = [f"{r['sample']} {r['planner']}" for r in ok if r["out"]["ratio"] > 1.2]
        lines += ["", f"Worst step / kernels: before {worst_b['before']['ratio']:.2f} "
                  f"({worst_b['sample']} {worst_b['planner']}); `out` "
                  f"{worst['out']['ratio']:.2f} ({worst['sample']} {worst['planner']}); "
                  f"`measure` {worst_m['measure']['ratio']:.2f} ({worst_m['sample']} "
                  f"{worst_m['planner']}). Cases over 1.2 with `out`: "
                  f"{', '.join(over) if over else 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--only", nargs="*", help="sample names (default: all)")
    ap.add_argument("--out", type=Path,
                    default=RESULTS / f"call-overhead-{dt.date.today().isoformat()}")
    a = ap.parse_args(argv)
    res = {"date": dt.date.today().isoformat(), "repeats": a.repeats, "pause_s": a.pause,
           "load_average_at_start": list(os.getloadavg()), "cases": []}
    for name, source in cases().items():
        if a.only and name not in a.only:
            continue
        for planner in PLANNERS:
            log(f"{name} {planner}")
            try:
                res["cases"].append(run_case(name, source, planner, a.repeats, a.pause))
            except wb.WorkbenchError as e:
                res["cases"].append({"sample": name, "planner": planner,
                                     "error": str(e).splitlines()[0][:200]})
            write_results(a.out, res, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
