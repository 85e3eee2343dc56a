"""The graph view: a Graphviz SVG drawing of the plan in an anywidget.

Python draws (DOT text -> SVG by ``dot``, see :mod:`workbench.ui.dot`); the front end
(``static/graph_view.js``) only shows the SVG, pans and zooms it, and turns clicks
into changes of the synced ``selected`` trait. So every behaviour but pan/zoom can be
driven and tested from Python.

Front-end protocol: the view writes ``selected`` (click: that node only, or nothing
when it was the only one selected; shift-click: toggle it in the selection; a
collapsed container stands for all its nodes) and sends ``{"type": "toggle", "id":
box}`` on double-click, which collapses the innermost container (composite or
namespace scope, see :mod:`workbench.ui.namespaces`) a node belongs to or expands a
collapsed one (``"outer": true``, shift-double-click: collapses the container around
the box). Python moves the view with ``focus`` ([box id, counter]): the front end
centres that box at a readable zoom (:meth:`GraphView.focus_on`, used by search).

Example::

    >>> v = GraphView(plan); v.selected = ["n0", "n1"]   # doctest: +SKIP
    >>> v.collapse(); v.expand("c0")                     # doctest: +SKIP
"""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from ..errors import WorkbenchError
from ..fusion import Plan
from .dot import Overlay, render_svg, to_dot
from .large_graph import opening_collapsed
from .round_trips import drawable
from .namespaces import namespaces
from .export import save_drawing

STATIC = Path(__file__).parent / "static"

_KEEP = object()     # redraw(): leave the overlay as it is

# Above this many nodes, composites start collapsed: the drawing stays small enough
# to lay out and pan quickly, and each box expands on double-click.
COLLAPSE_ABOVE = 200


class GraphView(anywidget.AnyWidget):
    """A plan's graph as SVG with kernels as clusters; selection syncs both ways."""
    _esm = STATIC / "graph_view.js"
    _css = STATIC / "graph_view.css"

    svg = traitlets.Unicode("").tag(sync=True)
    selected = traitlets.List(traitlets.Unicode(), default_value=[]).tag(sync=True)
    # collapsed composite box id -> its node ids, so a click on a box selects them
    members = traitlets.Dict(default_value={}).tag(sync=True)
    # overlay legend: [{"color": "#fed976", "label": "0.1–0.2 ms"}, ...] and its title
    legend = traitlets.List(traitlets.Dict(), default_value=[]).tag(sync=True)
    legend_title = traitlets.Unicode("").tag(sync=True)
    name = traitlets.Unicode("graph").tag(sync=True)   # file name of downloads
    # the containers around the first selected node, outermost first: [[id, label], ...]
    # (a breadcrumb; clicking one sends {"type": "collapse", "id": id})
    crumbs = traitlets.List(default_value=[]).tag(sync=True)
    # [box id, counter]: centre that box (a new counter re-centres the same box)
    focus = traitlets.List(default_value=[]).tag(sync=True)
    # why a box asked to be collapsed is drawn open ("" when none is): round_trips.py
    note = traitlets.Unicode("").tag(sync=True)

    def __init__(self, plan: Plan, collapse: bool | None = None, **kw):
        super().__init__(**kw)
        self.plan = plan
        self.graph = plan.graph
        self.name = "".join(c if c.isalnum() or c in "_-" else "_"
                            for c in self.graph.name)[:60] or "graph"
        self.namespaces = namespaces(self.graph)
        # every collapsible container (composites c0..., scopes s0...) -> its nodes
        self.composites = {c: self.namespaces[c].nodes for c in self.namespaces}
        if collapse is None and len(self.graph.nodes) > COLLAPSE_ABOVE:
            # layers collapsed, the wrappers around them (an encoder) open: large_graph.py
            self._collapsed = opening_collapsed(self.namespaces, self.graph.position)
        else:
            self._collapsed = frozenset(self.composites) if collapse else frozenset()
        self._focus_count = 0
        self._overlay: Overlay | None = None
        self.locks = None        # the session's constraints, marked on the drawing
        self.on_msg(self._on_front_msg)
        self.observe(lambda _: self._update_crumbs(), "selected")
        self.redraw()

    # -- drawing ---------------------------------------------------------------
    def redraw(self, plan: Plan | None = None, overlay: "Overlay | None | object" = _KEEP
               ) -> None:
        """Lay out and show ``plan`` (default: the current one) with the current
        collapsed set, and ``overlay`` (default: the current one; None: no colours)."""
        if plan is not None:
            self.plan = plan
        if overlay is not _KEEP:
            self._overlay = overlay
        # boxes Graphviz would take minutes on are drawn open (round_trips.py)
        self._collapsed, self.opened = drawable(self.graph, self.namespaces, self._collapsed)
        self.note = (", ".join(f"{b} · {self.namespaces[b].label} ({n} round trips)"
                               for b, n in self.opened)
                     + " drawn open: edges leave and re-enter it too often for Graphviz "
                     "to lay it out collapsed in time" if self.opened else "")
        d = to_dot(self.graph, self.plan, self._collapsed, self._overlay, self.namespaces,
                   self.locks)
        svg = render_svg(d.source)
        with self.hold_sync():
            self.members = {k: list(v) for k, v in d.boxes.items()}
            self.legend = [{"color": e.color, "label": e.label} for e in d.legend]
            self.legend_title = (f"kernel {self._overlay.metric}" if self._overlay and d.legend
                                 else "")
            self.svg = svg

    @property
    def overlay(self) -> Overlay | None:
        return self._overlay

    @overlay.setter
    def overlay(self, value: Overlay | None) -> None:
        self.redraw(overlay=value)

    # -- composites ------------------------------------------------------------
    @property
    def collapsed(self) -> frozenset[str]:
        """Composite box ids (``c0``...) drawn as one box."""
        return self._collapsed

    def _composite_ids(self, ref: str | None, collapsing: bool = True) -> set[str]:
        """Containers ``ref`` names: all (None), itself (a container id), or for a
        node id the innermost container still drawn open (collapsing) / every
        container holding it (expanding: the node shows again)."""
        if ref is None:
            return set(self.composites)
        if ref in self.composites:
            return {ref}
        owning = self.namespaces.ancestors(ref)
        if not owning:
            raise WorkbenchError(f"{ref!r} is not a composite or a node of one; composites "
                                 f"are {', '.join(self.composites) or 'none in this graph'}")
        if not collapsing:
            return set(owning)
        open_ = [c for c in owning if c not in self._collapsed]
        return {open_[-1] if open_ else owning[-1]}

    def collapse(self, ref: str | None = None) -> None:
        """Draw a container (by id, or the innermost one around a node; default all)
        as one box."""
        self._collapsed = self._collapsed | self._composite_ids(ref)
        self.redraw()

    def expand(self, ref: str | None = None) -> None:
        """Draw a collapsed container's contents again (default: all; a node id:
        every container holding it, so the node itself is drawn)."""
        self._collapsed = self._collapsed - self._composite_ids(ref, collapsing=False)
        self.redraw()

    def box_of(self, node_id: str) -> str:
        """The box a node is drawn as now: itself or a collapsed container."""
        return self.namespaces.box_of(node_id, self._collapsed)

    def focus_on(self, node_id: str, reveal: bool = True) -> str:
        """Centre the view on a node; ``reveal`` first expands the containers that
        hide it (as Model Explorer's search does). Returns the box centred."""
        if reveal and self.box_of(node_id) != node_id:
            self._collapsed = self._collapsed - set(self.namespaces.ancestors(node_id))
            self.redraw()
        box = self.box_of(node_id)
        self._focus_count += 1
        self.focus = [box, self._focus_count]
        return box

    def _update_crumbs(self) -> None:
        sel = [i for i in self.selected if i in self.graph.node_map]
        ns = self.namespaces
        self.crumbs = ([[c, ns[c].label[:40]] for c in ns.ancestors(sel[0])] if sel else [])

    def _on_front_msg(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict):
            return
        ref = str(content.get("id", ""))
        if content.get("type") == "collapse" and ref in self.composites:
            # a breadcrumb: close that container and show where it is
            self.collapse(ref)
            self._focus_count += 1
            self.focus = [self.box_of(self.composites[ref][0]), self._focus_count]
            return
        if content.get("type") != "toggle":
            return
        if content.get("outer"):
            # the container around this box (a box inside an open scope)
            inner = (self.namespaces[ref].parent if ref in self.composites
                     else self.namespaces.innermost(ref))
            if inner is not None:
                self.collapse(inner)
            return
        try:
            ids = self._composite_ids(ref)
        except WorkbenchError:
            return   # a node outside any composite: nothing to toggle
        if ref in self._collapsed:
            self._collapsed = self._collapsed - {ref}
        else:
            self._collapsed = self._collapsed | ids
        self.redraw()

    # -- export ------------------------------------------------------------------
    def save(self, path) -> str:
        """Write the drawing as it is now (collapsed boxes, overlay) to ``path``: .svg
        or .png by its suffix. Returns the path written."""
        d = to_dot(self.graph, self.plan, self._collapsed, self._overlay, self.namespaces,
                   self.locks)
        return save_drawing(d.source, path)
