"""The notebook faces of the workbench: ``wb.open`` and ``%workbench``.

Importing this package imports ipywidgets, anywidget and graphviz (no plotly module:
the charts are plotly.js JSON drawn in the browser, see ``charts.py``); plain
``import workbench`` does not (``wb.open`` imports it when called).
"""
from .app import WorkbenchApp
from .opening import open
from .code_panel import CodePanel
from .dot import DotDrawing, Overlay, composites, render_svg, to_dot
from .graph_view import GraphView
from .magics import WorkbenchMagics, load_ipython_extension
from .plots import Plots

__all__ = ["CodePanel", "DotDrawing", "GraphView", "Overlay", "Plots", "WorkbenchApp",
           "WorkbenchMagics", "composites", "load_ipython_extension", "open", "render_svg",
           "to_dot"]
