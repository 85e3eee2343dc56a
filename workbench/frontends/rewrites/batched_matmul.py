"""Batched matmuls with their batch axes kept: ``reshape`` (merging leading axes) ->
3-D ``matmul`` -> ``reshape`` (splitting them again), as ``torch.export`` decomposes
attention (``bmm`` over batch x heads), folded into one matmul over the original
axes.

Why: the planner's GEMM template reads a matmul's operands and writes its result
through layout ops (``fusion/gemm/operands.py``), and joins attention's two products with the
softmax between them, but only when each product is one op whose result the
epilogue reads where it is. A model imported from PyTorch reached its attention as
``view(B x H, S, D)`` -> ``bmm`` -> ``view(B, H, S, S)``: the reshape between the
product and the scale, mask and softmax kept every kernel apart (BERT from
``from_torch``: 29 kernels, no fused attention, where its ONNX export -- MatMul over
4-D operands -- plans to 17 with two).

:func:`fold_batch_reshapes` rewrites a ``matmul`` of two 3-D operands, each a
``reshape`` of a tensor whose leading axes (the same for both) merge into the batch,
as the ``matmul`` of those tensors followed by a ``reshape`` to the 3-D result; then
folds every ``reshape`` of a ``reshape`` into one of the first's input (an identity
one into that input itself) and drops the ops nothing reads. Row-major data makes
each step exact: the values are the same, element for element.

    >>> g2 = fold_batch_reshapes(g)        # doctest: +SKIP
"""
from __future__ import annotations

import math

from ...ir.graph import Graph, Node, Value
from .reshape_chains import fresh, rebuild


def fold_batch_reshapes(g: Graph) -> Graph:
    """``g`` with its batched matmuls over merged leading axes folded (see the module
    docstring); ``g`` itself where there is none."""
    values = {v.name: v for v in g.values}
    producer = {o: n for n in g.nodes for o in n.outputs}
    nodes: list[Node] = []
    changed = False
    for n in g.nodes:
        folded = _unmerged(n, values, producer)
        if folded is None:
            nodes.append(n)
            continue
        a4, b4 = folded
        c3 = values[n.outputs[0]]
        c4 = Value(fresh(f"{c3.name}_batched", values), a4.shape[:-2] + c3.shape[-2:],
                   c3.dtype)
        values[c4.name] = c4
        nodes += [Node(n.id, "matmul", (a4.name, b4.name), (c4.name,), n.attrs, n.name,
                       n.origin),
                  Node.make(f"{n.id}_r", "reshape", (c4.name,), (c3.name,),
                            {"shape": list(c3.shape)}, n.name, n.origin)]
        changed = True
    if not changed:
        return g
    return rebuild(g, nodes, values)


def _unmerged(n: Node, values: dict, producer: dict):
    """(A, B) before their leading axes were merged, where ``n`` is a matmul of two 3-D
    reshapes of tensors with the same leading axes (merged into its batch) and the
    same last two axes as the operands; else None."""
    if n.op != "matmul" or len(n.inputs) != 2:
        return None
    ps = [producer.get(i) for i in n.inputs]
    if any(p is None or p.op != "reshape" for p in ps):
        return None
    (a3, b3), (a4, b4) = ((values[i] for i in n.inputs),
                          (values[p.inputs[0]] for p in ps))
    if len(a3.shape) != 3 or len(b3.shape) != 3 or len(a4.shape) < 4 \
            or a4.shape[:-2] != b4.shape[:-2]:
        return None
    if a4.shape[-2:] != a3.shape[-2:] or b4.shape[-2:] != b3.shape[-2:] \
            or math.prod(a4.shape[:-2]) != a3.shape[0]:
        return None
    return a4, b4
