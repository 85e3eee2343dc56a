"""A convolution as one GEMM kernel (implicit im2col; a grouped or depthwise one a
batch of GEMMs, one per image and group) with an elementwise epilogue at its output's
shape (a bias, a BatchNorm's scale and shift, a ReLU, a residual) -- or why not. Which
form computes it is :mod:`.conv_rule`'s; this module checks what it may take and cuts
each form's tiles: each tile's patches gathered straight into the micro-kernel's panels
(PACK_TILE), or row-major for sgemm; a 1 x 1 one's patches are its input, read in place
(``Im2col.pointwise``). The CPU backend runs it only so far.

    >>> analyze_conv(g, ns, io, cpu, conv)                      # doctest: +SKIP
    Schedule(kind=<ScheduleKind.gemm: 'gemm'>, ...)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...device import Device
from ...dtypes import DType
from ...errors import FusionRefused
from ...ir import Graph
from ...ops import Kind, get_op
from ...ops.conv import conv_attrs
from ...ops.strided import MatrixView, Strided
from ..gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES, PACK_FILTERS,
                          PACK_PER_RUN, PACK_TILE, GemmShape, Im2col, Operand)
from ..mapping import ScheduleKind
from ..schedule import GroupIO, Schedule
from .conv_rule import IN_PLACE, conv_form, micro_kernel_wins
from .direct import direct_tiling
from .launch import GemmLaunch, set_tile
from .legality import check_epilogue, product_dest, takes_dtype
from .planes import plane_tile
from .tiles import (CPU_TILES, LANES_ALIGN, PANEL, cpu_tiling, for_cores, micro_kernel_fits,
                    round_up, rows_per_tile)

# (a GPU's GEMM kernel takes matmuls only: gpu_tiles.gpu_tiling)
GPU_REFUSAL = "a convolution's GEMM kernel runs on the CPU backend only so far"


@dataclass(frozen=True)
class _Conv:
    """A convolution as batched GEMMs: per image and group, ``k`` filters (``a``, their
    rows ``depth`` weights) times the patches ``cols`` of ``positions`` output positions,
    the product written into ``dest`` (``elements`` of them) and finished by
    ``epilogue_ops`` ops."""
    node: object
    images: int
    groups: int
    k: int
    cols: Im2col
    a: Operand
    per_group: MatrixView     # the filters, a group's run of rows per GEMM batch item
    in_place: Operand         # a 1 x 1 one's patches: its input, a matrix in place
    dest: str
    elements: int
    epilogue_ops: int
    half: bool

    @property
    def positions(self) -> int:
        return math.prod(self.cols.out)

    @property
    def depth(self) -> int:
        return self.cols.rows

    def schedule(self, t: GemmShape, **more) -> Schedule:
        """The gemm schedule of tiles ``t`` of this convolution."""
        return Schedule(ScheduleKind.gemm, elements=self.elements, gemm=replace(
                            t, epilogue_ops=self.epilogue_ops, im2col=self.cols,
                            col_axes=len(self.cols.out), **more))


def analyze_conv(g: Graph, ns, io: GroupIO, device: Device, conv,
                 lc: GemmLaunch = GemmLaunch()) -> Schedule:
    """A convolution as a GEMM (implicit im2col): per batch item and group, the
    group's filters [K, C x taps] times its input channels' patches [C x taps,
    positions], the patches of each column tile gathered into a per-thread buffer, then
    the elementwise epilogue at the output's shape."""
    c = _as_gemms(g, ns, io, device, conv)
    if lc.online != -1 or lc.skip != -1:
        raise FusionRefused(f"{conv.id} ({conv.op}) has no softmax to take a block of keys "
                            f"at a time ({'online' if lc.online != -1 else 'skip'})")
    # the patches gathered straight into the micro-kernel's panels, where it runs and a
    # panel's width of them fits a thread's buffer; the rule takes it for filters of
    # fewer than ConvRule.micro_depth weights, and for every bfloat16 convolution (whose
    # patches it multiplies in pairs, two rows of k per step, where sgemm would need
    # them and the filters widened)
    can = PACK_TILE if micro_kernel_fits(device) and (
        c.cols.pointwise or c.depth * PANEL <= CPU_TILES.scratch) else ""
    micro = micro_kernel_wins(c.cols, c.k)
    packed = lc.packs(can, f"{conv.id}'s patches", per_run=micro or c.half)
    form = conv_form(c.cols, c.k, c.groups, half=c.half, can=can, packed=packed, micro=micro,
                     constant=conv.inputs[1] in g.constants, blas=lc.blas)
    if form in (DEPTHWISE_LANES, DEPTHWISE_PLANES):
        return c.schedule(_depthwise(c, form, device.units, lc))
    if form == CONV_DIRECT:
        return c.schedule(direct_tiling(conv, c.cols, c.a, c.images, c.k, c.dest,
                                     c.epilogue_ops, device.units, lc))
    if form == PACK_FILTERS:
        return c.schedule(_transposed(c, device.units, lc), in_place=True)
    if form == IN_PLACE:
        # the input in place, packed by every run like an activation's B (or read by
        # sgemm) -- a matmul's tiles, cut over the filters too (ResNet-50's 1 x 1
        # convolutions: 2048 filters over 7 x 7 positions were two tiles of 25
        # columns). (A bfloat16 one for sgemm is widened as it is gathered, below.)
        # (A's batch modes whatever the groups: cpu_tiling takes the batch from them)
        return c.schedule(cpu_tiling(Operand(c.a.value, c.per_group), c.in_place,
                                  conv.outputs[0], c.dest, device.units,
                                  packed=PACK_PER_RUN if packed else "", lc=lc),
                       in_place=True)
    return c.schedule(_gathered(c, packed, device.units, lc))


def _as_gemms(g: Graph, ns, io: GroupIO, device: Device, conv) -> _Conv:
    """The convolution as batched GEMMs, or FusionRefused: on a CPU, of a dtype the
    kernel takes, its operands read from memory, an elementwise epilogue at its shape,
    an output to write into, a panel of patches within a thread's buffer."""
    if device.is_gpu:
        raise FusionRefused(f"{conv.id} ({conv.op}) as a GEMM: {GPU_REFUSAL}")
    x, w = (g.value(i) for i in conv.inputs[:2])
    out = g.value(conv.outputs[0])
    d = len(x.shape) - 2
    group, strides, dil, pads = conv_attrs(conv.attr_map, d, conv.op)
    if not takes_dtype(out.dtype, device):
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
    check_epilogue(g, ns, conv, shape, same=lambda a, b: a == b)
    dest = product_dest(g, conv.outputs[0], io, half, lambda s: s == shape)
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
    if depth * min(positions, CPU_TILES.align) > CPU_TILES.scratch:
        raise FusionRefused(f"{conv.id} ({conv.op}): {depth} weights per filter; even "
                            f"{CPU_TILES.align} positions of patches would not fit a "
                            "thread's buffer, so it stays a library call")
    # the filters: one matrix, or a group's run of rows per GEMM batch item (stride 0
    # over the batch items)
    per_group = MatrixView(0, ((n, 0), (group, k * depth)), k, depth, depth, 1)
    a = Operand(conv.inputs[1], Strided.contiguous((k, depth)).matrix() if group == 1 else
                per_group)
    # a 1 x 1 convolution's patches are the input itself: each batch item's (and
    # group's) channels x positions, a matrix in place
    c = x.shape[1]
    in_place = Operand(conv.inputs[0], MatrixView(
        0, ((n, c * positions), (group, c // group * positions)), c // group, positions,
        positions, 1))
    return _Conv(conv, n, group, k, cols, a, per_group, in_place, dest, out.numel,
                 len(rest) + (len(conv.inputs) == 3), half)


def _depthwise(c: _Conv, form: str, units: int, lc: GemmLaunch) -> GemmShape:
    """A depthwise convolution's tiles: an image's channels are the rows, tiles of
    whole planes, computed a vector of channels at a time over small planes
    (DEPTHWISE_LANES), else a padded plane at a time (DEPTHWISE_PLANES); blas=0 keeps
    the tap-by-tap path (codegen lower/convolution.py's direct_taps), blas=1 sgemm, for
    the tuner to compare."""
    conv, group = c.node, c.groups
    if lc.tile_n:
        raise FusionRefused(f"tile_n: {conv.id}'s planes are whole in each tile (a "
                            "depthwise convolution, its channels the rows)")
    tile_m = (min(group, round_up(rows_per_tile(c.images, group, group, units), LANES_ALIGN))
              if form == DEPTHWISE_LANES else plane_tile(group, units))
    if lc.tile_m:
        tile_m = set_tile("tile_m", lc.tile_m, group, 1)
    taps = math.prod(c.cols.kernel)
    return GemmShape(c.images, group, c.positions, taps,
                     Operand(conv.inputs[1], Strided.contiguous((group, taps)).matrix()),
                     Operand(conv.inputs[0], c.a.view), tile_m, c.positions,
                     conv.outputs[0], c.dest, packed_b=form)


def _transposed(c: _Conv, units: int, lc: GemmLaunch) -> GemmShape:
    """Few positions: the product made transposed, the filters in the vectors' lanes
    (packed once), the positions the micro-kernel's rows; tiles of whole panels of
    filters, as many as keep the cores busy."""
    k = c.k
    tile_m = round_up(rows_per_tile(c.images, k, k, units), PANEL)
    if lc.tile_m:
        tile_m = set_tile("tile_m", lc.tile_m, k, PANEL)
    if lc.tile_n:
        raise FusionRefused(f"tile_n: {c.node.id}'s {c.positions} positions are one tile "
                            "(its product is made transposed, positions as rows)")
    return GemmShape(c.images, k, c.positions, c.depth, c.a, c.in_place, min(tile_m, k),
                     c.positions, c.node.outputs[0], c.dest, packed_b=PACK_FILTERS)


def _gathered(c: _Conv, packed: str, units: int, lc: GemmLaunch) -> GemmShape:
    """The patches gathered by each tile (for the micro-kernel's panels where
    ``packed``, row-major for sgemm): every output channel in one tile, so each column
    tile's patches are gathered once; columns cut so the gathered patches stay within
    ``CpuTiles.im2col`` elements and the tiles come to a multiple of the cores."""
    k, depth, positions, half = c.k, c.depth, c.positions, c.half
    tiles = CPU_TILES
    tile_n = min(positions, max(tiles.align, tiles.im2col // depth))
    if half:   # the product's float32 tile (every filter's row of it) fits a thread too
        tile_n = min(tile_n, max(tiles.align, tiles.im2col // max(k, 1)))
    if packed and tile_n < min(PANEL, positions) and not half:
        # deep filters over few positions on the micro-kernel (blas=0: the rule gives
        # them to sgemm; ResNet-50's last stage, 4608 weights per filter over 49
        # positions): it multiplies whole panels, so a tile of 25 columns cost what 64
        # do. One panel of patches (within CpuTiles.scratch), the cores kept busy by
        # tiles of the filters instead, each gathering the patches
        tile_n = min(PANEL, positions)
    batch = c.images * c.groups
    col_tiles = min(positions, for_cores(batch, -(-positions // tile_n), units))
    if packed and -(-positions // col_tiles) < min(PANEL, tile_n):
        col_tiles = -(-positions // tile_n)   # (not cut below a panel for the cores...)
    tile_n = max(1, -(-positions // col_tiles))
    # (... the filters are, where the tiles come short of a multiple of the cores)
    tile_m = rows_per_tile(batch * col_tiles, k, k, units) if packed else k
    if lc.tile_n:
        tile_n = set_tile("tile_n", lc.tile_n, positions, 1)
    if lc.tile_m:
        tile_m = set_tile("tile_m", lc.tile_m, k, 1)
    if lc.tile_n and max(_patches(depth, tile_n, packed), k * tile_n if half else 0) > \
            tiles.scratch:
        raise FusionRefused(f"tile_n={lc.tile_n}: {depth} x {tile_n} patches (and a "
                            f"bfloat16 product's {k} x {tile_n} tile) would not fit a "
                            "thread's buffer")
    return GemmShape(batch, k, positions, depth, c.a, Operand(c.node.inputs[0], c.a.view),
                     tile_m, tile_n, c.node.outputs[0], c.dest, packed_b=packed)


def _patches(depth: int, tile_n: int, packed) -> int:
    """Floats of a convolution tile's gathered patches: ``depth`` rows of ``tile_n``
    columns, row-major for sgemm, or whole panels for the micro-kernel (``packed``)."""
    return depth * (-(-tile_n // PANEL) * PANEL if packed else tile_n)
