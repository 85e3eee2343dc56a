"""Ops on constants alone computed once at import: what a composite builds from a
model's parameters (BatchNormalization's ``rsqrt(var + eps) * scale`` and the
per-channel reshapes of its statistics) becomes the constants it computes.

Why: a frontend folds a model op whose every input is known, but a composite
applied to a live tensor emits its parameter arithmetic as graph nodes. Left there,
that arithmetic ran as a kernel on every call and kept the elementwise ops that use
it out of the producing GEMM's epilogue (ResNet from ``from_torch``: each
convolution's BatchNorm and ReLU a kernel of its own; its ONNX export, where the
exporter folded BatchNorm into the convolutions, fuses the ReLU into them).

Each op is evaluated by its registered NumPy reference (``evaluate_node``), as the
reference runtime would evaluate it, so the graph means what it meant. An op whose
result is larger than its largest input (an ``expand``) is left as it is: folding it
would store the broadcast, not compute less. So is one whose result is a graph
output, and one that reads a large constant (more than ``SHARED_LIMIT`` elements)
something else reads too: folding it would store a second copy of the weight (a tied
embedding and its transpose) -- the GEMM template reads a transposed operand in place
anyway.

    >>> g2 = fold_constants(g)        # doctest: +SKIP
"""
from __future__ import annotations

from ...ir.graph import Graph
from .reshape_chains import rebuild
from ...ops import evaluate_node

SHARED_LIMIT = 1 << 16


def fold_constants(g: Graph) -> Graph:
    """``g`` with every op whose inputs are all constants replaced by its result (see
    the module docstring), the constants nothing reads any more dropped; ``g`` itself
    where there is none."""
    values = {v.name: v for v in g.values}
    outputs = set(g.outputs)
    consts = dict(g.constants)
    reads: dict[str, int] = {}
    for n in g.nodes:
        for i in set(n.inputs):
            reads[i] = reads.get(i, 0) + 1

    def foldable(n) -> bool:
        sizes = [values[i].numel for i in n.inputs]
        return bool(n.inputs) and all(i in consts for i in n.inputs) \
            and not any(o in outputs for o in n.outputs) \
            and max(values[o].numel for o in n.outputs) <= max(sizes) \
            and all(k <= SHARED_LIMIT or reads[i] == 1 for i, k in zip(n.inputs, sizes))

    kept, folded = [], False
    for n in g.nodes:
        if foldable(n):
            consts.update(zip(n.outputs, evaluate_node(
                n, [consts[i] for i in n.inputs], [values[o] for o in n.outputs])))
            folded = True
        else:
            kept.append(n)
    if not folded:
        return g
    return rebuild(g, kept, values, consts)
