"""The app's charts: one anywidget that draws plotly.js figures sent as JSON.

The figures are built by :mod:`workbench.ui.charts` from plain numbers; the front end
(``static/charts.js``; the plotly.js bundle the ``plotly`` package ships is sent once
per page, when the front end asks) draws each with ``Plotly.react``. No plotly Python object is made: plotly's
``FigureWidget`` took 3.5-4 s to import in a fresh kernel (nbformat, jsonschema), most
of the first ``wb.open``. One widget carries plotly.js, and only the first app of a page
(the three FigureWidgets carried it three times per app).

Backgrounds are transparent and text takes the theme colour (CSS in
``static/graph_view.css``), so the figures read in light and dark themes.

Example::

    >>> p = Plots(); p.update(session.table(measure=False), rows)   # doctest: +SKIP
    >>> p.figure("steps")["data"][0]["name"]                        # doctest: +SKIP
    'measured'
"""
from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Sequence

import anywidget
import traitlets

from .charts import KernelRow, kernels_figure, roofline_figure, steps_figure

STATIC = Path(__file__).parent / "static"
NAMES = ("steps", "kernels", "roofline")


@functools.lru_cache(maxsize=1)
def plotly_js() -> str | None:
    """The plotly.js bundle of the installed ``plotly`` package (found without
    importing it), or None when plotly is not installed."""
    spec = importlib.util.find_spec("plotly")
    for d in (spec.submodule_search_locations or []) if spec else []:
        f = Path(d) / "package_data" / "plotly.min.js"
        if f.is_file():
            return f.read_text(encoding="utf-8")
    return None


def _esm() -> str:
    """charts.js behind a loader that evaluates plotly.js's UMD bundle, given as text,
    into a local ``module`` (so it neither needs nor touches a global ``define``)."""
    loader = ("const evalPlotly = (code) => { const module = { exports: {} };\n"
              "  new Function('module', 'exports', code)(module, module.exports);\n"
              "  return module.exports && module.exports.react ? module.exports : undefined; };\n")
    return loader + (STATIC / "charts.js").read_text(encoding="utf-8")


class Plots(anywidget.AnyWidget):
    """The steps, kernels and roofline charts; ``figure(name)`` is one's JSON.

    plotly.js (4.6 MB) is not in the widget's code: the front end asks for it
    (``{"type": "need_plotly"}``) only when the page has not evaluated it yet, and
    keeps it for every later app of the page -- sent with every app, it was most of a
    warm ``wb.open`` in the browser (benchmarks/lab_open.py)."""
    _esm = _esm()
    figures = traitlets.List(traitlets.Dict(), default_value=[]).tag(sync=True)
    plotly = traitlets.Unicode("").tag(sync=True)    # the bundle, once asked for
    missing = traitlets.Unicode(
        "" if plotly_js() is not None else
        "charts need the plotly package (pip install plotly): its plotly.js draws them"
    ).tag(sync=True)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.add_class("wb-plots")
        self.on_msg(self._on_msg)

    def _on_msg(self, _widget, content, _buffers) -> None:
        if isinstance(content, dict) and content.get("type") == "need_plotly" \
                and not self.plotly:
            self.plotly = plotly_js() or ""

    def figure(self, name: str) -> dict:
        """The figure ``name`` ("steps", "kernels" or "roofline") as plotly JSON."""
        return dict(zip(NAMES, self.figures))[name]

    def trace(self, figure: str, name: str, axis: str = "x") -> dict:
        """A trace of a figure by its name (and x axis, for names used twice)."""
        for t in self.figure(figure)["data"]:
            if t["name"] == name and t.get("xaxis", "x") == axis:
                return t
        raise KeyError(f"no trace {name!r} on {axis} in {figure}")

    def update(self, history, rows: Sequence[KernelRow] = (), device=None,
               tensor_flops: float | None = None) -> None:
        """Redraw from the history table (one row per step; ``bytes_moved_MB`` holds
        counted bytes where unmeasured) and the current step's kernels; ``tensor_flops``:
        the tensor cores' ceiling where the step's matmuls run on them."""
        bw = getattr(device, "dram_bandwidth", None)
        peak = getattr(device, "peak_flops", None)
        name = getattr(device, "name", "") or ""
        figs = [steps_figure(history),
                kernels_figure(rows, bw / 1e9 if bw else None, name),
                roofline_figure(rows, peak, bw, name, tensor_flops)]
        # through JSON: NumPy scalars become plain numbers, the trait syncs plain data
        self.figures = json.loads(json.dumps(figs, default=float))
