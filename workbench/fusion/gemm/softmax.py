"""A fused attention's softmax in FlashAttention's online form: whether the epilogue
between its two products takes it (:func:`online_softmax`), one block of keys at a
time -- elementwise logits (a scale, a mask), then exactly a softmax over the keys, read
by nothing but the second product -- and the causal limit past which its blocks may be
skipped (:mod:`..key_limit`). Which block size it takes is the caller's rule.

    >>> online_softmax(g, first, mm, t, "p", io, 256)          # doctest: +SKIP
    OnlineSoftmax(logits='z', prefix=('n3', 'n4'), block=256, limit=None)
"""
from __future__ import annotations

from ...ir import Graph
from ...ops import Kind, get_op
from ...ops.reduce import reduce_axes
from ..gemm_shape import GemmShape, OnlineSoftmax
from ..key_limit import find_key_limit

# the softmax over the last axis as ir/composites.py decomposes it (and the ONNX
# importer's Softmax): m = max(z), e = exp(z - m), p = e / sum(e)
_SOFTMAX_TAIL = ("reduce_max", "sub", "exp", "reduce_sum", "div")


def online_softmax(g: Graph, first, mm, t: GemmShape, p: str, io, block: int,
                   cast: bool = False) -> OnlineSoftmax | None:
    """The online form of a fused attention's epilogue, ``block`` keys at a time, where
    it takes one: the epilogue is elementwise ops at the scores' shape (``prefix``:
    scale, mask) making ``z``, then exactly the softmax of ``z`` over the last axis
    giving ``p`` (read by nothing but the second product). None otherwise: the
    whole-row epilogue takes any row reduction. Whether the rows are long enough for it
    (whole rows of scores leave tiles of few rows, each reading all of K and V for them)
    is the caller's rule, and a launch may say otherwise. ``cast``: ``p`` may be the
    softmax cast back to the product's half type (a bfloat16 softmax is computed in
    float32 between two casts; the GPU's kernel keeps the probabilities in float32, as
    the reference keeps half values inside a kernel)."""
    if tuple(io.outputs) != (p,):
        return None
    epi = [n for n in first if n is not mm and n.id not in t.views]
    div = g.producer.get(p)
    back = None
    if cast and div is not None and div.op == "cast" and div in epi and \
            len(g.consumers[div.inputs[0]]) == 1:
        back, div = div, g.producer.get(div.inputs[0])
    if div is None or div.op != "div" or div not in epi:
        return None
    e, total = div.inputs
    red_sum = g.producer.get(total)
    ex = g.producer.get(e)
    sub = g.producer.get(ex.inputs[0]) if ex is not None else None
    red_max = g.producer.get(sub.inputs[1]) if sub is not None else None
    tail = (red_max, sub, ex, red_sum, div)
    if any(x is None or x not in epi for x in tail) or \
            tuple(x.op for x in tail) != _SOFTMAX_TAIL:
        return None
    z = sub.inputs[0]
    last = len(g.value(z).shape) - 1
    for r in (red_max, red_sum):
        if reduce_axes(r.attr_map, last + 1) != (last,) or not r.attr("keepdims", True):
            return None
    if red_max.inputs[0] != z or red_sum.inputs[0] != e or \
            {c.id for c in g.consumers[e]} != {div.id, red_sum.id}:
        return None
    if {c.id for c in g.consumers[red_max.outputs[0]]} != {sub.id} or \
            {c.id for c in g.consumers[sub.outputs[0]]} != {ex.id} or \
            {c.id for c in g.consumers[total]} != {div.id}:
        return None
    prefix = [n for n in epi if n not in tail and n is not back]
    shape = g.value(mm.outputs[0]).shape
    made = {mm.outputs[0]} | {o for n in prefix for o in n.outputs}
    if z not in made:
        return None
    readers = {x.id for x in prefix} | {red_max.id, sub.id}   # of what the prefix makes
    for n in prefix:
        if get_op(n.op).kind is not Kind.elementwise or \
                any(g.value(o).shape != shape for o in n.outputs):
            return None
        if any(c.id not in readers for o in n.outputs for c in g.consumers[o]):
            return None
    ids = tuple(n.id for n in prefix)
    return OnlineSoftmax(z, ids, block, find_key_limit(g, ids, mm.outputs[0], z))
