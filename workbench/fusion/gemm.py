"""The ``gemm`` template's legality and tiling: a matmul (or a convolution) with its
epilogue as one kernel, or why not.

A group fits when it holds exactly one float32 or bfloat16 ``matmul`` (``GEMM_DTYPES``;
on a GPU float16 too)
whose operands are read from memory -- directly, or through layout ops in the kernel
(reshape, squeeze, unsqueeze, transpose, expand, slice, split: ``prologue`` views) that
make the operand a strided BLAS matrix of a value in memory (``operand``; batch dims
broadcast by NumPy's rule, A's batch folded into the rows where B has none and A's rows
run on through it) -- and otherwise an epilogue reading the matmul's result directly or
through each other:

- elementwise ops at the matmul's output rows (its shape, or a view of it keeping the
  rows: ``same_rows``), their other operands broadcast onto that shape by NumPy's rule
  (a bias ``[N]``, a residual ``[.., M, N]``, scalars). Every epilogue op is computable
  at one output element from that element of the product;
- or a row_reduce group over the product reducing its last axis (a LayerNorm, a
  softmax: ``_row_epilogue``), reading the product only in its reductions or
  elementwise where it is; the tiles are then whole rows;
- and after such a row epilogue, a second matmul taking its result as the left operand
  (attention: ``_attention``), its output written through the transposes and reshapes
  after it (``_result_views``).

A convolution is a GEMM too (``_conv``: implicit im2col; a grouped or depthwise one a
batch of them, one per batch item and group), with an elementwise epilogue at its
output's shape: each tile's patches gathered straight into the micro-kernel's panels
(``PACK_TILE``), or row-major for sgemm; a 1 x 1 one's patches are its input, read in
place (``Im2col.pointwise``).

The kernel writes the product of each tile into one output of the group (``dest``:
the matmul's result itself when it is read outside the kernel, else an epilogue output,
a float32 one first) -- or, for attention and where ``dest`` is not float32, into a
float32 tile of the thread's own -- and finishes it there while the tile is in cache,
each element read before the same element is written, by the same thread.

Only the CPU backend runs it so far (inside the kernel's OpenMP loop, each tile's
product by the generated micro-kernel against B packed -- once where B is a constant,
by every run before the tiles for a fused attention's K and V over long rows and a
1 x 1 convolution's input, by each tile for a convolution's patches -- where
the vectors are wide enough (``packs``, ``GemmLaunch.packs``), else by a
single-threaded BLAS sgemm). On a GPU (``_gpu_tiling``) the template takes one matmul
with an elementwise epilogue and its prologue views -- float32 on the CUDA cores or, with
TF32 allowed, on tensor cores; bfloat16 and float16 on tensor cores in their own type
(``_gpu_tiles``) -- a thread block per tile of 128 x 128 (or 64 x 64) outputs, each
thread's 8 x 8 (4 x 4) of them accumulated in registers and finished there by the
epilogue (``BlockTile``; codegen's wb_gemm_tile and wb_gemm_tile_tc), so the product is
never stored unless it is an output; and a fused attention whose softmax has the online
form (``_gpu_attention_scores``: a block of 64 queries takes 64 keys at a time,
FlashAttention's recurrence). Other row epilogues (a GEMM + LayerNorm) and
convolutions stay cuBLAS/cuDNN calls and kernels of their own on a GPU so far.

    >>> analyze_gemm(g, ("n0", "n1", "n2"), cpu)      # doctest: +SKIP
    Schedule(kind=<ScheduleKind.gemm: 'gemm'>, ...)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from ..errors import FusionRefused
from ..dtypes import DType
from ..ir import Graph
from ..ops import Kind, get_op
from ..ops.conv import CONVS, conv_attrs
from ..ops.layout import transpose_perm
from ..ops.reduce import reduce_axes
from ..ops.strided import MatrixView, Strided
from ..device import Device
from .key_limit import find_key_limit
from .mapping import ScheduleKind
from .gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES, PACK_FILTERS,
                         PACK_ONCE, PACK_PER_RUN, PACK_TILE, BlockTile, GemmShape, Im2col,
                         OnlineSoftmax, Operand, SecondGemm)
from .schedule import GroupIO, Schedule, group_io

# A tile's product should stay in the core's cache while the epilogue reads it: 128 x
# 256 float32 is 128 KB. Tiles also bound what sgemm packs per call (A's tile rows and
# B's tile columns), so they are not much smaller either. Measured on 2 cores (one-
# thread OpenBLAS sgemm per tile, BERT/GPT-2 small shapes, K = 256 or 1024): 128 x 256
# tiles ran 178-202 GFLOP/s where 256 x 256 (and 256 x 128) ran 157-200.
TILE_M = 128
TILE_N = 256
TILE_ALIGN = 16          # tile widths in whole cache lines of float32 (64 B)
# columns per panel of a packed constant B (codegen/microkernel.py); a packed tile
# starts on a panel, so its width is a multiple of it. 64 is a multiple of every
# register block the micro-kernel uses.
PANEL = 64
# the micro-kernel against a packed B outran OpenBLAS's sgemm per tile (which packs B
# again on every call) where the compiler targets 256-bit vectors or wider; with
# 128-bit ones it ran at 36 GFLOP/s against 90, so those machines call sgemm
PACK_MIN_VECTOR_BYTES = 32
# a convolution's gathered patches per tile (each thread's own buffer): 128K float32,
# 512 KB, within a core's L2
IM2COL_TILE = 128 * 1024
# the most floats a thread's own buffers of one tile may hold (on its stack: a
# convolution's patches, a fused attention's scores and output rows), 2 MB
THREAD_SCRATCH = 4 * IM2COL_TILE
# the deepest filters (weights each: channels x taps) whose products the rule gives the
# micro-kernel rather than sgemm per tile. Measured kernel by kernel on 2 cores (Zen 4,
# OpenBLAS 0.3.30 SkylakeX; benchmarks/results/conv-gemm-2026-11-24.md): below 256
# weights the micro-kernel won or tied (ResNet-50's 1 x 1 convolutions of 64 channels
# 174 GFLOP/s against 139, its 7 x 7 stem 148 against 143, ViT's patches 101 against
# 93, Wav2Vec2's front end 43-102 against 34-72); from 256 sgemm won by 5-25% on most
# (ResNet-50's 3 x 3 and 1 x 1 convolutions of its later stages: 113-142 GFLOP/s
# against 135-174), the whole of ResNet-50's convolutions 63.6 ms against 57.5
CONV_MICRO_DEPTH = 256
# ...except a 1 x 1 convolution with at most this many filters per group, or over
# more than FEW_POSITIONS and fewer than this many positions: its input, read in place
# by sgemm, would be packed by every run for the micro-kernel, an extra pass that few
# filters do not repay, into panels of 64 positions that 49 fill three quarters of
# (benchmarks/results/conv-gemm-2026-11-24*.md: ResNet-50's 64-filter 1 x 1 0.221 ms
# by sgemm against 0.241; MobileNetV2's 1 x 1s of 8-32 filters 0.007-0.016 against
# 0.011-0.019. Kernels alone, 2026-11-25: MobileNetV3's 72, 120 and 184 filters 0.066,
# 0.046 and 0.037 ms by sgemm against 0.089, 0.072 and 0.041, its 960 over 7 x 7
# positions 0.074 against 0.108; 672 filters tied, ResNet-50's 256 and 512 were 7% and
# 4% faster on the micro-kernel. Whole, in one process: MobileNetV3 5.27 -> 4.98 ms,
# EfficientNet-B0 10.78 -> 10.35, ShuffleNetV2 4.09 -> 3.86, SqueezeNet even)
CONV_POINTWISE_MICRO_FILTERS = 192
CONV_POINTWISE_MICRO_POSITIONS = 64
# a 1 x 1 convolution the rule gives the micro-kernel (more than
# CONV_POINTWISE_MICRO_FILTERS filters, fewer than CONV_MICRO_DEPTH weights each) over
# at most this many positions (one vector's lanes on AVX-512) is multiplied transposed
# (PACK_FILTERS): the filters in the lanes, packed once. Positions in the lanes filled
# a quarter of each vector over 4 of them, and the filters' sliver was packed again by
# every tile (MobileNetV2's last blocks, 2 x 2 and 4 x 4 positions: 1280 filters 72 ->
# 22 us; fewer filters measured faster by sgemm, deeper ones no faster transposed)
FEW_POSITIONS = 16
# A 2-D depthwise convolution (float32, on the micro-kernel's vectors) is computed with
# an image's channels as the GEMM's rows, each tile whole planes, one of two ways:
# - where its taps meet at most DEPTHWISE_LANES_SPAN input positions per plane (its
#   zero border included), the channels in the vectors' lanes (DEPTHWISE_LANES): a
#   plane per channel walks loops a few positions long;
# - else, up to DEPTHWISE_PLANE_SPAN positions (a 126 x 126 plane, 64 KiB of a
#   thread's stack), a padded plane at a time, each output's taps summed in a register
#   (DEPTHWISE_PLANES).
# Measured on MobileNetV2 (small, one process, alternating): against the tap-by-tap
# loops (lower._direct, which add each tap into the tile in memory) 4 x 4 planes 24 ->
# 11 us in the lanes, 16 x 16 35 -> 10 and 32 x 32 25 -> 12 as planes, strided 41 ->
# 22; lanes against planes: 2 x 2 (16 positions with the border) 7.1 against 13.5 us,
# 4 x 4 (36) 6.4 against 8.5, 8 x 8 (100) 11.4 against 7.8
DEPTHWISE_LANES_SPAN = 64
DEPTHWISE_PLANE_SPAN = 16384
# a plane is computed through its stride phases (codegen/planes.py), a copy loop each:
# at most this many (strides of 4 x 4), else tap by tap (a depthwise convolution) or
# the row kernel (a pooling)
PLANE_PHASES_MAX = 16
# a depthwise convolution's planes (and a pooling's, codegen lower._pool_planes) dealt
# out in PLANE_TILES tiles a core (not a tile a plane), so the border of a tile's
# buffer, written once per tile, serves many planes.
# Measured one call at a time against a tile a plane: 672 channels of 14 x 14, 5 x 5
# of stride 2, 0.067 -> 0.058 ms; 96 of 112 x 112, 3 x 3 of stride 2, 0.171 -> 0.154;
# 1152 of 7 x 7, 5 x 5, even within the noise (0.080 against 0.078-0.087)
PLANE_TILES = 8
LANES_ALIGN = 16      # channels per tile a multiple of the widest vector's lanes
# A 1-D or 2-D float32 convolution of one group with constant filters of at most
# CONV_DIRECT_WEIGHTS weights in all, not a 1 x 1 read in place (but see
# CONV_POINTWISE_DIRECT_DEPTH), is computed directly
# (CONV_DIRECT, codegen wb_conv_lanes): each tap's input a broadcast operand of
# multiply-adds into vectors of filters, no patches gathered; tiles whole output rows
# of one image, their input rows copied with their zero border into a thread's buffer
# of at most CONV_DIRECT_SCRATCH floats. Gathering the patches wrote each input element
# once per tap meeting it before the product read it (benchmarks/results/
# conv-gemm-2026-11-24-direct*.md, kernels timed alternating in one process: the small
# ResNet's 7 x 7 stem 0.147 -> 0.069 ms, its 3 x 3s 0.041 -> 0.025 and 0.051 -> 0.021;
# ResNet-50's 3 x 3s of 64 to 512 filters 1.71 -> 1.34, 1.93 -> 1.45, 2.04 -> 1.56 and
# 2.40 -> 1.74 ms against the micro-kernel, all faster than sgemm too). Its filters,
# a pair of vectors at a time, are read from the cache every block of a tile shares;
# up to 16 MiB of them (ResNet-50's last stage: 2.4 million weights) measured faster,
# when each block streamed all the filters they lost there (2.70 against 2.14 ms). It
# also stores each block transposed, element by element: a cost per output that the
# depth amortizes, where the gather's per input element is amortized over the
# filters. So it takes filters at least 1 / CONV_DIRECT_DEPTH_RATIO as deep as they are
# many: Whisper's first convolution (256 filters of 48 weights) ran 0.153 ms against
# 0.137, Wav2Vec2's (32 of 10) 0.104 against 0.037; MobileNetV2's stem (16 of 27) 0.032
# against 0.046; at the ratio, ResNet-50's strided 1 x 1s of 2 weights per filter
# were 11% slower to 9% faster
CONV_DIRECT_WEIGHTS = 1 << 22
CONV_DIRECT_DEPTH_RATIO = 2
# ...and a 1 x 1 convolution read in place (the micro-kernel's or sgemm's otherwise)
# of filters at least CONV_POINTWISE_DIRECT_DEPTH deep, over more than FEW_POSITIONS
# positions, where they are at least as deep as they are many, or where the positions
# are fewer than CONV_POINTWISE_MICRO_POSITIONS (a GEMM tile of 49 columns fills 49 of a
# panel's 64; the direct blocks of 7 positions fill a row of 7 whole). Kernels alone,
# the three ways alternated in one process (2 cores, Zen 4): ResNet-50's 1024 -> 256
# and 1024 -> 512 over 14 x 14 216 and 218 GFLOP/s against 196-197 (the rule's sgemm),
# 512 -> 128 over 28 x 28 210 against 180, 2048 -> 512 and 512 -> 2048 over 7 x 7 217
# and 213 against 170-172; GoogLeNet's 832 -> 384 over 7 x 7 207 against 149;
# EfficientNet-B0's 1152 -> 320 206 against 142, 672 -> 112 177 against 160;
# MobileNetV3's 960 -> 160 175 against 165; 256 deep over 56 x 56 even. Shallower, or
# more filters than weights each, it lost: 256 -> 1024 over 14 x 14 115 against 181,
# 128 -> 512 over 28 x 28 173 against 201, 64 -> 64 over 56 x 56 150 against 204,
# MobileNetV3's 160 -> 960 over 7 x 7 193 against 208. So did filters that leave more
# than an eighth of the last pair of vectors' lanes idle: SqueezeNet's 384 -> 48 and
# 256 -> 48 over 27 x 27 130-137 against 166-177 (EfficientNet's 112 filters, an
# eighth idle, still won)
CONV_POINTWISE_DIRECT_DEPTH = 256
CONV_DIRECT_SCRATCH = IM2COL_TILE
CONV_DIRECT_ALIGN = 2 * LANES_ALIGN   # filters per tile: whole pairs of vectors
CONV_DIRECT_BLOCKS = (6, 7, 8)   # positions per block (wb_conv_cr: 6 on 16 registers,
#                                  7 or 8 on 32)
# what a GEMM kernel reads and writes. A bfloat16 matmul is multiplied by the
# micro-kernel two rows of k at a time (A's sliver and B packed in pairs,
# codegen/microkernel.py), accumulated in float32 and rounded once where the epilogue
# stores: its B is always packed (by every run where it is an activation), since sgemm
# takes float32 only. A bfloat16 convolution is multiplied in pairs too: its patches
# gathered into panels two rows to a word (a 1 x 1 one's input packed so, in place);
# for sgemm (blas=1, narrow vectors) its filters are widened into a float32 copy on
# its first run (kir.WidenOnce), and its patches as they are gathered.
GEMM_DTYPES = (DType.float32, DType.bfloat16)
# (a GPU's GEMM kernel takes matmuls only: _gpu_tiling)
GPU_REFUSAL = "a convolution's GEMM kernel runs on the CPU backend only so far"

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
# a GPU's fused attention: a block of 64 queries takes 64 keys at a time (the scores'
# block in registers, 4 x 4 a thread; the probabilities through 17 KB of shared memory
# to the second product), its output rows up to 128 values (8 a thread) in registers
GPU_ATTENTION_SHAPE = (64, 64)      # (its tile in GPU_GEMM_TILES or GPU_TENSOR_TILES)
GPU_ATTENTION_MAX_VALUES = 128
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


@dataclass(frozen=True)
class GemmLaunch:
    """What a user or the tuner may set on a GEMM kernel in place of the rule's choice
    (``Plan.set_launch``, ``Session.tune``; 0 or -1 leaves it to the rule):

    - ``tile_m`` / ``tile_n``: rows and columns per output tile (a packed B's tiles
      start on a panel, so ``tile_n`` is then a multiple of PANEL; tiles of whole rows,
      an epilogue reducing rows, take no ``tile_n``; a convolution's rows are its
      filters, and each of its tiles gathers the patches of its columns);
    - ``blas``: 1 multiplies by sgemm per tile where the rule packs B for the
      micro-kernel (a convolution's patches: gathered row-major for it), 0 keeps the
      micro-kernel (where it runs: ``packs``);
    - ``online``: a fused attention's softmax a block of keys at a time (1) or over
      whole rows of scores (0), where its epilogue has the online form;
    - ``stages``: a GPU tile's panels in 1 stage (the rule) or 2 (the next panels'
      elements loaded into registers while the current ones are multiplied:
      ``BlockTile.stages``);
    - ``skip``: a fused attention under a causal mask skips the blocks of keys past
      each tile's diagonal (1, the rule, where its mask has a key limit:
      fusion/key_limit.py) or takes every block (0: the same kernel otherwise, for the
      tuner -- on a GPU the run-time checks' reads may cost what the skip saves -- and
      for comparing).

    ``blas``, ``online`` and ``skip`` are 0 or 1; any one ``-1`` is the rule's.
    """
    tile_m: int = 0
    tile_n: int = 0
    blas: int = -1
    online: int = -1
    stages: int = 0
    skip: int = -1

    @staticmethod
    def parse(launch) -> "GemmLaunch":
        """From (name, value) pairs; FusionRefused naming an unknown parameter or a
        value out of range."""
        launch = dict(launch)
        bad = [k for k in launch if k not in GEMM_LAUNCH]
        if bad:
            raise FusionRefused(f"a GEMM kernel has no launch parameter {bad[0]!r}; it takes "
                                f"{', '.join(GEMM_LAUNCH)}")
        for k, v in launch.items():
            allowed = {"blas": (0, 1), "online": (0, 1), "stages": (1, 2),
                       "skip": (0, 1)}.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or (
                    v not in allowed if allowed else v < 1):
                raise FusionRefused(f"{k}={v!r} is out of range for a GEMM kernel "
                                    + (f"({allowed[0]} or {allowed[1]})" if allowed
                                       else "(a positive count)"))
        return GemmLaunch(**launch)

    def packs(self, can: str, what: str, per_run: bool = False) -> str:
        """How B (``what``) is multiplied, given how it can be packed (``can``, see
        ``packs``): the rule packs a constant once, and an activation by every run
        only where the caller asks (``per_run``: a fused attention's K and V from
        ATTENTION_PACK_MIN_KEYS keys); ``blas`` overrides either way."""
        if self.blas == 1:
            return ""
        if self.blas == 0:
            if not can:
                raise FusionRefused(f"blas=0: {what} is multiplied by sgemm here (the "
                                    "micro-kernel needs wide vectors and B packed per batch "
                                    "item); there is no micro-kernel to choose")
            return can
        return can if can == PACK_ONCE or per_run else ""


# the launch parameters of a GEMM kernel (GemmLaunch's fields)
GEMM_LAUNCH = ("tile_m", "tile_n", "blas", "online", "stages", "skip")


# analyses the epilogue's nodes as a row_reduce group (analysis.analyze, passed in so
# that this module needs nothing from it)
RowAnalysis = Callable[[tuple], Schedule]


def analyze_gemm(g: Graph, ns, io: GroupIO, device: Device,
                 rows: RowAnalysis | None = None, launch=(), *,
                 per_run: bool = False, tf32: bool = False) -> Schedule:
    """The gemm schedule of a group holding a matmul (see the module docstring), or
    FusionRefused naming the op and the rule it breaks. ``rows`` analyses an epilogue
    that reduces rows; without it such an epilogue is refused. ``launch``: the
    parameters set in place of the rule's (see :class:`GemmLaunch`). ``per_run``: an
    activation B is packed by every run (a long fused attention's K, see
    ``_attention``). ``tf32``: the plan lets float32 products round their operands to
    TF32 (``Plan.tf32``), which a GPU multiplies on tensor cores."""
    lc = launch if isinstance(launch, GemmLaunch) else GemmLaunch.parse(launch)
    if lc.stages and not device.is_gpu:
        raise FusionRefused("stages applies to a GPU's GEMM tile (its panels through shared "
                            "memory); the CPU's GEMM kernel multiplies each tile from cache")
    libs = [n for n in ns if get_op(n.op).kind is Kind.opaque]
    empty = next((n for n in libs for v in (*n.inputs, *n.outputs)
                  if g.value(v).numel == 0), None)
    if empty is not None:   # (found by the fuzzer: tiles of an empty batch divided by 0)
        raise FusionRefused(f"{empty.id} ({empty.op}) has an empty operand or result: "
                            "there are no tiles to run, so it stays a library call")
    if len(libs) == 1 and libs[0].op in CONVS:
        return _conv(g, ns, io, device, libs[0], lc)
    mms = [n for n in libs if n.op == "matmul"]
    other = next((n for n in libs if n.op != "matmul"), None)
    if other is None and len(mms) == 2:
        return _attention(g, ns, io, device, rows, mms, lc, tf32)
    if lc.online != -1 or lc.skip != -1:
        raise FusionRefused(f"{'online' if lc.online != -1 else 'skip'} applies to a fused "
                            "attention (two matmuls with a softmax between them); this GEMM "
                            "kernel has one product")
    if other is not None or len(mms) != 1:
        x = other or mms[1]
        raise FusionRefused(f"{x.id} ({x.op}) is a library call and cannot share a kernel "
                            "with other ops (only one matmul with its elementwise epilogue "
                            "can)")
    mm = mms[0]
    result = mm.outputs[0]
    out = g.value(result)
    if len(out.shape) < 2 or any(len(g.value(i).shape) < 2 for i in mm.inputs):
        raise FusionRefused(f"{mm.id} (matmul) of a vector (rank-1 operand) stays a library "
                            "call; the GEMM kernel takes matrices")
    if out.dtype not in GEMM_DTYPES and not device.on_tensor_cores(out.dtype, tf32):
        raise FusionRefused(f"{mm.id} (matmul) is {out.dtype.value}: the fused GEMM kernel "
                            "takes float32 and bfloat16 (and float16 on a GPU's tensor "
                            "cores) so far, so it stays a library call")
    half = out.dtype is not DType.float32
    members = {n.id for n in ns}
    views = prologue(g, mm, members)
    through = {v.id for v in views} | {mm.id}
    _not_stored(views, io)
    for v in views:
        c = next((c for o in v.outputs for c in g.consumers[o]
                  if c.id in members and c.id not in through), None)
        if c is not None:
            raise FusionRefused(f"{v.id} ({v.op}) gives the matmul's operand and is read by "
                                f"{c.id} ({c.op}) too; a GEMM kernel reads the operand in "
                                "place and computes nothing else from it")
    ns = [n for n in ns if n not in views]
    shape = out.shape
    row = None
    if any(get_op(n.op).kind is Kind.reduce for n in ns):
        row = _row_epilogue(g, ns, mm, shape, rows)
    else:
        _check_epilogue(g, ns, mm, shape)
    dest = _dest(g, result, io, half, lambda s: same_rows(s, shape) if row is None
                 else s == shape)
    if dest is None:
        raise FusionRefused(f"{mm.id} (matmul): no float32 output of the product's shape to "
                            "write the product into; its epilogue ends in another dtype "
                            "or shape")
    a, b = (operand(g, mm, i, members, shape) for i in mm.inputs)
    if device.is_gpu:
        tiling = _gpu_tiling(g, mm, a, b, result, dest, device, row is not None, lc, tf32)
        return Schedule(ScheduleKind.gemm, elements=out.numel,
                        gemm=replace(tiling, epilogue_ops=len(ns) - 1,
                                     views=tuple(v.id for v in views)))
    packed = lc.packs(packs(g, b, device), f"{mm.id}'s right operand", per_run or half)
    if half and not packed:
        raise FusionRefused(f"{mm.id} (matmul) is {out.dtype.value}: only the micro-kernel "
                            "multiplies it (widening as it packs; sgemm reads float32), and "
                            + ("blas=1 asks for sgemm" if lc.blas == 1 else
                               "it needs 256-bit vectors and B one matrix per batch item")
                            + ", so it stays a library call")
    tiling = _tiling(shape, a, b, result, dest, device.units, row is not None, packed, lc)
    return Schedule(ScheduleKind.gemm, elements=out.numel,
                    gemm=replace(tiling, epilogue_ops=len(ns) - 1,
                                 views=tuple(v.id for v in views)), epilogue=row)


def prologue(g: Graph, mm, members) -> list:
    """The group's layout ops computing the matmul's operands (prologue views, read
    through in place): every member on the path from an operand back to a value in
    memory. Anything else computing an operand inside the kernel is refused; whether
    the views make a matrix BLAS reads is :func:`operand`'s question."""
    views = []
    for i in mm.inputs:
        for p in _chain(g, i, members):
            if p not in views:
                views.append(p)
    return views


def operand(g: Graph, mm, i: str, members, out_shape) -> Operand:
    """Operand ``i`` of the matmul as read in place: the value in memory its prologue
    views start from and the batched matrix they make of it, broadcast to the
    product's batch dims (a B without batch dims serves every batch); FusionRefused
    when the views are no strided matrix BLAS can read (a reshape merging axes a
    transpose separated, rows and columns both strided)."""
    chain = _chain(g, i, members)
    src = chain[-1].inputs[0] if chain else i
    layout = Strided.contiguous(g.value(src).shape)
    made = [i] + [p.inputs[0] for p in chain[:-1]]       # what each view gives
    for p, v in reversed(list(zip(chain, made))):
        layout = get_op(p.op).view(layout, p.attr_map, p.outputs.index(v),
                                   g.value(v).shape)
        if layout is None:
            raise FusionRefused(f"{p.id} ({p.op}) makes the matmul's operand {i} a layout "
                                "that is no strided view of its input (a reshape of axes "
                                "a transpose or slice has separated); it needs a copy "
                                "kernel")
    shape = g.value(i).shape
    view = layout.broadcast(tuple(out_shape[:-2]) + tuple(shape[-2:])).matrix()
    if view is None:
        raise FusionRefused(f"the matmul's operand {i} is neither row- nor column-major in "
                            f"{src} (each row and each column at one stride, one of them "
                            "unit), so BLAS cannot read it in place")
    return Operand(src, view)


def view_chain(g: Graph, i: str, within=None) -> list:
    """The layout ops with a view rule computing value ``i`` (those in ``within``, when
    given), nearest first, back to the first value made otherwise."""
    chain = []
    p = g.producer.get(i)
    while p is not None and (within is None or p.id in within) and get_op(p.op).view:
        chain.append(p)
        p = g.producer.get(p.inputs[0])
    return chain


def _chain(g: Graph, i: str, members) -> list:
    """The members computing value ``i`` through views, back to a value made outside
    them; FusionRefused when another member computes it."""
    chain = view_chain(g, i, members)
    p = g.producer.get(chain[-1].inputs[0] if chain else i)
    if p is not None and p.id in members:
        raise FusionRefused(f"{p.id} ({p.op}) computes the matmul's operand {i} inside "
                            "the kernel; a GEMM kernel reads its operands from memory "
                            "(through reshapes, transposes, slices and splits only)")
    return chain


def _not_stored(views, io: GroupIO) -> None:
    """Refuse views whose values are read outside the kernel: it reads them in place
    and never stores them."""
    for v in views:
        if any(o in io.outputs for o in v.outputs):
            raise FusionRefused(f"{v.id} ({v.op}) is read outside the kernel too; a GEMM "
                                "kernel reads the operand in place and does not store it")


# layout ops that keep every element where it is in row-major memory: in an epilogue
# they only regroup the leading axes (the last one stays the product's columns)
VIEWS = ("reshape", "squeeze", "unsqueeze")


def same_rows(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes hold the same elements in the same rows: equal size and the
    same last axis (so element ``row * N + col`` is the same in both)."""
    return math.prod(a) == math.prod(b) and len(a) >= 1 and len(b) >= 1 and a[-1] == b[-1]


def _check_epilogue(g: Graph, ns, mm, shape, same=None) -> None:
    """Every op but the matmul is elementwise, or a view regrouping the leading axes,
    at the matmul's output rows (see ``same_rows``), and reads its result (directly
    or through another epilogue op)."""
    fed = {mm.outputs[0]}
    for n in ns:
        if n is mm:
            continue
        op = get_op(n.op)
        if op.kind is not Kind.elementwise and n.op not in VIEWS:
            raise FusionRefused(f"{n.id} ({n.op}) is not elementwise; a GEMM epilogue holds "
                                "elementwise ops at the matmul's output shape (and "
                                "reshapes that keep its rows)")
        for o in n.outputs:
            if not (same or same_rows)(g.value(o).shape, shape):
                raise FusionRefused(f"{n.id} ({n.op}) output {list(g.value(o).shape)} is not "
                                    f"the matmul's output shape {list(shape)} or a reshape "
                                    "of it keeping its rows; a GEMM epilogue computes one "
                                    "value per product element")
        if n.op in VIEWS and n.inputs[0] not in fed:
            raise FusionRefused(f"{n.id} ({n.op}) reshapes a value other than the product "
                                "or an epilogue result")
        if not any(i in fed for i in n.inputs):
            raise FusionRefused(f"{n.id} ({n.op}) does not read the matmul's result; a GEMM "
                                "epilogue holds only ops that consume it")
        fed.update(n.outputs)


def _dest(g: Graph, result: str, io: GroupIO, half: bool, fits) -> str | None:
    """The output the product is written into (``GemmShape.dest``): the result itself
    when it is read outside the kernel, else an output whose shape ``fits`` the
    product's -- a float32 one, finished in place, first; for a bfloat16 product any
    such output, which the kernel writes from a float32 tile of each thread's
    (codegen/lower.py) -- or None."""
    if result in io.outputs:
        return result
    outs = [o for o in io.outputs if fits(g.value(o).shape)]
    return next((o for o in outs if g.value(o).dtype is DType.float32),
                next(iter(outs), None) if half else None)


def _row_epilogue(g: Graph, ns, mm, shape, rows: RowAnalysis | None) -> Schedule:
    """The row_reduce schedule of an epilogue that reduces the product's rows: it must
    reduce over the last axis of the product's shape (a tile of whole rows holds every
    column it needs), and read the product only in its reductions or elementwise at
    that shape (each element of the product is read before the same element of the
    output is written, by the same thread, so the output may overwrite it in place)."""
    if rows is None:
        raise FusionRefused(f"{mm.id} (matmul): an epilogue reducing rows needs the row "
                            "analysis")
    for n in ns:
        if n is mm or mm.outputs[0] not in n.inputs:
            continue
        kind = get_op(n.op).kind
        if kind is not Kind.reduce and (kind is not Kind.elementwise or any(
                g.value(o).shape != shape for o in n.outputs)):
            raise FusionRefused(f"{n.id} ({n.op}) reads the matmul's result other than "
                                "elementwise at its shape or in a reduction; a GEMM "
                                "epilogue reads each product element where it is")
    rest = tuple(n.id for n in ns if n is not mm)
    sched = rows(rest)
    last = (len(shape) - 1,)
    if (sched.kind is not ScheduleKind.row_reduce or sched.domain != tuple(shape)
            or sched.reduce_axes != last):
        raise FusionRefused(f"the epilogue of {mm.id} (matmul) reduces "
                            f"{list(sched.domain)} over {list(sched.reduce_axes)}; a GEMM "
                            f"epilogue reduces the product {list(shape)} over its last axis")
    return sched


def _attention(g: Graph, ns, io: GroupIO, device: Device, rows: RowAnalysis | None,
               mms, lc: GemmLaunch = GemmLaunch(), tf32: bool = False) -> Schedule:
    """Two matmuls: the first with an epilogue reducing rows, the second reading that
    epilogue's result (``softmax(Q Kᵀ) V``) as its left operand, which no one outside
    the kernel reads: the first's gemm schedule with ``then``, or FusionRefused."""
    members = {n.id for n in ns}

    def computed(m) -> bool:       # the left operand is made in the kernel, not a view
        p = g.producer.get(m.inputs[0])
        return p is not None and p.id in members and get_op(p.op).view is None

    inside = [m for m in mms if computed(m)]
    if len(inside) != 1:
        raise FusionRefused(f"{mms[1].id} (matmul) is a second library call in the kernel; "
                            "two matmuls share one only as attention (the second reading "
                            "the first's row epilogue)")
    mm2 = inside[0]
    p, v = mm2.inputs
    try:
        v_views = _chain(g, v, members)
    except FusionRefused:
        raise FusionRefused(f"{mm2.id} (matmul): its right operand {v} is computed inside "
                            "the kernel; a fused attention reads V from memory (through "
                            "views only)") from None
    if p in io.outputs:
        raise FusionRefused(f"{mm2.id} (matmul): {p} is read outside the kernel too; a "
                            "fused attention keeps the probabilities in the tile")
    _not_stored(v_views, io)
    # the first product's kernel: all but the second matmul and V's own views (a split
    # giving Q, K and V is the first's view too); what only V's views read from it is
    # read in the kernel, not written out
    mm1 = next(m for m in mms if m is not mm2)
    own = [x for x in v_views if x not in prologue(g, mm1, members)]
    after = _result_views(g, mm2, members, io)
    first = tuple(n for n in ns if n is not mm2 and n not in own and n not in after)
    io1 = group_io(g, tuple(n.id for n in first))
    mine = {x.id for x in own}
    io1 = replace(io1, outputs=tuple(o for o in io1.outputs if o in g.outputs or any(
        c.id not in members or (c.id not in mine and c is not mm2) for c in g.consumers[o])
        or o == p))
    # K and V packed by every run for the micro-kernel where the rows are long (each
    # pack then serves a head's many row tiles; the online softmax needs it), else
    # multiplied by sgemm per tile. Side by side in the zoo's models (2 cores, small
    # size), the fused attention kernel: 65 keys (ViT) 0.177 ms packed, 0.115 by sgemm
    # (K's second panel held one key); 128 keys 2-28% faster by sgemm (BERT, GPT-2,
    # Whisper, LLaMA); 639 keys (Wav2Vec2) 6.81 packed, 7.3 by sgemm
    keys = g.value(mm1.outputs[0]).shape[-1]
    half = g.value(mm2.outputs[0]).dtype is not DType.float32   # (packed: see GEMM_DTYPES)
    per_run = lc.online == 1 or keys >= ATTENTION_PACK_MIN_KEYS or half
    if device.is_gpu:
        sub = _gpu_attention_scores(g, first, mm1, mm2, p, lc, device, tf32)
    else:
        # (the first product's tiles are set below, once the softmax's form is known)
        sub = analyze_gemm(g, first, io1, device, rows,
                           replace(lc, tile_m=0, online=-1, skip=-1), per_run=per_run,
                           tf32=tf32)
    t = sub.gemm
    if not device.is_gpu and (sub.epilogue is None or t.dest != p):
        raise FusionRefused(f"{mm2.id} (matmul) joins a GEMM kernel only after an epilogue "
                            f"reducing rows whose result {p} it reads (attention)")
    pv, vv, out = g.value(p), g.value(v), g.value(mm2.outputs[0])
    first_dtype = g.value(mm1.outputs[0]).dtype
    if (out.dtype not in GEMM_DTYPES and not device.on_tensor_cores(out.dtype, tf32)) or \
            out.dtype is not first_dtype:
        raise FusionRefused(f"{mm2.id} (matmul) is {out.dtype.value} after a "
                            f"{first_dtype.value} product: a fused attention takes float32 "
                            "or bfloat16 (or float16 on a GPU's tensor cores) throughout")
    if len(vv.shape) < 2 or vv.shape[-2] != t.n:
        raise FusionRefused(f"{mm2.id} (matmul): {list(pv.shape)} @ {list(vv.shape)} is not "
                            "a matrix product of the tiles' rows")
    if tuple(out.shape[:-1]) != tuple(pv.shape[:-1]):
        raise FusionRefused(f"{mm2.id} (matmul): V {list(vv.shape)} broadcasts the "
                            f"probabilities {list(pv.shape)} to more batches")
    b = operand(g, mm2, v, members, out.shape)
    if b.value in g.constants:
        # (a weight after a row epilogue is a projection, not attention: LLaMA's last
        # RMSNorm then its LM head, whose 768 x 30522 weights, packed by every run and
        # read by every row tile, took 66 ms where the two kernels take 33)
        raise FusionRefused(f"{mm2.id} (matmul): its right operand {v} is a constant (a "
                            "weight); a fused attention reads V again for every tile of "
                            "rows (on the CPU: packs it by every run), its own GEMM once")
    n, d = vv.shape[-2:]
    views = t.views + tuple(x.id for x in v_views + after if x.id not in t.views)
    if device.is_gpu:
        online = _online_softmax(g, first, mm1, t, p, io1, cast=True)
        if online is None:
            raise FusionRefused(f"{mm2.id} (matmul): on a GPU a fused attention takes the "
                                "online softmax only (FlashAttention's): elementwise logits "
                                "then exactly a softmax over the keys, read by nothing but "
                                "the second product")
        if d > GPU_ATTENTION_MAX_VALUES:
            raise FusionRefused(f"{mm2.id} (matmul): rows of {d} values; a GPU's fused "
                                "attention keeps each thread's part of its output rows in "
                                f"registers, up to {GPU_ATTENTION_MAX_VALUES} values a row")
        return replace(sub, gemm=replace(t, views=views), then=SecondGemm(
            p, b, n, d, mm2.outputs[0], _written_through(g, mm2, after) if after else None,
            "", _skipping(replace(online, block=t.block.n), lc, mm2)))
    # V is packed by every run with K (never a constant: refused above)
    v_packed = (PACK_PER_RUN if lc.packs(packs(g, b, device), f"{mm2.id}'s V", per_run)
                else "")
    if half and not v_packed:
        raise FusionRefused(f"{mm2.id} (matmul) is {out.dtype.value}: only the micro-kernel "
                            "multiplies it, and its V is not packed here (blas=1, or "
                            "vectors narrower than the micro-kernel's), so the attention "
                            "is not fused")
    online = (_online_softmax(g, first, mm1, t, p, io1, cast=True) if t.packed_b and v_packed
              else None)
    if lc.online == 1 and online is None:
        raise FusionRefused(f"online=1: the softmax before {mm2.id} (matmul) has no online "
                            "form here (it needs K and V packed for the micro-kernel and an "
                            "epilogue of elementwise logits then exactly a softmax over the "
                            "keys, read by nothing but the second product)")
    if online is not None and online.limit is not None:
        # (a causal mask's blocks past the diagonal skipped: smaller blocks skip more)
        online = replace(online, block=CAUSAL_BLOCK)
    least = ONLINE_MIN_KEYS if online is None or online.limit is None else CAUSAL_MIN_KEYS
    if online is not None and (lc.online == 0 or lc.online == -1 and t.n < least):
        online = None
    online = _skipping(online, lc, mm2)
    if online is not None:     # tiles of rows as a lone GEMM's: no whole rows to hold
        t = replace(t, tile_m=_row_tile(t.batch, t.m, TILE_M, device.units))
    elif not t.packed_b:       # sgemm's whole rows: at most ATTENTION_ROWS of them
        t = replace(t, tile_m=_row_tile(t.batch, t.m, min(ATTENTION_ROWS, t.tile_m),
                                        device.units))
    if lc.tile_m:
        t = replace(t, tile_m=_set_tile("tile_m", lc.tile_m, t.m, 1))
        held = t.tile_m * ((online.block + d) if online is not None else t.n)
        if held > THREAD_SCRATCH:
            raise FusionRefused(f"tile_m={lc.tile_m}: each thread would hold {held} floats "
                                f"of scores and output rows, more than {THREAD_SCRATCH}")
    return replace(sub, gemm=replace(t, views=views),
                   then=SecondGemm(p, b, n, d, mm2.outputs[0],
                                   _written_through(g, mm2, after) if after else None,
                                   v_packed, online))


def _skipping(online: OnlineSoftmax | None, lc: GemmLaunch, mm2) -> OnlineSoftmax | None:
    """The online softmax as ``skip`` sets it: 0 drops its key limit (every block
    taken, the blocks as the limit chose them); 1 needs one, or FusionRefused."""
    if lc.skip == 1 and (online is None or online.limit is None):
        raise FusionRefused(f"skip=1: the softmax before {mm2.id} (matmul) has no causal "
                            "key limit here (no constant causal mask among its logits, or "
                            "no online softmax to skip blocks of)")
    return replace(online, limit=None) if lc.skip == 0 and online is not None else online


# the fewest keys for which a fused attention packs K and V by every run (see
# _attention), and the rows per tile of sgemm's whole rows of scores below that (fewer
# where the rows are long, see _tiling): LLaMA's attention (128 keys) 0.257 ms in tiles
# of 64 rows, 0.305 in one of 128; BERT, GPT-2 and Whisper within 3% either way; ViT
# (65 keys) 0.115 in two tiles, 0.105 in one
ATTENTION_PACK_MIN_KEYS = 256
ATTENTION_ROWS = 64
# keys per block of the online softmax (four panels of the packed Kᵀ), and the fewest
# keys for which it replaces whole rows of scores per tile. Measured on 2 cores (4
# heads of 64, side by side): whole rows 146 ms at 4096 keys against 126 online (124
# in blocks of 512, 131 in blocks of 128), 34.0 against 32.0 at 2048, 8.5 against 8.2
# at 1024; at 512 and 639 (Wav2Vec2) the two are within the noise
ONLINE_BLOCK = 4 * PANEL
ONLINE_MIN_KEYS = 1024
# under a causal mask (fusion/key_limit.py) the online softmax skips the blocks past
# the diagonal, and so takes over from whole rows at fewer keys, in smaller blocks.
# Measured on 2 cores (8 heads of 64, causal, side by side): whole rows 1.16 ms at 256
# keys against 0.93 online in blocks of 128 (1.12 in blocks of 256: one block, nothing
# skipped); 4.03 against 3.04 at 512; at 128 keys whole rows win (0.30 against 0.38)
CAUSAL_BLOCK = 2 * PANEL
CAUSAL_MIN_KEYS = 256
# the softmax over the last axis as ops/composites.py decomposes it (and the ONNX
# importer's Softmax): m = max(z), e = exp(z - m), p = e / sum(e)
_SOFTMAX_TAIL = ("reduce_max", "sub", "exp", "reduce_sum", "div")


def _online_softmax(g: Graph, first, mm, t: GemmShape, p: str, io,
                    cast: bool = False) -> OnlineSoftmax | None:
    """The online form of a fused attention's epilogue, where it takes one: the
    epilogue is elementwise ops at the scores' shape (``prefix``: scale, mask) making
    ``z``, then exactly the softmax of ``z`` over the last axis giving ``p`` (read by
    nothing but the second product), and the rows are long (ONLINE_MIN_KEYS keys or
    more: whole rows of scores then leave tiles of few rows, each reading all of K and
    V for them: the caller's rule, a launch may say otherwise). None otherwise: the
    whole-row epilogue takes any row reduction. ``cast``: ``p`` may be the softmax cast
    back to the product's half type (a bfloat16 softmax is computed in float32 between
    two casts; the GPU's kernel keeps the probabilities in float32, as the reference
    keeps half values inside a kernel)."""
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
    return OnlineSoftmax(z, ids, ONLINE_BLOCK, find_key_limit(g, ids, mm.outputs[0], z))


# layout ops a product can be written through: each output element is one input
# element, and the input's layout follows from the output's
INVERTIBLE = ("reshape", "squeeze", "unsqueeze", "transpose")


def _result_views(g: Graph, mm, members, io: GroupIO) -> list:
    """The chain of members after the matmul that only move its result (transposes and
    reshapes, each the one reader of the one before), ending in a value written out:
    the product is written where they would put it (the heads merged back after
    attention). Empty when the product is read otherwise."""
    chain, v = [], mm.outputs[0]
    while v not in io.outputs:
        readers = [c for c in g.consumers[v] if c.id in members]
        if len(readers) != 1 or readers[0].op not in INVERTIBLE or len(g.consumers[v]) != 1:
            return []
        chain.append(readers[0])
        v = readers[0].outputs[0]
    return chain


def _written_through(g: Graph, mm, chain) -> Operand:
    """The value at the end of ``chain`` and where each element of the matmul's product
    lies in it (walking the layout ops backwards from its contiguous layout);
    FusionRefused when the product's rows are not one stride apart with unit-stride
    columns there (sgemm writes row-major tiles)."""
    end = chain[-1].outputs[0]
    layout = Strided.contiguous(g.value(end).shape)
    for p in reversed(chain):
        src = g.value(p.inputs[0]).shape
        if p.op == "transpose":
            perm = transpose_perm(p.attr_map, len(src))
            layout = layout.permute(tuple(sorted(range(len(perm)), key=perm.__getitem__)))
        else:
            layout = layout.reshape(src)
        if layout is None:
            break
    view = None if layout is None else layout.matrix()
    if view is None or view.trans:
        raise FusionRefused(f"{chain[0].id} ({chain[0].op}) moves the product of {mm.id} "
                            "so that its rows are not row-major in "
                            f"{end}; the kernel writes it row by row")
    return Operand(end, view)


def _conv(g: Graph, ns, io: GroupIO, device: Device, conv,
          lc: GemmLaunch = GemmLaunch()) -> Schedule:
    """A convolution as a GEMM (implicit im2col): per batch item and group, the
    group's filters [K, C x taps] times its input channels' patches [C x taps,
    positions], the patches of each column tile gathered into a per-thread buffer, then
    the elementwise epilogue at the output's shape (a bias, a BatchNorm's scale and
    shift, a ReLU, a residual)."""
    if device.is_gpu:
        raise FusionRefused(f"{conv.id} ({conv.op}) as a GEMM: {GPU_REFUSAL}")
    x, w = (g.value(i) for i in conv.inputs[:2])
    out = g.value(conv.outputs[0])
    d = len(x.shape) - 2
    group, strides, dil, pads = conv_attrs(conv.attr_map, d, conv.op)
    if out.dtype not in GEMM_DTYPES:
        raise FusionRefused(f"{conv.id} ({conv.op}) is {out.dtype.value}: the GEMM kernel "
                            "takes float32 and bfloat16 so far, so it stays a library call")
    half = out.dtype is not DType.float32
    members = {n.id for n in ns}
    made = next((i for i in conv.inputs if i in g.producer
                 and g.producer[i].id in members), None)
    if made is not None:
        raise FusionRefused(f"{g.producer[made].id} ({g.producer[made].op}) computes the "
                            f"convolution's operand {made} inside the kernel; a GEMM kernel "
                            "reads its operands from memory")
    rest = [n for n in ns if n is not conv]
    if any(get_op(n.op).kind is Kind.reduce for n in rest):
        raise FusionRefused(f"{conv.id} ({conv.op}): a convolution's GEMM takes an "
                            "elementwise epilogue only (no reduction)")
    shape = out.shape
    _check_epilogue(g, ns, conv, shape, same=lambda a, b: a == b)
    dest = _dest(g, conv.outputs[0], io, half, lambda s: s == shape)
    if dest is None:
        raise FusionRefused(f"{conv.id} ({conv.op}): no float32 output of its shape to "
                            "write the product into")
    # groups: each batch item's group is a GEMM of its own (batch item b, group i as
    # GEMM batch b x group + i), its filters' rows, its input channels' patches and its
    # output channels all a contiguous run, so NCHW is the batched GEMM's layout
    n, k = shape[0], shape[1] // group
    cols = Im2col(conv.inputs[0], x.shape[1] // group, tuple(x.shape[2:]),
                  tuple(w.shape[2:]), tuple(shape[2:]), tuple(strides), tuple(dil),
                  tuple(pads[:d]))
    positions, depth = math.prod(shape[2:]), cols.rows
    if depth * min(positions, TILE_ALIGN) > THREAD_SCRATCH:
        raise FusionRefused(f"{conv.id} ({conv.op}): {depth} weights per filter; even "
                            f"{TILE_ALIGN} positions of patches would not fit a thread's "
                            "buffer, so it stays a library call")
    # the filters: one matrix, or a group's run of rows per GEMM batch item (stride 0
    # over the batch items)
    per_group = MatrixView(0, ((n, 0), (group, k * depth)), k, depth, depth, 1)
    a = Operand(conv.inputs[1], Strided.contiguous((k, depth)).matrix() if group == 1 else
                per_group)
    if lc.online != -1 or lc.skip != -1:
        raise FusionRefused(f"{conv.id} ({conv.op}) has no softmax to take a block of keys "
                            f"at a time ({'online' if lc.online != -1 else 'skip'})")
    # the patches gathered straight into the micro-kernel's panels, where it runs and a
    # panel's width of them fits a thread's buffer; the rule takes it for filters of
    # fewer than CONV_MICRO_DEPTH weights, and for every bfloat16 convolution (whose
    # patches it multiplies in pairs, two rows of k per step, where sgemm would need
    # them and the filters widened)
    can = PACK_TILE if device.vector_bytes >= PACK_MIN_VECTOR_BYTES and (
        cols.pointwise or depth * PANEL <= THREAD_SCRATCH) else ""
    micro = depth < CONV_MICRO_DEPTH and not (cols.pointwise and (
        k <= CONV_POINTWISE_MICRO_FILTERS
        or FEW_POSITIONS < positions < CONV_POINTWISE_MICRO_POSITIONS))
    packed = lc.packs(can, f"{conv.id}'s patches", per_run=micro or half)
    epilogue_ops = len(rest) + (len(conv.inputs) == 3)
    taps, c = math.prod(cols.kernel), x.shape[1]
    span = math.prod(cols.span)
    # a 1 x 1 convolution's patches are the input itself: each batch item's (and
    # group's) channels x positions, a matrix in place
    in_place = Operand(conv.inputs[0], MatrixView(
        0, ((n, c * positions), (group, c // group * positions)), c // group, positions,
        positions, 1))
    lanes = span <= DEPTHWISE_LANES_SPAN
    if (d == 2 and k == 1 and cols.channels == 1 and not half and can and lc.blas == -1
            and (lanes or (span <= DEPTHWISE_PLANE_SPAN
                           and math.prod(strides) <= PLANE_PHASES_MAX))):
        # a depthwise convolution: an image's channels are the rows, tiles of whole
        # planes, computed a vector of channels at a time over small planes, else a
        # padded plane at a time; blas=0 keeps the tap-by-tap path (lower._direct),
        # blas=1 sgemm, for the tuner to compare
        if lc.tile_n:
            raise FusionRefused(f"tile_n: {conv.id}'s planes are whole in each tile (a "
                                "depthwise convolution, its channels the rows)")
        tile_m = (min(group, _round_up(_row_tile(n, group, group, device.units),
                                       LANES_ALIGN)) if lanes
                  else plane_tile(group, device.units))
        if lc.tile_m:
            tile_m = _set_tile("tile_m", lc.tile_m, group, 1)
        t = GemmShape(n, group, positions, taps,
                      Operand(conv.inputs[1], Strided.contiguous((group, taps)).matrix()),
                      Operand(conv.inputs[0], a.view), tile_m, positions, conv.outputs[0],
                      dest, epilogue_ops=epilogue_ops, im2col=cols, col_axes=d,
                      packed_b=DEPTHWISE_LANES if lanes else DEPTHWISE_PLANES)
        return Schedule(ScheduleKind.gemm, elements=out.numel, gemm=t)
    # a deep 1 x 1 convolution directly too (CONV_POINTWISE_DIRECT_DEPTH)
    deep_pointwise = (cols.pointwise and positions > FEW_POSITIONS
                      and depth >= CONV_POINTWISE_DIRECT_DEPTH
                      and (depth >= k or positions < CONV_POINTWISE_MICRO_POSITIONS)
                      and _round_up(k, CONV_DIRECT_ALIGN) * 7 <= k * 8)
    if (d <= 2 and group == 1 and not half and can and (not cols.pointwise or deep_pointwise)
            and conv.inputs[1] in g.constants and lc.blas == -1
            and k * depth <= CONV_DIRECT_WEIGHTS and (depth * CONV_DIRECT_DEPTH_RATIO >= k
                                                 or deep_pointwise)
            and _direct_scratch(cols, 1) <= CONV_DIRECT_SCRATCH):
        # computed directly, the filters in the lanes; blas=0 keeps the patches
        # gathered for the micro-kernel, blas=1 sgemm, for the tuner to compare
        return Schedule(ScheduleKind.gemm, elements=out.numel, gemm=_direct_tiling(
            conv, cols, a, n, k, dest, epilogue_ops, device.units, lc))
    if (cols.pointwise and group == 1 and not half and can and positions <= FEW_POSITIONS
            and conv.inputs[1] in g.constants and (micro if lc.blas == -1 else lc.blas == 0)):
        # few positions: the product made transposed, the filters in the vectors' lanes
        # (packed once), the positions the micro-kernel's rows; tiles of whole panels
        # of filters, as many as keep the cores busy
        tile_m = _round_up(_row_tile(n, k, k, device.units), PANEL)
        if lc.tile_m:
            tile_m = _set_tile("tile_m", lc.tile_m, k, PANEL)
        if lc.tile_n:
            raise FusionRefused(f"tile_n: {conv.id}'s {positions} positions are one tile "
                                "(its product is made transposed, positions as rows)")
        t = GemmShape(n, k, positions, depth, a, in_place, min(tile_m, k), positions,
                      conv.outputs[0], dest, epilogue_ops=epilogue_ops, im2col=cols,
                      col_axes=d, in_place=True, packed_b=PACK_FILTERS)
        return Schedule(ScheduleKind.gemm, elements=out.numel, gemm=t)
    if cols.pointwise and (packed or not half):
        # the input in place, packed by every run like an activation's B (or read by
        # sgemm) -- a matmul's tiles, cut over the filters too (ResNet-50's 1 x 1
        # convolutions: 2048 filters over 7 x 7 positions were two tiles of 25
        # columns). (A bfloat16 one for sgemm is widened as it is gathered, below.)
        # (A's batch modes whatever the groups: _tiling takes the batch from them)
        t = _tiling(out, Operand(a.value, per_group), in_place, conv.outputs[0], dest,
                    device.units, packed=PACK_PER_RUN if packed else "", lc=lc)
        return Schedule(ScheduleKind.gemm, elements=out.numel, gemm=replace(
            t, epilogue_ops=epilogue_ops, im2col=cols, col_axes=d, in_place=True))
    # every output channel in one tile, so each column tile's patches are gathered
    # once; columns cut so the gathered patches stay within IM2COL_TILE elements and
    # the tiles come to a multiple of the cores
    tile_n = min(positions, max(TILE_ALIGN, IM2COL_TILE // depth))
    if half:   # the product's float32 tile (every filter's row of it) fits a thread too
        tile_n = min(tile_n, max(TILE_ALIGN, IM2COL_TILE // max(k, 1)))
    if packed and tile_n < min(PANEL, positions) and not half:
        # deep filters over few positions on the micro-kernel (blas=0: the rule gives
        # them to sgemm; ResNet-50's last stage, 4608 weights per filter over 49
        # positions): it multiplies whole panels, so a tile of 25 columns cost what 64
        # do. One panel of patches (within THREAD_SCRATCH), the cores kept busy by
        # tiles of the filters instead, each gathering the patches
        tile_n = min(PANEL, positions)
    col_tiles = min(positions, _for_cores(n * group, -(-positions // tile_n), device.units))
    if packed and -(-positions // col_tiles) < min(PANEL, tile_n):
        col_tiles = -(-positions // tile_n)   # (not cut below a panel for the cores...)
    tile_n = max(1, -(-positions // col_tiles))
    # (... the filters are, where the tiles come short of a multiple of the cores)
    tile_m = _row_tile(n * group * col_tiles, k, k, device.units) if packed else k
    if lc.tile_n:
        tile_n = _set_tile("tile_n", lc.tile_n, positions, 1)
    if lc.tile_m:
        tile_m = _set_tile("tile_m", lc.tile_m, k, 1)
    if lc.tile_n and max(_patches(depth, tile_n, packed), k * tile_n if half else 0) > \
            THREAD_SCRATCH:
        raise FusionRefused(f"tile_n={lc.tile_n}: {depth} x {tile_n} patches (and a "
                            f"bfloat16 product's {k} x {tile_n} tile) would not fit a "
                            "thread's buffer")
    t = GemmShape(n * group, k, positions, depth, a, Operand(conv.inputs[0], a.view), tile_m,
                  tile_n, conv.outputs[0], dest, epilogue_ops=epilogue_ops, im2col=cols,
                  col_axes=d, packed_b=packed)
    return Schedule(ScheduleKind.gemm, elements=out.numel, gemm=t)


def _patches(depth: int, tile_n: int, packed) -> int:
    """Floats of a convolution tile's gathered patches: ``depth`` rows of ``tile_n``
    columns, row-major for sgemm, or whole panels for the micro-kernel (``packed``)."""
    return depth * (-(-tile_n // PANEL) * PANEL if packed else tile_n)


def packs(g: Graph, b: Operand, device: Device) -> str:
    """How B can meet the micro-kernel (``GemmShape.packed_b``), where the compiler
    targets vectors wide enough for it to win (PACK_MIN_VECTOR_BYTES): packed once
    where B is a constant serving every batch item (a weight), else packed by every
    run, one pack per distinct matrix (grouped-query attention's K and V, broadcast
    over the heads sharing them, once per key-value head) -- or "" (BLAS sgemm per
    tile) on narrower vectors and on a GPU. Whether an activation is packed is the
    caller's (``GemmLaunch.packs``: a long attention's K and V, or ``blas=0``)."""
    if device.is_gpu or device.vector_bytes < PACK_MIN_VECTOR_BYTES:
        return ""
    if b.view.one_matrix:
        return PACK_ONCE if b.value in g.constants else PACK_PER_RUN
    return PACK_PER_RUN


def _tiling(out, a: Operand, b: Operand, result: str, dest: str, units: int,
            whole_rows: bool = False, packed: str = "",
            lc: GemmLaunch = GemmLaunch()) -> GemmShape:
    """The problem as batched GEMMs, cut into tiles: rows up to TILE_M, and columns
    cut so the tile count is a multiple of the cores (no core idles in the last
    round) where that keeps tiles at least TILE_ALIGN wide (PANEL when B is
    ``packed``). ``whole_rows`` (an epilogue reducing rows): every tile spans all
    columns (see the rule inside)."""
    batch, m, n, k, a = _problem(a, b)
    if whole_rows:
        # each tile reads all of B (K x N; sgemm packs it again), so as few tiles as
        # keep every core busy, capped so a tile of whole rows stays within 2 x TILE_M
        # x TILE_N elements (256 KB), and as many more as make the tile count a
        # multiple of the cores: 1278 rows of 256 in tiles of 256 were 5 tiles on 2
        # cores, one core doing 3 (a GEMM + LayerNorm kernel of Wav2Vec2 took 1.35 ms
        # where the same GEMM without the LayerNorm, in 10 tiles, took 0.96)
        tile_m = _row_tile(batch, m, max(1, 2 * TILE_M * TILE_N // max(n, 1)), units)
        if lc.tile_n:
            raise FusionRefused("tile_n: this GEMM's epilogue reduces rows, so every tile "
                                "spans all columns; set tile_m")
        if lc.tile_m:
            tile_m = _set_tile("tile_m", lc.tile_m, m, 1)
        return GemmShape(batch, m, n, k, a, b, tile_m, max(n, 1), result, dest,
                         packed_b=packed)
    # rows cut evenly (130 rows are two tiles of 65, not 128 and 2: a static schedule
    # would give one core nearly all the work)
    tile_m = max(1, -(-m // -(-m // TILE_M))) if m else 1
    col_tiles = _for_cores(batch * -(-m // tile_m), max(1, -(-n // TILE_N)), units)
    tile_n = max(1, min(n, _round_up(-(-n // col_tiles), PANEL if packed else TILE_ALIGN)))
    if lc.tile_m:
        tile_m = _set_tile("tile_m", lc.tile_m, m, 1)
    if lc.tile_n:
        tile_n = _set_tile("tile_n", lc.tile_n, n, PANEL if packed else 1)
    return GemmShape(batch, m, n, k, a, b, tile_m, tile_n, result, dest, packed_b=packed)


def _gpu_tiling(g: Graph, mm, a: Operand, b: Operand, result: str, dest: str,
                device: Device, whole_rows: bool, lc: GemmLaunch, tf32: bool) -> GemmShape:
    """A GPU GEMM's tiles: one thread block per tile (``_gpu_tiles``), 128 x 128 where
    there are enough of them to give every SM one, else 64 x 64; FusionRefused for what
    the GPU kernel does not do yet (an epilogue reducing rows, a dtype it has no tiles
    for, ``blas``). ``tile_m`` and ``tile_n`` set together pick one of the block tiles."""
    if whole_rows:
        raise FusionRefused(f"{mm.id} (matmul) with an epilogue reducing rows: on a GPU the "
                            "GEMM kernel takes an elementwise epilogue only so far, so the "
                            "reduction stays a kernel of its own")
    tiles = _gpu_tiles(g, mm, device, tf32, "the GPU GEMM kernel")
    if lc.blas != -1:
        raise FusionRefused("blas applies to the CPU's GEMM kernel (sgemm per tile or the "
                            "micro-kernel); a GPU tile is the generated block GEMM")
    batch, m, n, k, a = _problem(a, b)
    if lc.tile_m or lc.tile_n:
        block = tiles.get((lc.tile_m, lc.tile_n))
        if block is None:
            raise FusionRefused(f"tile_m={lc.tile_m}, tile_n={lc.tile_n}: a GPU GEMM tile is "
                                + " or ".join(f"{x} x {y}" for x, y in tiles)
                                + " (set both)")
    else:
        big = tiles[(128, 128)]
        large = batch * -(-m // big.m) * -(-n // big.n) >= device.units
        block = big if large else tiles[(64, 64)]
    block = _staged(block, lc)
    return GemmShape(batch, m, n, k, a, b, block.m, block.n, result, dest, block=block)


def _staged(block: BlockTile, lc: GemmLaunch) -> BlockTile:
    """``block`` in the stages ``lc`` sets (the rule: 1), or FusionRefused where 2 stages
    would spill (PIPELINED_TENSOR_MAX)."""
    if lc.stages and lc.stages != block.stages:
        block = replace(block, stages=lc.stages)
    if block.stages == 2 and block.tensor and block.m * block.n > PIPELINED_TENSOR_MAX:
        raise FusionRefused(f"stages=2 on a {block.m} x {block.n} tensor-core tile: its next "
                            "panels in registers beside the accumulator fragments would "
                            "spill; pipeline a 128 x 64 or 64 x 128 tile")
    return block


def _gpu_tiles(g: Graph, mm, device: Device, tf32: bool, kernel: str) -> dict:
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


def _gpu_attention_scores(g: Graph, first, mm, mm2, p: str, lc: GemmLaunch,
                          device: Device, tf32: bool) -> Schedule:
    """The scores' product of a fused attention on a GPU (its second product and softmax
    are added by _attention): a thread block per GPU_ATTENTION_SHAPE tile of queries,
    taking the keys a block tile's columns at a time (the online softmax), float32 (both
    products on tensor cores in TF32 where the device's matmuls may be)."""
    block = _gpu_tiles(g, mm, device, tf32, "a GPU's fused attention")[GPU_ATTENTION_SHAPE]
    if replace(lc, stages=0, skip=-1) != GemmLaunch():
        raise FusionRefused("a GPU's fused attention takes stages and skip only (its tiles "
                            f"are {block.m} x {block.n}, its softmax online)")
    block = _staged(block, lc)
    if block.stages == 2 and block.operands.is_half:
        raise FusionRefused("stages=2 on a fused attention in a half type: its next panels "
                            "in registers beside the scores, the output rows and the "
                            "fragments spill (bfloat16: 64 bytes at 128 registers)")
    members = {n.id for n in first}
    views = prologue(g, mm, members)
    shape = g.value(mm.outputs[0]).shape
    a, b = (operand(g, mm, i, members, shape) for i in mm.inputs)
    batch, m, n, k, a = _problem(a, b)
    t = GemmShape(batch, m, n, k, a, b, block.m, max(n, 1), mm.outputs[0], p,
                  views=tuple(v.id for v in views), block=block)
    return Schedule(ScheduleKind.gemm, elements=g.value(mm.outputs[0]).numel, gemm=t)


def _problem(a: Operand, b: Operand) -> tuple[int, int, int, int, Operand]:
    """The product as ``batch`` GEMMs of ``m x k`` by ``k x n``: (batch, m, n, k, A),
    A's batch folded into its rows where one B serves every batch item and A's rows
    run on through its batch."""
    m, k, n = a.view.rows, a.view.cols, b.view.cols
    batch = a.view.batch_size
    if b.view.one_matrix:
        a = _fold_rows(a)                # one B: A's batch rows are more rows
        if not a.view.batch:
            batch, m = 1, a.view.rows
    return batch, m, n, k, a


def _direct_scratch(cols: Im2col, rows: int) -> int:
    """Floats of a direct convolution's buffer for a tile of ``rows`` output rows
    (codegen wb_conv_lanes; a 1-D convolution as its plane one row high,
    ``Im2col.planar``): every channel's input rows they read, each as wide as the
    widest block's whole blocks of positions read."""
    cols = cols.planar()
    (oh, ow), (kh, kw), (sy, sx), (dy, dx) = cols.out, cols.kernel, cols.strides, cols.dilations
    if (kh, kw) == (1, 1):      # (a strided 1 x 1's buffer holds the rows and columns read)
        sy = sx = 1
    wide = max((-(-ow // r) * r - 1) * sx for r in CONV_DIRECT_BLOCKS) + (kw - 1) * dx + 1
    return cols.channels * ((min(rows, oh) - 1) * sy + (kh - 1) * dy + 1) * wide


def _direct_tiling(conv, cols: Im2col, a: Operand, n: int, k: int, dest: str,
                   epilogue_ops: int, units: int, lc: GemmLaunch) -> GemmShape:
    """A direct convolution's tiles (CONV_DIRECT): whole pairs of vectors of filters
    (or all of them) by whole output rows of one image (a 1-D convolution: one row),
    as many rows as the buffer takes, cut (``_direct_split``) so the cores share the
    work evenly."""
    oh, ow = cols.planar().out
    fit = max(r for r in range(1, oh + 1)
              if _direct_scratch(cols, r) <= CONV_DIRECT_SCRATCH)
    rows, tile_m = _direct_split(n, oh, fit, k, units)
    if lc.tile_n:     # (whole rows: a tile_n between two is taken up to the next)
        rows = -(-_set_tile("tile_n", lc.tile_n, oh * ow, 1) // ow)
        if _direct_scratch(cols, rows) > CONV_DIRECT_SCRATCH:
            raise FusionRefused(f"tile_n={lc.tile_n}: {rows} output rows of {conv.id} "
                                f"read more input than a thread's buffer of "
                                f"{CONV_DIRECT_SCRATCH} floats holds (direct convolution)")
    if lc.tile_m:
        tile_m = min(lc.tile_m, k)
        if tile_m % CONV_DIRECT_ALIGN and tile_m < k:
            raise FusionRefused(f"tile_m={lc.tile_m}: {conv.id} is computed directly, "
                                f"{CONV_DIRECT_ALIGN} filters at a time, so tiles are a "
                                f"multiple of {CONV_DIRECT_ALIGN} filters (or all {k})")
    b = Operand(conv.inputs[0], a.view)     # (the input; its view unused, as im2col's)
    return GemmShape(n, k, oh * ow, cols.rows, a, b, tile_m, rows * ow, conv.outputs[0],
                     dest, epilogue_ops=epilogue_ops, im2col=cols,
                     col_axes=len(cols.out), packed_b=CONV_DIRECT)


def _direct_split(n: int, oh: int, fit: int, k: int, units: int) -> tuple[int, int]:
    """Output rows and filters per tile of a direct convolution (``n`` images of ``oh``
    rows, at most ``fit`` rows a tile, ``k`` filters): the cut whose busiest core has
    the least work (``_static_load``), then the fewest tiles, then the fewest cuts of
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
        for cuts in range(1, min(-(-k // CONV_DIRECT_ALIGN), 2 * units) + 1):
            tile_m = min(k, _round_up(-(-k // cuts), CONV_DIRECT_ALIGN))
            work = [min(tile_m, k - f) * r for f in range(0, k, tile_m)
                    for r in row_sizes] * n
            key = (_static_load(work, units), len(work), -(-k // tile_m))
            if best is None or key < best[0]:
                best = (key, rows, tile_m)
    return best[1], best[2]


def _static_load(work: list[int], units: int) -> int:
    """The busiest core's work where a parallel loop over tiles of this ``work`` (in
    loop order) is shared out as ``schedule(static)`` does: a run of consecutive tiles
    each, the first ``len % units`` cores one more."""
    q, extra = divmod(len(work), units)
    load, i = 0, 0
    for u in range(units):
        take = q + (u < extra)
        load, i = max(load, sum(work[i:i + take])), i + take
    return load


def _set_tile(name: str, value: int, extent: int, align: int) -> int:
    """A tile size a launch sets: at most the extent (a larger one is the extent), and
    a multiple of ``align`` unless it spans the whole extent."""
    value = min(value, max(extent, 1))
    if value % align and value < extent:
        raise FusionRefused(f"{name}={value}: B is packed into panels of {align} columns "
                            f"for the micro-kernel, so tiles are a multiple of {align} wide "
                            f"(or all {extent} columns)")
    return value


def _row_tile(batch: int, m: int, cap: int, units: int) -> int:
    """Rows per tile of tiles spanning every column: at most ``cap``, and as many tiles
    as make their count (over the batch) a multiple of the cores where there are rows
    enough, the rows shared evenly."""
    per_item = -(-m // min(m, cap)) if m else 1
    per_item = -(-(units * -(-(batch * per_item) // units)) // batch)
    return max(1, -(-m // min(per_item, max(m, 1))))


def _for_cores(row_items: int, col_tiles: int, units: int) -> int:
    """At least ``col_tiles`` column tiles, more where that makes the tile count (row
    items x column tiles) a multiple of the cores, so no core idles in the last round."""
    want = units * -(-(row_items * col_tiles) // units)
    return max(col_tiles, -(-want // row_items))


def _fold_rows(a: Operand) -> Operand:
    """A with its batch folded into its rows where the rows run on through the batch
    (each batch's first row one row stride after the last one's), else A as it is."""
    v = a.view
    if v.trans or not v.batch:
        return a
    modes = list(v.batch) + [(v.rows, v.row_stride)]
    for (e, s), (e2, s2) in zip(modes, modes[1:]):
        if s != e2 * s2:
            return a
    return replace(a, view=replace(v, batch=(), rows=v.rows * v.batch_size))


def plane_tile(planes: int, units: int) -> int:
    """Planes per tile of a kernel taking a plane at a time (a depthwise convolution's,
    a pooling's): PLANE_TILES tiles a core, or a plane each where there are fewer."""
    return -(-planes // min(planes, units * PLANE_TILES))


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to
