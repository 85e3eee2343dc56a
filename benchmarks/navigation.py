#!/usr/bin/env python
"""Navigation of large graphs in the notebook app (issue 14): what each step costs in
Python, and the zoom the first view and "fit" give.

For the 1,020-op ``transformer_stack`` and the 510-op ``block_chain(34)`` (both from
sample_graphs/make_samples.py) on the ``reference`` backend (nothing compiled):

- ``namespaces``: building the nested containers (``ui.namespaces.namespaces``);
- ``open``: ``WorkbenchApp`` construction (containers collapsed, first drawing);
- ``search``: ``app.select("n<k>")`` for a node hidden in a collapsed box: reveal it
  (expand the boxes holding it), redraw, set ``focus``;
- ``properties``: the property panel of that node (``node_properties(...).to_html()``);
- ``save svg`` / ``save png``: ``app.save_graph`` through Graphviz, with file sizes;
- ``fit``: the zoom the front end's rules give in an 800 x 520 px view (the same
  formula as ``static/graph_view.js``: the whole graph when that is >= 0.5, else the
  width at 0.5-1), against the whole-graph zoom the old "fit" used.

Each timing is the median of ``--repeat`` runs. Writes ``<out>/navigation.json`` and
``<out>/navigation.md`` (``<out>`` defaults to benchmarks/results). Timing never makes
it exit non-zero.

    .venv/bin/python benchmarks/navigation.py
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from harness import RESULTS, machine_info
from make_samples import block_chain, transformer_stack

VIEW_W, VIEW_H = 800, 520          # the graph view's size in the app, px
MIN_READABLE, MAX_FIT = 0.5, 1.5   # as static/graph_view.js


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def fit_zoom(w: float, h: float) -> tuple[float, float]:
    """(old fit: the whole graph, new fit) in a VIEW_W x VIEW_H view."""
    whole = min(VIEW_W / w, VIEW_H / h, MAX_FIT)
    new = whole if whole >= MIN_READABLE else max(MIN_READABLE, min(VIEW_W / w, 1.0))
    return whole, new


def measure(name: str, g, target: str, repeat: int, tmp: Path) -> dict:
    from workbench.session import Session
    from workbench.ui import WorkbenchApp
    from workbench.ui.namespaces import namespaces
    from workbench.ui.properties import node_properties

    t_ns, ns = median_time(lambda: namespaces(g), repeat)
    t_open, app = median_time(lambda: WorkbenchApp(Session(g, backend="reference")), repeat)
    boxes = app.view.svg.count('class="node')
    w, h = map(float, re.search(r'viewBox="0\.00 0\.00 ([\d.]+) ([\d.]+)"', app.view.svg).groups())
    hidden = app.view.box_of(target) != target

    def search():
        app.view.collapse()                 # hide it again, as the view opened
        return app.select(target)
    t_search, hits = median_time(search, repeat)
    t_props, page = median_time(
        lambda: node_properties(app.session.plan, target, app.view.namespaces).to_html(), repeat)
    t_svg, _ = median_time(lambda: app.save_graph(tmp / f"{name}.svg"), repeat)
    t_png, _ = median_time(lambda: app.save_graph(tmp / f"{name}.png"), repeat)
    old_fit, new_fit = fit_zoom(w, h)
    return {
        "graph": name, "ops": len(g.nodes), "containers": len(ns), "depth": ns.depth(),
        "boxes_collapsed": boxes, "layout_w": w, "layout_h": h,
        "search_target": target, "target_was_hidden": hidden, "search_hits": hits,
        "namespaces_s": t_ns, "open_s": t_open, "search_s": t_search,
        "properties_s": t_props, "properties_bytes": len(page),
        "save_svg_s": t_svg, "svg_bytes": (tmp / f"{name}.svg").stat().st_size,
        "save_png_s": t_png, "png_bytes": (tmp / f"{name}.png").stat().st_size,
        "fit_old": old_fit, "fit_new": new_fit,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, g, target in (("transformer_stack_1020", transformer_stack(1020), "n1000"),
                                ("block_chain_34", block_chain(34, name="big"), "n400")):
            rows.append(measure(name, g, target, args.repeat, Path(d)))
            print(json.dumps(rows[-1]))
    info = machine_info()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "navigation.json").write_text(json.dumps({"machine": info, "rows": rows},
                                                         indent=1))
    lines = ["# Navigation of large graphs (reference backend)", "",
             f"{info.get('cpu', '')}, {info.get('cores', '')} cores, {info.get('date', '')}, "
             f"load {info.get('load_average', '')}. Median of {args.repeat} runs, seconds.", "",
             "| graph | ops | containers (depth) | boxes collapsed | layout w x h | "
             "namespaces | open | search (reveal + redraw) | properties | save SVG | "
             "save PNG | fit: old -> new |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['graph']} | {r['ops']} | {r['containers']} ({r['depth']}) | "
            f"{r['boxes_collapsed']} | {r['layout_w']:.0f} x {r['layout_h']:.0f} | "
            f"{r['namespaces_s']:.3f} | {r['open_s']:.3f} | {r['search_s']:.3f} | "
            f"{r['properties_s']:.4f} | {r['save_svg_s']:.3f} ({r['svg_bytes'] // 1024} KB) | "
            f"{r['save_png_s']:.3f} ({r['png_bytes'] // 1024} KB) | "
            f"{r['fit_old']:.0%} -> {r['fit_new']:.0%} |")
    lines += ["", f"Fit is computed with the front end's rule for a {VIEW_W} x {VIEW_H} px "
              "view (the whole graph when that is >= 50%, else its width at 50-100%); the "
              "browser test checks the zoom the page really shows."]
    (args.out / "navigation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
