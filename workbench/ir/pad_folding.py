"""A zero ``pad`` of a convolution's spatial axes taken into the convolution's own
``pads``, as the ONNX exporter's optimizer does: ``conv(pad(x))`` becomes ``conv(x)``
with the pads added.

Why: a model that pads explicitly (transformers' MobileNetV2 with its TensorFlow
"same" padding: ``F.pad`` before each depthwise convolution) has the pad between the
previous convolution's epilogue and the next convolution. A pad changes the shape,
so no epilogue holds it, and each BatchNorm + ReLU6 + pad ran as a kernel of its own
(MobileNetV2 from ``from_torch``: 71 kernels, its ONNX export 53). A convolution
reads outside its input as zeros, so the pad adds nothing the convolution's pads do
not: the result is the same, element for element.

Only constant pads with value 0, none on the batch and channel axes and none
negative (a crop) are taken; the pad stays where something else reads it too.

    >>> g2 = fold_pads_into_convs(g)        # doctest: +SKIP
"""
from __future__ import annotations

from .graph import Graph, Node
from .reshape_chains import rebuild


def fold_pads_into_convs(g: Graph) -> Graph:
    """``g`` with each zero spatial pad read by a convolution folded into it (see the
    module docstring); ``g`` itself where there is none."""
    from ..ops.conv import CONVS, conv_attrs
    from ..ops.window import pad_attrs
    producer = {o: n for n in g.nodes for o in n.outputs}
    nodes, changed = [], False
    for n in g.nodes:
        p = producer.get(n.inputs[0]) if n.op in CONVS else None
        if p is None or p.op != "pad" or len(p.inputs) != 1:
            nodes.append(n)
            continue
        x = g.value(p.inputs[0])
        rank = len(x.shape)
        pads, mode, value = pad_attrs(x.shape, p.attr_map)
        spatial = rank - 2
        if mode != "constant" or value != 0 or min(pads) < 0 \
                or any(pads[a] or pads[a + rank] for a in (0, 1)):
            nodes.append(n)
            continue
        *_, own = conv_attrs(n.attr_map, spatial, n.op)      # (its pads)
        added = [own[i] + pads[2 + i] for i in range(spatial)] + \
                [own[spatial + i] + pads[rank + 2 + i] for i in range(spatial)]
        nodes.append(Node.make(n.id, n.op, (p.inputs[0], *n.inputs[1:]), n.outputs,
                               {**n.attr_map, "pads": added}, n.name, n.origin))
        changed = True
    if not changed:
        return g
    return rebuild(g, nodes, {v.name: v for v in g.values})
