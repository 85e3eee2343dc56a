"""Small graph edits the distributed transformations share: a graph with some nodes
replaced (renumbered, values added), and the collectives' group size changed."""
from __future__ import annotations

import dataclasses
from typing import Iterable

from ..ir.graph import Graph, Node, Value
from ..ops.collective import COLLECTIVES


def renumbered(g: Graph, nodes: Iterable[Node], values: Iterable[Value] = (),
               drop: Iterable[str] = ()) -> Graph:
    """``g`` with ``nodes`` (in order; ids made n0..) and ``values`` added to its values
    (those named in ``drop`` removed); verified."""
    nodes = [dataclasses.replace(n, id=f"n{i}", name=n.name if n.name != n.id else f"n{i}")
             for i, n in enumerate(nodes)]
    gone = set(drop)
    vals = [v for v in g.values if v.name not in gone] + list(values)
    return dataclasses.replace(g, values=tuple(vals), nodes=tuple(nodes)).verify()


def set_group_size(g: Graph, p: int) -> Graph:
    nodes = [Node.make(n.id, n.op, n.inputs, n.outputs, {**n.attr_map, "group_size": p},
                       n.name, n.origin) if n.op in COLLECTIVES else n for n in g.nodes]
    return dataclasses.replace(g, nodes=tuple(nodes)).verify()
