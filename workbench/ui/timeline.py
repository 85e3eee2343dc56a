"""The per-rank timeline as plotly.js figure JSON (drawn by :class:`.plots.Plots`).

Rows are ranks (measured) and the model's rows (``model: 2 ranks``, ``simulated: 64
ranks``); bars are compute, communication and overlap
(:mod:`workbench.distributed.timeline`), placed by their start within the step.
Measured bars are solid; the model's are hatched and their legend entries say
"model" or "simulated", so a simulated number is never read as a measurement.

Example::

    >>> fig = timeline_figure(bars)                 # doctest: +SKIP
    >>> sorted({t["name"] for t in fig["data"]})    # doctest: +SKIP
    ['communication', 'compute', 'overlap', ...]
"""
from __future__ import annotations

from typing import Sequence

from ..distributed.timeline import KINDS, Bar

COLORS = {"compute": "#1f77b4", "communication": "#d62728", "overlap": "#2ca02c"}
SOURCES = ("measured", "model", "simulated")


def trace_name(kind: str, source: str) -> str:
    return kind if source == "measured" else f"{kind} ({source})"


def timeline_figure(bars: Sequence[Bar], note: str = "") -> dict:
    """One horizontal bar trace per (kind, source); rows top to bottom in the order
    they first appear. The simulated rows get a plot of their own under the others,
    with its own time axis (at 64 ranks a step is ~100x the measured one: on one axis
    the measured bars were slivers). ``note`` (e.g. the rank counts the model could not
    take) goes under the title."""
    near = list(dict.fromkeys(b.row for b in bars if b.source != "simulated"))
    far = list(dict.fromkeys(b.row for b in bars if b.source == "simulated"))
    data = []
    for source in SOURCES:
        axes = {"xaxis": "x2", "yaxis": "y2"} if source == "simulated" and near else {}
        for kind in KINDS:
            sel = [b for b in bars if b.kind == kind and b.source == source]
            if not sel:
                continue
            marker = {"color": COLORS[kind]}
            if source != "measured":
                marker["pattern"] = {"shape": "/" if source == "model" else "x"}
                marker["opacity"] = 0.7
            data.append({
                "type": "bar", "orientation": "h", "name": trace_name(kind, source),
                "y": [b.row for b in sel], "base": [b.start_s * 1e3 for b in sel],
                "x": [(b.end_s - b.start_s) * 1e3 for b in sel],
                "text": [b.label for b in sel], "textposition": "none",
                "hovertemplate": "%{y}: %{text}<br>%{base:.3g} ms + %{x:.3g} ms"
                                 f"<extra>{trace_name(kind, source)}</extra>",
                "marker": marker, **axes})
    title = "one step per rank: compute, communication, overlap"
    if not any(b.source == "measured" for b in bars):
        title += " (not measured yet: Measure runs the ranks)"
    plot_h = 90 + 30 * (len(near) + len(far))
    height = plot_h + 150
    split = len(far) / (len(near) + len(far)) if near and far else 0.0
    axis = {"title": {"text": "ms from the step's start"}}
    layout = {
        "title": {"text": title + (f"<br><sub>{note}</sub>" if note else ""),
                  "font": {"size": 12}},
        "barmode": "overlay", "height": height,
        "xaxis": dict(axis) if not split else {"anchor": "y", "ticksuffix": " ms"},
        "yaxis": {"categoryorder": "array", "categoryarray": (near or far)[::-1],
                  "automargin": True, "domain": [split + 0.12 if split else 0, 1]},
        # (70 px under the plotting area: clear of the axis title; above it, the
        # legend met the two-line title)
        "legend": {"orientation": "h", "y": -70 / plot_h, "yanchor": "top"},
        "margin": {"t": 60, "b": 90}, "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)"}
    if split:
        layout["xaxis2"] = {**axis, "anchor": "y2",
                            "title": {"text": "ms from the step's start (simulated rows)"}}
        layout["yaxis2"] = {"categoryorder": "array", "categoryarray": far[::-1],
                            "automargin": True, "domain": [0, split], "anchor": "x2"}
    return {"data": data, "layout": layout}
