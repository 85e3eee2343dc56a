"""The CPU's GEMM tiles: how the CPU's GEMM kernel cuts a product into tiles its cores
share (:func:`cpu_tiling`, the rule, by the product's shape), and whether the
generated micro-kernel or a single-threaded BLAS sgemm multiplies each tile
(:func:`packs`). The tuned sizes are one frozen :class:`CpuTiles`, ``CPU_TILES``.

Only the CPU backend runs such tiles (inside the kernel's OpenMP loop, each tile's
product by the generated micro-kernel against B packed -- once where B is a constant,
by every run before the tiles for a fused attention's K and V over long rows and a
1 x 1 convolution's input, by each tile for a convolution's patches -- where the
vectors are wide enough, else by sgemm); a GPU's are thread blocks (:mod:`.gpu_tiles`).

    >>> cpu_tiling(Operand.whole("x", (512, 768)), Operand.whole("w", (768, 3072)),
    ...            "h", "h", 8).tiles
    48
"""
from __future__ import annotations

from dataclasses import dataclass

from ...device import Device
from ...ir import Graph
from ...errors import FusionRefused
from ..gemm_shape import PACK_ONCE, PACK_PER_RUN, GemmShape, Operand
from .launch import GemmLaunch, set_tile
from .operands import problem

# columns per panel of a packed constant B (codegen/microkernel.py); a packed tile
# starts on a panel, so its width is a multiple of it. 64 is a multiple of every
# register block the micro-kernel uses.
PANEL = 64
# rows of k per block of the micro-kernel's loop (codegen/microkernel.py): an A sliver
# of 6 x KC floats stays in L1; a tile that packs its own panels of B packs them KC
# rows at a time (fusion/gemm/right_pack.py)
KC = 256
LANES_ALIGN = 16      # channels per tile a multiple of the widest vector's lanes
# the micro-kernel against a packed B outran OpenBLAS's sgemm per tile (which packs B
# again on every call) where the compiler targets 256-bit vectors or wider; with
# 128-bit ones it ran at 36 GFLOP/s against 90, so those machines call sgemm (a fact of
# the machine, not of a product's shape)
PACK_MIN_VECTOR_BYTES = 32


@dataclass(frozen=True)
class CpuTiles:
    """The CPU GEMM kernel's tuned tile sizes and buffer bounds (``CPU_TILES``; a test
    or a benchmark replaces it there to try others)."""
    # A tile's product should stay in the core's cache while the epilogue reads it: 128
    # x 256 float32 is 128 KB. Tiles also bound what sgemm packs per call (A's tile rows
    # and B's tile columns), so they are not much smaller either. Measured on 2 cores
    # (one-thread OpenBLAS sgemm per tile, BERT/GPT-2 small shapes, K = 256 or 1024):
    # 128 x 256 tiles ran 178-202 GFLOP/s where 256 x 256 (and 256 x 128) ran 157-200.
    m: int = 128
    n: int = 256
    align: int = 16          # tile widths in whole cache lines of float32 (64 B)
    # a convolution's gathered patches per tile (each thread's own buffer): 128K
    # float32, 512 KB, within a core's L2
    im2col: int = 128 * 1024
    # the most floats a thread's own buffers of one tile may hold (on its stack: a
    # convolution's patches, a fused attention's scores and output rows), 2 MB (four
    # tiles of patches)
    scratch: int = 4 * 128 * 1024


CPU_TILES = CpuTiles()


def micro_kernel_fits(device: Device) -> bool:
    """Whether the compiler targets vectors wide enough here for the micro-kernel to
    win (PACK_MIN_VECTOR_BYTES); never on a GPU."""
    return not device.is_gpu and device.vector_bytes >= PACK_MIN_VECTOR_BYTES


def packs(g: Graph, b: Operand, device: Device) -> str:
    """How B can meet the micro-kernel (``GemmShape.packed_b``), where the compiler
    targets vectors wide enough for it to win (:func:`micro_kernel_fits`): packed once
    where B is a constant serving every batch item (a weight), else packed by every
    run, one pack per distinct matrix (grouped-query attention's K and V, broadcast
    over the heads sharing them, once per key-value head) -- or "" (BLAS sgemm per
    tile) on narrower vectors and on a GPU. Whether an activation is packed is the
    caller's (``GemmLaunch.packs``: a long attention's K and V, or ``blas=0``)."""
    if not micro_kernel_fits(device):
        return ""
    if b.view.one_matrix:
        return PACK_ONCE if b.value in g.constants else PACK_PER_RUN
    return PACK_PER_RUN


def cpu_tiling(a: Operand, b: Operand, result: str, dest: str, units: int,
               whole_rows: bool = False, packed: str = "",
               lc: GemmLaunch = GemmLaunch()) -> GemmShape:
    """The problem as batched GEMMs, cut into tiles: rows up to ``CpuTiles.m``, and
    columns cut so the tile count is a multiple of the cores (no core idles in the
    last round) where that keeps tiles at least ``CpuTiles.align`` wide (PANEL when B
    is ``packed``). ``whole_rows`` (an epilogue reducing rows): every tile spans all
    columns (see the rule inside)."""
    tiles = CPU_TILES
    batch, m, n, k, a = problem(a, b)
    if whole_rows:
        # each tile reads all of B (K x N; sgemm packs it again), so as few tiles as
        # keep every core busy, capped so a tile of whole rows stays within 2 x
        # CpuTiles.m x CpuTiles.n elements (256 KB), and as many more as make the tile
        # count a multiple of the cores: 1278 rows of 256 in tiles of 256 were 5 tiles
        # on 2 cores, one core doing 3 (a GEMM + LayerNorm kernel of Wav2Vec2 took 1.35 ms where the
        # same GEMM without the LayerNorm, in 10 tiles, took 0.96)
        tile_m = rows_per_tile(batch, m, max(1, 2 * tiles.m * tiles.n // max(n, 1)), units)
        if lc.tile_n:
            raise FusionRefused("tile_n: this GEMM's epilogue reduces rows, so every tile "
                                "spans all columns; set tile_m")
        if lc.tile_m:
            tile_m = set_tile("tile_m", lc.tile_m, m, 1)
        return GemmShape(batch, m, n, k, a, b, tile_m, max(n, 1), result, dest,
                         packed_b=packed)
    # rows cut evenly (130 rows are two tiles of 65, not 128 and 2: a static schedule
    # would give one core nearly all the work)
    tile_m = max(1, -(-m // -(-m // tiles.m))) if m else 1
    col_tiles = for_cores(batch * -(-m // tile_m), max(1, -(-n // tiles.n)), units)
    tile_n = max(1, min(n, round_up(-(-n // col_tiles), PANEL if packed else tiles.align)))
    if lc.tile_m:
        tile_m = set_tile("tile_m", lc.tile_m, m, 1)
    if lc.tile_n:
        tile_n = set_tile("tile_n", lc.tile_n, n, PANEL if packed else 1)
    return GemmShape(batch, m, n, k, a, b, tile_m, tile_n, result, dest, packed_b=packed)


def rows_per_tile(batch: int, m: int, cap: int, units: int) -> int:
    """Rows per tile of tiles spanning every column: at most ``cap``, and as many tiles
    as make their count (over the batch) a multiple of the cores where there are rows
    enough, the rows shared evenly."""
    per_item = -(-m // min(m, cap)) if m else 1
    per_item = -(-(units * -(-(batch * per_item) // units)) // batch)
    return max(1, -(-m // min(per_item, max(m, 1))))


def for_cores(row_items: int, col_tiles: int, units: int) -> int:
    """At least ``col_tiles`` column tiles, more where that makes the tile count (row
    items x column tiles) a multiple of the cores, so no core idles in the last round."""
    want = units * -(-(row_items * col_tiles) // units)
    return max(col_tiles, -(-want // row_items))


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to
