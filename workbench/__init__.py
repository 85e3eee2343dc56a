"""Fusion Workbench: operator fusion and kernel stitching for deep-learning graphs.

    >>> import workbench as wb
    >>> g = wb.load("sample_graphs/layernorm.json")      # doctest: +SKIP
    >>> s = wb.Session(g, backend="cpu"); s.auto("rules"); s.measure()  # doctest: +SKIP
"""
from .errors import FusionRefused, WorkbenchError
from .frontends import load, load_onnx
from .ir import DType, Graph, GraphBuilder, load_json, save_json
from .session import Session

__version__ = "0.1.0"

__all__ = ["DType", "FusionRefused", "Graph", "GraphBuilder", "Session", "WorkbenchError",
           "load", "load_json", "load_onnx", "save_json", "__version__"]
