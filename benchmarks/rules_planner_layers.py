#!/usr/bin/env python
"""The rules planner on stacks of identical row layers (issue 49: 44 s on 134; issue
44: linear, not quadratic).

Graphs: ``layer_stack(n)`` of tests/ui/test_large_graphs.py (n x LayerNorm -> GELU ->
residual, 15 ops a layer: 1,005 ops at 67, 2,010 at 134) and ``rms_stack(n)`` below (n
chained RMSNorms, 6 ops a layer): the planner grows one row kernel through the chain.
Times ``Session.auto("rules")`` on a fresh session (the plan is not cached): wall and
process CPU time, each call after a 0.2 s idle pause (the machine is shared).

With ``--against PATH`` (another checkout: ``git worktree add /tmp/base main``) both
checkouts are measured side by side, in fresh child processes alternating graph by
graph and round by round; the children report the plan's kernels and a hash of its
decisions, so the run shows whether the two plan alike.

    .venv/bin/python benchmarks/rules_planner_layers.py --against /tmp/base --tag T \
        [--layers 34 67 134] [--rounds 3]

Writes ``benchmarks/results/rules_planner_layers-<date>[-TAG].{json,md}`` (the
undated ``rules_planner_layers.{json,md}`` are issue 49's runs).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, machine_info, write_results

PAUSE_S = 0.2


def rms_stack(layers: int, rows: int = 64, cols: int = 128):
    from workbench.ir.builder import GraphBuilder
    b = GraphBuilder(f"rms{layers}")
    x = b.input("x", (rows, cols))
    for i in range(layers):
        w = b.constant(np.ones(cols, np.float32), f"w{i}")
        x = b.rms_norm(x, w, eps=1e-6, source=f"layers.{i}.norm")
    b.output(x, "y")
    return b.build()


def child(root: str, graph: str) -> dict:
    """One timed ``auto("rules")`` of ``graph`` (``layer_stack(67)``...) by the checkout
    at ``root``."""
    sys.path.insert(0, root)
    sys.path.insert(0, str(Path(root) / "tests" / "ui"))
    import workbench as wb
    from test_large_graphs import layer_stack
    if not Path(wb.__file__).resolve().is_relative_to(Path(root).resolve()):
        raise SystemExit(f"imported {wb.__file__}, not the checkout {root}")
    make, n = graph.rstrip(")").split("(")
    g = {"layer_stack": layer_stack, "rms_stack": rms_stack}[make](int(n))
    s = wb.Session(g, backend="reference")
    time.sleep(PAUSE_S)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = s.auto("rules")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    text = plan.describe() + "\n" + "\n".join(map(str, s.step.decisions))
    return {"ops": len(g.nodes), "kernels": len(plan.groups), "wall_s": wall, "cpu_s": cpu,
            "plan_sha": hashlib.sha256(text.encode()).hexdigest()[:16]}


def run_child(root: Path, graph: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(root))
    p = subprocess.run([sys.executable, __file__, "--child", graph, "--root", str(root)],
                       env=env, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise SystemExit(f"child {root} {graph} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[34, 67, 134])
    ap.add_argument("--against", help="another checkout to measure beside this one")
    ap.add_argument("--against-name", help="what to call it in the results (a commit)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.root, a.child)))
        return
    roots = {"this": ROOT}
    if a.against:
        roots["before"] = Path(a.against).resolve()
    graphs = [f"{m}({n})" for m in ("layer_stack", "rms_stack") for n in a.layers]
    stem = a.out / f"rules_planner_layers-{_dt.date.today().isoformat()}" \
        f"{'-' + a.tag if a.tag else ''}"
    res = {"info": machine_info(), "rounds": a.rounds,
           "checkouts": {k: str(v) for k, v in roots.items()},
           "against_name": a.against_name, "graphs": {}}
    for r in range(a.rounds):
        for graph in graphs:
            order = list(roots) if r % 2 == 0 else list(roots)[::-1]
            for name in order:
                got = run_child(roots[name], graph)
                got["load"] = os.getloadavg()[0]
                res["graphs"].setdefault(graph, {}).setdefault(name, []).append(got)
                print(r, graph, name, f"{got['wall_s']:.2f} s wall, {got['cpu_s']:.2f} s CPU",
                      f"load {got['load']:.1f}", got["kernels"], got["plan_sha"], flush=True)
            write_results(stem, res, markdown)
    print(f"wrote {stem}.md")


def markdown(res: dict) -> str:
    names = list(res["checkouts"])
    info = res["info"]
    lines = ["# Rules planner on stacks of identical row layers", "",
             f"Machine: {info.get('cpu')}, {info.get('cores')} cores, "
             f"{info.get('date', '')[:10]}, commit {info.get('git_commit')}; load average "
             f"(1 min) beside each run below.", "",
             f"`Session.auto(\"rules\")` in fresh child processes, checkouts alternating "
             f"graph by graph, {res['rounds']} rounds, a 0.2 s idle pause before each call; "
             "medians. `this`: " + res["checkouts"]["this"]
             + ("; `before`: " + res["checkouts"]["before"]
                + (f" ({res['against_name']})" if res.get("against_name") else "")
                if "before" in res["checkouts"] else ""), "",
             "| graph | ops | kernels | " + " | ".join(
                 f"{n} wall s | {n} CPU s" for n in names)
             + (" | CPU x | same plan | load |" if len(names) > 1 else " load |"),
             "|---|---|---|" + "---|---|" * len(names) + ("---|---|---|" if len(names) > 1
                                                          else "---|")]
    for graph, by in res["graphs"].items():
        first = by[names[0]][0]
        med = {n: (statistics.median(x["wall_s"] for x in by[n]),
                   statistics.median(x["cpu_s"] for x in by[n])) for n in names if n in by}
        cells = [f"{med[n][0]:.2f} | {med[n][1]:.2f}" if n in med else " | " for n in names]
        loads = [x["load"] for n in names for x in by.get(n, [])]
        row = f"| {graph} | {first['ops']} | {first['kernels']} | " + " | ".join(cells)
        if len(names) > 1 and len(med) > 1:
            same = {x["plan_sha"] for n in names for x in by[n]}
            row += (f" | {med['before'][1] / med['this'][1]:.1f}x | "
                    f"{'yes' if len(same) == 1 else 'NO'}")
        row += f" | {min(loads):.1f}-{max(loads):.1f} |"
        lines.append(row)
    if len(names) > 1:
        lines += ["", "`CPU x`: the before checkout's CPU seconds / this one's (above 1: this "
                  "one is faster); same plan: the plan's text and the session's decisions "
                  "hash alike."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
