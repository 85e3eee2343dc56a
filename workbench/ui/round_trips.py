"""Collapsed boxes Graphviz cannot lay out in time, found before layout and opened.

A collapsed box whose edges leave it and come back through the rest of the drawing
(a module shared by every layer: one ``norm`` called 134 times is one composite box;
each layer's residual add reads the box and feeds it again) puts every layer on a
cycle through the box. Graphviz's ``dot`` then spends minutes untangling it: 30 round
trips 0.26 s, 60 round trips 6.1 s, 134 over 300 s (one box, 8-op layers). Drawn with
the box open the same graph takes 0.4 s (60 layers). So before each layout the boxes
with more than ``MAX_ROUND_TRIPS`` round trips are opened -- a round trip is an edge
into the box from a box it reaches -- and the view says which and why.

Only boxes with more than ``MAX_ROUND_TRIPS`` edges coming in can have more round
trips than that, so only they are searched: on a 2,000-op graph of layer boxes the
check costs one pass over the edges.

Example::

    >>> drawable(g, ns, frozenset({"c0"}))          # doctest: +SKIP
    (frozenset(), (('c0', 134),))
"""
from __future__ import annotations

from collections import defaultdict

from ..ir import Graph
from .namespaces import Namespaces

# above this many round trips a box is opened: 30 lay out in a quarter second, the
# time then roughly grows with the cube of the count
MAX_ROUND_TRIPS = 32


def round_trips(g: Graph, ns: Namespaces, collapsed: frozenset[str],
                limit: int = MAX_ROUND_TRIPS) -> dict[str, int]:
    """Round trips of each drawn collapsed box with more than ``limit`` of them."""
    box_of = {n.id: ns.box_of(n.id, collapsed) if n.id in ns.node_ancestors else n.id
              for n in g.nodes}
    succ: dict[str, set[str]] = defaultdict(set)
    pred: dict[str, set[str]] = defaultdict(set)
    for n in g.nodes:
        for v in n.inputs:
            p = g.producer.get(v)
            if p is not None and box_of[p.id] != box_of[n.id]:
                succ[box_of[p.id]].add(box_of[n.id])
                pred[box_of[n.id]].add(box_of[p.id])
    found = {}
    for box in dict.fromkeys(box_of.values()):
        if box not in collapsed or len(pred[box]) <= limit:
            continue
        reach, todo = set(), list(succ[box])
        while todo:                      # every box downstream of this one
            b = todo.pop()
            if b != box and b not in reach:
                reach.add(b)
                todo.extend(succ[b])
        trips = len(pred[box] & reach)
        if trips > limit:
            found[box] = trips
    return found


def drawable(g: Graph, ns: Namespaces, collapsed: frozenset[str],
             limit: int = MAX_ROUND_TRIPS) -> tuple[frozenset[str], tuple[tuple[str, int], ...]]:
    """``collapsed`` without the boxes Graphviz would take too long on (opening one
    can show collapsed boxes inside it: checked again), and the (box, round trips)
    opened."""
    opened: list[tuple[str, int]] = []
    while True:
        found = round_trips(g, ns, collapsed, limit)
        if not found:
            return collapsed, tuple(opened)
        opened += sorted(found.items())
        collapsed = collapsed - set(found)
