#!/usr/bin/env python
"""Compile time of a model's kernels, each with the whole prelude (every helper, as
every kernel had it before) and with its own (the helpers it calls:
``codegen/render/helpers.py``), cold kernel cache, side by side.

    .venv/bin/python benchmarks/prelude_compile.py [--rounds 3] [--models bert_chain,zoo:bert]

Models: a sample graph (``bert_chain``: ``sample_graphs/bert_chain.json``) or a zoo model
(``zoo:NAME``, tiny, random weights), planned by ``stitch`` for this machine's CPU
(``assumed_cpu``: the micro-kernel's GEMM and convolution kernels, as the CPU backend
plans) and for the H100. Every generated kernel is compiled as the backends compile it:
C by the system compiler with the CPU backend's flags (``cc.build_library``), CUDA by
NVRTC for sm_90 (``nvrtc.compile_cuda``, where NVRTC is installed), each round in a fresh
``WORKBENCH_CACHE`` (a temporary directory), so every compile is cold. The two forms
alternate round by round (which goes first alternates too), after an idle pause. The
whole-prelude source is the source before the change byte for byte (``prelude()`` with
no code is every helper; ``scripts/prelude_diff.py`` compares the two renderings).

Writes ``benchmarks/results/prelude-compile-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, log, machine_line, write_results

SETTLE_S = 0.2


def kernels(name: str, device):
    from workbench.codegen import lower_plan
    from workbench.frontends import load
    from workbench.fusion import run_planner
    from workbench.fusion.cost import CostModel
    if name.startswith("zoo:"):
        from workbench.testing import zoo
        g = zoo.import_torch(zoo.build(name[4:]))
    else:
        g = load(ROOT / "sample_graphs" / f"{name}.json")
    plan = run_planner("stitch", g, model=CostModel.for_device(device))[0]
    return [k for k in lower_plan(plan) if k.library is None]


def sources(ks, target: str) -> dict[str, list[tuple[str, str]]]:
    """(name, source) of every kernel the target renders, whole prelude and own."""
    from workbench.codegen import RENDERERS, render_kernel
    r = RENDERERS[target]
    ks = [k for k in ks if r.supports(k)]
    return {"whole": [(k.name, r.prelude(k.tensor_cores) + "\n" + r.kernel(k)) for k in ks],
            "own": [(k.name, render_kernel(k, target)) for k in ks]}


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the C compiler runs as
    one; NVRTC in this process): less moved by other work on a loaded host than the
    wall clock, which waits for a core."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def compile_all(target: str, srcs: list[tuple[str, str]]) -> tuple[float, float]:
    """(wall, CPU) seconds to compile every source, in a fresh kernel cache."""
    from workbench.runtime import cc, nvrtc
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_CACHE"] = tmp
        time.sleep(SETTLE_S)
        t0, c0 = time.perf_counter(), cpu_seconds()
        for name, src in srcs:
            if target == "c":
                cc.build_library(name, src)
            else:
                nvrtc.compile_cuda(src, name, "90")
        return time.perf_counter() - t0, cpu_seconds() - c0


def measure(name: str, target: str, srcs: dict, rounds: int) -> dict:
    times = {"whole": [], "own": []}
    cpu = {"whole": [], "own": []}
    for i in range(rounds):
        for form in (("whole", "own") if i % 2 == 0 else ("own", "whole")):
            wall, used = compile_all(target, srcs[form])
            times[form].append(wall)
            cpu[form].append(used)
    chars = {f: float(np.mean([len(s) for _, s in v])) for f, v in srcs.items()}
    med = {f: float(np.median(v)) for f, v in times.items()}
    med_cpu = {f: float(np.median(v)) for f, v in cpu.items()}
    ratios = [w / o for w, o in zip(times["whole"], times["own"])]
    cpu_ratios = [w / o for w, o in zip(cpu["whole"], cpu["own"])]
    rec = {"model": name, "target": target, "kernels": len(srcs["own"]),
           "mean_chars": chars, "seconds": times, "median_s": med,
           "speedup_median": float(np.median(ratios)), "speedup_rounds": ratios,
           "cpu_seconds": cpu, "median_cpu_s": med_cpu,
           "cpu_speedup_median": float(np.median(cpu_ratios)),
           "cpu_speedup_rounds": cpu_ratios}
    log(f"{name} {target}: {rec['kernels']} kernels, whole {med['whole']:.2f} s, own "
        f"{med['own']:.2f} s ({rec['speedup_median']:.2f}x); CPU {med_cpu['whole']:.2f} vs "
        f"{med_cpu['own']:.2f} s ({rec['cpu_speedup_median']:.2f}x)")
    return rec


def markdown(res: dict) -> str:
    lines = [f"# Compile time of a model's kernels: whole prelude vs its own ({res['date']})",
             "", machine_line(res), "",
             f"Cold kernel cache, {res['rounds']} rounds alternating; seconds to compile every "
             "kernel of the model's stitch plan one after another, wall clock and CPU time "
             "(the compiler processes' for C, NVRTC's in this process for CUDA: the steadier "
             "figure on a loaded host), medians over rounds; speedup = whole / own per "
             "round, median.", "",
             "| model | target | kernels | mean source chars (whole -> own) | wall whole s | "
             "wall own s | wall speedup | CPU whole s | CPU own s | CPU speedup |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        c, w, u = r["mean_chars"], r["median_s"], r["median_cpu_s"]
        lines.append(f"| {r['model']} | {r['target']} | {r['kernels']} | "
                     f"{c['whole']:.0f} -> {c['own']:.0f} | {w['whole']:.2f} | "
                     f"{w['own']:.2f} | {r['speedup_median']:.2f}x | {u['whole']:.2f} | "
                     f"{u['own']:.2f} | {r['cpu_speedup_median']:.2f}x |")
    for what, key in (("wall", "speedup_rounds"), ("CPU", "cpu_speedup_rounds")):
        lines += ["", f"Per round, {what} (whole / own): " + "; ".join(
            f"{r['model']} {r['target']}: " + ", ".join(f"{x:.2f}" for x in r[key])
            for r in res["runs"])]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="bert_chain,zoo:bert,zoo:mobilenet_v2")
    ap.add_argument("--targets", default="c,cuda")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    from workbench.device import H100, assumed_cpu
    from workbench.runtime import nvrtc
    date = _dt.date.today().isoformat()
    a.stem = a.out / f"prelude-compile-{date}"
    res = {"date": date, "rounds": a.rounds, "load_average_at_start": list(os.getloadavg()),
           "runs": []}
    cpu = assumed_cpu("this cpu", os.cpu_count())
    targets = a.targets.split(",")
    if "cuda" in targets:
        try:
            nvrtc.toolchain()
        except Exception as e:      # (no NVRTC here: the C rows only)
            log(f"no CUDA rows: {e}")
            targets.remove("cuda")
    for name in a.models.split(","):
        for target in targets:
            srcs = sources(kernels(name, cpu if target == "c" else H100), target)
            res["runs"].append(measure(name, target, srcs, a.rounds))
            write_results(a.stem, res, markdown)


if __name__ == "__main__":
    main()
