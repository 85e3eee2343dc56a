"""The kernel IR: a small structured program both renderers print.

Loops are bound to the hardware (``flat``: every thread of the grid strides over the
range; ``grid``: one block per iteration; ``block``: the threads of a block stride
over it; ``warp``: one warp per iteration, ``per_block`` iterations per block;
``lane``: the 32 threads of a warp stride over it; ``serial``). Every loop strides
over the grid, so any grid size is correct -- which lets a cooperative kernel cap its
grid to one wave. ``GridSync`` is a grid-wide barrier between phases (AStitch's global
stitching): cooperative_groups' grid sync written out on the GPU
(``include/grid_sync.cuh``); on the CPU each phase is its own OpenMP parallel loop,
whose implicit barrier is the grid barrier.

Statements are loads and stores (where storage types and conversions differ by
target), ``Let``/``Assign`` of target-neutral C expressions, ``If``, a block-wide
(or warp-wide) reduction and a once-per-block region. The C renderer runs ``flat`` and
``grid`` loops in parallel with OpenMP and ``block`` loops serially, so the CPU runs
the same schedule the GPU does, with one thread per block.

The statements read and write kernel parameters (:class:`Buffer`) and on-chip arrays
(:class:`Scratch`); the kernel that holds them, with its launch, is
``codegen/kernel.py``'s :class:`~workbench.codegen.kernel.Kernel`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..fusion.gemm_shape import BlockTile, Im2col
from ..dtypes import DType


@dataclass(frozen=True)
class Buffer:
    """A kernel parameter: ``name`` is a sanitized identifier, ``value`` the graph value."""
    name: str
    value: str
    dtype: DType
    numel: int
    is_output: bool
    # global memory owned by the kernel (values passed between phases, partial
    # results of a split row): written and read by the kernel, not a graph value
    workspace: bool = False
    # a workspace kept from run to run, written by the first run only (a constant
    # operand packed for the GEMM micro-kernel): no traffic of its own once written
    persistent: bool = False
    # a right operand packed into the micro-kernel's column panels (up to PANEL x the
    # operand: each row padded to whole panels), persistent or packed by every run
    packed: bool = False
    # an input's elements the kernel never loads (fusion/footprint.py: the table rows a
    # gather does not select, what a slice or a window skips); 0: it reads them all
    unread: int = 0

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def read_bytes(self) -> int:
        """Bytes of an input the kernel reads, each element once."""
        return max(0, self.numel - self.unread) * self.dtype.itemsize


@dataclass(frozen=True)
class Scratch:
    """On-chip storage for one value across a row, indexed by the column: in shared
    memory (regional stitching; per warp under the warp mapping), or in registers
    (``space="register"``: each thread keeps the ``slots`` elements of its own columns,
    its tile of the row), or both (``space="hybrid"``, a group input's row too long
    for either alone: the tile's first ``slots`` elements of each thread in registers,
    the rest in shared memory, ``numel`` of them, element j of thread t at
    j * ``threads`` + t, so a warp's lanes hit 32 banks). On the CPU either is a
    per-thread array -- except that a register (or hybrid) copy of a group input
    (``source``) is simply read again from memory there, where the caches keep the
    row, and a computed row may live in an output's row (``home``)."""
    name: str
    value: str
    dtype: DType          # compute type
    numel: int
    rows: int = 1         # rows of a block sharing the array (warp mapping: one per warp)
    space: str = "shared"  # shared | register | hybrid
    slots: int = 0        # register: elements per thread (its tile: per_thread x vector)
    source: "Buffer | None" = None   # register: the input buffer the row was read from
    threads: int = 0      # hybrid: threads sharing the row (the shared part's stride)
    # register, CPU: the output whose row holds the value until the last pass reads it
    # back and overwrites it with the output (``RowLowerer._home``)
    home: "Buffer | None" = None


@dataclass(frozen=True)
class DeclareScratch:
    scratch: Scratch
    note: str = ""        # what it holds, for the declaration's comment ("": a row's)
    init: str = ""        # a C expression every element starts as ("": none)


@dataclass(frozen=True)
class Let:
    var: str
    dtype: DType          # compute type
    expr: str             # target-neutral C
    # the graph node (sanitized id, ``n12``) this statement computes, or "": printed as a
    # trailing comment, so a reader -- and the app's source map -- can tell which lines
    # implement which node (Compiler Explorer's source-to-assembly colouring)
    node: str = ""


@dataclass(frozen=True)
class Assign:
    var: str
    expr: str
    node: str = ""        # as Let.node


@dataclass(frozen=True)
class Load:
    var: str
    buf: "Buffer | Scratch"
    offset: str
    # inside a tiled loop: the access is unit-stride in the column and aligned, so a
    # thread's ``vector`` consecutive elements may move as one access
    vector: int = 1
    # a load from a register copy of an input: where the element lives in memory
    src_offset: str = ""


@dataclass(frozen=True)
class Store:
    buf: "Buffer | Scratch"
    offset: str
    expr: str
    vector: int = 1
    node: str = ""        # a graph output's store: the node computing it (as Let.node)
    # a store into a row array kept in an output's row (Scratch.home): where it lands
    dst_offset: str = ""


@dataclass(frozen=True)
class BlockReduce:
    """Combine ``var`` across the threads of a block; every thread gets the result."""
    var: str
    dtype: DType
    combine: str          # "{0}" and "{1}" stand for the two partials
    identity: str
    slot: int             # which shared-memory scratch array to use
    width: str = "block"  # block | warp (warp shuffles only, no shared memory)


@dataclass(frozen=True)
class OncePerBlock:
    """Run by one thread of the row's owners (the block, or the warp when width=warp)."""
    body: tuple["Stmt", ...]
    width: str = "block"


@dataclass(frozen=True)
class If:
    cond: str             # target-neutral C
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class GridSync:
    """Grid-wide barrier: every block finishes the phase before any starts the next."""
    reason: str = ""


@dataclass(frozen=True)
class Gemm:
    """``c[c_off..] = a[a_off..] @ b[b_off..]`` for one tile: ``rows x cols`` of the
    product over the inner dimension ``k``, row-major with leading dimensions ``lda``,
    ``ldb``, ``ldc`` (offsets and extents are C expressions). The CPU calls the host
    BLAS's single-threaded sgemm for it (the kernel's ``blas`` argument), inside the
    kernel's own parallel loop, so one thread pool runs everything."""
    a: Buffer
    b: Buffer
    c: Buffer
    a_off: str
    b_off: str
    c_off: str
    rows: str
    cols: str
    k: int | str          # (a block of the inner dimension: a C expression)
    lda: int
    ldb: int
    ldc: int
    node: str = ""        # the matmul's node id (as Let.node)
    trans_a: bool = False     # A (B) stored column-major: BLAS's transposed operand
    trans_b: bool = False
    # b is packed into column panels (PackB): the generated micro-kernel multiplies the
    # tile instead of sgemm, b_off is the tile's first panel and ldb unused
    packed: bool = False
    # (packed only) c += the product instead of c = it; the packed panels' rows when the
    # product takes a block of them (0: k, the whole panel)
    accumulate: bool = False
    panel_rows: int = 0
    # (packed only) A and B are bfloat16 and B is packed in pairs of rows (PackB.pairs):
    # the micro-kernel takes two rows of k per step (codegen/microkernel.py)
    pairs: bool = False
    # (packed only) the product made transposed (``wb_gemm_packed_t``): ``b`` holds A
    # transposed, packed (a 1 x 1 convolution's filters, packed once), ``a`` is B read
    # in place (the input: element (row r, column i) at a[a_off + r x lda + i]), and
    # each block of positions x filters is stored transposed into ``c``
    transposed: bool = False
    # (transposed only) ``a`` read in place by the micro-kernel's broadcasts, not copied
    # into slivers (``wb_gemm_transposed``; fusion/gemm/transposed.py): element (column
    # i, row r) at a[a_off + i x lda + r] with ``trans_a``, else at a[a_off + i + r x
    # lda]; ``b`` holds the other operand transposed, packed by every run
    a_in_place: bool = False
    # (packed only) ``a`` is a constant A packed once into the micro-kernel's slivers
    # (PackA), ``a_off`` the tile's: no sliver is copied while the tile is multiplied
    a_packed: bool = False
    # (packed only, not pairs) the PackB of B's panels this tile alone reads, made by
    # the product itself just before it multiplies them (``wb_gemm_packing_b``;
    # fusion/gemm/right_pack.py, packs_b_in_tile): ``b`` is the pack, ``b_off`` the
    # tile's first panel, ``packs_b.panel`` that panel's index
    packs_b: PackB | None = None
    # a GPU tile (fusion.gemm_shape.BlockTile): the block's threads compute it together,
    # each its own elements into ``c``, a register Scratch (the CUDA prelude's
    # wb_gemm_tile); ``ldc`` unused. The C rendering computes the whole tile into
    # ``c`` row-major (``block.n`` wide), as one thread does the block's work there
    block: BlockTile | None = None


@dataclass(frozen=True)
class ThreadTile:
    """Each element of a GPU GEMM tile (``block``) this thread holds, rows ``r0`` to
    ``r1`` and columns ``c0`` to ``c1`` of the product (C expressions): ``body`` runs
    with ``r`` (the row in the batch item), ``col``, ``wb_s`` (the element's slot in
    the accumulator :class:`Gemm` filled) and ``wb_si`` (its row's slot in a per-row
    register array, :class:`OnlineStep`'s ``m`` and ``l``) bound. The CUDA rendering unrolls the
    thread's ``thread_m x thread_n`` elements (constant slots: the accumulator stays in
    registers); the C rendering runs over the whole tile (slot ``(r - r0) x block.n +
    col - c0``)."""
    block: BlockTile
    r0: str
    r1: str
    c0: str
    c1: str
    body: tuple["Stmt", ...]


@dataclass(frozen=True)
class OnlineStep:
    """Fused attention on a GPU, one block of keys (FlashAttention's online softmax;
    the CUDA prelude's wb_online_step): ``s`` holds the block's logits as a
    :class:`Gemm` with ``block`` left them (key columns from ``valid``, a C expression,
    on ignored), ``m`` and ``l`` the running maximum and sum of each row the thread
    holds, ``o`` its output elements (``out_block``'s layout, the same rows), rescaled;
    the probabilities are written to ``p`` (shared, ``block.m`` rows of ``block.n`` +
    ``BlockTile.PAD``), for the second product. The C rendering does the whole tile."""
    s: Scratch
    o: Scratch
    m: Scratch
    l: Scratch
    p: Scratch
    block: BlockTile
    out_block: BlockTile
    valid: str
    node: str = ""


@dataclass(frozen=True)
class PackA:
    """Copy a constant left operand (``m x k``, element ``(i, r)`` at ``a[a_off + i x
    row_stride + r x col_stride]``) into ``packed`` on the kernel's first run, in the
    slivers the GEMM micro-kernel reads, tile by tile of ``tile_m`` rows
    (``wb_pack_a_once``, codegen/microkernel.py); ``packed`` is a persistent workspace
    that records when it is done. With ``sliver`` (C expressions: ``tile``, the row
    tile, and ``sliver``, its sliver) one sliver, by every run, into ``packed`` from
    ``packed_off`` (an activation: a parallel loop packs them all,
    ``wb_pack_a_sliver``; fusion/gemm/left_pack.py)."""
    a: Buffer
    packed: Buffer
    a_off: int | str
    m: int
    k: int
    row_stride: int
    col_stride: int
    tile_m: int
    node: str = ""
    tile: str = ""
    sliver: str = ""
    packed_off: str = "0"


@dataclass(frozen=True)
class PackB:
    """Copy a right operand (``k x n``, element ``(r, c)`` at ``b[b_off + r x row_stride
    + c x col_stride]``) into ``packed``'s column panels (from ``packed_off``), the
    layout the GEMM micro-kernel reads (codegen/microkernel.py). With ``panel`` (a C
    expression) one panel, by every run (an activation; a parallel loop packs them
    all); without, every panel on the kernel's first run only: ``packed`` is then a
    persistent workspace that records when it is done (a constant)."""
    b: Buffer
    packed: Buffer
    b_off: int | str
    k: int
    n: int
    row_stride: int
    col_stride: int
    node: str = ""
    panel: str = ""
    packed_off: str = "0"
    # a bfloat16 B packed two rows to a 32-bit word, for a bfloat16 A (Gemm.pairs)
    pairs: bool = False


@dataclass(frozen=True)
class Comment:
    text: str


@dataclass(frozen=True)
class Loop:
    var: str
    extent: int
    bind: str             # flat | grid | block | warp | lane | serial
    body: tuple["Stmt", ...]
    vector: int = 1       # elements per thread per step (flat loops)
    # (accumulator, OpenMP operator) when the loop reduces; operator "" if lanes
    # may not be combined in any order
    reduction: tuple[str, str] | None = None
    per_block: int = 1    # warp loops: iterations (rows) one block takes at a time
    start: str = ""       # C expressions overriding the range [0, extent) (a split
    stop: str = ""        # row's chunk of columns)
    # block / lane loops over a row kept on chip: (threads, per_thread, vector, shift)
    # -- the row's columns dealt out so thread t owns (k * threads + t) * vector + v
    # - shift for k < per_thread, v < vector (the GPU unrolls this tile; the CPU loops
    # over the row); shift: "" or a C expression, the row's misalignment when the
    # vector does not divide its length
    tile: tuple[int, int, int, str] | None = None
    # index arithmetic in 64 bits: the kernel touches a buffer whose offsets (plus a
    # grid stride) can pass 2^31 - 1
    wide: bool = False


@dataclass(frozen=True)
class WidenOnce:
    """A bfloat16 constant (``n`` elements of ``src``) widened into ``dst``, a
    persistent float32 workspace, on the kernel's first run only (a bfloat16
    convolution's filters, multiplied in float32 by the micro-kernel against its
    widened patches, or by sgemm)."""
    src: Buffer
    dst: Buffer
    n: int
    node: str = ""


@dataclass(frozen=True)
class DepthwiseLanes:
    """A 2-D depthwise convolution of ``channels`` consecutive channels of one image,
    the channels in the vectors' lanes (``wb_depthwise_lanes``, codegen/microkernel.py):
    the input planes from ``x[x_off]``, each channel's filter from ``f[f_off]``, the
    output planes into ``c[c_off]``; ``window`` the convolution's 2-D geometry (planes,
    taps, strides, dilations, begin pads). ``channels`` is a C expression."""
    x: Buffer
    f: Buffer
    c: Buffer
    x_off: str
    f_off: str
    c_off: str
    channels: str
    window: Im2col
    node: str = ""


@dataclass(frozen=True)
class ConvLanes:
    """A 2-D convolution of one image computed directly, the filters in the vectors'
    lanes (``wb_conv_lanes``, codegen/microkernel.py): the input planes from
    ``x[x_off]``, filters ``f0`` to ``f1`` of ``f`` (the filters transposed and packed
    into panels, as :class:`PackB` packs them), output rows ``oy0`` to ``oy1`` into
    ``c[c_off]`` (filter ``f0``'s first, the filters ``ldc`` apart); ``window`` the
    convolution's 2-D geometry (``Im2col.planar``: its channels, planes, taps, strides,
    dilations, begin pads). ``f0``, ``f1``, ``oy0`` and ``oy1`` are C expressions."""
    x: Buffer
    f: Buffer
    c: Buffer
    x_off: str
    c_off: str
    ldc: int
    f0: str
    f1: str
    oy0: str
    oy1: str
    window: Im2col
    node: str = ""


Stmt = Union[Let, Assign, Load, Store, BlockReduce, OncePerBlock, Comment, Loop,
             DeclareScratch, If, GridSync, Gemm, ThreadTile, OnlineStep, PackA, PackB,
             WidenOnce, DepthwiseLanes, ConvLanes]
