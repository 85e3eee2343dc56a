"""Every ``window`` a reduction consumes, clipped to the taps that read its input.

The pooling composites clip their windows when they are made (``PoolGeometry``); a
``window`` written by hand -- in the builder, in a JSON graph -- is taken as written,
and a window longer than its map (``kernel=[1280, 1280]`` on a 7 x 7 map, as
EfficientNet's pooler once was) makes its reduction run over 1.6M taps of which 49 read
the input: one kernel of 352 ms where 0.4 ms does. This rewrite gives such a window the
clip the composites give theirs.

A tap that no output position reads inside the input holds only the window's fill, so
dropping it changes nothing only where every reader reduces over the taps with the
fill as its identity: ``reduce_max`` over a ``lowest`` fill, ``reduce_sum`` over a
``zero`` one (a mean would divide by fewer taps; another reader would see the window's
shape change). Those windows get the clipped kernel and pads (``ops.window.clip_taps``);
node ids, value names and every other node stay as they were, and a graph with nothing
to clip comes back as the same object.

    >>> g2 = clip_windows(g)        # doctest: +SKIP
"""
from __future__ import annotations

from .graph import Graph, Node, Value
from ..ops.reduce import reduce_axes
from ..ops.window import clip_taps, window_attrs

# the reduction for which a window's fill changes nothing
_IDENTITY = {"lowest": "reduce_max", "zero": "reduce_sum"}


def _clipped(g: Graph, n: Node, readers) -> tuple[list[int], list[int]] | None:
    """(kernel, pads) of window ``n`` clipped, or None where nothing may or need be cut."""
    x = g.value(n.inputs[0])
    kernel, strides, dil, pads = window_attrs(x.shape, n.attr_map)
    d, lead = len(kernel), len(x.shape) - len(kernel)
    y = g.value(n.outputs[0])
    op = _IDENTITY.get(n.attr("fill", "zero"))
    taps = set(range(len(y.shape) - d, len(y.shape)))
    if n.outputs[0] in g.outputs or not readers or any(
            r.op != op or not taps <= set(reduce_axes(r.attr_map, len(y.shape)))
            for r in readers):
        return None
    cut = [clip_taps(x.shape[lead + i], kernel[i], strides[i], dil[i], pads[i],
                     pads[i + d], y.shape[lead + i]) for i in range(d)]
    new_kernel = [k for k, _, _ in cut]
    new_pads = [b for _, b, _ in cut] + [e for _, _, e in cut]
    if new_kernel == list(kernel) and new_pads == list(pads):
        return None
    return new_kernel, new_pads


def clip_windows(g: Graph) -> Graph:
    """``g`` with each window that only tap reductions read clipped to the taps that
    read its input (see the module docstring); ``g`` itself where there is none."""
    if not any(n.op == "window" for n in g.nodes):
        return g
    readers = g.consumers
    nodes, values, changed = [], {v.name: v for v in g.values}, False
    for n in g.nodes:
        cut = _clipped(g, n, readers[n.outputs[0]]) if n.op == "window" else None
        if cut is not None:
            kernel, pads = cut
            n = Node.make(n.id, n.op, n.inputs, n.outputs,
                          {**n.attr_map, "kernel": kernel, "pads": pads}, n.name, n.origin)
            y = values[n.outputs[0]]
            d = len(kernel)
            values[y.name] = Value(y.name, y.shape[:len(y.shape) - d] + tuple(kernel),
                                   y.dtype)
            changed = True
        nodes.append(n)
    if not changed:
        return g
    return Graph(g.name, tuple(values.values()), tuple(nodes), g.inputs, g.outputs,
                 g.constants, g.description, dict(g.input_ranges)).verify()
