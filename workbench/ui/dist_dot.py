"""A distributed program -> Graphviz DOT, as one rank sees it (docs/distributed.md).

The same ids and conventions as :mod:`.dot` (node ``n3`` is ``<g id="n3">``, inputs
``in0``..., outputs ``out0``...), so the graph view's clicks, pan and zoom work
unchanged. What differs:

- a collective's *start* is its own node kind: a hexagon (class ``wb-collective``)
  labelled with the collective, its reduction or dim and its group size
  (``all_reduce(avg) x2``) and "async start"; its *wait* an octagon (class
  ``wb-wait``); the time in between -- the collective in flight, when compute placed
  there can overlap it -- is a dashed edge from start to wait;
- every edge carries its value's placement as DTensor writes it (``R``, ``S(0)``,
  ``P(sum)``), coloured by kind (legend: :data:`PLACEMENT_LEGEND`);
- shapes are the chosen rank's: a sharded value shows its local shape and which slice
  of the global tensor that rank holds (``f32[32,8] [32:64, :]``), a partial one that
  it is that rank's addend. All ranks run the same program on their own pieces, so
  choosing a rank changes the shapes and slices shown, not the nodes.

Example::

    >>> d = dist_dot(program, rank=1)                 # doctest: +SKIP
    >>> 'class="wb-collective"' in render_svg(d.source)  # doctest: +SKIP
    True
"""
from __future__ import annotations

from ..distributed.placement import Partial, Placement, Shard
from ..distributed.program import DistProgram
from ..errors import WorkbenchError
from ..ops.collective import COLLECTIVES
from .dot import _HEADER, DotDrawing, LegendEntry, quote

COLLECTIVE_FILL, WAIT_FILL, IN_FLIGHT = "#fdae6b", "#fee6ce", "#e6550d"
# edge colour per placement kind: replicated grey, sharded blue, partial (pending a
# reduction) red -- the one a reader must not use as a whole value
PLACEMENT_COLORS = {"R": "#737373", "S": "#2171b5", "P": "#cb181d"}
PLACEMENT_LEGEND = (LegendEntry(COLLECTIVE_FILL, "collective: async start"),
                    LegendEntry(WAIT_FILL, "wait (dashed: in flight)"),
                    LegendEntry(PLACEMENT_COLORS["R"], "R: replicated"),
                    LegendEntry(PLACEMENT_COLORS["S"], "S(d): sharded on dim d"),
                    LegendEntry(PLACEMENT_COLORS["P"], "P(op): partial, one addend per rank"))


def check_rank(d: DistProgram, rank) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < d.ranks:
        raise WorkbenchError(f"rank {rank!r:.20} is not one of this program's ranks; "
                             f"choose 0..{d.ranks - 1}")
    return rank


def local_text(d: DistProgram, value: str, rank: int) -> str:
    """What rank ``rank`` holds of ``value``: its local shape, and the slice of the
    global tensor (sharded) or that it is one addend (partial)."""
    v = d.graph.value(value)
    pl = d.placements[value]
    loc = d.local_shape(value)
    text = f"{v.dtype.short}[{','.join(map(str, loc))}]"
    if isinstance(pl, Shard):
        n = loc[pl.dim]
        idx = [":"] * len(loc)
        idx[pl.dim] = f"{rank * n}:{(rank + 1) * n}"
        return f"{text} [{', '.join(idx)}]"
    if isinstance(pl, Partial):
        return f"{text} addend {rank + 1}/{d.ranks}"
    return text


def collective_label(node) -> str:
    """``all_reduce(avg) x2``: the collective, its reduction or dims, the group size."""
    a = dict(node.attrs)
    what = [str(a[k]) for k in ("reduce_op",) if k in a]
    what += [f"{k}={a[k]}" for k in ("dim", "split_dim", "concat_dim", "shift") if k in a]
    return f"{node.op}({', '.join(what)}) x{a.get('group_size', '?')}"


def placement_color(pl: Placement) -> str:
    return PLACEMENT_COLORS[str(pl)[0]]


def dist_dot(d: DistProgram, rank: int = 0) -> DotDrawing:
    """DOT text of ``d`` as rank ``rank`` runs it (see the module docstring)."""
    check_rank(d, rank)
    g, pl = d.graph, d.placements
    lines = list(_HEADER)
    for i, name in enumerate(g.inputs):
        lines.append(f'  in{i} [id="in{i}" label={quote(name, f"@{pl[name]}")} '
                     'shape=ellipse class="wb-io" style="filled" fillcolor="#ffffff"];')
    starts = {}
    for n in g.nodes:
        out = n.outputs[0] if n.outputs else None
        shape = local_text(d, out, rank) if out else ""
        named = n.id if n.name == n.id else f"{n.id} {n.name}"
        if n.op in COLLECTIVES:
            starts[out] = n.id
            label = quote(f"{n.id} · {collective_label(n)}", "async start", shape)
            tip = quote(f"{named}: {n.op} {pl[n.inputs[0]]} -> {pl[out]}", limit=80)
            lines.append(f'  {n.id} [id="{n.id}" label={label} tooltip={tip} shape=hexagon '
                         f'class="wb-op wb-collective" fillcolor="{COLLECTIVE_FILL}" '
                         f'color="{IN_FLIGHT}" penwidth=1.5];')
        elif n.op == "wait_tensor":
            start = g.producer[n.inputs[0]].id
            label = quote(f"{n.id} · wait {start}", shape)
            lines.append(f'  {n.id} [id="{n.id}" label={label} tooltip={quote(named)} '
                         f'shape=octagon class="wb-op wb-wait" fillcolor="{WAIT_FILL}"];')
        else:
            label = quote(f"{n.id} · {n.op}", shape)
            tip = quote(f"{named} ({n.origin.composite})" if n.origin else named, limit=80)
            lines.append(f'  {n.id} [id="{n.id}" label={label} tooltip={tip} '
                         'class="wb-op" fillcolor="#ffffff"];')
    for i, name in enumerate(g.outputs):
        lines.append(f'  out{i} [id="out{i}" label={quote(name, f"@{pl[name]}")} '
                     'shape=ellipse class="wb-io" style="filled" fillcolor="#ffffff"];')
    lines += _edges(d, rank)
    lines.append("}")
    return DotDrawing("\n".join(lines), {}, PLACEMENT_LEGEND)


def _edges(d: DistProgram, rank: int) -> list[str]:
    """One edge per (producer, consumer), labelled with the value's placement; a
    start -> wait edge dashed (the collective in flight)."""
    g, pl = d.graph, d.placements
    inputs = {name: f"in{i}" for i, name in enumerate(g.inputs)}
    lines, seen = [], set()

    def edge(src: str, dst: str, value: str, in_flight: bool = False) -> None:
        if (src, dst) in seen:
            return
        seen.add((src, dst))
        p = pl[value]
        tip = quote(f"{value}: {p} (rank {rank}: {local_text(d, value, rank)})", limit=80)
        style = (f' style="dashed" penwidth=1.6 color="{IN_FLIGHT}" fontcolor="{IN_FLIGHT}"'
                 if in_flight else f' color="{placement_color(p)}" '
                 f'fontcolor="{placement_color(p)}"')
        # (the CSS colours edges by these classes: the theme's rule would grey them)
        kind = ("wb-edge wb-in-flight" if in_flight
                else f"wb-edge wb-placement wb-pl-{str(p)[0]}")
        text = f"in flight {p}" if in_flight else str(p)
        lines.append(f'  {src} -> {dst} [id="e{len(lines)}" class="{kind}" '
                     f'label={quote(text)} fontname="Helvetica" fontsize=8{style} '
                     f'tooltip={tip}];')

    for n in g.nodes:
        for v in dict.fromkeys(n.inputs):
            p = g.producer.get(v)
            if p is not None:
                edge(p.id, n.id, v, in_flight=n.op == "wait_tensor" and p.op in COLLECTIVES)
            elif v in inputs:
                edge(inputs[v], n.id, v)
    for i, name in enumerate(g.outputs):
        p = g.producer.get(name)
        src = p.id if p is not None else inputs.get(name)
        if src:
            edge(src, f"out{i}", name)
    return lines
