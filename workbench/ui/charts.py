"""The app's charts as plotly.js figure JSON, built from plain numbers (no plotly import).

Plotly's Python ``FigureWidget`` costs 3.5-4 s to import (nbformat, jsonschema) in a
fresh kernel, most of the first ``wb.open``. These builders return the ``{"data",
"layout"}`` dicts plotly.js draws, and :class:`workbench.ui.plots.Plots` hands them to
the front end, which draws them with the plotly.js shipped in the ``plotly`` package.
Pure functions of their inputs, so every chart is testable without a browser.

- :func:`steps_figure`: per step, latency (measured: the whole call, and its kernels'
  own summed, beside predicted), bytes moved
  (counted from the kernel IR, so known before anything runs; DRAM bytes the hardware
  counters measured beside them where read) and kernel count;
- :func:`kernels_figure`: the current step's kernels, the top ``TOP_KERNELS`` by
  latency and the rest summed: latency (measured, predicted) and bandwidth (achieved,
  predicted) against the device's DRAM bandwidth, drawn as a line at any kernel count;
- :func:`roofline_figure`: each kernel's FLOP/s against its arithmetic intensity,
  under the device's roofs (peak FLOP/s, DRAM bandwidth from ``workbench/device.py``;
  the TF32 tensor cores' peak too in a step whose matmuls run on them).

Legends sit above the plotting area, so they never meet rotated tick labels.

Example::

    >>> fig = steps_figure(session.table(measure=False))        # doctest: +SKIP
    >>> [t["name"] for t in fig["data"]][:2]                    # doctest: +SKIP
    ['measured', 'predicted']
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MEASURED, PREDICTED, BYTES, KERNELS, DRAM, ROOF = ("#1f77b4", "#ff7f0e", "#2ca02c",
                                                   "#9467bd", "#8c564b", "#d62728")
KERNELS_OWN = "#aec7e8"   # the measured step's lighter shade: its kernels' own share
TOP_KERNELS = 12          # the per-kernel chart shows these; the rest is one bar
LONG_LABELS_UP_TO = 24    # steps labelled "3 fuse n1 n2" up to this many, then "3"
LABEL_CHARS = 16


@dataclass(frozen=True)
class KernelRow:
    """One kernel of the current step, as the charts need it (NaN: not known)."""
    group: str
    bytes_moved: float        # counted from the kernel IR
    flops: float              # the kernel's arithmetic (generated + library calls)
    predicted_ms: float
    latency_ms: float = math.nan
    dram_bytes: float = math.nan


def finite(values) -> list:
    """NaN (not measured) as None: plotly leaves a gap, and the JSON stays valid."""
    return [None if v is None or (isinstance(v, float) and math.isnan(v)) else v
            for v in values]


def _base_layout(title: str, height: int) -> dict:
    # transparent backgrounds; text takes the theme colour (CSS in graph_view.css)
    return {"title": {"text": title, "font": {"size": 13}, "x": 0, "xanchor": "left",
                      "y": 0.98, "yanchor": "top"},
            "height": height, "autosize": True,
            "margin": {"l": 55, "r": 15, "t": 62, "b": 10},
            "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
            "barmode": "group", "hovermode": "closest",
            # above the plots: a legend below collides with rotated tick labels
            "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0,
                       "yanchor": "bottom", "bgcolor": "rgba(0,0,0,0)"},
            "font": {"size": 11}}


def _domains(n: int, gap: float = 0.06) -> list[list[float]]:
    w = (1 - gap * (n - 1)) / n
    return [[round(i * (w + gap), 4), round(i * (w + gap) + w, 4)] for i in range(n)]


def _axis_names(i: int) -> tuple[str, str]:
    return ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")


def _subplots(layout: dict, titles: Sequence[str], kinds: Sequence[str]) -> None:
    """Side-by-side subplots (what plotly's make_subplots lays out), titled."""
    layout["annotations"] = []
    for i, (dom, title, kind) in enumerate(zip(_domains(len(titles)), titles, kinds)):
        x, y = _axis_names(i)
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = {
            "domain": dom, "anchor": y, "type": kind, "automargin": True,
            "tickfont": {"size": 10}}
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = {
            "anchor": x, "automargin": True, "rangemode": "tozero"}
        layout["annotations"].append({
            "text": title, "xref": "paper", "yref": "paper", "x": (dom[0] + dom[1]) / 2,
            "y": 1.0, "yanchor": "bottom", "yshift": 2, "showarrow": False,
            "font": {"size": 11}})
    # the legend above the subplot titles
    layout["legend"]["y"] = 1.09


def step_labels(steps: Sequence[int], actions: Sequence[str]) -> list[str]:
    """Tick labels: "3 fuse n1 n2" cut to LABEL_CHARS while they fit, then the step
    number alone (the hover shows the action), so no step loses its label."""
    if len(steps) > LONG_LABELS_UP_TO:
        return [str(int(s)) for s in steps]
    return [_cut(f"{int(s)} {a}", LABEL_CHARS) for s, a in zip(steps, actions)]


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def steps_figure(history) -> dict:
    """Latency, bytes and kernels per step from a history table (``Session.table``
    columns; ``bytes_moved_MB`` filled with the counted bytes for unmeasured steps)."""
    n = len(history)
    steps = [int(s) for s in history["step"]] if n else []
    actions = [str(a) for a in history["action"]] if n else []
    # categories named by their tick label ("3 fuse n1 n2"; unique: the step leads)
    x = step_labels(steps, actions)
    col = lambda name: finite([float(v) for v in history[name]] if name in history
                              else [None] * n)
    hover = [f"step {s}: {a}" for s, a in zip(steps, actions)]
    measured, predicted, dram = col("latency_ms"), col("predicted_ms"), col("dram_MB")

    def bar(name, y, color, i, **kw):
        xa, ya = _axis_names(i)
        return {"type": "bar", "name": name, "x": x, "y": y, "xaxis": xa, "yaxis": ya,
                "marker": {"color": color}, "hovertext": hover, **kw}

    data = [bar("measured", measured, MEASURED, 0,
                visible=any(v is not None for v in measured)),
            bar("predicted", predicted, PREDICTED, 0,
                visible=any(v is not None for v in predicted)),
            bar("bytes counted", col("bytes_moved_MB"), BYTES, 1),
            # measured DRAM bytes only where counters were read (never the counted ones)
            bar("DRAM measured", dram, DRAM, 1, visible=any(v is not None for v in dram)),
            bar("kernels", col("kernels"), KERNELS, 2, showlegend=False)]
    # the kernels' own times summed beside the step's (a whole call): the gap between
    # the two bars is the call overhead, never folded into either
    own = col("kernels_ms")
    data.append(bar("kernels' own", own, KERNELS_OWN, 0,
                    visible=any(v is not None for v in own)))
    unmeasured = all(v is None for v in measured)
    layout = _base_layout("Steps" + (" (predicted; Measure times them)" if unmeasured
                                     else ""), 320)
    _subplots(layout, ("latency per step (ms)", "bytes moved (MB)", "kernels"),
              ("category",) * 3)
    angle = 0 if n <= 4 else -45 if n <= LONG_LABELS_UP_TO else 0
    for i in range(3):
        ax = layout["xaxis" if i == 0 else f"xaxis{i + 1}"]
        # every tick given: plotly thins crowded category ticks (16 steps lost theirs)
        ax.update(tickmode="array", tickvals=x, ticktext=x, tickangle=angle,
                  range=[-0.5, max(n, 1) - 0.5])
    return {"data": data, "layout": layout}


def top_kernels(rows: Sequence[KernelRow], top: int = TOP_KERNELS) -> list[KernelRow]:
    """The ``top`` kernels by latency (measured, else predicted), in plan order, and
    one row summing the rest ("+N others")."""
    rows = list(rows)
    if len(rows) <= top:
        return rows
    key = lambda r: r.latency_ms if not math.isnan(r.latency_ms) else r.predicted_ms
    keep = set(sorted(range(len(rows)), key=lambda i: -(key(rows[i]) or 0))[:top - 1])
    rest = [r for i, r in enumerate(rows) if i not in keep]
    total = lambda f: (math.nan if all(math.isnan(getattr(r, f)) for r in rest)
                       else sum(getattr(r, f) for r in rest if not math.isnan(getattr(r, f))))
    other = KernelRow(f"+{len(rest)} others", total("bytes_moved"), total("flops"),
                      total("predicted_ms"), total("latency_ms"), total("dram_bytes"))
    return [r for i, r in enumerate(rows) if i in keep] + [other]


def _gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms and ms > 0 and not math.isnan(ms) else math.nan


def kernels_figure(rows: Sequence[KernelRow], device_GBps: float | None = None,
                   device_name: str = "") -> dict:
    """Latency and bandwidth of the current step's kernels (top ones, the rest summed)."""
    shown = top_kernels(rows)
    names = [r.group for r in shown]
    measured = [r.latency_ms for r in shown]
    is_measured = any(not math.isnan(v) for v in measured)
    data = [
        {"type": "bar", "name": "measured", "x": names, "y": finite(measured),
         "marker": {"color": MEASURED}, "xaxis": "x", "yaxis": "y",
         "visible": is_measured, "legendgroup": "measured"},
        {"type": "bar", "name": "predicted", "x": names,
         "y": finite([r.predicted_ms for r in shown]), "marker": {"color": PREDICTED},
         "xaxis": "x", "yaxis": "y", "legendgroup": "predicted"},
        {"type": "bar", "name": "achieved", "x": names,
         "y": finite([_gbps(r.bytes_moved, r.latency_ms) for r in shown]),
         "marker": {"color": MEASURED}, "xaxis": "x2", "yaxis": "y2",
         "visible": is_measured, "showlegend": False, "legendgroup": "measured"},
        {"type": "bar", "name": "predicted", "x": names,
         "y": finite([_gbps(r.bytes_moved, r.predicted_ms) for r in shown]),
         "marker": {"color": PREDICTED}, "xaxis": "x2", "yaxis": "y2",
         "showlegend": False, "legendgroup": "predicted"}]
    title = ((f"Kernels of the current step: top {TOP_KERNELS - 1} of {len(rows)}, the "
              "rest summed" if len(rows) > len(shown) else
              f"Kernels of the current step ({len(rows)})")
             + ("" if is_measured else ": predicted; Measure times them"))
    layout = _base_layout(title, 320)
    _subplots(layout, ("latency (ms)", "bandwidth (GB/s)"), ("category", "category"))
    layout["shapes"] = []
    if device_GBps and names:
        # a shape spans the subplot's width, also with a single kernel (a line trace
        # through one point draws nothing)
        label = f"{device_name} DRAM {device_GBps:.0f} GB/s".strip()
        layout["shapes"].append({
            "type": "line", "xref": "x2 domain", "yref": "y2", "x0": 0, "x1": 1,
            "y0": device_GBps, "y1": device_GBps,
            "line": {"color": ROOF, "dash": "dash", "width": 2}, "name": label})
        layout["annotations"].append({
            "text": label, "xref": "x2 domain", "yref": "y2", "x": 1, "xanchor": "right",
            "y": device_GBps, "yanchor": "bottom", "showarrow": False,
            "font": {"size": 10, "color": ROOF}})
    for ax in ("xaxis", "xaxis2"):
        layout[ax]["tickangle"] = 0 if len(names) <= 8 else -45
    return {"data": data, "layout": layout}


def roofline_figure(rows: Sequence[KernelRow], peak_flops: float | None,
                    dram_bandwidth: float | None, device_name: str = "",
                    tensor_flops: float | None = None) -> dict:
    """Each kernel's achieved (measured) and predicted GFLOP/s against its arithmetic
    intensity (FLOP per byte moved), under the device's roofs; log-log.
    ``tensor_flops``: the TF32 tensor cores' peak, a second, higher ceiling where the
    step's float32 matmuls run on them (its kernels would sit above the first)."""
    pts = [r for r in rows if r.bytes_moved > 0 and r.flops > 0]

    def trace(name, ms_of, color, symbol):
        xs, ys, text = [], [], []
        for r in pts:
            ms = ms_of(r)
            if ms and ms > 0 and not math.isnan(ms):
                xs.append(r.flops / r.bytes_moved)
                ys.append(r.flops / (ms * 1e-3) / 1e9)
                text.append(r.group)
        return {"type": "scatter", "mode": "markers", "name": name, "x": xs, "y": ys,
                "text": text, "hovertemplate": "%{text}: %{x:.3g} FLOP/B, "
                "%{y:.3g} GFLOP/s<extra>" + name + "</extra>",
                "marker": {"color": color, "size": 8, "symbol": symbol},
                "visible": bool(xs)}

    data = [trace("measured", lambda r: r.latency_ms, MEASURED, "circle"),
            trace("predicted", lambda r: r.predicted_ms, PREDICTED, "diamond-open")]
    xs = [p for t in data for p in t["x"]]
    if peak_flops and dram_bandwidth:
        ridge = peak_flops / dram_bandwidth
        lo = min(xs + [ridge]) / 4
        hi = max(xs + [ridge]) * 4
        roof_x = [lo, ridge, hi]
        roof_y = [lo * dram_bandwidth / 1e9, peak_flops / 1e9, peak_flops / 1e9]
        data.append({"type": "scatter", "mode": "lines", "name":
                     f"{device_name} roof: {dram_bandwidth / 1e9:.0f} GB/s, "
                     f"{peak_flops / 1e12:.3g} TFLOP/s".strip(),
                     "x": roof_x, "y": roof_y, "hoverinfo": "skip",
                     "line": {"color": ROOF, "dash": "dash", "width": 2}})
        if tensor_flops:
            ridge = tensor_flops / dram_bandwidth
            hi = max(hi, ridge * 4)
            data.append({"type": "scatter", "mode": "lines", "name":
                         f"TF32 tensor cores: {tensor_flops / 1e12:.3g} TFLOP/s",
                         "x": [lo, ridge, hi], "y": [lo * dram_bandwidth / 1e9,
                                                     tensor_flops / 1e9, tensor_flops / 1e9],
                         "hoverinfo": "skip",
                         "line": {"color": ROOF, "dash": "dot", "width": 2}})
    title = "Roofline: kernels against the device's limits"
    if not pts:
        title += " (no kernel does arithmetic)"
    elif not data[0]["visible"]:
        title += " (predicted; Measure places the measured points)"
    layout = _base_layout(title, 340)
    layout["xaxis"] = {"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"},
                       "automargin": True}
    layout["yaxis"] = {"type": "log", "title": {"text": "GFLOP/s"}, "automargin": True}
    return {"data": data, "layout": layout}
