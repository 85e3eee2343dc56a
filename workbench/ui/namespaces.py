"""Nested collapsible namespaces of a graph, like Model Explorer's layers.

Every primitive's :class:`~workbench.ir.Origin` names where it came from. Two kinds of
container are built from it:

- a **composite** (``c0``, ``c1``...): the primitives one model op was decomposed into
  (one LayerNorm, one GELU), the nodes sharing one ``Origin`` -- as before;
- a **scope** (``s0``, ``s1``...): one level of a namespace path, at any depth. The path
  is read from ``Origin.source``: a torch module path (FX ``nn_module_stack``:
  ``encoder.layer.0.attention.self``; every segment is a module) or an ONNX name scope
  (``/encoder/layer.0/attention/Softmax``: the segments before the last, which names
  the node itself). A segment that is only digits stays with the one before it
  (``layer.0``: the ModuleList entry, as the ONNX exporter writes it).

Containers nest: a composite sits in the deepest scope holding all its nodes, a scope
in its parent scope. A scope holding fewer than two nodes, or exactly the nodes of its
only child (a chain such as ``encoder`` holding only ``encoder/layer.0``) or of one
composite, adds nothing to click through and is left out; the chain's label joins the
segments instead. The drawing collapses a set of containers: each node is drawn as the
outermost collapsed container that holds it (:meth:`Namespaces.box_of`), so expanding a
collapsed scope shows its children still collapsed, one level at a time.

Example::

    >>> ns = namespaces(g)                            # doctest: +SKIP
    >>> ns.ancestors("n12")                           # outermost first  # doctest: +SKIP
    ('s0', 's1', 'c3')
    >>> ns.box_of("n12", {"s1"})                      # doctest: +SKIP
    's1'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from ..ir import Graph, Origin


@dataclass(frozen=True)
class Container:
    """One collapsible box: a scope (``s3``) or a composite (``c0``)."""
    id: str
    kind: str                 # "scope" | "composite"
    label: str                # model text, escaped where drawn: "layer.0", "Softmax"
    path: str                 # the full namespace path / the composite's source
    nodes: tuple[str, ...]    # node ids, in graph order
    parent: str | None = None


def scope_path(origin: Origin | None) -> tuple[str, ...]:
    """The namespace segments of a node from its origin's source (see the module doc)."""
    if origin is None:
        return ()
    s = origin.source.strip()
    if "/" in s:
        parts = [p for p in s.split("/") if p][:-1]    # the last segment names the node
    elif "." in s:
        parts = [p for p in s.split(".") if p]         # a module path: every segment
    else:
        return ()
    merged: list[str] = []
    for p in parts:
        if p.isdigit() and merged:
            merged[-1] = f"{merged[-1]}.{p}"
        else:
            merged.append(p)
    return tuple(merged)


def composites(g: Graph) -> dict[str, tuple[str, ...]]:
    """Composite instances in first-appearance order: box id ``c0``... -> node ids."""
    by_origin: dict[Origin, list[str]] = {}
    for n in g.nodes:
        if n.origin is not None:
            by_origin.setdefault(n.origin, []).append(n.id)
    return {f"c{i}": tuple(ns) for i, ns in enumerate(by_origin.values()) if len(ns) > 1}


@dataclass(frozen=True, eq=False)
class Namespaces:
    """Every container of a graph, and which ones hold which node."""
    containers: Mapping[str, Container]
    node_ancestors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __contains__(self, cid: object) -> bool:
        return cid in self.containers

    def __getitem__(self, cid: str) -> Container:
        return self.containers[cid]

    def __iter__(self):
        return iter(self.containers)

    def __len__(self) -> int:
        return len(self.containers)

    def ancestors(self, node_id: str) -> tuple[str, ...]:
        """The containers holding a node, outermost first."""
        return self.node_ancestors.get(node_id, ())

    def innermost(self, node_id: str) -> str | None:
        a = self.ancestors(node_id)
        return a[-1] if a else None

    def box_of(self, node_id: str, collapsed: Iterable[str]) -> str:
        """What a node is drawn as: the outermost collapsed container holding it, or
        itself."""
        c = collapsed if isinstance(collapsed, (set, frozenset)) else set(collapsed)
        for a in self.ancestors(node_id):
            if a in c:
                return a
        return node_id

    def children(self, cid: str | None) -> list[str]:
        """Direct child containers of ``cid`` (None: the top level)."""
        return self._children.get(cid, [])

    @cached_property
    def _children(self) -> dict[str | None, list[str]]:
        out: dict[str | None, list[str]] = {}
        for c in self.containers.values():
            out.setdefault(c.parent, []).append(c.id)
        return out

    def depth(self) -> int:
        """How deep containers nest (0: none; 1: composites only, as before)."""
        return max((len(a) for a in self.node_ancestors.values()), default=0)


def namespaces(g: Graph) -> Namespaces:
    """The scopes and composites of ``g`` (see the module doc)."""
    paths = {n.id: scope_path(n.origin) for n in g.nodes}
    # every path prefix -> its nodes, in graph order
    prefix_nodes: dict[tuple[str, ...], list[str]] = {}
    for n in g.nodes:
        p = paths[n.id]
        for i in range(1, len(p) + 1):
            prefix_nodes.setdefault(p[:i], []).append(n.id)
    comps = composites(g)
    comp_sets = {frozenset(v) for v in comps.values()}
    kept: dict[tuple[str, ...], tuple[str, ...]] = {}   # prefix -> nodes
    label: dict[tuple[str, ...], str] = {}
    for prefix in sorted(prefix_nodes, key=len):
        nodes = tuple(prefix_nodes[prefix])
        if len(nodes) < 2 or frozenset(nodes) in comp_sets:
            continue
        parent = next((prefix[:i] for i in range(len(prefix) - 1, 0, -1)
                       if prefix[:i] in kept), None)
        if parent is not None and kept[parent] == nodes:
            # a chain: the parent holds exactly this scope; one box, both names
            del kept[parent]
            label[prefix] = f"{label.pop(parent)}/{prefix[-1]}"
        else:
            label[prefix] = prefix[-1]
        kept[prefix] = nodes
    pos = g.position
    scope_order = sorted(kept, key=lambda p: (pos[kept[p][0]], len(p)))
    scope_id = {p: f"s{i}" for i, p in enumerate(scope_order)}
    containers: dict[str, Container] = {}
    for p in scope_order:
        parent = next((scope_id[p[:i]] for i in range(len(p) - 1, 0, -1) if p[:i] in kept),
                      None)
        containers[scope_id[p]] = Container(scope_id[p], "scope", label[p], "/".join(p),
                                            kept[p], parent)
    scope_sets = {sid: frozenset(containers[sid].nodes) for sid in containers}
    for cid, nodes in comps.items():
        org = g.node(nodes[0]).origin
        s = frozenset(nodes)
        holders = [sid for sid, ns in scope_sets.items() if s <= ns]
        parent = max(holders, key=lambda sid: -len(scope_sets[sid])) if holders else None
        containers[cid] = Container(cid, "composite", org.composite, org.source, nodes,
                                    parent)
    # each node's chain of containers, outermost first
    comp_of = {nid: cid for cid, nodes in comps.items() for nid in nodes}
    anc: dict[str, tuple[str, ...]] = {}
    for n in g.nodes:
        chain = [scope_id[paths[n.id][:i]] for i in range(1, len(paths[n.id]) + 1)
                 if paths[n.id][:i] in kept]
        comp = comp_of.get(n.id)
        if comp is not None:
            chain.append(comp)
        if chain:
            anc[n.id] = tuple(chain)
    return Namespaces(containers, anc)

