#!/usr/bin/env python
"""The first ``wb.open`` in a fresh Jupyter kernel: how long until the app exists.

Each run starts a new ipykernel (jupyter_client, this interpreter), runs one cell that
imports the workbench and opens the app on a graph (displayed, as in a notebook), and
reads back the cell's own timings: ``import workbench``, then ``wb.open`` (the widget
libraries' import, the session, the first drawing, the charts' data). The kernel is
then shut down. The time the browser takes to draw is not included (the browser test
covers what is drawn).

``--tree`` runs the same against another checkout (``--tree /work/main`` measures the
version before the charts left plotly's FigureWidget).

    .venv/bin/python benchmarks/first_open.py                 # 5 runs per graph
    .venv/bin/python benchmarks/first_open.py --runs 1        # smoke run

Writes ``<out>/responsiveness-first-open.json`` and ``.md`` (``<out>`` defaults to
benchmarks/results). Timing never makes it exit non-zero.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from harness import RESULTS, ROOT, machine_info


GRAPHS = {
    "layernorm (9 ops)": "sample_graphs/layernorm.json",
    "bert_chain.onnx": "sample_graphs/bert_chain.onnx",
    "transformer_stack (1,020 ops)": "transformer_stack(1020)",
}

CELL = """
import time, sys, json
_t0 = time.perf_counter()
import workbench as wb
_t1 = time.perf_counter()
_src = {src!r}
if _src.startswith("transformer_stack"):
    sys.path.insert(0, {samples!r})
    from make_samples import transformer_stack
    _src = transformer_stack(1020)
_t2 = time.perf_counter()
app = wb.open(_src, backend="cpu")
_t3 = time.perf_counter()
print("WB-TIMES", json.dumps({{"import_s": _t1 - _t0, "open_s": _t3 - _t2,
      "ops": len(app.session.graph.nodes),
      "plotly_python": "plotly.graph_objs._figurewidget" in sys.modules,
      "nbformat": "nbformat" in sys.modules}}))
"""


def one_run(tree: Path, src: str, timeout: float = 180.0) -> dict:
    from jupyter_client.manager import start_new_kernel
    env = {**os.environ, "PYTHONPATH": str(tree)}
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(tree),
                              extra_arguments=[])
    try:
        out = []
        kc.execute_interactive(CELL.format(src=src, samples=str(tree / "sample_graphs")),
                               timeout=timeout,
                               output_hook=lambda m: out.append(m))
        for m in out:
            text = m.get("content", {}).get("text", "")
            if "WB-TIMES" in text:
                return json.loads(text.split("WB-TIMES", 1)[1].strip().splitlines()[0])
            if m.get("msg_type") == "error":
                raise RuntimeError("\n".join(m["content"]["traceback"][-3:]))
        raise RuntimeError(f"no timings in the output: {out[-3:]}")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout to measure")
    ap.add_argument("--label", default="", help="a name for this tree in the report")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    # the kernelspec runs this interpreter (the venv's)
    os.environ.setdefault("JUPYTER_PATH", "")
    res = {"tree": str(a.tree), "label": a.label or a.tree.name, "graphs": {}}
    t_start = time.perf_counter()
    for name, src in GRAPHS.items():
        runs = [one_run(a.tree, src) for _ in range(a.runs)]
        res["graphs"][name] = {
            "runs": runs,
            "import_s": statistics.median(r["import_s"] for r in runs),
            "open_s": statistics.median(r["open_s"] for r in runs),
            "total_s": statistics.median(r["import_s"] + r["open_s"] for r in runs),
            "max_total_s": max(r["import_s"] + r["open_s"] for r in runs),
            "plotly_python": any(r["plotly_python"] for r in runs),
            "nbformat": any(r["nbformat"] for r in runs)}
    res["machine"] = machine_info()
    res["wall_s"] = round(time.perf_counter() - t_start, 1)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = "responsiveness-first-open" + (f"-{a.label}" if a.label else "")
    (a.out / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    m = res["machine"]
    lines = [f"# First `wb.open` in a fresh kernel ({res['label']})", "",
             f"{m['cpu']}, {m['cores']} cores, {m['date']}, load {m.get('load_average')}; "
             f"{a.runs} fresh kernels per graph, cpu backend, medians in seconds.", "",
             "| graph | import workbench | wb.open | total | worst total | plotly FigureWidget imported | nbformat imported |",
             "|---|---|---|---|---|---|---|"]
    for name, g in res["graphs"].items():
        lines.append(f"| {name} | {g['import_s']:.2f} | {g['open_s']:.2f} | "
                     f"{g['total_s']:.2f} | {g['max_total_s']:.2f} | "
                     f"{'yes' if g['plotly_python'] else 'no'} | "
                     f"{'yes' if g['nbformat'] else 'no'} |")
    worst = max(g["open_s"] for g in res["graphs"].values())
    lines += ["", f"Target: the first `wb.open` under 2 s. Slowest median wb.open: "
              f"{worst:.2f} s -> {'met' if worst < 2 else 'NOT met'}."]
    md = "\n".join(lines) + "\n"
    (a.out / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
