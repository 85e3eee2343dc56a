#!/usr/bin/env python
"""The rules planner on stacks of identical row layers (issue 49: 44 s on 134).

Graphs: ``layer_stack(n)`` of tests/ui/test_large_graphs.py (n x LayerNorm -> GELU ->
residual, 15 ops a layer: 2,010 ops at 134) and ``rms_stack(n)`` below (n chained
RMSNorms, 6 ops a layer): the planner grows one row kernel through the whole chain.
Times ``Session.auto("rules")`` on a fresh session (the plan is not cached), the
median of ``--repeat`` runs, each after a 0.2 s idle pause (the machine is shared).
``--label`` names the code measured (``before``/``after`` a change): results of each
label are kept side by side in one file.

    .venv/bin/python benchmarks/rules_planner_layers.py --label after [--layers 34 67 134]

Writes ``<out>/rules_planner_layers.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, machine_info, write_results

sys.path.insert(0, str(ROOT / "tests" / "ui"))


def rms_stack(layers: int, rows: int = 64, cols: int = 128):
    from workbench.ir.builder import GraphBuilder
    b = GraphBuilder(f"rms{layers}")
    x = b.input("x", (rows, cols))
    for i in range(layers):
        w = b.constant(np.ones(cols, np.float32), f"w{i}")
        x = b.rms_norm(x, w, eps=1e-6, source=f"layers.{i}.norm")
    b.output(x, "y")
    return b.build()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="current")
    ap.add_argument("--layers", type=int, nargs="+", default=[34, 67, 134])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args()
    import workbench as wb
    from test_large_graphs import layer_stack
    stem = Path(a.out) / "rules_planner_layers"
    old = json.loads(stem.with_suffix(".json").read_text()) if stem.with_suffix(
        ".json").exists() else {}
    res = {"runs": old.get("runs", {}), "info": machine_info()}
    rows = res["runs"].setdefault(a.label, {})
    for make in (layer_stack, rms_stack):
        for n in a.layers:
            g = make(n)
            samples = []
            for _ in range(a.repeat):
                s = wb.Session(g, backend="reference")
                time.sleep(0.2)
                t = time.perf_counter()
                plan = s.auto("rules")
                samples.append(time.perf_counter() - t)
            rows[f"{make.__name__}({n})"] = {"ops": len(g.nodes), "kernels": len(plan.groups),
                                             "seconds": statistics.median(samples),
                                             "samples": samples}
            print(a.label, make.__name__, n, len(g.nodes), f"{statistics.median(samples):.2f} s",
                  flush=True)
            write_results(stem, res, markdown)


def markdown(res: dict) -> str:
    labels = list(res["runs"])
    graphs = list(dict.fromkeys(k for r in res["runs"].values() for k in r))
    lines = ["# Rules planner on stacks of identical row layers", "",
             "Seconds of `Session.auto(\"rules\")`, one column per code version.", "",
             "| graph | ops | kernels | " + " | ".join(labels) + " |",
             "|---|---|---|" + "---|" * len(labels)]
    for gname in graphs:
        any_row = next(r[gname] for r in res["runs"].values() if gname in r)
        cells = [f"{res['runs'][lab][gname]['seconds']:.2f}" if gname in res["runs"][lab]
                 else "" for lab in labels]
        lines.append(f"| {gname} | {any_row['ops']} | {any_row['kernels']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
