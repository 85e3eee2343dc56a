"""The graph IR: values with static shapes and dtypes, nodes in topological order."""
from .builder import GraphBuilder, Tensor
from .graph import Graph, Node, Origin, Value
from .printer import format_graph
from .serialize import from_json, load_json, save_json, to_json
from .window_clip import clip_windows

__all__ = ["Graph", "GraphBuilder", "Node", "Origin", "Tensor", "Value", "clip_windows",
           "format_graph", "from_json", "load_json", "save_json", "to_json"]
