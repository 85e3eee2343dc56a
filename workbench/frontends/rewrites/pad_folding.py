"""A zero ``pad`` of a convolution's spatial axes taken into the convolution's own
``pads``, as the ONNX exporter's optimizer does: ``conv(pad(x))`` becomes ``conv(x)``
with the pads added; and one before a pooling window into the window's.

Why: a model that pads explicitly (transformers' MobileNetV2 with its TensorFlow
"same" padding: ``F.pad`` before each depthwise convolution) has the pad between the
previous convolution's epilogue and the next convolution. A pad changes the shape,
so no epilogue holds it, and each BatchNorm + ReLU6 + pad ran as a kernel of its own
(MobileNetV2 from ``from_torch``: 71 kernels, its ONNX export 53). A convolution
reads outside its input as zeros, so the pad adds nothing the convolution's pads do
not: the result is the same, element for element.

The same for a pooling window (``window``, the max or average pool's taps): a zero
pad before it becomes the window's own pads with the fill ``zero`` -- where the window
has no pads of its own, or pads of that fill. tf2onnx writes Keras' ZeroPadding2D
before ResNet50's max pool as such a pad: a ReLU and the pad ran as a kernel of their
own, 2.7 ms of a 46 ms model, its clamped reads gathered element by element.

A pad that only a transpose reads moves after it first (its pads permuted), so one
written in another layout between two transposes -- tf2onnx's Keras MobileNetV3 --
meets the convolution.

Only constant pads with value 0, none on the axes the convolution or window does not
slide over and none negative (a crop) are taken; the pad stays where something else
reads it too.

    >>> g2 = fold_pads_into_convs(g)        # doctest: +SKIP
"""
from __future__ import annotations

from ...ir.graph import Graph, Node, Value
from .reshape_chains import rebuild
from ...ops.conv import CONVS, conv_attrs
from ...ops.layout import transpose_perm
from ...ops.window import pad_attrs, window_attrs


def fold_pads_into_convs(g: Graph) -> Graph:
    """``g`` with each zero pad read by a convolution or a pooling window folded into it
    (see the module docstring); ``g`` itself where there is none."""
    g = _pads_after_transposes(g)
    producer = {o: n for n in g.nodes for o in n.outputs}
    nodes, changed = [], False
    for n in g.nodes:
        p = producer.get(n.inputs[0]) if n.inputs else None
        folded = None
        if p is not None and p.op == "pad" and len(p.inputs) == 1:
            folded = _folded(g, n, p)
        nodes.append(folded or n)
        changed |= folded is not None
    if not changed:
        return g
    return rebuild(g, nodes, {v.name: v for v in g.values})


def _folded(g: Graph, n: Node, p: Node) -> Node | None:
    """``n`` (a convolution or a window) reading ``p``'s input with ``p``'s zero pads
    added to its own, or None where they cannot be."""
    if n.op not in CONVS and n.op != "window":
        return None
    x = g.value(p.inputs[0])
    rank = len(x.shape)
    pads, mode, value = pad_attrs(x.shape, p.attr_map)
    if mode != "constant" or value != 0 or min(pads) < 0:
        return None
    if n.op in CONVS:
        spatial = rank - 2
        *_, own = conv_attrs(n.attr_map, spatial, n.op)      # (its pads)
        attrs = {}
    else:                       # (a window)
        kernel, _, _, own = window_attrs(x.shape, n.attr_map)
        spatial = len(kernel)
        if any(own) and n.attr_map.get("fill", "zero") != "zero":
            return None         # (its own border is the lowest value, not zeros)
        attrs = {"fill": "zero"}
    if any(pads[a] or pads[a + rank] for a in range(rank - spatial)):
        return None             # (a pad of an axis it does not slide over)
    added = [own[i] + pads[rank - spatial + i] for i in range(spatial)] + \
            [own[spatial + i] + pads[2 * rank - spatial + i] for i in range(spatial)]
    return Node.make(n.id, n.op, (p.inputs[0], *n.inputs[1:]), n.outputs,
                     {**n.attr_map, **attrs, "pads": added}, n.name, n.origin)


def _pads_after_transposes(g: Graph) -> Graph:
    """``g`` with each transpose of a pad that nothing else reads made a pad of the
    transpose -- the same values, the pads permuted -- so the pad meets what reads the
    transpose. tf2onnx writes Keras' ZeroPadding2D in the model's NHWC layout between
    two transposes (MobileNetV3: transpose, hard-swish, pad, transpose back, depthwise
    convolution); moved after the second, the pad joins the convolution."""
    producer = {o: n for n in g.nodes for o in n.outputs}
    values = {v.name: v for v in g.values}
    nodes, changed = [], False
    for n in g.nodes:
        p = producer.get(n.inputs[0]) if n.op == "transpose" else None
        if (p is None or p.op != "pad" or len(p.inputs) != 1 or p.outputs[0] in g.outputs
                or len(g.consumers[p.outputs[0]]) != 1):
            nodes.append(n)
            continue
        x = g.value(p.inputs[0])
        rank = len(x.shape)
        perm = transpose_perm(n.attr_map, rank)
        pads, _, _ = pad_attrs(x.shape, p.attr_map)
        moved = f"{n.outputs[0]}__unpadded"
        while moved in values:
            moved += "_"
        values[moved] = Value(moved, tuple(x.shape[a] for a in perm), x.dtype)
        nodes.append(Node.make(n.id, n.op, (p.inputs[0],), (moved,), n.attr_map, n.name,
                               n.origin))
        nodes.append(Node.make(f"{p.id}_moved", "pad", (moved,), n.outputs,
                               {**p.attr_map, "pads": [pads[a] for a in perm]
                                + [pads[rank + a] for a in perm]}, p.name, p.origin))
        changed = True
    if not changed:
        return g
    return rebuild(g, nodes, values)
