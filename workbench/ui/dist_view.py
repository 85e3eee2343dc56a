"""The graph view over a distributed program, as one rank sees it.

The same widget and front end as :class:`.graph_view.GraphView` (pan, zoom, click to
select, SVG/PNG download); only the drawing differs: :func:`.dist_dot.dist_dot`
(collectives as their own node kind, placements on the edges, the chosen rank's
shapes), with the placement legend. There are no kernels to draw: each rank's compute
is planned when it runs.

Example::

    >>> v = DistGraphView(session.program, rank=1)   # doctest: +SKIP
    >>> v.show(session.program, rank=0)              # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass

from ..distributed.program import DistProgram
from ..ir.graph import Graph
from .dist_dot import check_rank, dist_dot
from .dot import render_svg
from .export import save_drawing
from .graph_view import _KEEP, GraphView
from .namespaces import namespaces


@dataclass(frozen=True)
class _Drawn:
    """What GraphView keeps as its ``plan``: here only the graph (no kernels)."""
    graph: Graph


class DistGraphView(GraphView):
    """A distributed program drawn for rank ``rank``; selection syncs as in GraphView."""

    def __init__(self, program: DistProgram, rank: int = 0, **kw):
        self.program, self.rank = program, check_rank(program, rank)
        super().__init__(_Drawn(program.graph), collapse=False, **kw)

    def show(self, program: DistProgram | None = None, rank: int | None = None) -> None:
        """Draw ``program`` (default: the one shown) for ``rank`` (default: the same);
        a selection of nodes the new program lacks is dropped."""
        program = program or self.program
        rank = check_rank(program, self.rank if rank is None else rank)
        if program is not self.program:
            self.plan = _Drawn(program.graph)
            self.graph = program.graph
            self.namespaces = namespaces(self.graph)
            self.composites = {c: self.namespaces[c].nodes for c in self.namespaces}
            self._collapsed = frozenset()
        self.program, self.rank = program, rank
        self.redraw()
        known = self.graph.node_map
        if any(i not in known for i in self.selected):
            self.selected = [i for i in self.selected if i in known]

    def redraw(self, plan=None, overlay=_KEEP) -> None:
        """Lay out and show the program (collapsing and overlays do not apply: every
        node is drawn, and there are no kernels to colour)."""
        d = dist_dot(self.program, self.rank)
        svg = render_svg(d.source)
        with self.hold_sync():
            self.members = {}
            self.legend = [{"color": e.color, "label": e.label} for e in d.legend]
            self.legend_title = f"rank {self.rank} of {self.program.ranks}"
            self.svg = svg

    def save(self, path) -> str:
        return save_drawing(dist_dot(self.program, self.rank).source, path)
