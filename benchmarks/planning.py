#!/usr/bin/env python
"""Planning in interactive time (issue 12 item 4): how long ``rules`` and ``stitch`` take
to plan, how good the plans are by the cost model, and ``stitch`` against ``rules``
measured on a transformers GPT-2 block.

    .venv/bin/python benchmarks/planning.py                  # everything (BERT: ~1 min export)
    .venv/bin/python benchmarks/planning.py --no-bert --rounds 3

1. **Plan time and quality** on every planning case (``planning_cases.py``: the samples,
   transformer stacks of ~200/500/1000 ops, random graphs, GPT-2/LLaMA/DistilBERT blocks)
   and BERT-base exported by both ONNX exporters: ``rules`` and ``stitch`` planned
   alternately ``--rounds`` times for the H100 and the reference CPU (medians), with
   the search's work count (node sets analysed) and the predicted latency of each plan,
   beside the old search's predicted latency and plan time from
   ``tests/fusion/data/stitch_baseline.json`` (recorded by ``stitch_baseline.py`` on
   the search before this work, with the same cost model).
2. **GPT-2 block on the CPU backend** (batch 2, seq 64, hidden 256): the ``rules`` plan,
   the ``stitch`` plan of the model before this work (a CPU grid barrier priced at 0)
   and the ``stitch`` plan now, compiled and timed alternately, one run of each per
   round; per kernel medians, predicted beside measured, for the kernels the plans do
   not share.

Writes ``benchmarks/results/planning-<date>.{json,md}``. The machine is shared (other
work runs on its 2 cores), so every timing alternates the things compared and takes
medians; the result file says so and records the load average.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

from harness import RESULTS, ROOT, log, machine_info
from planning_cases import DEVICES, all_cases, bert_base_onnx, gpt2_block

from workbench.fusion.cost import CostModel
from workbench.fusion.greedy import rules_partition
from workbench.fusion.stitch import plan_stitch

BASELINE = ROOT / "tests" / "fusion" / "data" / "stitch_baseline.json"


def plan_case(name: str, g, rounds: int, baseline_file: Path) -> dict:
    baseline = json.loads(baseline_file.read_text())["cases"]   # (read late: re-recordable)
    row = {"case": name, "nodes": len(g.nodes)}
    for dev_name, dev in DEVICES.items():
        model = CostModel.for_device(dev)
        times = {"rules": [], "stitch": [], "stitch_cpu": []}
        for _ in range(rounds):          # alternated: load drift hits both alike
            t0 = time.perf_counter()
            rules = rules_partition(g, device=dev)[0].to_plan("rules", dev)
            times["rules"].append(time.perf_counter() - t0)
            stats: dict = {}
            t0, c0 = time.perf_counter(), time.process_time()
            plan, _ = plan_stitch(g, model, stats=stats)
            times["stitch"].append(time.perf_counter() - t0)
            # the planner is one thread: its CPU time is what an idle core would take
            # (wall time on this shared machine includes waiting for a core)
            times["stitch_cpu"].append(time.process_time() - c0)
        old = baseline.get(name, {}).get(dev_name, {})
        row[dev_name] = {
            "rules_s": statistics.median(times["rules"]),
            "stitch_s": statistics.median(times["stitch"]),
            "stitch_s_max": max(times["stitch"]),
            "stitch_cpu_s": statistics.median(times["stitch_cpu"]),
            "analyses": stats["analyses"], "regions": stats["regions"],
            "searched": stats["searched"],
            "rules_ms": model.plan_seconds(rules) * 1e3,
            "stitch_ms": model.plan_seconds(plan) * 1e3,
            "kernels": len(plan.groups),
            "old_stitch_ms": old.get("stitch_ms"), "old_stitch_s": old.get("plan_s")}
    h, c = row["h100"], row["cpu"]
    log(f"[plan] {name} ({len(g.nodes)} ops): stitch {h['stitch_s']:.3f} / {c['stitch_s']:.3f}"
        f" s (old {h['old_stitch_s'] or float('nan'):.2f} / "
        f"{c['old_stitch_s'] or float('nan'):.2f} s), rules {h['rules_s']:.3f} s")
    return row


def gpt2_side_by_side(rounds: int) -> dict:
    """rules vs stitch (model before / now) on the GPT-2 block, CPU backend."""
    from workbench.session import Session
    g = gpt2_block()
    s = Session(g, backend="cpu", calibrate=False)
    now = s.cost_model
    before = replace(now, factors=replace(now.factors, barrier=0.0), _cache={})
    plans = {"rules": rules_partition(g, device=now.device)[0].to_plan("rules", now.device),
             "stitch_before": plan_stitch(g, before)[0],
             "stitch_now": plan_stitch(g, now)[0]}
    progs = {k: s.program(p) for k, p in plans.items()}
    per = {k: [] for k in plans}
    total = {k: [] for k in plans}
    for _ in range(rounds):
        for k, prog in progs.items():
            kern, t = prog.time(s.inputs, 1, 1)
            per[k].append(kern)
            total[k].append(t)
    rules_nodes = {gr.nodes for gr in plans["rules"].groups}
    out = {"graph": f"transformers GPT2Block, batch 2 x seq 64 x hidden 256, 4 heads, "
                    f"causal mask, from_torch ({len(g.nodes)} ops)",
           "device": now.device.describe(), "rounds": rounds, "plans": {}}
    for k, plan in plans.items():
        est = now.predict(plan).groups
        kernels = []
        for i, gr in enumerate(plan.groups):
            kernels.append({
                "id": gr.id, "schedule": gr.schedule.describe(), "nodes": list(gr.nodes),
                "shared_with_rules": gr.nodes in rules_nodes,
                "measured_ms": statistics.median(x[i] for x in per[k]) * 1e3,
                "predicted_ms_now": est[i][1].seconds * 1e3,
                "predicted_ms_before": before.estimate(g, gr).seconds * 1e3})
        out["plans"][k] = {
            "kernels": len(plan.groups), "median_ms": statistics.median(total[k]) * 1e3,
            "min_ms": min(total[k]) * 1e3, "max_ms": max(total[k]) * 1e3,
            "predicted_ms_now": now.plan_seconds(plan) * 1e3,
            "predicted_ms_before": before.plan_seconds(plan) * 1e3,
            "same_as_rules": {gr.nodes for gr in plan.groups} == rules_nodes,
            "own_kernels_ms": sum(x["measured_ms"] for x in kernels
                                  if not x["shared_with_rules"]),
            "per_kernel": kernels}
    r = out["plans"]["rules"]["median_ms"]
    for k in ("stitch_before", "stitch_now"):
        out["plans"][k]["speedup_vs_rules"] = r / out["plans"][k]["median_ms"]
    log(f"[gpt2] rules {r:.3f} ms, stitch before {out['plans']['stitch_before']['median_ms']:.3f}"
        f" ms, now {out['plans']['stitch_now']['median_ms']:.3f} ms")
    return out


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# Planning time and plan quality: `rules` and `stitch` (issue 12 item 4)", "",
        f"**Machine:** {m['cpu']}, {m['cores']} logical cores, SHARED with other work "
        f"(load average at start {', '.join(f'{x:.1f}' for x in m.get('load_average', []))}"
        f", at end {', '.join(f'{x:.1f}' for x in res.get('load_average_end', []))}): "
        "every time here is a median of alternated runs and still noisy.  ",
        f"Date {m['date']}, commit `{m['git_commit']}`, {res['rounds']} rounds per case.  ",
        "Predicted latency: the uncalibrated cost model for the H100 and for "
        "`planning_cases.REFERENCE_CPU` (this machine's probe, frozen). *old* = the search "
        "before this work (`tests/fusion/data/stitch_baseline.json`, recorded by "
        "`benchmarks/stitch_baseline.py` with the same cost model; its plan seconds were "
        "taken on the same shared machine, one run).", "",
        "Plan seconds are wall clock (median); *CPU s* is the planner's process CPU time "
        "(it is single-threaded: what it takes on an idle core).", "",
        "| case | ops | rules s | stitch s (H100 / CPU) | stitch CPU s (H100 / CPU) | "
        "old stitch s | analysed sets | regions (searched) | H100 ms rules / old / now | "
        "CPU ms rules / old / now |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        h, c = r["h100"], r["cpu"]

        def q(d):
            old = "n/a" if d["old_stitch_ms"] is None else f"{d['old_stitch_ms']:.4g}"
            mark = "" if d["old_stitch_ms"] is None else (
                " **worse**" if d["stitch_ms"] > d["old_stitch_ms"] * (1 + 1e-9) else
                " better" if d["stitch_ms"] < d["old_stitch_ms"] * (1 - 1e-9) else " =")
            return f"{d['rules_ms']:.4g} / {old} / {d['stitch_ms']:.4g}{mark}"
        old_s = " / ".join("n/a" if d["old_stitch_s"] is None else f"{d['old_stitch_s']:.2f}"
                           for d in (h, c))
        lines.append(f"| {r['case']} | {r['nodes']} | {h['rules_s']:.3f} | "
                     f"{h['stitch_s']:.3f} / {c['stitch_s']:.3f} | "
                     f"{h['stitch_cpu_s']:.3f} / {c['stitch_cpu_s']:.3f} | {old_s} | "
                     f"{h['analyses']} | {h['regions']} ({h['searched']}) | {q(h)} | {q(c)} |")
    gp = res.get("gpt2")
    if gp:
        lines += ["", "## `stitch` vs `rules` on the GPT-2 block, CPU backend", "",
                  f"{gp['graph']}; {gp['device']}; {gp['rounds']} rounds, one timed run of "
                  "each plan per round, alternated; medians.", "",
                  "| plan | kernels | median ms (min-max) | vs rules | kernels not in rules, "
                  "measured ms | predicted ms (model now / before) |", "|---|---|---|---|---|---|"]
        for k, p in gp["plans"].items():
            vs = "" if k == "rules" else f"{p['speedup_vs_rules']:.2f}x"
            lines.append(f"| {k} | {p['kernels']} | {p['median_ms']:.3f} ({p['min_ms']:.3f}-"
                         f"{p['max_ms']:.3f}) | {vs} | {p['own_kernels_ms']:.3f} | "
                         f"{p['predicted_ms_now']:.3f} / {p['predicted_ms_before']:.3f} |")
        lines += ["", "Kernels of the stitch plan before this work that rules does not have "
                  "(and the rules kernels they replace):", "",
                  "| plan | kernel | schedule | ops | measured ms | predicted now / before |",
                  "|---|---|---|---|---|---|"]
        sets = {k: {tuple(x["nodes"]) for x in gp["plans"][k]["per_kernel"]}
                for k in ("rules", "stitch_before")}
        for k, other in (("stitch_before", "rules"), ("rules", "stitch_before")):
            for x in gp["plans"][k]["per_kernel"]:
                if tuple(x["nodes"]) in sets[other]:
                    continue
                lines.append(f"| {k} | {x['id']} | {x['schedule'][:60]} | {len(x['nodes'])} |"
                             f" {x['measured_ms']:.4f} | {x['predicted_ms_now']:.4f} / "
                             f"{x['predicted_ms_before']:.4f} |")
    if res.get("gpt2_runs"):
        lines += ["", "All runs (the first is detailed above): median ms of the whole "
                  "plan, and the summed per-kernel medians of the kernels stitch_before "
                  "has that rules does not / the rules kernels they replace:", "",
                  "| run | rules ms | stitch_before ms (vs rules) | stitch_now ms (vs rules) | "
                  "stitch_before own kernels ms | rules kernels replaced ms |",
                  "|---|---|---|---|---|---|"]
        for i, run in enumerate(res["gpt2_runs"], 1):
            p = run["plans"]
            before = {tuple(x["nodes"]) for x in p["stitch_before"]["per_kernel"]}
            replaced = sum(x["measured_ms"] for x in p["rules"]["per_kernel"]
                           if tuple(x["nodes"]) not in before)
            lines.append(
                f"| {i} | {p['rules']['median_ms']:.3f} | {p['stitch_before']['median_ms']:.3f}"
                f" ({p['stitch_before']['speedup_vs_rules']:.2f}x) | "
                f"{p['stitch_now']['median_ms']:.3f} ({p['stitch_now']['speedup_vs_rules']:.2f}x)"
                f" | {p['stitch_before']['own_kernels_ms']:.3f} | {replaced:.3f} |")
    if res.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gpt2-rounds", type=int, default=30)
    ap.add_argument("--gpt2-runs", type=int, default=3,
                    help="independent side-by-side runs (each with fresh programs)")
    ap.add_argument("--no-bert", action="store_true")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--bert-dir", type=Path,
                    default=Path(os.environ.get("WB_CACHE", Path.home() / ".cache" /
                                                "fusion-workbench")) / "planning")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--baseline", type=Path, default=BASELINE,
                    help="the old search's plan quality (stitch_baseline.py's output)")
    args = ap.parse_args()
    res = {"benchmark": "planning", "machine": machine_info(), "rounds": args.rounds,
           "cases": [], "notes": []}
    cases = all_cases()
    if not args.no_bert:
        for dyn in (True, False):
            n = f"bert_base_onnx_{'dynamo' if dyn else 'legacy'}"
            cases[n] = lambda d=dyn, n=n: bert_base_onnx(args.bert_dir / f"{n}.onnx", d)
    for name, make in cases.items():
        if args.only and name not in args.only:
            continue
        g = make()
        res["cases"].append(plan_case(name, g, args.rounds, args.baseline))
    if not args.only or "gpt2" in args.only:
        runs = [gpt2_side_by_side(args.gpt2_rounds) for _ in range(args.gpt2_runs)]
        res["gpt2"], res["gpt2_runs"] = runs[0], runs
    res["load_average_end"] = list(os.getloadavg())
    date = _dt.date.today().isoformat()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"planning-{date}.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / f"planning-{date}.md").write_text(markdown(res))
    log(f"wrote {args.out / f'planning-{date}.md'}")


if __name__ == "__main__":
    main()
