"""Whether a CPU GEMM kernel packs an activation B into the micro-kernel's column
panels once per run, before the tiles, where many row tiles read it
(:func:`packs_b_per_run`), instead of each tile's sgemm packing its columns of B again.

Why: sgemm called per tile packs the tile's part of B on every call, so each column of
an activation B is packed once per *row* tile. A training step's weight gradients are
``x^T @ dy``: A is read transposed and has the layer's features as rows (768 or 3072,
six or 24 row tiles), B is the ``128 x n`` output gradient, packed by sgemm six or 24
times. Packed once per run (``wb_pack_panel``, one panel per item of a parallel loop),
the tiles multiply it with the micro-kernel, and A's slivers are packed once too where
:mod:`.left_pack` says so. Measured on the BERT-base layer's fwd+bwd (2 cores, Zen 4,
loaded host, fastest of 8 alternating calls): 768x3072x128 2.93 against 3.76 ms,
768x768x128 0.78 against 0.87 ms (``benchmarks/training_gemms.py`` has the side-by-side
table).

Where one row tile reads B (a 128-token product) the pack is a copy sgemm makes
anyway, so it pays only where the micro-kernel beats sgemm's own packing and product
(``RightPack.one_row_tile``): one weight matrix (a training step's ``x @ W^T`` and
``dy @ W``), where the product has 8 column tiles or more (``one_tile_min_col_tiles``),
4 or more where B is read transposed (``transposed_min_col_tiles``: ``x @ W^T``,
whose strided pack costs sgemm most), and the panels a tile reads back at once stay
in a core's L2 (``max_tile_b_bytes``, :func:`tile_b_bytes`). Each such tile packs its
own panels (:func:`packs_b_in_tile`, ``wb_gemm_packing_b``), ``KC`` = 256 rows of k at
a time into the same floats just before multiplying them, so they are read from its
core's L2 and never written back. In the BERT layer's step, two threads, each
kernel's fastest of 30 alternating calls (four runs, load 1.4-2.1): the four 128 x 768
x 768 projections ``x @ W^T`` and the 3072-deep ``h @ W2^T`` together 1.01-1.05x
faster than sgemm per tile (one core: 1.18x and 1.10x); earlier, the FFN's ``x @
W1^T`` 1.03-1.06x and ``dy @ W2`` 1.01-1.06x. The untransposed 128 x 768 x 768 and 128
x 768 x 3072 ``dy @ W`` (4 column tiles) keep sgemm: on one core 1.06x and 0.99x, in
the step 0.99x and 1.03x (one run, load 4). A transposed B's pack (``wb_pack_block``)
is made by 8 x 8 blocks transposed in registers, 16 rows of k at a time (it gathered one element at a time,
64 columns' cache lines per panel row: 128 x 768 x 768 took 1.22 ms packed so against
1.04 by blocks), an untransposed one row by row across a tile's panels. Not for
whole-row tiles (an epilogue reducing rows: each tile reads all of B), nor where B is
a constant (packed once for good already: ``PACK_ONCE``), nor where the micro-kernel
does not run (``tiles.packs`` returns ""). Measurements: docs/decisions/right-pack.md.

    >>> RIGHT_PACK.min_row_tiles
    4
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..gemm_shape import PACK_PER_RUN, GemmShape
from .tiles import KC, PANEL, round_up


@dataclass(frozen=True)
class RightPack:
    """When an activation B is packed by every run (``RIGHT_PACK``; a test or a
    benchmark replaces it there). ``min_row_tiles``: the row tiles reading each B
    matrix; with fewer, sgemm's own packing per tile costs about what the pack costs
    (the same one parallel loop and barrier as :class:`.left_pack.LeftPack`'s) --
    except, with ``one_row_tile``, one weight matrix in ``one_tile_min_col_tiles``
    column tiles or more (``transposed_min_col_tiles`` where B is read transposed)
    whose panels a tile reads back at once (:func:`tile_b_bytes`) fit
    ``max_tile_b_bytes`` (a Zen 4 core's 1 MB L2): an untransposed B in 4 column tiles
    measured no faster on the micro-kernel than on sgemm inside the step, a transposed
    one 1.03-1.04x faster. ``in_tile``: where one tile reads each panel, that tile
    packs them (:func:`packs_b_in_tile`).
    ``max_floats``: the pack is a workspace of the run, read by the tiles from memory,
    not cache, so its size is memory: at most 4M floats (16 MB, bert_chain's 1024 x
    4096 W1, whose pack made its call 1.09x faster); a larger B (an LM head's 32000 x
    768 weight in training, 98 MB) keeps sgemm per tile, which packs it a tile at a
    time. ``wide_b_bytes``: where many row tiles read a B packed before them, a column
    tile spans as many of B's columns as hold this many bytes of its panels (all of
    them, for a training step's weight gradients: :func:`widened`)."""
    min_row_tiles: int = 4
    one_row_tile: bool = True
    max_tile_b_bytes: int = 1 << 20
    one_tile_min_col_tiles: int = 8
    transposed_min_col_tiles: int = 4
    max_floats: int = 1 << 22
    in_tile: bool = True
    wide_b_bytes: int = 2 << 20


RIGHT_PACK = RightPack()


def b_pack_words(t: GemmShape) -> int:
    """Floats of B packed by every run: each distinct matrix's ``k`` rows of panels."""
    items = 1 if t.b.view.one_matrix else t.b.view.distinct.batch_size
    return items * -(-t.n // PANEL) * PANEL * t.k


def packs_b_in_tile(t: GemmShape) -> bool:
    """Whether each tile of a GEMM whose activation B is packed by the run packs its own
    panels just before its product (``wb_gemm_packing_b``) instead of a parallel loop
    packing them all before the tiles: where one tile reads each panel (one row tile,
    one batch item, one B matrix). The panels are then read back from the core's L2,
    not L3 or memory, and the kernel has one parallel loop and barrier fewer. BERT's
    128 x 3072 x 768 products in the step, two threads, each kernel's fastest of 24
    alternating calls (load 3): ``x @ W1^T`` + GELU 3.34 against 3.43 ms packed before
    the tiles, ``dy @ W2`` 3.12 against 3.23; one thread, CPU time, alone: 6.54
    against 6.74 and 6.39 against 6.20 (load 9)."""
    return RIGHT_PACK.in_tile and t.packed_b == PACK_PER_RUN and _one_tile_each(t)


def _one_tile_each(t: GemmShape) -> bool:
    """Whether each panel of B is read by one tile alone (one row tile, one batch item,
    one B matrix)."""
    return t.tiles == t.col_tiles and t.b.view.one_matrix


def in_tile_rows(t: GemmShape) -> int:
    """Rows of k of its panels a tile that packs them itself (:func:`packs_b_in_tile`)
    holds at once: ``KC``, or all of a shorter k. Its part of the workspace is that
    many rows of its panels, reused block after block (``wb_gemm_packing_b``)."""
    return min(t.k, KC)


def tile_b_bytes(t: GemmShape) -> int:
    """Bytes of packed B a tile of ``t`` reads back from its core's cache at once: its
    panels' ``KC`` rows where it packs them itself (``wb_gemm_packing_b`` packs a block
    of ``KC`` rows of k at a time), else all ``k`` rows of them."""
    rows = in_tile_rows(t) if RIGHT_PACK.in_tile and _one_tile_each(t) else t.k
    return 4 * rows * t.tile_n


def packs_b_per_run(t: GemmShape, can: str, whole_rows: bool = False) -> bool:
    """Whether the CPU GEMM kernel of ``t`` (tiled for sgemm: ``t.packed_b`` empty;
    ``whole_rows``: each tile spans every column, for an epilogue reducing rows) packs
    B by every run, given how B can be packed here (``can``, ``tiles.packs``)."""
    if can != PACK_PER_RUN or t.im2col is not None or b_pack_words(t) > RIGHT_PACK.max_floats:
        return False
    min_cols = (RIGHT_PACK.transposed_min_col_tiles if t.b.view.trans
                else RIGHT_PACK.one_tile_min_col_tiles)
    return (t.row_tiles >= RIGHT_PACK.min_row_tiles
            or (RIGHT_PACK.one_row_tile and t.b.view.one_matrix and not whole_rows
                and tile_b_bytes(t) <= RIGHT_PACK.max_tile_b_bytes
                and t.col_tiles >= min_cols))


def widened(t: GemmShape, units: int) -> GemmShape:
    """``t`` (B packed by the run before its tiles), where ``min_row_tiles`` or more
    row tiles read that B, with column tiles as wide as ``RightPack.wide_b_bytes`` of
    B's panels allow, where that cuts their count and keeps it a multiple of the
    cores: each column tile copies A's
    slivers again (or :mod:`.left_pack` packs them once by the run, one more parallel
    loop), while B's panels, packed once already, cost the same read by fewer, wider
    tiles. A training step's weight gradients ``dy^T @ x`` (k = 128 tokens) then take
    whole rows: BERT's six such products, 768 or 3072 columns (3 or 12 column tiles of
    256 before), took 8.63 and 9.20 ms against 8.83 and 9.52 in tiles of 384 and 256
    (each kernel's fastest of 24 alternating calls in the step, two runs, load 0.6),
    and the five of 768 columns 5.89 against 6.11 ms in tiles of 384 against 256."""
    cols = max(1, -(-4 * t.k * t.n // RIGHT_PACK.wide_b_bytes))
    if (t.row_tiles < RIGHT_PACK.min_row_tiles or cols >= t.col_tiles
            or (t.batch * t.row_tiles * cols) % units):
        return t
    return replace(t, tile_n=min(t.n, round_up(-(-t.n // cols), PANEL)))
