"""A transpose of a transpose read as one transpose of the first's input, and one
whose composed permutation is the identity replaced by that input.

Why: torch's backward writes a linear layer's weight gradient as ``mm(dY^T, X)``
followed by two permutes (``t(t(mm))``), and the gradient of ``x @ W^T`` reads ``W``
as ``t(t(W))``. Each permute is a kernel of its own where its result is read twice or
is a graph output: on BERT-base's layer the two 768 x 3072 weight gradients and the
forward's ``W^T`` (read by the forward GEMM and, transposed back, by the backward's)
were the slowest kernels of the step. Composed, the weight gradient is the GEMM's own
result and the backward GEMM reads ``W`` itself.

Where an identity's result is a graph output (``grad.<name>``), the value it stands
for takes the output's name (its producer writes the output directly), unless that
value is itself an input, a constant or another output: then the permutes stay.

    >>> g2 = fold_transpose_chains(g)        # doctest: +SKIP
"""
from __future__ import annotations

from ...ir.graph import Graph, Node
from .reshape_chains import rebuild


def fold_transpose_chains(g: Graph) -> Graph:
    """``g`` with its transpose chains composed (see the module docstring); ``g``
    itself where there is none."""
    values = {v.name: v for v in g.values}
    outputs = set(g.outputs)
    fixed = set(g.inputs) | set(g.constants) | outputs
    producer: dict[str, Node] = {}
    alias: dict[str, str] = {}       # a dropped identity's result -> the value it is
    rename: dict[str, str] = {}      # a value -> the graph output it becomes
    nodes, changed = [], False
    for n in g.nodes:
        n = _reading(n, alias)
        p = producer.get(n.inputs[0]) if n.op == "transpose" else None
        if p is not None and p.op == "transpose":
            inner, outer = _perm(p), _perm(n)
            perm = tuple(inner[q] for q in outer)
            src, out = p.inputs[0], n.outputs[0]
            if perm != tuple(range(len(perm))):
                n = Node(n.id, n.op, (src,), n.outputs, (("perm", perm),), n.name, n.origin)
                changed = True
            elif out not in outputs:
                alias[out], changed = src, True
                continue
            elif src not in fixed and src not in rename:
                rename[src], changed = out, True
                continue
        for o in n.outputs:
            producer[o] = n
        nodes.append(n)
    if not changed:
        return g
    if rename:
        nodes = [Node(n.id, n.op, tuple(rename.get(i, i) for i in n.inputs),
                      tuple(rename.get(o, o) for o in n.outputs), n.attrs, n.name,
                      n.origin) for n in nodes]
    return rebuild(g, nodes, values)


def _reading(n: Node, alias: dict[str, str]) -> Node:
    if not any(i in alias for i in n.inputs):
        return n
    return Node(n.id, n.op, tuple(alias.get(i, i) for i in n.inputs), n.outputs, n.attrs,
                n.name, n.origin)


def _perm(n: Node) -> tuple[int, ...]:
    return tuple(dict(n.attrs)["perm"])
