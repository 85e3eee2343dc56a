"""Plots of the step history and of the current step's kernels (plotly FigureWidgets).

- ``steps``: per step, measured latency beside predicted latency (when the session
  predicts), bytes moved (counted from the kernel IR, and beside them the DRAM bytes
  the hardware counters measured, where they were read) and kernel count;
- ``kernels``: the current step's per-kernel latency (measured, and predicted);
- ``bandwidth``: each kernel's achieved bandwidth against the device's DRAM bandwidth
  (when the session knows its device).

Backgrounds are transparent and text takes the theme colour (CSS in
``static/graph_view.css``), so the figures read in light and dark themes.

Example::

    >>> p = Plots(); p.update(session.table(measure=False), None)   # doctest: +SKIP
"""
from __future__ import annotations

import math

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def _finite(values) -> list:
    """NaN (not measured) as None: plotly leaves a gap, and the widget's JSON stays valid."""
    return [None if v is None or math.isnan(v) else v for v in values]


MEASURED, PREDICTED, BYTES, KERNELS, DRAM = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                                             "#8c564b")


def _layout(fig: go.FigureWidget, title: str, height: int) -> None:
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=height,
                      margin=dict(l=50, r=10, t=40, b=40), template="plotly_white",
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      barmode="group", legend=dict(orientation="h", y=-0.2))


class Plots(w.VBox):
    """The three figures, as one widget; ``figures`` lists them."""

    def __init__(self):
        steps = make_subplots(rows=1, cols=3, subplot_titles=(
            "latency per step (ms)", "bytes moved (MB)", "kernels"))
        steps.add_bar(name="measured", marker_color=MEASURED, row=1, col=1)
        steps.add_bar(name="predicted", marker_color=PREDICTED, row=1, col=1)
        steps.add_bar(name="bytes counted", marker_color=BYTES, row=1, col=2)
        steps.add_bar(name="DRAM measured", marker_color=DRAM, row=1, col=2, visible=False)
        steps.add_bar(name="kernels", marker_color=KERNELS, row=1, col=3, showlegend=False)
        self.steps = go.FigureWidget(steps)
        _layout(self.steps, "Steps", 300)
        self.kernels = go.FigureWidget()
        self.kernels.add_bar(name="measured", marker_color=MEASURED)
        self.kernels.add_bar(name="predicted", marker_color=PREDICTED)
        _layout(self.kernels, "Kernels of the current step: latency (ms)", 300)
        self.bandwidth = go.FigureWidget()
        self.bandwidth.add_bar(name="achieved", marker_color=MEASURED)
        self.bandwidth.add_scatter(name="device DRAM bandwidth", mode="lines",
                                   line=dict(color="#d62728", dash="dash"))
        _layout(self.bandwidth, "Achieved bandwidth (GB/s)", 300)
        self.figures = (self.steps, self.kernels, self.bandwidth)
        # stacked, each the app's full width: side by side at 50% the figures kept
        # plotly's default width and were clipped at the right edge
        super().__init__(list(self.figures))
        self.add_class("wb-plots")

    def update(self, history: pd.DataFrame, per_kernel: pd.DataFrame | None,
               device_GBps: float | None = None, device_name: str = "") -> None:
        """Redraw from the history table and the current step's per-kernel frame
        (``None`` when the current step is not measured)."""
        x = [f"{int(s)} {a}"[:28] for s, a in zip(history["step"], history["action"])]
        col = lambda name: _finite(history[name].astype(float).tolist() if name in history
                                   else [None] * len(history))
        with self.steps.batch_update():
            m, p, b, dram, k = self.steps.data
            m.x, m.y = x, col("latency_ms")
            p.x, p.y = x, col("predicted_ms")
            p.visible = any(v is not None for v in col("predicted_ms"))
            b.x, b.y = x, col("bytes_moved_MB")
            # measured DRAM bytes only where counters were read (never the counted ones)
            dram.x, dram.y = x, col("dram_MB")
            dram.visible = any(v is not None for v in col("dram_MB"))
            k.x, k.y = x, col("kernels")
        names = [] if per_kernel is None else per_kernel["group"].tolist()
        kcol = lambda name: _finite(per_kernel[name].astype(float).tolist()
                                    if per_kernel is not None and name in per_kernel
                                    else [None] * len(names))
        with self.kernels.batch_update():
            m, p = self.kernels.data
            m.x, m.y = names, kcol("latency_ms")
            p.x, p.y = names, kcol("predicted_ms")
            p.visible = any(v is not None for v in kcol("predicted_ms"))
            self.kernels.layout.title.text = ("Kernels of the current step: latency (ms)"
                                              if names else
                                              "Kernels of the current step: not measured yet")
        with self.bandwidth.batch_update():
            a, d = self.bandwidth.data
            a.x, a.y = names, kcol("bandwidth_GBps")
            known = device_GBps is not None and bool(names)
            d.x = names if known else []
            d.y = [device_GBps] * len(names) if known else []
            d.name = f"{device_name} DRAM {device_GBps:.0f} GB/s" if known else "device DRAM bandwidth"
            self.bandwidth.layout.title.text = (
                "Achieved bandwidth (GB/s)" + ("" if known or not names
                                               else " (device bandwidth unknown)"))
