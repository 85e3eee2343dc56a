#!/usr/bin/env python
"""Record the stitch planner's plan quality -- the cost model's predicted latency of its
plan, and of the rules plan, on H100 and the reference CPU -- for every planning case
(``planning_cases.py``), as the regression baseline of ``tests/fusion/test_stitch_speed.py``.

    .venv/bin/python benchmarks/stitch_baseline.py                 # writes the baseline
    .venv/bin/python benchmarks/stitch_baseline.py --bert DIR      # + BERT-base (slow)

The committed file was recorded by this script run on a checkout of commit 44dff7e
(the search before the speed work: one beam over the whole graph) with this branch's
``fusion/cost.py`` (a CPU prices stitched phases as parallel loops), so the test holds
the faster search to plans no worse than the old search finds under the same model.
``--label`` says so in the file; ``--out`` writes elsewhere.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from harness import ROOT
from planning_cases import DEVICES, all_cases, bert_base_onnx

from workbench.fusion.cost import CostModel
from workbench.fusion.greedy import rules_partition
from workbench.fusion.stitch import plan_stitch

BASELINE = ROOT / "tests" / "fusion" / "data" / "stitch_baseline.json"


def record(g, devices=DEVICES) -> dict:
    out = {"nodes": len(g.nodes)}
    for name, dev in devices.items():
        model = CostModel.for_device(dev)
        rules = rules_partition(g, device=dev)[0].to_plan("rules", dev)
        t0 = time.perf_counter()
        plan, _ = plan_stitch(g, model)
        out[name] = {"rules_ms": model.plan_seconds(rules) * 1e3,
                     "stitch_ms": model.plan_seconds(plan) * 1e3,
                     "kernels": len(plan.groups),
                     "plan_s": time.perf_counter() - t0}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BASELINE)
    ap.add_argument("--bert", type=Path, help="directory for the BERT-base ONNX exports")
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--label", help="what was recorded (default: the git commit)")
    ap.add_argument("--devices", nargs="*", choices=sorted(DEVICES),
                    help="record these devices only (others' numbers are kept)")
    args = ap.parse_args()
    cases = all_cases()
    res = json.loads(args.out.read_text()) if args.out.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    todo = [(k, f) for k, f in cases.items() if not args.only or k in args.only]
    if args.bert:
        for dyn in (True, False):
            name = f"bert_base_onnx_{'dynamo' if dyn else 'legacy'}"
            todo.append((name, lambda d=dyn, n=name: bert_base_onnx(args.bert / f"{n}.onnx", d)))
    for name, make in todo:
        g = make()
        devices = {k: v for k, v in DEVICES.items() if not args.devices or k in args.devices}
        res.setdefault("cases", {}).setdefault(name, {}).update(record(g, devices))
        print(name, json.dumps(res["cases"][name]), flush=True)
        res["recorded_with"] = args.label or commit
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
