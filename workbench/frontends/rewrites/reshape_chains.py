"""What the import-time rewrites (``batched_matmul.py``, ``matmul_rows.py``,
``constant_folding.py``) share: folding the reshape chains they leave, dropping what
nothing reads, and building the rewritten graph.

Each matmul rewrite moves a reshape from before a matmul to after it, where it meets
the reshape the exporter put back: a reshape of a reshape reads from the first's
input (row-major data makes that exact), and one that gives its input's shape back
is that input.
"""
from __future__ import annotations

from ...ir.graph import Graph, Node


def rebuild(g: Graph, nodes: list[Node], values: dict,
            constants: dict | None = None) -> Graph:
    """``g`` with ``nodes`` (topological, possibly new ``values`` and ``constants``):
    reshape chains folded, dead nodes dropped, nodes renumbered, unused values and
    constants left out; verified."""
    constants = g.constants if constants is None else constants
    nodes = fold_reshape_chains(nodes, values, set(g.outputs))
    nodes = live(nodes, set(g.outputs))
    used = set(g.inputs) | set(g.outputs) | {x for n in nodes for x in (*n.inputs,
                                                                         *n.outputs)}
    renumbered = [Node(f"n{i}", n.op, n.inputs, n.outputs, n.attrs, n.name, n.origin)
                  for i, n in enumerate(nodes)]
    return Graph(g.name, tuple(v for k, v in values.items() if k in used),
                 tuple(renumbered), g.inputs, g.outputs,
                 {k: v for k, v in constants.items() if k in used}, g.description,
                 dict(g.input_ranges)).verify()


def fold_reshape_chains(nodes: list[Node], values: dict, outputs: set) -> list[Node]:
    """Each reshape of a reshape read from the first's input instead; one that gives
    its input's own shape back replaced by that input wherever it is read (unless it
    is a graph output)."""
    producer: dict[str, Node] = {}
    alias: dict[str, str] = {}
    out = []
    for n in nodes:
        n = Node(n.id, n.op, tuple(alias.get(i, i) for i in n.inputs), n.outputs, n.attrs,
                 n.name, n.origin)
        p = producer.get(n.inputs[0]) if n.op == "reshape" else None
        if p is not None and p.op == "reshape":
            src = p.inputs[0]
            if values[src].shape == values[n.outputs[0]].shape and n.outputs[0] not in outputs:
                alias[n.outputs[0]] = src
                continue
            n = Node(n.id, n.op, (src,), n.outputs, n.attrs, n.name, n.origin)
        for o in n.outputs:
            producer[o] = n
        out.append(n)
    return out


def live(nodes: list[Node], outputs: set) -> list[Node]:
    """The nodes whose results something reads (every op is pure)."""
    read = set(outputs)
    keep = []
    for n in reversed(nodes):
        if any(o in read for o in n.outputs):
            keep.append(n)
            read.update(n.inputs)
    return keep[::-1]


def fresh(name: str, values: dict) -> str:
    """``name``, or ``name_1``, ``name_2``... whichever ``values`` does not hold yet."""
    out, i = name, 1
    while out in values:
        out, i = f"{name}_{i}", i + 1
    return out
