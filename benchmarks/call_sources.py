#!/usr/bin/env python
"""Where a small model's call goes besides its kernels: MobileNetV2 (the zoo's, dynamo
export, ``--size`` small: 53 kernels, a ~0.3 ms call) on the CPU against onnxruntime,
side by side in one process, with each source of call overhead removed in turn.

    .venv/bin/python benchmarks/call_sources.py [--model mobilenet_v2] [--rounds 15]

Methods, timed as ``benchmarks/models.py`` times them (``harness.alternate``: per round
every method in turn, a 0.2 s pause, one untimed call, then ``--inner`` back-to-back
calls), each workbench call made by ``Program.execute`` with the kernels' own
nanoseconds taken inside the native call (``kernel_ns``), so every call splits into its
kernels' sum and the rest:

- ``onnxruntime`` -- ``InferenceSession.run``, default session options;
- ``workbench`` -- a call as a user makes it (``run(x)``: placement as the runtime
  decides it, the BLAS libraries at 1 thread while it runs);
- ``placed`` / ``unplaced`` -- thread placement forced on / off for every call
  (through the program's ``placement.PlaceRule``);
- ``BLAS left alone`` -- no BLAS thread count set or restored (``blas_threads=None``;
  the kernels' sgemm calls then run with NumPy's own count);
- ``out=`` -- the outputs written into the caller's arrays (no allocation);
- ``a region per kernel`` -- ``out=``, with the plan driver told no kernel has a team
  form (codegen/render/c.py), so each kernel opens its own parallel region, as before
  the driver ran consecutive team kernels inside one; ``out=`` is the same call with
  them.

Beside them, each Python step of a call timed by itself (medians of 2,000 back-to-back
calls, microseconds), and the whole Python path with the native call replaced by a
no-op. Writes ``<out>/call-sources-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from harness import one_model_run, alternate, log, machine_line, write_results
import models


def _us(fn, n: int = 2000) -> float:
    """Median microseconds of ``fn`` over ``n`` back-to-back calls."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return float(np.median(ts)) / 1e3


def steps(prog, inputs) -> dict:
    """Each Python step of a call by itself, microseconds."""
    from workbench.runtime import placement, threads
    out = prog.new_outputs()

    def blas():
        with threads.one_pool(1):
            pass

    def place():
        with placement.placed():
            pass

    def paused_place():
        time.sleep(0.02)
        t0 = time.perf_counter_ns()
        place()
        return time.perf_counter_ns() - t0
    res = {"inputs checked (check_inputs)": _us(lambda: prog.check_inputs(inputs)),
           "BLAS threads set and restored (one_pool)": _us(blas),
           "threads placed and given back (placed), back to back": _us(place),
           "threads placed and given back, after a 20 ms pause":
               float(np.median([paused_place() for _ in range(100)])) / 1e3}
    plan_driver = prog._driver()
    with mock.patch.object(plan_driver, "_call", ((lambda *a: None),) + plan_driver._call[1:]), \
            mock.patch.dict(os.environ, {"WB_PLACE_THREADS": "0"}):
        res["whole Python path, native call a no-op, run(x)"] = _us(lambda: prog.run(inputs))
        res["the same, run(x, out=...)"] = _us(lambda: prog.run(inputs, out=out))
        blas_threads = prog.backend.blas_threads
        prog.backend.blas_threads = None
        res["the same, run(x), BLAS left alone"] = _us(lambda: prog.run(inputs))
        prog.backend.blas_threads = blas_threads
    return res


def methods(prog, inputs, ort_call) -> tuple[dict, dict]:
    """label -> call, and label -> the kernels' own seconds of each timed call."""
    ns = np.zeros(len(prog.compiled), dtype=np.int64)
    kernels: dict = {}
    out = prog.new_outputs()

    plan_driver = prog._driver()
    with_team = plan_driver._call
    no_team = np.zeros_like(plan_driver._team)     # (kept alive by the closure)
    without_team = with_team[:-1] + (no_team.ctypes.data,)

    def wb(label, place=None, blas="keep", use_out=False, team=True):
        kernels[label] = []
        blas_threads = prog.backend.blas_threads

        def call():
            # placement forced through the program's rule (no run yet: placed; a run
            # of 0 s among its last: not), its own history put back after: changing
            # the environment inside the timed call would cost more than placing
            rule = prog.place_rule
            history = tuple(rule.recent)
            if place is not None:
                rule.recent.clear()
                if not place:
                    rule.recent.append(0.0)
            if blas != "keep":
                prog.backend.blas_threads = blas
            plan_driver._call = with_team if team else without_team
            try:
                e = prog.execute(inputs, out=out if use_out else None, kernel_ns=ns)
            finally:
                plan_driver._call = with_team
                prog.backend.blas_threads = blas_threads
                if place is not None:
                    rule.recent.clear()
                    rule.recent.extend(history)
            kernels[label].append(int(ns.sum()) * 1e-9)
            return {o: e[o] for o in prog.graph.outputs}
        return call
    prog.execute(inputs)        # (the program's placement rule made)
    calls = {"onnxruntime": ort_call,
             "workbench": wb("workbench"),
             "placed": wb("placed", place=True),
             "unplaced": wb("unplaced", place=False),
             "BLAS left alone": wb("BLAS left alone", blas=None),
             "out=": wb("out=", use_out=True),
             "a region per kernel": wb("a region per kernel", use_out=True, team=False)}
    return calls, kernels


def markdown(res: dict) -> str:
    lines = [f"# Call overhead of {res['model']} by source ({res['date']})", "",
             f"{machine_line(res)}. Zoo size `{res['size']}`, dynamo export, planner "
             f"stitch, {res['kernels']} kernels ({res.get('team_kernels', 0)} with a "
             f"team form). {res['rounds']} rounds x {res['inner']} "
             "back-to-back calls per method, alternating, 0.2 s pause before each block. "
             "ms: median of calls; kernels and rest: medians over the calls of each "
             "call's own split (kernels timed inside the native call); x = onnxruntime "
             "/ method (> 1: the workbench is faster).", "",
             "| method | call ms | x | kernels ms | rest ms | fastest block ms |",
             "|---|---|---|---|---|---|"]
    ort = res["methods"]["onnxruntime"]["median_ms"]
    for label, r in res["methods"].items():
        k = r.get("kernels_ms")
        lines.append(f"| {label} | {r['median_ms']:.3f} | {ort / r['median_ms']:.2f} | "
                     f"{'' if k is None else f'{k:.3f}'} | "
                     f"{'' if k is None else format(r['rest_ms'], '.3f')} | "
                     f"{r['fastest_block_ms']:.3f} |")
    lines += ["", "Each Python step by itself (median us of back-to-back calls):", "",
              "| step | us |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in res["steps_us"].items()]
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    a, res = one_model_run(argv, __doc__, rounds=15)
    date = res["date"]
    with tempfile.TemporaryDirectory() as tmp:
        log(f"{a.model}: build, export, plan, compile")
        rec, calls = models.prepare_model(a.model, Path(tmp), [1], a.size,
                                          planners=("stitch",))
        wb_call = calls["workbench stitch"]
        prog, inputs = wb_call.program, wb_call.inputs
        res["kernels"] = len(prog.compiled)
        res["team_kernels"] = int((prog._driver()._team != 0).sum())
        res["error_vs_torch"] = rec["planners"]["stitch"]["error_vs_torch"]
        log("Python steps")
        res["steps_us"] = steps(prog, inputs)
        timed, kernels = methods(prog, inputs, calls["onnxruntime"])
        log(f"timing {', '.join(timed)}")
        samples = alternate(timed, a.rounds, a.inner)
    res["methods"] = {}
    for label, s in samples.items():
        r = {"median_ms": float(np.median(s)) * 1e3,
             "fastest_block_ms": min(float(np.median(s[i:i + a.inner])) * 1e3
                                     for i in range(0, len(s), a.inner)),
             "samples_ms": [round(x * 1e3, 4) for x in s]}
        if label in kernels:
            # the timed calls' own kernels (alternate's untimed calls left out)
            ks = [k for i, k in enumerate(kernels[label][2:]) if i % (a.inner + 1)]
            r["kernels_ms"] = float(np.median(ks)) * 1e3
            r["rest_ms"] = float(np.median([c - k for c, k in zip(s, ks)])) * 1e3
        res["methods"][label] = r
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"call-sources-{date}{a.tag}"
    write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
