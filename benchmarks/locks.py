#!/usr/bin/env python
"""Planning around locks (issue 48): what honouring constraints costs in planning time
and in the plan's predicted latency, per planner, on the samples and transformer stacks.

    .venv/bin/python benchmarks/locks.py                 # every case, 3 rounds
    .venv/bin/python benchmarks/locks.py --rounds 5 --only layernorm

For each case and planner (``xla``, ``rules``, ``stitch``; the H100's cost model), three
constraint sets, each derived from the graph's own plans so that it can be met:

- ``cut``: the first edge inside the largest kernel of the planner's plan cut (the kernel
  must be planned again: carve, repair, regrow);
- ``pin``: the largest kernel of the ``rules`` plan pinned, and the ``cut`` lock;
- ``stitch locks``: every kernel of the ``stitch`` plan pinned (Auto must give it back).

Timed: ``run_planner`` (no constraints) and ``plan_constrained`` with each set, in
alternation, one of each per round, an idle pause (0.2 s) before every timed call;
medians over ``--rounds``. Reported: the ratio of each constrained plan's time to the
free planner's, and both plans' predicted latency and kernel count (the constrained plan
is checked to honour its set: a violation is an error). The machine is shared (2 cores,
other work running): the ratios, not the absolute times, are the result.

Writes ``benchmarks/results/locks-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import time

from harness import RESULTS, log, machine_line, write_results
from planning_cases import sample_cases, synthetic_cases

PLANNERS = ("xla", "rules", "stitch")
PAUSE_S = 0.2


def _sets(g, plan_of):
    """The constraint sets of one case and planner (see the module docstring)."""
    from workbench.fusion.constraints import Constraints, Cut, Pinned
    from workbench.session_locks import kernel_locks

    def first_cut(plan):
        for gr in sorted(plan.groups, key=lambda gr: -len(gr.nodes)):
            members = set(gr.nodes)
            for n in gr.nodes:
                for o in g.node(n).outputs:
                    for c in g.consumers[o]:
                        if c.id in members:
                            return Cut((n, c.id))
        return None

    out = {}
    own, rules, stitch = plan_of["own"], plan_of["rules"], plan_of["stitch"]
    cut = first_cut(own)
    if cut is not None:
        out["cut"] = Constraints((cut,))
    big = max(rules.groups, key=lambda gr: len(gr.nodes))
    pin = Pinned(big.nodes)
    if cut is None or not set(cut.edge) <= set(big.nodes):
        out["pin"] = Constraints((pin,) + ((cut,) if cut is not None else ()))
    out["stitch locks"] = Constraints.of_items(
        c for gr in stitch.groups for c in kernel_locks(stitch, gr.id))
    return out


def run_case(name, g, rounds: int) -> dict:
    from workbench.device import H100
    from workbench.fusion import run_planner
    from workbench.fusion.constrained import plan_constrained
    from workbench.fusion.cost import CostModel
    from workbench.fusion.honour import check, violations
    from workbench.errors import FusionRefused

    model = CostModel.for_device(H100)
    rec = {"case": name, "ops": len(g.nodes), "planners": {}}
    base = {p: run_planner(p, g, model)[0] for p in ("rules", "stitch")}
    for p in PLANNERS:
        own = run_planner(p, g, model)[0]
        sets = {}
        for label, cs in _sets(g, {"own": own, **base}).items():
            try:
                check(g, cs, H100)
                sets[label] = cs
            except FusionRefused as e:          # (a set these cases cannot meet: said)
                rec["planners"].setdefault(p, {}).setdefault("refused", {})[label] = str(e)
        times = {"free": []} | {k: [] for k in sets}
        plans = {}
        for _ in range(rounds):
            for label in times:
                time.sleep(PAUSE_S)
                t = time.perf_counter()
                if label == "free":
                    plans[label] = run_planner(p, g, model)[0]
                else:
                    plans[label] = plan_constrained(p, g, sets[label], model)[0]
                times[label].append(time.perf_counter() - t)
        r = rec["planners"].setdefault(p, {})
        for label in times:
            plan = plans[label]
            if label != "free":
                broken = violations(plan, sets[label])
                assert not broken, (name, p, label, broken)
            r[label] = {"seconds": statistics.median(times[label]),
                        "kernels": len(plan.groups),
                        "predicted_ms": model.predict(plan).ms,
                        "same_as_stitch": plan == base["stitch"],
                        "constraints": str(sets[label]) if label != "free" else ""}
    return rec


def markdown(res: dict) -> str:
    lines = [f"# Planning around locks ({res['date']})", "",
             machine_line(res) + f"; {res['rounds']} rounds, medians. The machine is "
             "shared: read the ratios.", "",
             "| case | ops | planner | locks | plan s | x free | kernels (free) | "
             "predicted ms (free) | = stitch plan |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rec in res["cases"]:
        for p, r in rec["planners"].items():
            free = r.get("free")
            if free is None:
                continue
            for label, x in r.items():
                if label in ("free", "refused"):
                    continue
                lines.append(
                    f"| {rec['case']} | {rec['ops']} | {p} | {label} | {x['seconds']:.3f} | "
                    f"{x['seconds'] / free['seconds']:.2f} | {x['kernels']} ({free['kernels']}) | "
                    f"{x['predicted_ms']:.4g} ({free['predicted_ms']:.4g}) | "
                    f"{'yes' if x['same_as_stitch'] else 'no'} |")
    lines += ["", "`x free`: the constrained plan's planning time over the free planner's "
              "(the free planner runs inside it). Every constrained plan honoured its locks."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="cases whose name contains this")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    cases = {k: v for k, v in (sample_cases() | synthetic_cases()).items()
             if (k.startswith("transformer_stack") or k in sample_cases())
             and a.only in k}
    date = _dt.date.today().isoformat()
    stem = RESULTS / f"locks-{date}{'-' + a.tag if a.tag else ''}"
    res = {"date": date, "rounds": a.rounds, "load_average_at_start": list(os.getloadavg()),
           "cases": []}
    for name, make in cases.items():
        log(f"{name} ...")
        res["cases"].append(run_case(name, make(), a.rounds))
        write_results(stem, res, markdown)
    log(f"wrote {stem}.md")


if __name__ == "__main__":
    main()
