"""A convolution computed directly (CONV_DIRECT, codegen wb_conv_lanes): its filters in
the vectors' lanes, packed once, each tap's input a broadcast operand of multiply-adds,
no patches gathered; each tile whole output rows of one image and a run of filters,
their input rows copied with their zero border into a thread's buffer. Its sizes are
one frozen :class:`DirectConv`, ``DIRECT``; :func:`direct_tiling` cuts the work so the
cores share it evenly. (Which convolutions take this form: :mod:`.conv_rule`.)

    >>> direct_split(1, 7, 7, 512, 2)     # 7 rows on 2 cores: half the filters a tile
    (7, 256)
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import FusionRefused
from ..gemm_shape import CONV_DIRECT, GemmShape, Im2col, Operand
from .launch import GemmLaunch, set_tile
from .tiles import CPU_TILES, LANES_ALIGN, round_up


@dataclass(frozen=True)
class DirectConv:
    """A direct convolution's sizes (``DIRECT``; a test or a benchmark replaces it there
    to try others)."""
    # a thread's buffer of input rows: as many floats as a tile's gathered patches
    scratch: int = CPU_TILES.im2col
    align: int = 2 * LANES_ALIGN   # filters per tile: whole pairs of vectors
    blocks: tuple[int, ...] = (6, 7, 8)   # positions per block (wb_conv_cr: 6 on 16
    #                                       registers, 7 or 8 on 32)


DIRECT = DirectConv()


def direct_scratch(cols: Im2col, rows: int) -> int:
    """Floats of a direct convolution's buffer for a tile of ``rows`` output rows
    (codegen wb_conv_lanes; a 1-D convolution as its plane one row high,
    ``Im2col.planar``): every channel's input rows they read, each as wide as the
    widest block's whole blocks of positions read."""
    cols = cols.planar()
    (oh, ow), (kh, kw), (sy, sx), (dy, dx) = cols.out, cols.kernel, cols.strides, cols.dilations
    if (kh, kw) == (1, 1):      # (a strided 1 x 1's buffer holds the rows and columns read)
        sy = sx = 1
    wide = max((-(-ow // r) * r - 1) * sx for r in DIRECT.blocks) + (kw - 1) * dx + 1
    return cols.channels * ((min(rows, oh) - 1) * sy + (kh - 1) * dy + 1) * wide


def direct_fits(cols: Im2col) -> bool:
    """Whether a tile of one output row fits a thread's buffer (``DirectConv.scratch``)."""
    return direct_scratch(cols, 1) <= DIRECT.scratch


def direct_tiling(conv, cols: Im2col, a: Operand, n: int, k: int, dest: str,
                  epilogue_ops: int, units: int, lc: GemmLaunch) -> GemmShape:
    """A direct convolution's tiles: whole pairs of vectors of filters (or all of them)
    by whole output rows of one image (a 1-D convolution: one row), as many rows as the
    buffer takes, cut (:func:`direct_split`) so the cores share the work evenly."""
    oh, ow = cols.planar().out
    fit = max(r for r in range(1, oh + 1)
              if direct_scratch(cols, r) <= DIRECT.scratch)
    rows, tile_m = direct_split(n, oh, fit, k, units)
    if lc.tile_n:     # (whole rows: a tile_n between two is taken up to the next)
        rows = -(-set_tile("tile_n", lc.tile_n, oh * ow, 1) // ow)
        if direct_scratch(cols, rows) > DIRECT.scratch:
            raise FusionRefused(f"tile_n={lc.tile_n}: {rows} output rows of {conv.id} "
                                f"read more input than a thread's buffer of "
                                f"{DIRECT.scratch} floats holds (direct convolution)")
    if lc.tile_m:
        tile_m = min(lc.tile_m, k)
        if tile_m % DIRECT.align and tile_m < k:
            raise FusionRefused(f"tile_m={lc.tile_m}: {conv.id} is computed directly, "
                                f"{DIRECT.align} filters at a time, so tiles are a "
                                f"multiple of {DIRECT.align} filters (or all {k})")
    b = Operand(conv.inputs[0], a.view)     # (the input; its view unused, as im2col's)
    return GemmShape(n, k, oh * ow, cols.rows, a, b, tile_m, rows * ow, conv.outputs[0],
                     dest, epilogue_ops=epilogue_ops, im2col=cols,
                     col_axes=len(cols.out), packed_b=CONV_DIRECT)


def direct_split(n: int, oh: int, fit: int, k: int, units: int) -> tuple[int, int]:
    """Output rows and filters per tile of a direct convolution (``n`` images of ``oh``
    rows, at most ``fit`` rows a tile, ``k`` filters): the cut whose busiest core has
    the least work (:func:`static_load`), then the fewest tiles, then the fewest cuts of
    the filters. Cutting the rows alone left a core idle for part of the last round
    where they do not share out evenly: ResNet-50's last stage, 7 rows in tiles of 4
    and 3 on 2 cores, 1.36 ms against 1.19 in two tiles of half the filters (each
    filter also read once where each row tile read them all; benchmarks/
    conv_direct.py)."""
    best = None
    first = -(-oh // fit)
    for row_tiles in range(first, min(oh, first + 2 * units) + 1):
        rows = -(-oh // row_tiles)
        row_sizes = [min(rows, oh - r) for r in range(0, oh, rows)]
        for cuts in range(1, min(-(-k // DIRECT.align), 2 * units) + 1):
            tile_m = min(k, round_up(-(-k // cuts), DIRECT.align))
            work = [min(tile_m, k - f) * r for f in range(0, k, tile_m)
                    for r in row_sizes] * n
            key = (static_load(work, units), len(work), -(-k // tile_m))
            if best is None or key < best[0]:
                best = (key, rows, tile_m)
    return best[1], best[2]


def static_load(work: list[int], units: int) -> int:
    """The busiest core's work where a parallel loop over tiles of this ``work`` (in
    loop order) is shared out as ``schedule(static)`` does: a run of consecutive tiles
    each, the first ``len % units`` cores one more."""
    q, extra = divmod(len(work), units)
    load, i = 0, 0
    for u in range(units):
        take = q + (u < extra)
        load, i = max(load, sum(work[i:i + take])), i + take
    return load
