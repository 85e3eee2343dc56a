"""Graph + plan -> Graphviz DOT text, and DOT -> SVG.

A pure function of its inputs, so the drawing is testable without a browser. Ids are
the workbench's own, so the SVG can be addressed: node ``n12`` is ``<g id="n12"
class="node">``, kernel ``k3`` (a group of two or more ops) is ``subgraph cluster_k3``
with ``id="k3"`` (``<g id="k3" class="cluster">``), a collapsed composite is ``c0``,
graph inputs ``in0``... and outputs ``out0``.... Every string taken from a model (value
names, composite names) is escaped for DOT and cut short, so a model file cannot
inject DOT (or, through it, SVG) syntax.

Example::

    >>> d = to_dot(plan.graph, plan)                   # doctest: +SKIP
    >>> svg = render_svg(d.source); 'id="n0"' in svg   # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import WorkbenchError
from ..fusion import Group, Plan, StitchScheme
from ..ir import Graph
from .namespaces import Namespaces, composites, namespaces  # noqa: F401 (re-exported)
from .lock_marks import CUT_EDGE, LOCK_GLYPH, LOCKED_EDGE, LockMarks, lock_marks

# Kernel clusters: tab10 hues at low alpha, readable on light and dark backgrounds.
CLUSTER_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# Overlay: ColorBrewer YlOrRd, light (cheap) to dark (costly), and the text colour each
# bin needs to stay readable.
HEAT = ("#ffffb2", "#fed976", "#feb24c", "#fd8d3c", "#f03b20", "#bd0026")
HEAT_TEXT = ("#000000", "#000000", "#000000", "#000000", "#ffffff", "#ffffff")
REGIONAL_EDGE = "#d62728"

OVERLAY_UNITS = {"latency": "ms", "predicted latency": "ms", "bytes": "MB"}


@dataclass(frozen=True)
class LegendEntry:
    color: str
    label: str


@dataclass(frozen=True)
class Overlay:
    """A number per kernel (group id -> value) to colour the drawing by."""
    metric: str                     # "latency", "predicted latency" (ms) or "bytes" (MB)
    values: Mapping[str, float]


@dataclass(frozen=True)
class DotDrawing:
    """The DOT text and what the front end needs to map SVG ids back to nodes."""
    source: str
    boxes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # composite box -> nodes
    legend: tuple[LegendEntry, ...] = ()


def escape(text: str, limit: int = 40) -> str:
    """Model-provided text made safe inside a DOT string: control characters dropped,
    cut to ``limit`` characters, backslashes and quotes escaped (so ``\\n``, ``\\N``
    or ``"`` in a name stay literal text)."""
    s = re.sub(r"[\x00-\x1f\x7f]", " ", str(text))
    if len(s) > limit:
        s = s[:limit - 1] + "…"
    return s.replace("\\", "\\\\").replace('"', '\\"')


def quote(*lines: str, limit: int = 40) -> str:
    """A DOT string literal of one or more lines of (escaped) text."""
    return '"' + "\\n".join(escape(x, limit) for x in lines) + '"'


def shape_text(g: Graph, value: str) -> str:
    v = g.value(value)
    return f"{v.dtype.short}[{','.join(map(str, v.shape))}]"


def _heat(overlay: Overlay | None) -> tuple[dict[str, int], tuple[LegendEntry, ...]]:
    """Bin each group's value into HEAT; log-spaced bins when values span > 100x."""
    if overlay is None:
        return {}, ()
    vals = {k: float(v) for k, v in overlay.values.items()
            if not math.isnan(v) and v >= 0}
    if not vals:
        return {}, ()
    lo, hi = min(vals.values()), max(vals.values())
    n = len(HEAT)
    use_log = lo > 0 and hi / lo > 100
    f = (lambda x: math.log10(x)) if use_log else (lambda x: x)
    a, b = f(lo), f(hi)
    span = (b - a) or 1.0
    bins = {k: min(n - 1, int((f(v) - a) / span * n)) for k, v in vals.items()}
    edges = [a + span * i / n for i in range(n + 1)]
    inv = (lambda x: 10 ** x) if use_log else (lambda x: x)
    unit = OVERLAY_UNITS.get(overlay.metric, "")
    legend = tuple(LegendEntry(HEAT[i], f"{inv(edges[i]):.3g}–{inv(edges[i + 1]):.3g} {unit}")
                   for i in range(n) if lo != hi or i == 0)
    return bins, legend


_HEADER = ["digraph workbench {",
           '  graph [rankdir=TB nodesep=0.15 ranksep=0.3 bgcolor="transparent" '
           'fontname="Helvetica" fontsize=10 id="wbgraph"];',
           '  node [shape=box style="filled,rounded" fontname="Helvetica" fontsize=9 '
           'height=0.3 margin="0.08,0.03" penwidth=1];',
           '  edge [arrowsize=0.5 penwidth=0.8];']


def to_dot(g: Graph, plan: Plan, collapsed: frozenset[str] | set[str] = frozenset(),
           overlay: Overlay | None = None, ns: Namespaces | None = None,
           locks=None) -> DotDrawing:
    """DOT text for ``g`` under ``plan``: kernels of two or more ops as coloured
    clusters, ``collapsed`` containers (composite ``c0``... and scope ``s0``... ids of
    :func:`~workbench.ui.namespaces.namespaces`; ``ns``, when the caller has them) as
    one box each -- the outermost collapsed one where they nest -- and, with an
    ``overlay``, nodes and clusters coloured by the kernel's value with a legend;
    ``locks`` (the session's constraints) marked (:mod:`.lock_marks`)."""
    ns = ns if ns is not None else namespaces(g)
    unknown = set(collapsed) - set(ns.containers)
    if unknown:
        comps = [c for c in ns if ns[c].kind == "composite"]
        raise WorkbenchError(f"no composite {sorted(unknown)[0]!r} to collapse; "
                             f"composites are {', '.join(comps) or 'none'}")
    collapsed = frozenset(collapsed)
    box_of = {n.id: ns.box_of(n.id, collapsed) if n.id in ns.node_ancestors else n.id
              for n in g.nodes}
    heat, legend = _heat(overlay)
    marks = lock_marks(plan, locks)
    boxes = _Boxes(g, plan, ns, heat, marks)
    order = list(dict.fromkeys(box_of[n.id] for n in g.nodes))
    lines = list(_HEADER)
    lines += _io_lines(g.inputs, "in")
    lines += _cluster_lines(plan, boxes, order, heat)
    lines += _io_lines(g.outputs, "out")
    lines += _edge_lines(g, plan, box_of, marks)
    lines.append("}")
    return DotDrawing("\n".join(lines), {b: ns[b].nodes for b in order if b in ns}, legend)


class _Boxes:
    """DOT lines of the boxes: one per op, or one per collapsed container. Every box
    shows its id first (``n16 · add``): the ids messages and kernel headers use."""

    def __init__(self, g: Graph, plan: Plan, ns: Namespaces, heat: dict[str, int],
                 marks: LockMarks = LockMarks()):
        self.g, self.plan, self.ns, self.heat, self.marks = g, plan, ns, heat, marks

    def kernels(self, box: str) -> set[str]:
        members = self.ns[box].nodes if box in self.ns else (box,)
        return {self.plan.group_of[m].id for m in members}

    def line(self, box: str) -> str:
        return self._container(box) if box in self.ns else self._op(box)

    def _fill(self, group_id: str) -> str:
        if group_id not in self.heat:
            return 'class="wb-op" fillcolor="#ffffff"'
        i = self.heat[group_id]
        return f'class="wb-op wb-heat" fillcolor="{HEAT[i]}" fontcolor="{HEAT_TEXT[i]}"'

    def _op(self, nid: str) -> str:
        n = self.g.node(nid)
        out = n.outputs[0] if n.outputs else None
        gid = self.plan.group_of[nid].id
        lock = f"{LOCK_GLYPH} " if gid in self.marks.kernels else ""
        label = quote(f"{lock}{n.id} · {n.op}", shape_text(self.g, out) if out else "")
        named = n.id if n.name == n.id else f"{n.id} {n.name}"
        tip = quote(f"{named} ({n.origin.composite})" if n.origin else named, limit=80)
        return (f'  {nid} [id="{nid}" label={label} tooltip={tip} '
                f'{self._fill(self.plan.group_of[nid].id)}];')

    def _container(self, cid: str) -> str:
        c = self.ns[cid]
        members = c.nodes
        kernels = self.kernels(cid)
        last = self.g.node(members[-1])
        sub = f"{len(members)} ops" + (f", {len(kernels)} kernels" if len(kernels) > 1 else "")
        label = quote(f"{cid} · {c.label}", sub,
                      shape_text(self.g, last.outputs[0]) if last.outputs else "")
        attrs = self._fill(next(iter(kernels))) if len(kernels) == 1 else 'class="wb-op"'
        kind = "wb-composite" if c.kind == "composite" else "wb-composite wb-scope"
        tip = c.path if c.kind == "scope" else f"{c.label} {c.path}"
        return (f'  {cid} [id="{cid}" label={label} tooltip={quote(tip, limit=80)} '
                f'{attrs.replace("wb-op", "wb-op " + kind, 1)} peripheries=2];')


def _io_lines(names, prefix: str) -> list[str]:
    return [f'  {prefix}{i} [id="{prefix}{i}" label={quote(name)} shape=ellipse '
            f'class="wb-io" style="filled" fillcolor="#ffffff"];'
            for i, name in enumerate(names)]


def _cluster_lines(plan: Plan, boxes: _Boxes, order: list[str], heat) -> list[str]:
    """Kernels of two or more ops as clusters holding their boxes (a box sits in a
    kernel's cluster when all its nodes belong to that kernel), then the other boxes."""
    home = {}
    for box in order:
        ks = boxes.kernels(box)
        home[box] = ks.pop() if len(ks) == 1 else None
    lines, placed = [], set()
    for gi, gr in enumerate(plan.groups):
        if len(gr.nodes) < 2:
            continue
        color = CLUSTER_COLORS[gi % len(CLUSTER_COLORS)]
        fill = HEAT[heat[gr.id]] + "66" if gr.id in heat else color + "33"
        lines.append(f"  subgraph cluster_{gr.id} {{")
        locked = gr.id in boxes.marks.kernels
        label = (LOCK_GLYPH + " " if locked else "") + _cluster_label(gr)
        kind = "wb-kernel wb-locked" if locked else "wb-kernel"
        lines.append(f'    id="{gr.id}"; class="{kind}"; label="{label}"; '
                     f'style="filled,rounded"; fillcolor="{fill}"; color="{color}"; '
                     f'penwidth=1.5; fontsize=9; labeljust=l;')
        for b in order:
            if home[b] == gr.id and b not in placed:
                lines.append("  " + boxes.line(b))
                placed.add(b)
        lines.append("  }")
    return lines + [boxes.line(b) for b in order if b not in placed]


def _edge_lines(g: Graph, plan: Plan, box_of: dict[str, str],
                marks: LockMarks = LockMarks()) -> list[str]:
    """One edge per pair of boxes; an edge inside a kernel shows its stitch scheme, a
    locked one is bold (a cut one dashed too)."""
    inputs = {name: f"in{i}" for i, name in enumerate(g.inputs)}
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()

    def edge(src: str, dst: str, value: str, scheme: StitchScheme | None,
             lock: str | None = None) -> None:
        if src == dst or (src, dst) in seen:
            return
        seen.add((src, dst))
        attrs = f'id="e{len(lines)}"'
        if lock is not None:
            attrs += " " + (CUT_EDGE if lock == "cut" else LOCKED_EDGE)
            value = f"{value} ({'cut' if lock == 'cut' else 'kept fused'}: locked)"
        elif scheme is StitchScheme.regional:
            attrs += f' class="wb-edge wb-regional" color="{REGIONAL_EDGE}" penwidth=1.6'
        else:
            attrs += ' class="wb-edge"'
        tip = quote(f"{value}: {scheme.value}" if scheme else value, limit=80)
        lines.append(f"  {src} -> {dst} [{attrs} tooltip={tip}];")

    for n in g.nodes:
        for v in dict.fromkeys(n.inputs):
            p = g.producer.get(v)
            if p is not None:
                gr = plan.group_of[n.id]
                inside = plan.group_of[p.id].id == gr.id
                edge(box_of[p.id], box_of[n.id], v, gr.scheme(v) if inside else None,
                     marks.edge(p.id, n.id))
            elif v in inputs:
                edge(inputs[v], box_of[n.id], v, None)
    for i, name in enumerate(g.outputs):
        p = g.producer.get(name)
        src = box_of[p.id] if p is not None else inputs.get(name)
        if src:
            edge(src, f"out{i}", name, None)
    return lines


def _cluster_label(gr: Group) -> str:
    s = gr.schedule
    if s.mapping is not None:
        return f"{gr.id} · {s.kind.value} ({s.mapping.info.label})"
    if s.gemm is not None:      # the product's shape: m x n x k (batch x ...)
        t = s.gemm
        batch = f"{t.batch}x" if t.batch > 1 else ""
        epi = " + epilogue" if t.epilogue_ops else ""
        return f"{gr.id} · gemm {batch}{t.m}x{t.n}x{t.k}{epi}"
    return f"{gr.id} · {s.kind.value}"


def render_svg(dot_source: str) -> str:
    """SVG text of a DOT source, laid out by Graphviz ``dot``."""
    import graphviz
    try:
        svg = graphviz.Source(dot_source).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        raise WorkbenchError("Graphviz 'dot' is not installed: install it (apt-get install "
                             "graphviz, or conda install graphviz) to draw graphs") from None
    except graphviz.CalledProcessError as e:
        raise WorkbenchError(f"Graphviz could not lay out the graph: {e.stderr!s:.300}; "
                             "this is a workbench bug, please report it with the graph") from None
    # drop the XML prolog and DOCTYPE: the SVG is inserted into an HTML page
    return svg[svg.index("<svg"):]
