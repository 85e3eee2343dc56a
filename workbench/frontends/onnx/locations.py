"""Where an ONNX node sits in the model, in the words a refusal names it by: the module
path torch.onnx.export recorded, a scoped node name, or the nearest named neighbour."""
from __future__ import annotations

import ast

import onnx

from ..importing import located


class NodeLocator:
    """Places the nodes of one ONNX graph; the producers are indexed at the first
    question."""

    def __init__(self, g: onnx.GraphProto):
        self.g = g
        self._producers: dict[str, onnx.NodeProto] | None = None

    def locate(self, node: onnx.NodeProto, display: str) -> str:
        """Where a node sits: the module path torch.onnx.export recorded (the same
        words from_torch uses), a scoped name (``/encoder/layer.0/...``) as it is, or
        else the node with its nearest named producer (an initializer, an input or a
        scoped node) -- or consumer, when nothing named feeds it."""
        meta = {p.key: p.value for p in node.metadata_props}
        scopes = meta.get("pkg.torch.onnx.name_scopes")
        if scopes:
            try:
                path = [str(x) for x in ast.literal_eval(scopes)][1:-1]
            except (ValueError, SyntaxError):
                path = []
            return located(display, path[-1] if path else "",
                           meta.get("pkg.torch.onnx.stack_trace"))
        if "/" in display.strip("/"):
            return display
        near = self._named_near(node)
        return f"{display} ({near})" if near else display

    def _named_near(self, node: onnx.NodeProto) -> str:
        if self._producers is None:
            self._producers = {o: n for n in self.g.node for o in n.output}
        named = lambda n: bool(n.name) and "/" in n.name.strip("/")  # noqa: E731
        leaves = {v.name for v in self.g.input} | {t.name for t in self.g.initializer}
        seen, frontier = set(), [i for i in node.input if i]
        for _ in range(32):      # breadth first, a bounded walk
            nxt = []
            for v in frontier:
                if v in seen:
                    continue
                seen.add(v)
                if v in leaves:
                    return f"after {v}"
                p = self._producers.get(v)
                if p is None:
                    continue
                if named(p):
                    return f"after {p.name}"
                nxt += [i for i in p.input if i]
            if not nxt:
                break
            frontier = nxt
        for n in self.g.node:     # nothing named feeds it: its first named consumer
            if named(n) and set(node.output) & set(n.input):
                return f"before {n.name}"
        return ""
