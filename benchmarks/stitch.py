#!/usr/bin/env python
"""The stitch planner against none, xla and rules on the CPU, with the cost model's
predictions beside the measurements, and planning time on large graphs.

    .venv/bin/python benchmarks/stitch.py                  # all samples, 10 repeats
    .venv/bin/python benchmarks/stitch.py --quick --graphs softmax cross_entropy
    .venv/bin/python benchmarks/stitch.py --device h100 a100   # + predicted GPU latency

For every sample graph (``sample_graphs/make_samples.py`` ``build_all()`` and the
``.onnx`` samples), in one run on the ``cpu`` backend:

1. ``none``, ``xla`` (the XLA/TVM baseline: a reduction ends its kernel) and ``rules``
   (plus the row-reduction template: a reduction with its consumers) are planned,
   compiled, checked and timed (``Session.measure``);
2. the CPU cost model is calibrated on every kernel measured in step 1 (least squares
   on relative error, ``CostModel.calibrate``);
3. ``stitch`` plans with the calibrated model (planning time recorded) and is measured;
   where its plan differs from ``rules``, the two are then timed alternately, side by
   side, for the verdict (win / tie / LOSS beyond the spread).

Each plan's predicted latency is reported three ways: the uncalibrated model (probe
numbers only), the model calibrated on all graphs of step 1, and -- the honest one --
calibrated on the *other* graphs only (leave one graph out). Model error is
``|predicted / measured - 1|``. Search time: ``rules`` and ``stitch`` on synthetic
transformer stacks of about 100, 500 and 1000 ops and a 1210-op elementwise chain.

Writes ``<out>/stitch_cpu.json`` and ``<out>/stitch_cpu.md`` (``<out>`` defaults to
benchmarks/results). Timing never makes the script fail: it is a benchmark.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, log, machine_info, stats, workbench_samples
from make_samples import build_all, transformer_stack

from workbench.frontends import load
from workbench.fusion import run_planner
from workbench.fusion.cost import CostModel, relative_error, samples_from
from workbench.device import GPUS
from workbench.ir import GraphBuilder
from workbench.session import Session

# xla: the XLA/TVM baseline (a reduction ends its kernel); rules: + row templates
PLANNERS = ("none", "xla", "rules", "stitch")
MEASURED_FIRST = ("none", "xla", "rules")     # measured before calibration


# -- graphs ------------------------------------------------------------------------------
def sample_graphs(names: list[str] | None) -> dict:
    graphs = dict(build_all())
    for f in sorted((ROOT / "sample_graphs").glob("*.onnx")):
        graphs[f.name] = str(f)
    if names:
        graphs = {k: v for k, v in graphs.items()
                  if k in names or k.rsplit(".", 1)[0] in names}
    return graphs


def elementwise_chain(n: int):
    b = GraphBuilder(f"chain_{n}")
    x = b.input("x", (64, 256))
    for i in range(n):
        x = x * 1.01 if i % 2 else x + 0.5
    b.output(x, "y")
    return b.build()


# -- measuring ---------------------------------------------------------------------------
def measure_plan(s: Session, plan, repeats: int, warmup: int) -> dict:
    m = s.measure(plan, warmup=warmup, repeats=repeats)
    spread = stats(workbench_samples(s.program(plan), s.inputs, repeats))
    return {"kernels": m.kernels, "bytes_moved": int(m.bytes_moved),
            "latency_ms": m.latency_ms, "latency_min_ms": spread["latency_min_ms"],
            "latency_max_ms": spread["latency_max_ms"], "spread_pct": spread["spread_pct"],
            "max_rel_error": m.max_rel_error, "end_to_end_error": m.end_to_end_error,
            "ok": bool(m.within_tolerance), "_m": m, "_plan": plan}


def bench_graph(label: str, src, repeats: int, warmup: int) -> tuple[Session, dict]:
    log(f"[{label}] {', '.join(MEASURED_FIRST)}: planning, compiling, measuring")
    s = Session(src, backend="cpu", calibrate=False)
    rows = {}
    for planner in MEASURED_FIRST:
        t0 = time.perf_counter()
        plan = s.plan if planner == "none" else s.auto(planner)
        search = time.perf_counter() - t0 if planner != "none" else 0.0
        rows[planner] = {**measure_plan(s, plan, repeats, warmup), "search_ms": search * 1e3}
    return s, rows


def run_stitch(label: str, s: Session, rows: dict, model: CostModel, repeats: int,
               warmup: int) -> None:
    log(f"[{label}] stitch: planning with the calibrated model, measuring")
    s.cost_model = model
    t0 = time.perf_counter()
    plan = s.auto("stitch")
    search = time.perf_counter() - t0
    rows["stitch"] = {**measure_plan(s, plan, repeats, warmup), "search_ms": search * 1e3,
                      "decisions": [str(d) for d in s.step.decisions]}


def predictions(rows: dict, models: dict[str, CostModel]) -> None:
    for r in rows.values():
        for name, model in models.items():
            pred = model.plan_seconds(r["_plan"]) * 1e3
            r[f"predicted_ms_{name}"] = pred
            r[f"model_error_{name}"] = relative_error(pred, r["latency_ms"])


def side_by_side(s: Session, rows: dict, repeats: int) -> dict:
    """rules and stitch timed alternately (one warm run, then one timed run of each, per
    sample), so drift from other load on the machine hits both alike."""
    progs = [s.program(rows[p]["_plan"]) for p in ("rules", "stitch")]
    samples = ([], [])
    for _ in range(max(3, repeats)):
        for prog, out in zip(progs, samples):
            out.append(prog.time(s.inputs, 1, 1)[1])
    r, st = stats(samples[0]), stats(samples[1])
    return {"rules_ms": r["latency_ms"], "stitch_ms": st["latency_ms"],
            "rules_spread_pct": r["spread_pct"], "stitch_spread_pct": st["spread_pct"],
            "ratio": r["latency_ms"] / st["latency_ms"]}


def verdict(ab: dict, same_plan: bool) -> str:
    """stitch vs rules from the side-by-side samples: a win or loss only beyond the
    larger of the two spreads (at least 5%)."""
    if same_plan:
        return "same plan"
    noise = max(ab["rules_spread_pct"] or 0, ab["stitch_spread_pct"] or 0, 5.0) / 100
    ratio = ab["ratio"]
    if ratio > 1 + noise:
        return f"win {ratio:.2f}x"
    if ratio < 1 / (1 + noise):
        return f"LOSS {ratio:.2f}x"
    return f"tie {ratio:.2f}x (noise ±{noise * 100:.0f}%)"


# -- search time -------------------------------------------------------------------------
def search_times(model: CostModel, reps: int) -> list[dict]:
    out = []
    graphs = [transformer_stack(n) for n in (100, 500, 1000)] + [elementwise_chain(1210)]
    for g in graphs:
        row = {"graph": g.name, "nodes": len(g.nodes)}
        for planner in ("rules", "stitch"):
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                plan, _ = run_planner(planner, g, model=model)
                ts.append(time.perf_counter() - t0)
            row[f"{planner}_s"] = statistics.median(ts)
            row[f"{planner}_kernels"] = len(plan.groups)
            row[f"{planner}_predicted_ms"] = model.plan_seconds(plan) * 1e3
        log(f"[search] {g.name}: rules {row['rules_s']:.3f} s, stitch {row['stitch_s']:.3f} s")
        out.append(row)
    return out


def gpu_predictions(graphs: dict, devices: list[str]) -> list[dict]:
    out = []
    for dev in devices:
        model = CostModel.for_device(GPUS[dev])
        for label, src in graphs.items():
            g = load(src) if isinstance(src, str) else src
            row = {"device": GPUS[dev].name, "graph": label}
            for planner in PLANNERS:
                plan, _ = run_planner(planner, g, model=model)
                row[f"{planner}_kernels"] = len(plan.groups)
                row[f"{planner}_predicted_ms"] = model.plan_seconds(plan) * 1e3
            out.append(row)
    return out


# -- reporting ---------------------------------------------------------------------------
def markdown(result: dict) -> str:
    m = result["machine"]
    lines = ["# `stitch` vs `rules` vs `xla` vs `none` on the CPU, with the cost model's predictions",
             "",
             f"**Machine:** {m['cpu']}, {m['cores']} logical cores, {m['os']}  ",
             f"Python {m['python']}, NumPy {m['numpy']}, compiler `{m['compiler']}`  ",
             f"Date {m['date']}, commit `{m['git_commit']}`, repeats {result['repeats']} "
             f"(warm-up {result['warmup']}), median wall clock"
             + (f", load average at start {', '.join(f'{x:.2f}' for x in m['load_average'])}"
                if m.get("load_average") else ""),
             f"CPU device (probe): {result['cpu_device']}  ",
             f"Calibrated on {result['calibrated_on']} kernels: {result['factors']}",
             "",
             "| graph | planner | kernels | MB moved | latency ms | spread | predicted ms "
             "(uncal / cal / held-out) | model error (held-out) | search ms | ok |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["graphs"]:
        for p in PLANNERS:
            x = r["planners"][p]
            lines.append(
                f"| {r['graph']} | {p} | {x['kernels']} | {x['bytes_moved'] / 1e6:.1f} | "
                f"{x['latency_ms']:.3f} | {x['spread_pct']:.0f}% | "
                f"{x['predicted_ms_uncalibrated']:.3f} / {x['predicted_ms_calibrated']:.3f} / "
                f"{x['predicted_ms_held_out']:.3f} | {x['model_error_held_out'] * 100:.0f}% | "
                f"{x.get('search_ms', 0):.1f} | {'yes' if x['ok'] else 'NO'} |")
        ab = r["side_by_side"]
        timed = (f"side by side: rules {ab['rules_ms']:.3f} ms, stitch {ab['stitch_ms']:.3f}"
                 f" ms" if ab else "")
        lines.append(f"| | **stitch vs rules** | | | **{r['verdict']}** | | {timed} | | | |")
    e = result["model_error"]
    lines += ["", "## Model error (median |predicted / measured - 1| over all plans)", "",
              f"- uncalibrated (probe numbers only): {e['uncalibrated'] * 100:.0f}%",
              f"- calibrated on all graphs (in sample): {e['calibrated'] * 100:.0f}%",
              f"- calibrated on the other graphs (held out): {e['held_out'] * 100:.0f}%",
              "", "## Search time (median of runs)", "",
              "| graph | nodes | rules s | stitch s | kernels rules / stitch | "
              "predicted ms rules / stitch |", "|---|---|---|---|---|---|"]
    for r in result["search"]:
        lines.append(f"| {r['graph']} | {r['nodes']} | {r['rules_s']:.3f} | "
                     f"{r['stitch_s']:.3f} | {r['rules_kernels']} / {r['stitch_kernels']} | "
                     f"{r['rules_predicted_ms']:.3f} / {r['stitch_predicted_ms']:.3f} |")
    if result.get("gpu"):
        lines += ["", "## Predicted GPU latency (model only: no GPU in this run)", "",
                  "| device | graph | " + " | ".join(f"{p} ms (k)" for p in PLANNERS) + " |",
                  "|---|---|" + "---|" * len(PLANNERS)]
        for r in result["gpu"]:
            lines.append(f"| {r['device']} | {r['graph']} | " + " | ".join(
                f"{r[f'{p}_predicted_ms']:.4f} ({r[f'{p}_kernels']})" for p in PLANNERS)
                + " |")
    lines += ["", "spread = (max - min) / median of a second sampling of the same compiled "
              "program. stitch vs rules: the two programs timed alternately (one warm and "
              "one timed run each per sample); a ratio inside the larger spread (at least "
              "5%) is a tie. "
              "MB moved = compulsory traffic counted from the kernel IR. held-out = the "
              "model calibrated on every other graph's none/xla/rules kernels."]
    return "\n".join(lines) + "\n"


def _clean(rows: dict) -> dict:
    return {p: {k: v for k, v in r.items() if not k.startswith("_")} for p, r in rows.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=None, help="timed runs (default 10, "
                   "3 with --quick)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="3 repeats, 1 warm-up")
    p.add_argument("--graphs", nargs="+", metavar="NAME", help="subset (file names or stems)")
    p.add_argument("--device", nargs="*", default=["h100", "a100"], choices=sorted(GPUS),
                   help="GPUs to predict each plan's latency on (model only)")
    p.add_argument("--search-reps", type=int, default=3)
    p.add_argument("--out", default=str(RESULTS), metavar="DIR")
    args = p.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 10)
    warmup = 1 if args.quick and args.warmup == 2 else args.warmup
    graphs = sample_graphs(args.graphs)
    if not graphs:
        log("no graphs to run")
        return 2
    t_start = time.perf_counter()
    machine = machine_info()

    measured: dict[str, tuple[Session, dict]] = {}
    for i, (label, src) in enumerate(graphs.items(), 1):
        log(f"== {i}/{len(graphs)} {label}")
        measured[label] = bench_graph(label, src, repeats, warmup)

    base = CostModel.for_device(next(iter(measured.values()))[0].device)
    samples = {label: [x for p in MEASURED_FIRST
                       for x in samples_from(base, rows[p]["_plan"], rows[p]["_m"].per_kernel)]
               for label, (s, rows) in measured.items()}
    everything = [x for xs in samples.values() for x in xs]
    calibrated = base.calibrate(everything)
    log(f"calibrated on {len(everything)} kernels: {calibrated.factors}")

    results = []
    for label, (s, rows) in measured.items():
        run_stitch(label, s, rows, calibrated, repeats, warmup)
        others = [x for k, xs in samples.items() if k != label for x in xs]
        held_out = base.calibrate(others) if others else calibrated
        predictions(rows, {"uncalibrated": base, "calibrated": calibrated,
                           "held_out": held_out})
        same = rows["stitch"]["_plan"] == rows["rules"]["_plan"]
        ab = side_by_side(s, rows, repeats) if not same else {}
        results.append({"graph": label, "name": s.graph.name, "nodes": len(s.graph.nodes),
                        "planners": _clean(rows), "side_by_side": ab,
                        "verdict": verdict(ab, same)})
        log(f"[{label}] stitch vs rules: {results[-1]['verdict']}")

    def med(key):
        return float(np.median([r["planners"][p][f"model_error_{key}"] for r in results
                                for p in PLANNERS]))

    result = {
        "benchmark": "stitch_cpu", "machine": machine, "repeats": repeats,
        "warmup": warmup, "backend": "cpu", "cpu_device": base.device.describe(),
        "cpu_device_source": base.device.source, "calibrated_on": calibrated.calibrated_on,
        "factors": {"overhead_us": calibrated.factors.overhead * 1e6,
                    "memory": dict(calibrated.factors.memory),
                    "compute": calibrated.factors.compute,
                    "library": calibrated.factors.library,
                    "gemm": calibrated.factors.gemm},
        "graphs": results,
        "model_error": {"uncalibrated": med("uncalibrated"), "calibrated": med("calibrated"),
                        "held_out": med("held_out")},
        "search": search_times(calibrated, args.search_reps),
        "gpu": gpu_predictions(graphs, args.device) if args.device else [],
    }
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stitch_cpu.json").write_text(json.dumps(result, indent=1, default=str))
    md = markdown(result)
    (out / "stitch_cpu.md").write_text(md)
    print(md)
    log(f"wrote {out / 'stitch_cpu.json'} and {out / 'stitch_cpu.md'} ({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
