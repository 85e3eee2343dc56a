"""The keys a fused attention's rows may skip: a constant causal mask.

A decoder's attention masks every key after the query's own position: the logits of
row ``r`` are the mask's fill value at every key from ``r + offset`` on (``offset`` 1
for a causal mask, more where cached keys come first). FlashAttention does not compute
those blocks at all. Skipping them is exact, not an approximation, when ``exp(z - m)``
is 0 for every skipped logit ``z`` and every row's running maximum ``m`` -- then the
reference's softmax adds exact zeros for them (and leaves each row's maximum as it
is), and ``0 x V`` adds nothing to the output. So the kernel checks, per tile of rows,
at run time (the GPU's block agreeing on each check through a block-wide reduction):

- the skipped keys' values are finite (their sum of magnitudes is: ``0 x inf`` is NaN
  in the reference);
- an additive mask (``scores x scale + mask``, what ``torch.onnx.export`` makes of
  transformers' causal masks: 0 and the dtype's lowest): the skipped logits are the
  fill plus at most ``|scale| x d x max|Q's rows| x max|the skipped keys|`` (each
  score a sum of ``d`` products; NaN and infinity fail the check), which must be under
  ``bound``, an eighth of the fill's magnitude. A ``where(mask, x, fill)`` needs no
  bound: its masked logits are ``fill`` whatever the scores;
- every row's running maximum over the keys it did take is above ``floor``: the fill,
  plus twice the bound and a rounding of the sum to the coarsest half type (what an
  added mask's logits may reach), plus 128 (float32's ``exp`` is 0 below -104). A row
  with nothing but masked logits -- a padded query whose keys are all masked too -- is
  a uniform softmax over *all* keys in the reference, so that tile takes every block.

When a check fails the tile takes the remaining blocks as before, so the result is the
reference's in every case; only the time differs.

A model run in bfloat16 or float16 (``model.to(torch.bfloat16)``, then exported) adds
its mask in that type -- 0 and the type's lowest (float16's is -65504) -- and widens the
sum to float32 for the softmax (LLaMA's ``softmax(..., dtype=float32)``). The kernels
compute in float32 whatever the storage; the scale covers the scores' and the
product's rounding in their types, the floor the sum's. Masks of -10000 (BERT-era
exporters) qualify the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import DType
from ..ir import Graph

# below this fill the masked keys are worth skipping (a causal mask's fill is the
# dtype's lowest or -inf; BERT-era masks add -10000, float16 models -65504)
MIN_FILL = -1e4
# the margin above what a masked logit may reach each row's maximum must keep:
# exp(-128) is 0 in float32
ROW_MARGIN = 128.0
# a value stored in each float type is off by at most this much of itself (twice its
# unit roundoff and more: float32's also covers the products' accumulation order)
ROUNDING = {DType.float32: 2.0 ** -20, DType.bfloat16: 2.0 ** -7, DType.float16: 2.0 ** -10}
COARSEST = max(ROUNDING.values())


def causal_mask(queries: int, keys: int, dtype="float32") -> np.ndarray:
    """The additive causal mask ``[1, 1, queries, keys]`` as ``torch.onnx.export``
    writes transformers' (a constant): 0 where a query sees a key -- the first
    ``keys - queries`` (cached) keys and those up to its own position -- and the dtype's
    lowest elsewhere. The form :func:`find_key_limit` recognizes added to the scores;
    what test and benchmark graphs add to theirs."""
    dt = DType.of(dtype)
    keep = np.tril(np.ones((queries, keys), bool), keys - queries)
    return np.where(keep, 0, dt.lowest).astype(dt.np)[None, None]


@dataclass(frozen=True)
class KeyLimit:
    """Row ``r`` (of a batch item's rows) of a fused attention's mask is ``fill`` at
    every key from ``min(keys, max(0, r + offset))`` on, whatever the inputs.
    ``scale`` 0: the mask is a ``where`` (those logits are ``fill`` whatever the
    scores); else the mask is added to the scores times at most ``scale`` in
    magnitude, and ``bound`` is what the tile's bound on those (``scale x d x max|q| x
    max|k|``) must stay under.

    >>> KeyLimit(1, -3.4028235e38, 0.125, 4.25e37).keys(63, 128)
    64
    """
    offset: int
    fill: float
    scale: float = 0.0
    bound: float = 0.0

    @property
    def additive(self) -> bool:
        return self.scale > 0

    def keys(self, row: int, n: int) -> int:
        """The keys row ``row`` takes (the rest are masked)."""
        return min(n, max(0, row + self.offset))

    @property
    def floor(self) -> float:
        """Every row's running maximum must be above this (float32, rounded up) for the
        masked logits' exp to be 0: the fill, plus what an added mask's logits may
        reach above it (twice ``bound``, the check's margin for its own rounding, and
        the sum's rounding to the coarsest half type), plus ``ROW_MARGIN``."""
        if np.isinf(self.fill):
            return -math.inf            # (-inf plus any finite score is -inf)
        reach = 2 * self.bound + -self.fill * COARSEST if self.additive else 0.0
        exact = self.fill + reach + ROW_MARGIN
        f = np.float32(exact)
        return float(f if f >= exact else np.nextafter(f, np.float32(np.inf)))

    def describe(self) -> str:
        return (f"keys past row + {self.offset} skipped (a causal mask; checked per tile "
                "at run time)")

    def taken(self, m: int, n: int, tile_m: int, block: int) -> float:
        """The fraction of key blocks the tiles take when every check passes (the cost
        model's flops)."""
        blocks = -(-n // block)
        took = sum(min(blocks, -(-self.keys(min(r0 + tile_m, m) - 1, n) // block))
                   for r0 in range(0, m, tile_m))
        return took / (blocks * -(-m // tile_m))


def find_key_limit(g: Graph, prefix, scores: str, logits: str) -> KeyLimit | None:
    """The key limit of the logits ``logits`` that the elementwise ``prefix`` nodes
    make from the product ``scores``, or None. Recognized: ``logits`` made by a
    ``where`` choosing a fill, or by ``x + mask`` (x the scores, or the scores times or
    divided by a one-element constant), then perhaps widened by a cast (a
    half-precision model's softmax in float32). The keys certainly filled
    (:func:`_filled`: a constant mask's, or where a ``where``'s condition is certain
    whatever the inputs -- transformers' ``causal & padding``, the padding from the
    user's ``attention_mask``) of each row must be a suffix starting at ``row +
    offset`` for one offset over every row and batch item."""
    node = g.producer.get(logits)
    if node is not None and node.op == "cast" and node.id in prefix and \
            _widens(g, node.inputs[0], logits):
        node = g.producer.get(node.inputs[0])
    if node is None or node.id not in prefix:
        return None
    shape = g.value(scores).shape
    if not g.value(node.outputs[0]).dtype.is_float or len(shape) < 2:
        return None
    if node.op == "where":
        got = _filled(g, node.outputs[0])
        offset = None if got is None else _suffix_offset(got[0], shape)
        return None if offset is None else KeyLimit(offset, got[1])
    if node.op != "add":
        return None
    for x, mask in (node.inputs, node.inputs[::-1]):
        scale = _scale(g, prefix, scores, x)
        got = None if scale is None else _filled(g, mask)
        offset = None if got is None else _suffix_offset(got[0], shape)
        if offset is not None:
            # the scores may move a masked logit an eighth of the way to zero (twice
            # that with the check's own rounding): the rows' floor stays three
            # quarters of the way out; -inf plus any finite score is -inf
            f = got[1]
            bound = float(np.finfo(np.float32).max) if np.isinf(f) else -f / 8
            return KeyLimit(offset, f, scale, bound)
    return None


def _filled(g: Graph, v: str) -> tuple[np.ndarray, float] | None:
    """Where float value ``v`` is its fill whatever the inputs: (a boolean array
    broadcasting to v's shape, the fill), or None. ``v`` a constant: where it holds
    its minimum; ``where(cond, a, b)`` with a branch one constant value: where
    ``cond`` certainly picks that branch (:func:`_certain`). The fill must be at most
    MIN_FILL."""
    if v in g.constants:
        if not g.value(v).dtype.is_float:
            return None
        c = np.asarray(g.constants[v]).astype(np.float32)   # (exact from a half)
        if c.size == 0 or not float(c.min()) <= MIN_FILL:
            return None
        return c == c.min(), float(c.min())
    node = g.producer.get(v)
    if node is None or node.op != "where":
        return None
    cond, a, b = node.inputs
    for branch, side in ((b, False), (a, True)):
        if branch not in g.constants:
            continue
        c = np.asarray(g.constants[branch]).astype(np.float32)
        if c.size and np.all(c == c.flat[0]) and float(c.flat[0]) <= MIN_FILL:
            return _certain(g, cond, side), float(c.flat[0])
    return None


def _certain(g: Graph, v: str, side: bool) -> np.ndarray:
    """Where boolean ``v`` is ``side`` whatever the inputs (an array broadcasting to
    v's shape): a constant's own positions; through ``not``, ``and`` (false where
    either operand is, true where both are) and ``or`` (the reverse); nowhere for
    anything else, an input's value or an op not followed."""
    if v in g.constants:
        return np.asarray(g.constants[v], dtype=bool) == side
    node = g.producer.get(v)
    if node is not None and node.op == "not":
        return _certain(g, node.inputs[0], not side)
    if node is not None and node.op in ("and", "or"):
        a, b = (_certain(g, x, side) for x in node.inputs)
        return (a | b) if (node.op == "and") != side else (a & b)
    return np.zeros((), bool)


def _scale(g: Graph, prefix, scores: str, x: str) -> float | None:
    """|x| <= scale |scores|: x the scores themselves, or the scores times or divided
    by a one-element constant in the prefix; None otherwise."""
    stored = 1 + ROUNDING[g.value(scores).dtype]   # (the scores as stored)
    if x == scores:
        return stored
    node = g.producer.get(x)
    if node is None or node.id not in prefix or node.op not in ("mul", "div") or \
            scores not in node.inputs:
        return None
    other = [v for v in node.inputs if v != scores]
    if len(other) != 1 or other[0] not in g.constants:
        return None
    c = np.asarray(g.constants[other[0]], dtype=np.float64)
    if c.size != 1 or not np.isfinite(c).all() or c.item() == 0:
        return None
    if node.op == "div" and node.inputs[1] != other[0]:
        return None
    s = abs(c.item()) if node.op == "mul" else 1.0 / abs(c.item())
    return s * stored * (1 + ROUNDING[g.value(x).dtype])   # (the product's rounding)


def _widens(g: Graph, src: str, dst: str) -> bool:
    """A cast from ``src`` to ``dst`` is exact (a half type to float32, or none)."""
    a, b = g.value(src).dtype, g.value(dst).dtype
    return a.is_float and b.is_float and (a is b or b is DType.float32)


def _suffix_offset(masked: np.ndarray, shape) -> int | None:
    """The one offset such that, in every batch item of a mask broadcast to ``shape``
    (the scores'), row r is masked from key ``r + offset`` on (clipped to the row);
    None when there is none or nothing would be skipped."""
    m, n = shape[-2:]
    if masked.ndim > len(shape) or masked.ndim < 2 or masked.shape[-2:] != (m, n):
        return None
    rows = masked.reshape(-1, m, n)
    # the start of each row's masked suffix: n minus the trailing run of masked keys
    trailing = np.argmin(rows[:, :, ::-1], axis=2)
    trailing = np.where(rows.all(axis=2), n, trailing)
    start = n - trailing
    inner = (start > 0) & (start < n)
    if not inner.any():
        return None
    offset = int((start - np.arange(m))[inner][0])
    if not np.array_equal(start, np.broadcast_to(np.clip(np.arange(m) + offset, 0, n),
                                                 start.shape)):
        return None
    return offset
