"""A GPU's GEMM tiles: the thread-block tiles (:class:`~..gemm_shape.BlockTile`, frozen
configurations) a GPU's GEMM kernels multiply with, one table per operand type
(:func:`gpu_tiles`), the rule picking one by the product's shape (:func:`gpu_block`),
and what the cost model assumes they reach.

On a GPU the template takes one matmul with an elementwise epilogue and its prologue
views -- float32 on the CUDA cores or, with TF32 allowed, on tensor cores; bfloat16 and
float16 on tensor cores in their own type -- a thread block per tile of 128 x 128 (or
64 x 64) outputs, each thread's 8 x 8 (4 x 4) of them accumulated in registers and
finished there by the epilogue (codegen's wb_gemm_tile and wb_gemm_tile_tc), so the
product is never stored unless it is an output; and a fused attention whose softmax
has the online form (:mod:`.attention`). Other row epilogues (a GEMM + LayerNorm) and
convolutions stay library calls (cuBLAS; a convolution a batched matmul per filter
tap) and kernels of their own on a GPU so far.

    >>> gpu_block(GPU_GEMM_TILES, 1, 512, 768, 132).m       # 24 large tiles, 132 SMs
    64
"""
from __future__ import annotations

from dataclasses import replace

from ...device import Device
from ...dtypes import DType
from ...errors import FusionRefused
from ...ir import Graph
from ..gemm_shape import BlockTile, GemmShape, Operand
from .launch import GemmLaunch
from .operands import problem

# On a GPU a thread block computes each tile (codegen: wb_gemm_tile in the CUDA
# prelude), 256 threads each holding an 8 x 8 of a 128 x 128 tile in registers, or a
# 4 x 4 of a 64 x 64 one where the large tiles would leave SMs idle; A's and B's
# panels pass through shared memory GPU_GEMM_DEPTH deep. The rule takes one of those
# two; the tuner (measure.tune) also times the oblong 128 x 64 and 64 x 128 (8 x 4 and
# 4 x 8 a thread), which fill the SMs' last wave differently. float32 FMAs on the
# CUDA cores: float32 is the exact default, and cuBLAS runs float32 the same way (the
# H100 FFN GEMMs of issue 10 ran at cuBLAS's 42-45 TFLOP/s without TF32).
GPU_GEMM_DEPTH = 8
GPU_GEMM_TILES = {(128, 128): BlockTile(128, 128, GPU_GEMM_DEPTH, 8, 8),
                  (64, 64): BlockTile(64, 64, GPU_GEMM_DEPTH, 4, 4),
                  (128, 64): BlockTile(128, 64, GPU_GEMM_DEPTH, 8, 4),
                  (64, 128): BlockTile(64, 128, GPU_GEMM_DEPTH, 4, 8)}
# with matmul_precision "tf32" (Plan.tf32), and for bfloat16 whatever it says (its
# operands are exact in TF32: Device.on_tensor_cores), the same tiles are multiplied on tensor
# cores (BlockTile.tensor: WMMA m16n16k8 fragments, operands rounded to TF32), panels
# 8 deep, one fragment step between barriers (16 deep, the 128 x 128 tile's panel loads
# took ptxas past 128 registers: 292 bytes spilled for BERT's FFN; the second resident
# block overlaps the barriers)
GPU_TENSOR_DEPTH = 8
GPU_TENSOR_TILES = {mn: replace(t, depth=GPU_TENSOR_DEPTH, tensor=True)
                    for mn, t in GPU_GEMM_TILES.items()}
# bfloat16 and float16 matmuls keep their type on the tensor cores (WMMA m16n16k16,
# twice TF32's rate): the same tiles, panels of the half type 16 deep (one fragment
# step between barriers: the same bytes a panel as TF32's 8 deep; their loads unrolled
# 4 at a time, which kept the 128 x 128 tile at 117 registers where full unrolling
# spilled 112 bytes)
GPU_HALF_DEPTH = 16
GPU_HALF_TILES = {half: {mn: replace(t, depth=GPU_HALF_DEPTH, operands=half)
                         for mn, t in GPU_TENSOR_TILES.items()}
                  for half in (DType.bfloat16, DType.float16)}
# a tensor-core tile in 2 stages (BlockTile.stages) holds its next panels' elements in
# registers beside its accumulator fragments: at 128 x 128 that took ptxas past the 128
# registers two resident blocks leave (BERT's FFN spilled 64 bytes in TF32, 488 in
# bfloat16); 128 x 64 and smaller fit (at most 124). The CUDA cores' tiles fit at any size.
PIPELINED_TENSOR_MAX = 128 * 64
# blocks of it an SM holds at once: the compiler is asked to leave registers for two
# (ptxas: 128 a thread at 128 x 128, no spills; left to itself it took 150, one block
# an SM), so one block's panel loads overlap the other's arithmetic
GPU_GEMM_RESIDENT = 2
# what the cost model assumes the generated GEMM reaches, as a fraction of the float32
# peak cuBLAS is priced at: a register-blocked SIMT GEMM without cp.async pipelining
# (the classic 8 x 8-per-thread kernel) reaches about 70% of cuBLAS in published
# measurements; unmeasured here (no GPU yet), so fusing a GEMM with its epilogue
# wins only where the epilogue's saved round trip outweighs 30% of the product
GPU_GEMM_EFFICIENCY = 0.7
# the same for a tensor-core tile against cuBLAS in TF32: WMMA fragments loaded from
# shared memory without cp.async pipelining or swizzled layouts reach well under half
# of cuBLAS's tensor-core rate in published measurements; assumed, unmeasured
GPU_TENSOR_GEMM_EFFICIENCY = 0.4


def gpu_tiles(g: Graph, mm, device: Device, tf32: bool, kernel: str) -> dict:
    """The block tiles a GPU kernel (``kernel``, for the reason) multiplies ``mm``'s
    dtype with: on tensor cores where the device runs it there (Device.on_tensor_cores:
    GPU_TENSOR_TILES in TF32, GPU_HALF_TILES in a half type), float32 on the CUDA cores
    otherwise (GPU_GEMM_TILES); any other dtype is FusionRefused."""
    dtype = g.value(mm.inputs[0]).dtype
    if device.on_tensor_cores(dtype, tf32):
        return GPU_HALF_TILES[dtype] if dtype.is_half else GPU_TENSOR_TILES
    if dtype is DType.float32:
        return GPU_GEMM_TILES
    raise FusionRefused(f"{kernel} multiplies float32, and float16 or bfloat16 on tensor "
                        f"cores, which this GPU has not; {mm.id} (matmul, {dtype.value}) "
                        "stays a library call")


def gpu_block(tiles: dict, batch: int, m: int, n: int, units: int) -> BlockTile:
    """The rule's block tile of a ``batch x m x n`` product: 128 x 128 where there are
    enough of them to give every SM one, else 64 x 64."""
    big = tiles[(128, 128)]
    large = batch * -(-m // big.m) * -(-n // big.n) >= units
    return big if large else tiles[(64, 64)]


def gpu_tiling(g: Graph, mm, a: Operand, b: Operand, result: str, dest: str,
               device: Device, whole_rows: bool, lc: GemmLaunch, tf32: bool) -> GemmShape:
    """A GPU GEMM's tiles: one thread block per tile (:func:`gpu_tiles`, the rule's by
    :func:`gpu_block`); FusionRefused for what the GPU kernel does not do yet (an
    epilogue reducing rows, a dtype it has no tiles for, ``blas``). ``tile_m`` and
    ``tile_n`` set together pick one of the block tiles."""
    if whole_rows:
        raise FusionRefused(f"{mm.id} (matmul) with an epilogue reducing rows: on a GPU the "
                            "GEMM kernel takes an elementwise epilogue only so far, so the "
                            "reduction stays a kernel of its own")
    tiles = gpu_tiles(g, mm, device, tf32, "the GPU GEMM kernel")
    if lc.blas != -1:
        raise FusionRefused("blas applies to the CPU's GEMM kernel (sgemm per tile or the "
                            "micro-kernel); a GPU tile is the generated block GEMM")
    batch, m, n, k, a = problem(a, b)
    if lc.tile_m or lc.tile_n:
        block = tiles.get((lc.tile_m, lc.tile_n))
        if block is None:
            raise FusionRefused(f"tile_m={lc.tile_m}, tile_n={lc.tile_n}: a GPU GEMM tile is "
                                + " or ".join(f"{x} x {y}" for x, y in tiles)
                                + " (set both)")
    else:
        block = gpu_block(tiles, batch, m, n, device.units)
    block = staged(block, lc)
    return GemmShape(batch, m, n, k, a, b, block.m, block.n, result, dest, block=block)


def staged(block: BlockTile, lc: GemmLaunch) -> BlockTile:
    """``block`` in the stages ``lc`` sets (the rule: 1), or FusionRefused where 2 stages
    would spill (PIPELINED_TENSOR_MAX)."""
    if lc.stages and lc.stages != block.stages:
        block = replace(block, stages=lc.stages)
    if block.stages == 2 and block.tensor and block.m * block.n > PIPELINED_TENSOR_MAX:
        raise FusionRefused(f"stages=2 on a {block.m} x {block.n} tensor-core tile: its next "
                            "panels in registers beside the accumulator fragments would "
                            "spill; pipeline a 128 x 64 or 64 x 128 tile")
    return block
