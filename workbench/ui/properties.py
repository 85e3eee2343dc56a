"""The property panel, like Netron's: everything known about the selected node.

For a node: its op, id and model name, attributes, each input and output with its
shape and dtype (and where it comes from / goes to), its namespace (composite, module
path or ONNX scope, and the scopes around it), and a summary of every constant input
(shape, dtype, min/max, mean/std, zeros, NaN, the first values; ``tensor_stats.py``,
computed when the node is shown), and the op's one-line description from its registry
definition. For the kernel holding it: the schedule, the stitch scheme of each
internal edge, the row mapping and the launch.

:func:`node_properties` builds the content as plain text (a frozen value, testable
without a browser); :meth:`Properties.to_html` is the only place it becomes markup,
and it HTML-escapes every string: names come from model files and are untrusted.

Example::

    >>> p = node_properties(plan, "n3"); p.section("inputs")   # doctest: +SKIP
    (('x', 'f32[32, 64]  graph input'),)
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from ..fusion import Plan
from ..ir import Graph
from ..ops import get_op
from .namespaces import Namespaces, namespaces
from .tensor_stats import tensor_stats

MAX_WEIGHTS = 4         # constant inputs given a section of their own (the rest: a line)
MAX_TEXT = 160          # longest attribute / name text shown (the rest is cut)


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Properties:
    title: str
    sections: tuple[Section, ...]

    def section(self, title: str) -> tuple[tuple[str, str], ...]:
        for s in self.sections:
            if s.title == title:
                return s.rows
        return ()

    def to_html(self) -> str:
        """A collapsible table; every string escaped."""
        e = html.escape
        parts = [f'<details class="wb-props" open><summary>{e(self.title)}</summary>']
        for s in self.sections:
            if not s.rows:
                continue
            parts.append(f'<div class="wb-props-head">{e(s.title)}</div><table>')
            parts += [f'<tr><td class="wb-dim">{e(k)}</td><td>{e(v)}</td></tr>'
                      for k, v in s.rows]
            parts.append("</table>")
        parts.append("</details>")
        return "".join(parts)


def _cut(text: str) -> str:
    s = " ".join(str(text).split())          # control characters and newlines: spaces
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT - 1] + "…"


def _shape(g: Graph, value: str) -> str:
    v = g.value(value)
    return f"{v.dtype.value}[{', '.join(map(str, v.shape))}]"


def constant_summary(g: Graph, name: str) -> str:
    """``float32[64]  min -0.31  max 0.29  mean 0.01  std 0.1  [0.0496, ...]`` (makes
    lazy data)."""
    return tensor_stats(g.constants, name).line()


def op_doc(op: str) -> str:
    """The op's one-line description, from its registry definition (the one place
    each op is described)."""
    return get_op(op).doc


def node_properties(plan: Plan, node_id: str, ns: Namespaces | None = None,
                    launch: str | None = None, selected: int = 1) -> Properties:
    """The panel's content for one node of ``plan.graph`` (``launch``: the kernel's
    launch configuration as the session lowered it, when known)."""
    g = plan.graph
    n = g.node(node_id)
    ns = ns if ns is not None else namespaces(g)
    node_rows = [("op", n.op), ("does", _cut(op_doc(n.op))), ("id", n.id)]
    if n.name and n.name != n.id:
        node_rows.append(("name", _cut(n.name)))
    attrs = tuple((k, _cut(repr(v) if isinstance(v, str) else v)) for k, v in n.attrs)

    def source(v: str) -> str:
        if v in g.constants:
            return "constant"
        if v in g.inputs:
            return "graph input"
        p = g.producer.get(v)
        return f"from {p.id} ({p.op})" if p is not None else ""

    def users(v: str) -> str:
        who = [c.id for c in g.consumers.get(v, ())]
        tail = ["graph output"] if v in g.outputs else []
        shown = who[:8] + (["…"] if len(who) > 8 else [])
        return ("to " + ", ".join(shown) if shown else "") + \
            (("; " if shown else "") + tail[0] if tail else "")

    inputs = tuple((_cut(v), f"{_shape(g, v)}  {source(v)}") for v in n.inputs)
    outputs = tuple((_cut(v), f"{_shape(g, v)}  {users(v)}".rstrip()) for v in n.outputs)
    where = []
    if n.origin is not None:
        where.append(("composite", _cut(n.origin.composite)))
        if n.origin.source:
            where.append(("source", _cut(n.origin.source)))
    scopes = [ns[c] for c in ns.ancestors(n.id) if ns[c].kind == "scope"]
    if scopes:
        where.append(("scope", _cut(" / ".join(c.path for c in scopes[-1:]))))
        where.append(("boxes", " ⊃ ".join(ns.ancestors(n.id))))
    const_names = [v for v in dict.fromkeys(n.inputs) if v in g.constants]
    stats = {v: tensor_stats(g.constants, v) for v in const_names}
    consts = tuple((_cut(v), _cut(stats[v].line())) for v in const_names)
    # Netron's weight view: each constant input's statistics, one section each
    weights = tuple(Section(f"constant {_cut(v)}", stats[v].rows())
                    for v in const_names[:MAX_WEIGHTS])
    gr = plan.group_of[n.id]
    s = gr.schedule
    kernel = [("kernel", f"{gr.id} ({len(gr.nodes)} op{'s' * (len(gr.nodes) != 1)})"),
              ("schedule", s.describe())]
    if s.mapping is not None:
        kernel.append(("mapping", s.mapping.info.label))
    if launch:
        kernel.append(("launch", launch))
    # the stitch scheme of this node's own edges inside the kernel, and a count of all
    mine = set(n.inputs) | set(n.outputs)
    kernel += [(f"edge {_cut(v)}", f"{sch.value} stitching") for v, sch in gr.schemes
               if v in mine]
    if gr.schemes:
        counts: dict[str, int] = {}
        for _, sch in gr.schemes:
            counts[sch.value] = counts.get(sch.value, 0) + 1
        kernel.append(("internal edges", ", ".join(f"{c} {k}" for k, c in counts.items())))
    title = f"{n.id} · {n.op}" + (f"  (1 of {selected} selected)" if selected > 1 else "")
    return Properties(_cut(title), (
        Section("node", tuple(node_rows)),
        Section("attributes", attrs),
        Section("inputs", inputs),
        Section("outputs", outputs),
        Section("namespace", tuple(where)),
        Section("constants", consts),
        *weights,
        Section("kernel", tuple(kernel)),
    ))


def empty_html(hint: str = "Select a node to see its properties.") -> str:
    return f'<details class="wb-props" open><summary>Properties</summary>' \
           f'<span class="wb-dim">{html.escape(hint)}</span></details>'

