"""Whether a CPU GEMM kernel packs its left operand A into the micro-kernel's slivers
once per run, before the tiles, instead of each tile copying its slivers again
(:func:`packs_a_per_run`; the size it takes, :func:`left_pack_words`).

Why: the micro-kernel reads A as slivers of ``MR`` rows copied into a small buffer
(``wb_sliver``, codegen/microkernel.py). Each tile copies its rows' slivers, so a row
of A is copied once per *column* tile: an LM head (128 x 32000 x 256) cuts its 32000
columns into 125 tiles, and A's 128 rows were copied 125 times -- a strided scalar
gather that took ~4.5% of the kernel's time on one core (Zen 4, 21.1 ms against 20.2
with A packed once per run; ``benchmarks/lm_head.py``), which is what it took to meet
onnxruntime's MLAS on that product. A constant A (a convolution's filters) is packed
once for good (``kir.PackA``, first run); an activation A is packed by every run here,
one sliver per item of a parallel loop, into a workspace of the run that the tiles
then read (``wb_gemm_packed_a``).

Not where a tile's rows are all of the product's columns (one column tile: nothing is
copied twice), a fused attention (its first product's A is Q, read per tile; its
second is the tile's own probabilities), bfloat16 (its slivers are pairs of rows),
sgemm tiles (BLAS packs A itself), where the pack would outgrow ``max_floats``, or
where it would save too few copies to repay its loop (``min_saved``).

    >>> LEFT_PACK.min_col_tiles
    4
"""
from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import DType
from ...ir import Graph
from ..gemm_shape import PACK_ONCE, PACK_PER_RUN, GemmShape

# the most rows and the fewest a sliver of any target's micro-kernel holds (WB_MR: 6 on
# AVX, AVX-512 and AArch64, 3 elsewhere); the pack is laid out for the most, and its
# loop has a slot for each of the fewest
SLIVER_ROWS, SLIVER_ROWS_MIN = 6, 3


@dataclass(frozen=True)
class LeftPack:
    """When A is packed by every run (``LEFT_PACK``; a test or a benchmark replaces it
    there). ``min_col_tiles``: each row of A is copied that many times by the tiles
    otherwise; the pack costs one parallel loop (and its barrier) before them, ~10 us
    on 2 cores, so a product cut into a few column tiles (BERT's 768 columns in 3)
    keeps copying per tile. ``max_floats``: the pack (A's rows of every batch item)
    stays within a core's L2 (4 MB: 1M floats) so the tiles read it from cache.
    ``min_saved``: the copies it saves ((column tiles - 1) x A's floats) at least 64K
    floats, ~20-60 us of strided copying, well above the loop's cost: a classifier's
    2 rows x 1280 read by 4 column tiles (7.7K floats saved, a 25 us kernel) keeps
    copying per tile."""
    min_col_tiles: int = 4
    max_floats: int = 1 << 20
    min_saved: int = 1 << 16


LEFT_PACK = LeftPack()


def a_tile_stride(k: int, tile_m: int) -> int:
    """Floats between two tiles' slivers of a packed A (``wb_pack_a_once``,
    ``wb_pack_a_sliver``): ``tile_m`` rows in slivers of 6 or of 3, each ``k`` long."""
    return -(-tile_m // SLIVER_ROWS) * SLIVER_ROWS * k


def left_items(t: GemmShape) -> int:
    """Distinct left matrices packed: one where every batch item reads the same A."""
    return 1 if t.a.view.one_matrix else t.a.view.distinct.batch_size


def left_pack_words(t: GemmShape) -> int:
    """Floats of A packed by every run: its slivers, row tile by row tile, per
    distinct matrix."""
    return left_items(t) * t.row_tiles * a_tile_stride(t.k, t.tile_m)


def packs_a_per_run(g: Graph, t: GemmShape, then=None, online=None) -> bool:
    """Whether the CPU GEMM kernel of ``t`` (``then``/``online``: its fused attention's
    second product, if any) packs A by every run (see the module docstring)."""
    return (t.block is None and then is None and online is None
            and t.packed_b in (PACK_ONCE, PACK_PER_RUN) and t.im2col is None
            and t.a.value not in g.constants
            and g.value(t.a.value).dtype is DType.float32
            and t.col_tiles >= LEFT_PACK.min_col_tiles
            and left_pack_words(t) <= LEFT_PACK.max_floats
            and (t.col_tiles - 1) * t.batch * t.m * t.k >= LEFT_PACK.min_saved)
