"""How a large graph opens: its layers collapsed, the wrappers around them open.

Above ``COLLAPSE_ABOVE`` ops (graph_view.py) every container starts collapsed. For a
model whose module tree has a wrapper holding most of it (``encoder`` around BERT's
12 layers, ``model.layers`` around a decoder's), that drew one box for the whole
encoder: a user had to double-click before seeing anything. So a collapsed
container drawn as a box and holding more than half of the graph's ops is opened,
again and again, while the drawing keeps at most ``MAX_BOXES`` boxes: BERT opens as
its embeddings, 12 layer boxes and the pooler; a 48-layer stack as 48 layer boxes; a
chain of 34 equal blocks (no wrapper) stays 34 boxes.

    >>> opening_collapsed(namespaces(g), len(g.nodes))   # doctest: +SKIP
    frozenset({'s2', 's9', ...})
"""
from __future__ import annotations

from .namespaces import Namespaces

WRAPPER_SHARE = 0.5     # a box holding more than this share of the ops is a wrapper
MAX_BOXES = 150         # opening a wrapper never draws more boxes than this


def drawn_boxes(ns: Namespaces, nodes, collapsed: frozenset[str]) -> int:
    """How many boxes the drawing has with ``collapsed``: nodes and collapsed
    containers (inputs and outputs not counted)."""
    return len({ns.box_of(n, collapsed) for n in nodes})


def opening_collapsed(ns: Namespaces, nodes) -> frozenset[str]:
    """Every container collapsed but the wrappers (see the module docstring)."""
    nodes = list(nodes)
    collapsed = frozenset(ns)
    tried: set[str] = set()
    while True:
        shown = {ns.box_of(n, collapsed) for n in nodes}
        wrappers = [c for c in shown if c in collapsed and c not in tried
                    and len(ns[c].nodes) > WRAPPER_SHARE * len(nodes)]
        if not wrappers:
            return collapsed
        c = wrappers[0]          # (at most one box can hold more than half)
        tried.add(c)
        opened = collapsed - {c}
        if drawn_boxes(ns, nodes, opened) <= MAX_BOXES:
            collapsed = opened
