#!/usr/bin/env python
"""Responsiveness of the notebook app: the time from Fuse to the redrawn view.

On the ``cpu`` backend, for a ~100-node graph (LayerNorm -> GELU -> residual blocks
from the builder, 15 nodes each), it clicks Fuse through the real app
(``WorkbenchApp.fuse``) on each block's LayerNorm (9 ops -> one row-reduction kernel)
and GELU (5 ops -> one elementwise kernel), and splits each click's wall time into
(exclusive times, nested calls not counted twice):

- ``plan``: ``Session.fuse`` (legality, schedule, the new Plan);
- ``codegen``: lowering the new group and rendering, highlighting and diffing its CUDA
  and C source for the code panel;
- ``compile``: building the new kernel with the C compiler (``backend.compile``);
- ``draw``: DOT text + Graphviz ``dot`` -> SVG;
- ``other``: the rest (history table with predictions, plots, controls).

Measuring is apart (not part of a Fuse). Run twice: with a *cold* kernel cache (an
empty ``$WORKBENCH_CACHE``: every kernel compiled) and a *warm* one (the same kernels
already built). It also times drawing a 510-node graph (composites collapsed, as the
view starts, and expanded). Target: Fuse -> view under 1 s.

    .venv/bin/python benchmarks/responsiveness.py            # 7 blocks (105 nodes)
    .venv/bin/python benchmarks/responsiveness.py --quick    # 2 blocks, smoke run

Writes ``<out>/responsiveness.json`` and ``<out>/responsiveness.md`` (``<out>``
defaults to benchmarks/results). Timing never makes it exit non-zero.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import RESULTS, machine_info
from make_samples import block_chain

from workbench.device import H100


PHASES = ("plan", "codegen", "compile", "draw", "other")


class Phases:
    """Exclusive wall time per phase of wrapped calls (a child's time is its own)."""

    def __init__(self):
        self.totals = dict.fromkeys(PHASES, 0.0)
        self._stack: list[list] = []

    def wrap(self, obj, attr: str, phase: str) -> None:
        fn = getattr(obj, attr)

        def timed(*a, **k):
            frame = [phase, 0.0]          # [phase, time spent in wrapped children]
            self._stack.append(frame)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t0
                self._stack.pop()
                self.totals[phase] += dt - frame[1]
                if self._stack:
                    self._stack[-1][1] += dt
        setattr(obj, attr, timed)

    def reset(self):
        self.totals = dict.fromkeys(PHASES, 0.0)


def instrumented_app(graph):
    from workbench.session import Session
    from workbench.ui import WorkbenchApp
    app = WorkbenchApp(Session(graph, backend="cpu"))
    ph = Phases()
    ph.wrap(app.session, "fuse", "plan")
    ph.wrap(app.session, "_lower", "codegen")      # lowering, cached per group
    ph.wrap(app.code, "show", "codegen")
    ph.wrap(app.session.backend, "compile", "compile")
    ph.wrap(app.view, "redraw", "draw")
    return app, ph


def fuse_clicks(graph, blocks: int) -> list[dict]:
    """Fuse each block's LayerNorm, then its GELU, through the app; one row per click."""
    from workbench.ui.dot import composites
    app, ph = instrumented_app(graph)
    comps = list(composites(graph).values())     # ln0, gelu0, ln1, gelu1, ...
    rows = []
    for i in range(blocks):
        for kind, nodes in (("layernorm", comps[2 * i]), ("gelu", comps[2 * i + 1])):
            app.selected = list(nodes)
            ph.reset()
            t0 = time.perf_counter()
            plan = app.fuse()
            total = time.perf_counter() - t0
            if plan is None:
                raise SystemExit(f"fuse refused: {app.message}")
            t = dict(ph.totals)
            t["other"] = total - sum(t[p] for p in PHASES if p != "other")
            rows.append({"block": i, "kernel": kind, "ops": len(nodes),
                         "total_s": total, **{f"{p}_s": t[p] for p in PHASES}})
    return rows


def summarize(rows: list[dict]) -> dict:
    out = {}
    for kind in sorted({r["kernel"] for r in rows}):
        rs = [r for r in rows if r["kernel"] == kind]
        out[kind] = {k: statistics.median(r[k] for r in rs)
                     for k in ["total_s"] + [f"{p}_s" for p in PHASES]}
        out[kind]["max_total_s"] = max(r["total_s"] for r in rs)
        out[kind]["clicks"] = len(rs)
    return out


def draw_times(blocks: int, rows: int, cols: int, repeats: int) -> dict:
    from workbench.fusion import Plan
    from workbench.ui.dot import composites, render_svg, to_dot
    g = block_chain(blocks, rows, cols)
    plan = Plan.singletons(g, H100)
    out = {"nodes": len(g.nodes)}
    for name, collapsed in (("collapsed", set(composites(g))), ("expanded", set())):
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            svg = render_svg(to_dot(g, plan, collapsed).source)
            ts.append(time.perf_counter() - t0)
        out[name] = {"median_s": statistics.median(ts), "svg_bytes": len(svg)}
    return out


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = ["# Responsiveness: Fuse -> redrawn view (cpu backend)", "",
             f"{res['graph']['nodes']}-node graph ({res['graph']['blocks']} blocks of "
             f"LayerNorm -> GELU -> add, x[{res['graph']['rows']}, {res['graph']['cols']}]); "
             f"{m['cpu']}, {m['cores']} cores, {m['date']}, load {m.get('load_average')}.",
             "Median seconds per Fuse click (exclusive phase times; measuring is apart).", "",
             "| cache | kernel | clicks | total | plan | codegen | compile | draw | other | max total |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for cache in ("cold", "warm"):
        for kind, s in res[cache]["summary"].items():
            lines.append(f"| {cache} | {kind} | {s['clicks']} | {s['total_s']:.3f} | "
                         + " | ".join(f"{s[f'{p}_s']:.3f}" for p in PHASES)
                         + f" | {s['max_total_s']:.3f} |")
    d = res["draw_500"]
    lines += ["", f"Drawing a {d['nodes']}-node graph (DOT + dot -> SVG): composites "
              f"collapsed (how the view opens) {d['collapsed']['median_s']:.3f} s "
              f"({d['collapsed']['svg_bytes'] // 1024} KB SVG), expanded "
              f"{d['expanded']['median_s']:.3f} s ({d['expanded']['svg_bytes'] // 1024} KB).",
              "", f"Target: under 1 s per Fuse. Worst click: {res['worst_total_s']:.3f} s "
              f"-> {'met' if res['worst_total_s'] < 1 else 'NOT met'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=7, help="15 nodes each (default 7: 105)")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--draw-repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 blocks, 1 draw repeat")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if a.quick:
        a.blocks, a.draw_repeats = 2, 1
    g = block_chain(a.blocks, a.rows, a.cols)
    res = {"graph": {"nodes": len(g.nodes), "blocks": a.blocks, "rows": a.rows,
                     "cols": a.cols}}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb-resp-cache-") as cache:
        os.environ["WORKBENCH_CACHE"] = cache    # cold: nothing built yet
        for cache_state in ("cold", "warm"):     # warm: the same kernels, now cached
            rows = fuse_clicks(g, a.blocks)
            res[cache_state] = {"clicks": rows, "summary": summarize(rows)}
    res["draw_500"] = draw_times(34, a.rows, a.cols, a.draw_repeats)
    res["worst_total_s"] = max(r["total_s"] for c in ("cold", "warm")
                               for r in res[c]["clicks"])
    res["machine"] = machine_info()
    res["wall_s"] = round(time.perf_counter() - t_start, 1)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "responsiveness.json").write_text(json.dumps(res, indent=1, default=str))
    md = markdown(res)
    (a.out / "responsiveness.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
