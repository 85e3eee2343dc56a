"""The cost model's predictions beside what the CPU measures, step by step, as a user
meets them: one session per sample (backend ``cpu``, the model refitted after every
measurement, as ``Session`` does by default), step 0 one kernel per op, step 1 the
``stitch`` plan; each step's prediction is the one made just before it was measured.

Reported per step: the predicted, the measured step (a whole call) and the sum of the
kernels' own times, the factor between prediction and measurement (max(p/m, m/p)),
and per step kind (unfused, fused) the median and worst factor, and the predicted and
measured speedups of fusion (issue 44's target: every step within a factor of 2,
median 1.3; a predicted speedup close to the measured one).

    python benchmarks/cost_model.py [--repeats 20] [--only NAME ...] [--tag TAG]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time

from harness import RESULTS, ROOT, fmt, log, machine_line, write_results


def factor(p: float, m: float) -> float:
    return max(p / m, m / p) if p > 0 and m > 0 else float("nan")


def fastest(s, repeats: int) -> tuple[float, float]:
    """The fastest of ``repeats`` more calls of the session's current plan, and the
    fastest of those calls' kernels' own sums, in ms: what the machine does when the
    load beside it lets it (the measured median carries the load; the factor against
    the fastest says how much of a factor is the load's)."""
    prog = s.program(s.plan)
    runs = [prog.time_calls(s.inputs, 1, 1) for _ in range(repeats)]
    return min(r.step for r in runs) * 1e3, min(r.kernels for r in runs) * 1e3


def additive_ms(s, measured: list, refit: bool) -> float:
    """The step's prediction by the model with every CPU pass's bounds added instead
    of the larger taken (the pricing before fusion/cpu_passes.py), refitted as the
    session refits to the same steps measured before this one: both pricings side by
    side on the same measurements, under the same load."""
    from dataclasses import replace
    from workbench.fusion.cost import CostModel, samples_from
    from workbench.fusion.fitted import REFIT_PRIOR
    base = CostModel.for_device(s.device)
    model = base
    samples = [replace(x, features=replace(x.features, passes=()))
               for plan, per_kernel in measured for x in samples_from(base, plan, per_kernel)]
    if refit and samples:
        model = base.calibrate(samples, prior_weight=REFIT_PRIOR)
    return sum(model.estimate_features(replace(base.features(s.graph, gr), passes=())).ms
               for gr in s.plan.groups)


def run(names, repeats: int, planner: str, refit: bool = True) -> list[dict]:
    import workbench as wb
    rows = []
    for name in names:
        s = wb.Session(str(ROOT / "sample_graphs" / f"{name}.json"), backend="cpu",
                       calibrate=refit)
        steps = {}
        measured = []
        for kind in ("unfused", "fused"):
            if kind == "fused":
                s.auto(planner)
            added = additive_ms(s, measured, refit)
            time.sleep(0.2)        # (the last call's threads stop spinning)
            m = s.measure(repeats=repeats)
            measured.append((s.plan, m.per_kernel))
            ks = float(m.per_kernel.latency_ms.sum())
            steps[kind] = m
            fast_step, fast_kernels = fastest(s, repeats)
            rows.append({"sample": name, "step": kind, "kernels": m.kernels,
                         "predicted_ms": m.predicted_ms, "step_ms": m.latency_ms,
                         "kernels_ms": ks, "fastest_step_ms": fast_step,
                         "fastest_kernels_ms": fast_kernels,
                         "factor": factor(m.predicted_ms, m.latency_ms),
                         "factor_fastest": factor(m.predicted_ms, fast_step),
                         "additive_ms": added,
                         "factor_additive": factor(added, m.latency_ms),
                         "factor_additive_fastest": factor(added, fast_step)})
            log(f"{name:36s} {kind:8s} predicted {m.predicted_ms:8.3f} measured "
                f"{m.latency_ms:8.3f} (kernels {ks:8.3f}) x{rows[-1]['factor']:.2f}")
        u, f = steps["unfused"], steps["fused"]
        rows[-1]["speedup_predicted"] = u.predicted_ms / f.predicted_ms
        rows[-1]["speedup_measured"] = u.latency_ms / f.latency_ms
    return rows


def summary(rows: list[dict]) -> dict:
    out = {}
    for kind in ("unfused", "fused", "all"):
        fs = [r["factor"] for r in rows if kind in ("all", r["step"])]
        ff = [r["factor_fastest"] for r in rows if kind in ("all", r["step"])]
        fa = [r["factor_additive"] for r in rows if kind in ("all", r["step"])]
        faf = [r["factor_additive_fastest"] for r in rows if kind in ("all", r["step"])]
        out[kind] = {"median": statistics.median(fs), "worst": max(fs),
                     "additive_median": statistics.median(fa), "additive_worst": max(fa),
                     "additive_median_fastest": statistics.median(faf),
                     "additive_worst_fastest": max(faf),
                     "within_2": sum(f <= 2 for f in fs), "steps": len(fs),
                     "median_fastest": statistics.median(ff), "worst_fastest": max(ff),
                     "within_2_fastest": sum(f <= 2 for f in ff)}
    return out


def markdown(res: dict) -> str:
    lines = [f"# The cost model against the CPU ({res['date']})", "",
             machine_line(res) + "; at the end "
             + ", ".join(f"{x:.1f}" for x in res.get("load_average_at_end", [])), "",
             f"The model's device: {res['device']}.", "",
             f"`python benchmarks/cost_model.py --repeats {res['repeats']}`: planner "
             f"`{res['planner']}`; predictions made before each step was measured, "
             + ("the model refitted after each measurement (the session's default)."
                if res["refit"] else "the device's uncalibrated model (`--no-refit`)."),
             "",
             "Factors against the step's median call, and against its fastest call "
             "(of as many more; the load beside a run inflates the median).", "",
             "| step kind | median factor | worst | within 2x | median (fastest) | "
             "worst (fastest) | within 2x (fastest) |", "|---|---|---|---|---|---|---|"]
    for kind, s in res["summary"].items():
        lines.append(f"| {kind} | {s['median']:.2f} | {s['worst']:.2f} | "
                     f"{s['within_2']}/{s['steps']} | {s['median_fastest']:.2f} | "
                     f"{s['worst_fastest']:.2f} | {s['within_2_fastest']}/{s['steps']} |")
    lines += ["", "The same steps priced with each CPU pass's bounds added "
              "(`additive`: the pricing before `fusion/cpu_passes.py`), refitted to the "
              "same measurements:", "",
              "| step kind | median | worst | median (fastest) | worst (fastest) |",
              "|---|---|---|---|---|"]
    for kind, s in res["summary"].items():
        lines.append(f"| {kind} | {s['additive_median']:.2f} | {s['additive_worst']:.2f} | "
                     f"{s['additive_median_fastest']:.2f} | "
                     f"{s['additive_worst_fastest']:.2f} |")
    lines += ["", "| sample | step | kernels | predicted ms | step ms | kernels' sum ms | "
              "fastest step ms | fastest kernels ms | factor | factor (fastest) | "
              "additive ms | factor additive (fastest) | "
              "speedup predicted | speedup measured |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['sample']} | {r['step']} | {r['kernels']} | "
                     f"{fmt(r['predicted_ms'], '{:.3f}')} | {fmt(r['step_ms'], '{:.3f}')} | "
                     f"{fmt(r['kernels_ms'], '{:.3f}')} | "
                     f"{fmt(r['fastest_step_ms'], '{:.3f}')} | "
                     f"{fmt(r['fastest_kernels_ms'], '{:.3f}')} | {r['factor']:.2f} | "
                     f"{r['factor_fastest']:.2f} | {fmt(r['additive_ms'], '{:.3f}')} | "
                     f"{r['factor_additive_fastest']:.2f} | "
                     f"{fmt(r.get('speedup_predicted'))} | "
                     f"{fmt(r.get('speedup_measured'))} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--planner", default="stitch")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--tag", default="")
    ap.add_argument("--no-refit", action="store_true",
                    help="price every step with the device's uncalibrated model")
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    names = a.only or sorted(p.stem for p in (ROOT / "sample_graphs").glob("*.json"))
    date = dt.date.today().isoformat()
    load = list(os.getloadavg())
    rows = run(names, a.repeats, a.planner, refit=not a.no_refit)
    from workbench.runtime.calibrate import cpu_device
    res = {"date": date, "repeats": a.repeats, "planner": a.planner,
           "refit": not a.no_refit,
           "load_average_at_start": load, "device": cpu_device().describe(),
           "load_average_at_end": list(os.getloadavg()),
           "rows": rows, "summary": summary(rows)}
    from pathlib import Path
    stem = Path(a.out) / f"cost_model-{date}{'-' + a.tag if a.tag else ''}"
    write_results(stem, res, markdown)
    log(f"wrote {stem}.md")
    s = res["summary"]["all"]
    print(f"median factor {s['median']:.2f}, worst {s['worst']:.2f}, "
          f"{s['within_2']}/{s['steps']} within 2x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
