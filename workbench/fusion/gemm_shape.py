"""The values of a ``gemm`` schedule: the product and its tiles, its operands read in
place, a convolution's patches, a GPU thread block's tile, and a fused attention's
second product and online softmax.

:mod:`.gemm` decides which of them a group gets (legality and tile choice);
:class:`~.schedule.Schedule` holds them (``gemm``, ``then``); codegen lowers them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..device import CUDA_WARP
from ..dtypes import DType
from ..ops.strided import MatrixView, Strided
from .key_limit import KeyLimit

# how a GEMM's right operand is packed for the CPU micro-kernel (GemmShape.packed_b)
PACK_ONCE = "once"          # a constant: by the kernel's first run, kept
PACK_PER_RUN = "per run"    # an activation: by every run, before its tiles
PACK_TILE = "per tile"      # a convolution's patches: gathered into panels by each tile
# an activation B read in place by a product made transposed, A packed into panels by
# every run (few rows: a training step's tokens; fusion/gemm/transposed.py)
TRANSPOSED_PER_RUN = "transposed, A packed per run"
# a 1 x 1 convolution over few positions: its filters, transposed, packed once as the
# right operand, its positions the micro-kernel's rows (codegen wb_gemm_packed_t)
PACK_FILTERS = "filters once"
# a 2-D depthwise convolution over small planes: each tile's channels computed with the
# channels in the vectors' lanes (codegen wb_depthwise_lanes), no micro-kernel
DEPTHWISE_LANES = "depthwise, channels in lanes"
# a 2-D depthwise convolution over larger planes: each tile's channels a plane at a
# time, the plane with its zero border copied once, each output row's taps
# summed in registers (codegen lower/convolution.py's depthwise_planes)
DEPTHWISE_PLANES = "depthwise, planes"
# a 2-D convolution of few filters computed directly (codegen wb_conv_lanes): its
# filters in the vectors' lanes, packed once, each tap's input a broadcast operand, no
# patches gathered; each tile whole output rows
CONV_DIRECT = "direct, filters in lanes"
# how a schedule's description names the products that are no packed B
_PRODUCT_TEXT = {
    PACK_FILTERS: ", made transposed against the filters packed once (micro-kernel)",
    TRANSPOSED_PER_RUN: ", made transposed: B read in place, A packed per run (micro-kernel)",
    DEPTHWISE_LANES: ", depthwise, the channels in the vectors' lanes",
    DEPTHWISE_PLANES: ", depthwise, a padded plane at a time, taps summed in registers",
    CONV_DIRECT: ", direct, the filters in the vectors' lanes (packed once), no patches"}



@dataclass(frozen=True)
class Operand:
    """A GEMM operand read in place: the value in memory holding it and where its
    batched matrix lies there (the operand itself, or what layout ops in the kernel --
    prologue views: reshapes, transposes, slices, splits -- make of that value).

    >>> Operand.whole("w", (768, 3072)).view.ld
    3072
    """
    value: str
    view: MatrixView

    @staticmethod
    def whole(value: str, shape) -> "Operand":
        return Operand(value, Strided.contiguous(shape).matrix())


@dataclass(frozen=True)
class Im2col:
    """A convolution's right operand as a GEMM gathers it, one column tile at a time:
    row ``j`` (an input channel and a filter tap, row-major over ``(C, *kernel)``) of
    column ``p`` (an output position, row-major over ``out``) is the input element the
    tap meets there -- ``o * stride - pad + tap * dilation`` along each spatial axis,
    0 past the edge.

    >>> Im2col("x", 3, (64, 64), (8, 8), (8, 8), (8, 8), (1, 1), (0, 0)).rows
    192
    """
    value: str
    channels: int
    spatial: tuple[int, ...]      # the input's spatial extents
    kernel: tuple[int, ...]
    out: tuple[int, ...]          # the output's spatial extents
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]         # before each spatial axis

    @property
    def rows(self) -> int:
        return self.channels * math.prod(self.kernel)

    @property
    def pointwise(self) -> bool:
        """Whether the patches are the input itself (1 x 1 filters, stride 1, no
        padding): row ``j`` input channel ``j``, column ``p`` position ``p``, read in
        place with nothing to gather."""
        return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.strides)
                and self.out == self.spatial and not any(self.pads))

    @property
    def span(self) -> tuple[int, ...]:
        """Per spatial axis, the input positions the taps meet, from ``-pad``:
        ``(out - 1) * stride + (kernel - 1) * dilation + 1`` (a plane and its border)."""
        return tuple((o - 1) * s + (k - 1) * d + 1
                     for o, s, k, d in zip(self.out, self.strides, self.kernel, self.dilations))

    def planar(self) -> "Im2col":
        """The 2-D form of a 1-D or 2-D convolution: a 1-D one's axis as the row of a
        plane one row high (a direct convolution's geometry, codegen wb_conv_lanes)."""
        if len(self.spatial) != 1:
            return self
        return Im2col(self.value, self.channels, (1, *self.spatial), (1, *self.kernel),
                      (1, *self.out), (1, *self.strides), (1, *self.dilations),
                      (0, *self.pads))

    @property
    def padded(self) -> bool:
        """Whether some tap reads past the input's edge (then it reads 0)."""
        return any(p > 0 or (o - 1) * s - p + (k - 1) * d >= n for p, o, s, k, d, n in zip(
            self.pads, self.out, self.strides, self.kernel, self.dilations, self.spatial))


@dataclass(frozen=True)
class GemmShape:
    """A gemm schedule's problem and tiling: ``batch`` independent products of
    ``m x k`` by ``k x n`` (A's batch folds into ``m`` when B has none and A's rows
    run on through its batch), A and B read in place (``a``, ``b``: their batch
    strides, 0 where one operand serves every batch), the output cut into ``tile_m x
    tile_n`` tiles. ``result`` is the matmul's value, ``dest`` the output buffer the
    product is written into and finished in place (row-major, ``batch x m x n``).

    >>> a, b = Operand.whole("x", (128, 768)), Operand.whole("w", (768, 3072))
    >>> GemmShape(1, 128, 3072, 768, a, b, 128, 256, "h", "y").tiles
    12
    """
    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    tile_m: int
    tile_n: int
    result: str
    dest: str
    epilogue_ops: int = 0      # ops finishing each tile (0: the matmul alone)
    views: tuple[str, ...] = ()     # the prologue views' node ids (read through, in place)
    # a convolution: B gathered per column tile (``b`` names the input, its view unused),
    # the product's columns the output's trailing ``col_axes`` (spatial) axes
    im2col: Im2col | None = None
    col_axes: int = 1
    # (a 1 x 1 convolution, Im2col.pointwise) B is the input itself, read or packed in
    # place through ``b``'s view: no patches gathered
    in_place: bool = False
    # how B meets the generated micro-kernel (codegen/microkernel.py): packed into
    # column panels once (PACK_ONCE: a constant, a weight), or at the start of every
    # run, one pack per batch item (PACK_PER_RUN: an activation, K or V of attention),
    # or a convolution's patches gathered by each tile straight into panels
    # (PACK_TILE), or, for a 1 x 1 convolution over few positions, the product made
    # transposed against the filters packed once (PACK_FILTERS: whole vectors of
    # filters, where the positions would fill a fraction of one), or, where A has few
    # rows and B is an activation, the product made transposed against A packed by
    # every run, B read in place (TRANSPOSED_PER_RUN); a depthwise
    # convolution over small planes computed with its channels in the lanes
    # (DEPTHWISE_LANES: the GEMM's rows are then an image's channels, its batch the
    # images, its depth the taps, each tile whole planes), or, over larger planes, a
    # padded plane at a time (DEPTHWISE_PLANES, the same tiles); a convolution of few
    # filters computed directly, the filters in the lanes (CONV_DIRECT: each tile whole
    # output rows of one image, its rows a run of filters); "" where each tile
    # calls BLAS sgemm (which packs B's panel again per call; a convolution's patches
    # are then gathered row-major)
    packed_b: str = ""
    # on a GPU: how a thread block computes each tile (its threads' sub-tiles in
    # registers, panels of A and B staged through shared memory); None on a CPU
    block: "BlockTile | None" = None

    @property
    def row_tiles(self) -> int:
        return -(-self.m // self.tile_m)

    @property
    def col_tiles(self) -> int:
        return -(-self.n // self.tile_n)

    @property
    def tiles(self) -> int:
        """Parallel work items: every tile of every batch."""
        return self.batch * self.row_tiles * self.col_tiles

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def title(self) -> str:
        """What the kernel computes, as a schedule's description names it."""
        return ("gemm" if self.im2col is None else "conv as gemm (1x1, input in place)"
                if self.in_place else "conv" if self.packed_b == CONV_DIRECT
                else "conv as gemm (im2col)")

    @property
    def product_text(self) -> str:
        """How each tile's product is made, as a description says it ("" for sgemm)."""
        return _PRODUCT_TEXT.get(self.packed_b, f", B packed {self.packed_b} (micro-kernel)"
                                 if self.packed_b else "")


@dataclass(frozen=True)
class BlockTile:
    """A GPU GEMM tile of ``m x n`` outputs computed by one thread block: each thread
    holds ``thread_m x thread_n`` of them in registers, rows ``i * m / thread_m + ty``
    and columns ``j * n / thread_n + tx`` of the tile (``ty``, ``tx`` its place in the
    block's ``m / thread_m x n / thread_n`` grid of threads), so that a warp's lanes
    read neighbouring columns of shared memory and store neighbouring elements of a
    row. ``depth`` columns of A's rows and rows of B's columns pass through shared
    memory at a time (``shared_bytes``), each panel's rows padded by ``PAD`` floats so
    that a panel stored transposed falls in distinct banks.

    ``tensor``: the product is taken on tensor cores (WMMA): the block's 8 warps,
    ``WARPS_M x WARPS_N``, each multiply an ``m / 2 x n / 4`` part of the tile as
    16 x 16 fragments from the same panels; at the end the fragments pass to the
    threads' layout above through shared memory (a row of fragments at a time), so
    what follows the product is the same either way. ``operands``: the type the panels
    hold and the tensor cores read -- float32 read as TF32 (m16n16k8), or bfloat16 or
    float16 (m16n16k16, twice TF32's rate; a value computed in the kernel, such as a
    fused attention's probabilities, is rounded to it on the way in). ``stages``: 1,
    each step's panels loaded into shared memory between two barriers, then
    multiplied; 2, software pipelining -- the next step's panel elements loaded into
    registers while the current panels are multiplied, then stored into a second pair
    of panels (one barrier a step; twice the panels' shared memory, and registers for
    the elements in flight).

    >>> BlockTile(128, 128, 8, 8, 8).threads
    256
    """
    m: int
    n: int
    depth: int
    thread_m: int
    thread_n: int
    tensor: bool = False
    operands: DType = DType.float32
    stages: int = 1

    PAD = 4                 # floats a row of float panels (or probabilities) is padded by
    PAD_BYTES = 4 * PAD     # (16 bytes: 8 halves in a row of half panels)
    WARPS_M = 2
    WARPS_N = 4
    FRAGMENT = 16           # a WMMA fragment's rows and columns

    def __post_init__(self):
        if self.stages not in (1, 2):
            raise ValueError(f"a tile's panels pass in 1 or 2 stages, not {self}")
        if self.operands is not DType.float32 and not (self.tensor and self.operands.is_half):
            raise ValueError(f"a tile's panels hold float32, or bfloat16 or float16 on tensor "
                             f"cores, not {self}")
        if self.tensor and (self.m % (self.WARPS_M * self.FRAGMENT)
                            or self.n % (self.WARPS_N * self.FRAGMENT)
                            or self.depth % self.fragment_k
                            or self.m // self.thread_m != self.FRAGMENT
                            or self.threads != CUDA_WARP * self.WARPS_M * self.WARPS_N):
            raise ValueError(f"a tensor-core tile takes 8 warps over rows in 32s, columns in "
                             f"64s, depth in {self.fragment_k}s and each thread's rows 16 "
                             f"apart, not {self}")

    @property
    def fragment_k(self) -> int:
        """A WMMA product's depth: 8 in TF32 (m16n16k8), 16 in a half type (m16n16k16)."""
        return 16 if self.operands.is_half else 8

    @property
    def threads(self) -> int:
        return (self.m // self.thread_m) * (self.n // self.thread_n)

    @property
    def shared_bytes(self) -> int:
        """A's and B's panels in shared memory (their rows PAD_BYTES longer; two pairs
        of them in 2 stages); a tensor tile's fragments pass to the threads through an
        array of 16 rows of floats beside them."""
        size = self.operands.itemsize
        pad = self.PAD_BYTES // size
        panels = self.stages * size * self.depth * (self.m + self.n + 2 * pad)
        handover = 4 * self.FRAGMENT * (self.n + self.PAD)
        return panels + handover if self.tensor else panels

    def over(self, n: int) -> "BlockTile":
        """The tile of the same rows and threads over ``n`` columns (a fused attention's
        output rows, beside its scores' block): as many columns a thread as cover them
        (a tensor tile's columns: whole fragments for each warp).

        >>> BlockTile(64, 64, 8, 4, 4).over(72)
        BlockTile(m=64, n=80, depth=8, thread_m=4, thread_n=5, tensor=False, operands=<DType.float32: 'float32'>, stages=1)
        """
        across = self.n // self.thread_n
        per = -(-n // across)
        if self.tensor:
            whole = self.WARPS_N * self.FRAGMENT // across
            per = -(-per // whole) * whole
        return replace(self, n=across * per, thread_n=per)

    @property
    def rows_bytes(self) -> int:
        """This tile's values in shared memory, its rows padded by PAD (a fused
        attention's probabilities, passed to the second product)."""
        return 4 * self.m * (self.n + self.PAD)


@dataclass(frozen=True)
class OnlineSoftmax:
    """Fused attention's softmax taken one block of keys at a time (FlashAttention's
    online recurrence): per tile row a running maximum ``m`` and sum ``l``; for each
    block the scores' block, the ``prefix`` (elementwise: scale, mask) making the
    ``logits`` the softmax normalizes, ``exp(logits - m_new)``, ``l`` and the output
    rows rescaled by ``exp(m - m_new)`` and the block's probabilities times V's block
    added; the output rows divided by ``l`` at the end. Scores live in a tile of
    ``block`` keys, whatever the sequence length.

    >>> OnlineSoftmax("z", ("n3", "n4"), 128).block
    128
    """
    logits: str
    prefix: tuple[str, ...]
    block: int
    # the keys a constant causal mask hides, skipped where the run-time checks allow
    # (fusion/key_limit.py), or None: every block taken
    limit: KeyLimit | None = None


@dataclass(frozen=True)
class SecondGemm:
    """Fused attention: after a gemm's row epilogue, each tile's finished rows
    (``value``: the softmax's probabilities, kept in the tile, never written out) are
    multiplied by ``b`` (V: ``k x n`` per batch, read in place) into ``result``, as
    ``value @ b`` would.

    >>> SecondGemm("p", Operand.whole("v", (8, 128, 64)), 128, 64, "o").n
    64
    """
    value: str
    b: Operand
    k: int
    n: int
    result: str
    # where the product is written: ``result`` itself, row-major (None), or the value
    # that layout ops after it make of it (the heads merged back: [B, H, S, D] ->
    # [B, S, H x D]), each product row at its stride there
    out: Operand | None = None
    # V packed per run for the micro-kernel (PACK_PER_RUN), or "" (BLAS sgemm per tile)
    packed: str = ""
    # the softmax taken a block of keys at a time (None: whole rows of scores per tile)
    online: OnlineSoftmax | None = None

