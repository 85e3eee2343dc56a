"""Convolutions and poolings over windows: a convolution's right operand in each form the
planner gives it (``GemmShape.packed_b``), and a CPU's 2-D pooling a plane at a time.

A convolution is a GEMM of its filters (A) by its input's patches (B, ``Im2col``): the
patches gathered per tile (im2col, into panels or not), gathered nowhere (the filters in
the vector lanes: ``ConvLanes``, ``DepthwiseLanes``), or each tap of a depthwise filter
added into the tile (``direct``) or summed a padded plane at a time (``depthwise_planes``,
``codegen/planes.py``, which pooling shares). Functions over the GEMM kernel's lowerer
(``gemm.GemmLowerer`` calls them; the pooling's is the row kernel's).
"""
from __future__ import annotations

import math

import numpy as np

from ...dtypes import DType, c_literal
from ...fusion.gemm.tiles import PANEL
from ...fusion.gemm.planes import PLANE_PHASES_MAX, plane_tile
from ...fusion.gemm_shape import PACK_TILE, Im2col
from ...ops import Index
from ...ops.reduce import reduce_axes
from ...ops.window import window_attrs
from .. import planes
from ..kir import (Assign, Buffer, Comment, ConvLanes, DeclareScratch, DepthwiseLanes, Gemm,
                   Let, Load, Loop, PackB, Scratch, Store)
from ..microkernel import packed_numel, panel_rows
from .base import Lowerer

# a CPU pooling of at most this many taps, whose planes with their border hold at most
# POOL_PLANE_SPAN floats (a 181 x 181 plane, 128 KiB of a thread's stack), is lowered a
# plane at a time (pool_planes), each output's taps read in one unrolled expression.
# (16384 before: Xception's and InceptionV3's first max pools, over 147 x 147, went to
# the row kernel, its taps gathered: Xception's 4.7 ms)
POOL_TAPS = 64
POOL_PLANE_SPAN = 32768


def depthwise_lanes(lw: Lowerer, dest, c_off: str) -> tuple:
    """``DEPTHWISE_LANES``: the statements computing the tile's product, its rows an
    image's channels (whole planes), a vector of channels at a time."""
    t = lw.sched.gemm
    ic, mm = t.im2col, lw.g.producer[t.result]
    return (Comment("the tile's channels, a vector of them at a time"),
            DepthwiseLanes(lw.buffers[ic.value], lw.buffers[t.a.value],
                           dest, f"(bt * {t.m} + r0) * {math.prod(ic.spatial)}",
                           f"r0 * {t.k}", c_off, "r1 - r0", ic, mm.id))


def depthwise_planes(lw: Lowerer, dest, first: str) -> tuple:
    """A 2-D depthwise convolution (``DEPTHWISE_PLANES``), the tile's channels one
    plane at a time: the plane copied into the inside of its stride phases
    (``codegen/planes.py``), whose border of zeros (what the taps meet past the
    edges) is written once per tile, then one flat loop over its positions, each
    the sum of its taps in a register, stored once -- where adding each tap into
    the tile in memory (``direct``) read and wrote every output once per tap."""
    t, ic = lw.sched.gemm, lw.sched.gemm.im2col
    f = lw.buffers[t.a.value]
    (kh, kw), (oh, ow) = ic.kernel, ic.out
    # the border zeroed once per tile; each channel's plane then copied into its
    # inside
    ph = planes.Phases(ic)
    xp, zero, fill = planes.padded_plane(
        lw.buffers[ic.value], ph, f"(bt * {t.m} + r) * {math.prod(ic.spatial)}", "0.0f")
    weights = tuple(Load(f"wb_w{j}", f, f"r * {kh * kw} + {j}") for j in range(kh * kw))
    # (in the taps' order, as the reference adds them)
    total = " + ".join(f"wb_w{j} * xv{j}" for j in range(kh * kw))
    rows_out, rows = planes.window_rows(xp, ph, total, dest,
                                        f"{first} + (r - r0) * {oh * ow}")
    return (DeclareScratch(xp), *map(DeclareScratch, rows_out),
            Comment("a padded plane at a time, split into its stride phases; each "
                    "output's taps summed in a register (codegen/planes.py)"), zero,
            Loop("r", t.m, "serial", (*fill, *weights, *rows), start="r0", stop="r1"))


def filters_in_lanes(lw: Lowerer, dest, c_off: str, ldc: int) -> tuple[tuple, tuple]:
    """``CONV_DIRECT``: no patches, the filters in the lanes -- (the statements computing
    the tile's product, the statements packing the filters on the first run)."""
    t = lw.sched.gemm
    mm = lw.g.producer[t.result]
    ic = t.im2col.planar()          # (a 1-D convolution: one row)
    packed, packing = filters_packed(lw, mm.id)
    # (c0 and c1 whole output rows; r0 a multiple of two vectors of filters)
    ow = ic.out[1]
    return (Comment("the tile's output rows: each tap's input times a "
                    "vector of filters, no patches gathered"),
            ConvLanes(lw.buffers[ic.value], packed, dest,
                      f"bt * {ic.channels * math.prod(ic.spatial)}", c_off,
                      ldc, "r0", "r1", f"c0 / {ow}", f"c1 / {ow}", ic,
                      mm.id)), packing


def transposed_product(lw: Lowerer, dest, c_off: str, ldc: int) -> tuple[tuple, tuple]:
    """``PACK_FILTERS``: few positions, the product made transposed -- (the statements
    computing the tile's product, the statements packing the filters on the first
    run)."""
    t = lw.sched.gemm
    b, mm = t.b.view, lw.g.producer[t.result]
    packed, packing = filters_packed(lw, mm.id)
    # (r0 a whole number of panels of filters, or 0)
    return (Comment("the tile's positions x filters, stored transposed"),
            Gemm(lw.buffers[t.b.value], packed, dest,
                 f"{b.batch_offset('bt')} + c0", f"r0 * {t.k}", c_off,
                 "r1 - r0", "c1 - c0", t.k, b.row_stride, PANEL, ldc, mm.id,
                 packed=True, transposed=True)), packing


def direct(lw: Lowerer) -> bool:
    """Whether the convolution is computed tap by tap into its tile (``direct_taps``): one
    filter per GEMM (a depthwise convolution; its product has one row), float32
    throughout, on the micro-kernel's path (``blas=1`` keeps sgemm on the gathered
    patches, for the tuner to compare). Gathering the taps of every position into
    panels for a micro-kernel that multiplies WB_MR rows, one of them real, wrote
    and read every tap once more than the product needs (MobileNetV2's depthwise
    kernels: most of its time)."""
    t = lw.sched.gemm
    # (float32 filters: never multiplied in pairs; a convolution has no second product)
    return (t.im2col is not None and t.packed_b == PACK_TILE and t.m == 1
            and lw.g.value(t.a.value).dtype is DType.float32
            and lw.g.value(t.im2col.value).dtype is DType.float32)


def direct_taps(lw: Lowerer, dest, c_off: str) -> tuple:
    """One filter per group (``direct``): the statements adding each tap times the
    input into the tile, no patches gathered."""
    t = lw.sched.gemm
    a = t.a.view
    w = f"{a.batch_offset('bt')} + r0 * {a.row_stride}"
    return (
        Comment("one filter per group (a depthwise convolution): each tap times "
                "the input added into the tile, no patches gathered"),
        Loop("col", t.tile_n, "block", (Store(dest, f"{c_off} + col - c0", "0.0f"),),
             start="c0", stop="c1"),
        im2col(lw, None, accumulate=(dest, c_off, lw.buffers[t.a.value], w)))


def patches(lw: Lowerer) -> tuple[tuple, tuple]:
    """B the tile's patches of the input, gathered (im2col): (the statements gathering
    them, the right operand)."""
    t = lw.sched.gemm
    cols = Scratch("wb_cols", t.b.value, DType.float32, t.k * t.tile_n)
    gather = (DeclareScratch(cols), Comment("the tile's patches of the input, "
                                            "gathered (im2col)"), im2col(lw, cols))
    return gather, (cols, "0", t.tile_n, False)


def patch_panels(lw: Lowerer, pairs: bool) -> tuple[tuple, tuple]:
    """``PACK_TILE``: the tile's patches gathered straight into panels -- float32, or
    bfloat16 two rows to a word where the filters are bfloat16: (the statements
    gathering them, the right operand)."""
    t = lw.sched.gemm
    kw = panel_rows(t.k, pairs)
    cols = Scratch("wb_cols", t.b.value, DType.bfloat16 if pairs else DType.float32,
                   (2 * kw if pairs else t.k) * -(-t.tile_n // PANEL) * PANEL)
    gather = (DeclareScratch(cols), Comment(
        "the tile's patches of the input, gathered (im2col) into column panels"
        + (" in pairs of rows" if pairs else "")), im2col_panels(lw, cols, pairs))
    return gather, (cols, "0", PANEL, False)


def filters_packed(lw: Lowerer, node: str) -> tuple[Buffer, tuple]:
    """A convolution's filters (A: m x k) transposed and packed into column panels
    on the first run, the right operand with the filters in the lanes (PACK_FILTERS,
    CONV_DIRECT): the persistent workspace and the statements packing it."""
    t = lw.sched.gemm
    a = t.a.view
    packed = lw.workspace("pack", DType.float32, packed_numel(t.k, t.m),
                          persistent=True, packed=True)
    return packed, (Comment(f"{t.a.value}, the filters, transposed and packed into "
                            "column panels on the first run"),
                    PackB(lw.buffers[t.a.value], packed, a.offset, t.k, t.m,
                          a.col_stride, a.row_stride, node))


def im2col_panels(lw: Lowerer, cols: Scratch, pairs: bool = False) -> Loop:
    """Fill ``cols`` with the patches of the tile's output positions c0..c1 in the
    micro-kernel's panel layout (codegen/microkernel.py): panel by panel, each
    ``C x taps`` rows of PANEL columns -- with ``pairs``, bfloat16 rows ``2 r`` and
    ``2 r + 1`` of a column side by side in one 32-bit word, as ``PackB.pairs``
    packs them -- gathered as ``im2col`` gathers a tile; a partial last panel's
    columns past c1 zeros, as a packed B's are (the micro-kernel multiplies whole
    blocks of columns and stores the ones it has), and so is an odd row count's
    missing last row of a pair."""
    k, i64 = lw.sched.gemm.k, DType.int64
    size = PANEL * (2 * -(-k // 2) if pairs else k)     # (elements of a panel)
    row, step = ((f"j / 2 * {2 * PANEL} + j % 2", 2) if pairs else (f"j * {PANEL}", 1))
    pad = (Loop("j", k, "serial", (Loop("x", PANEL, "block", (
        Store(cols, f"pc * {size} + {row} + x * {step}", "0.0f"),), start="g1 - g0"),)),)
    if pairs and k % 2:
        pad += (Loop("x", PANEL, "block", (
            Store(cols, f"pc * {size} + {(k - 1) * PANEL + 1} + x * 2", "0.0f"),)),)
    return Loop("pc", -(-lw.sched.gemm.tile_n // PANEL), "serial", (
        Let("g0", i64, f"c0 + pc * {PANEL}"),
        Let("g1", i64, f"g0 + {PANEL} < c1 ? g0 + {PANEL} : c1"),
        im2col(lw, cols, "g0", "g1", row, step, f"pc * {size}"), *pad),
        stop=f"(c1 - c0 + {PANEL - 1}) / {PANEL}")


def im2col(lw: Lowerer, cols: Scratch | None, c0: str = "c0", c1: str = "c1", row: str = "",
           step: int = 1, base: str = "", accumulate=None) -> Loop:
    """Fill ``cols`` with the patches of output positions c0..c1 (C expressions: the
    tile's by default) in batch item bt (see ``Im2col``): row ``j`` (a C expression
    of j: row-major over the tile's width by default) from ``base``, the positions
    ``step`` elements apart. A tap past the input's edge reads 0. Per tap, the
    tile's positions are walked as runs along the last spatial axis (an output
    row, or the part of one the tile holds): the run's taps inside the input are a
    strided copy (contiguous at stride 1, so it vectorizes as plain loads), those
    past either edge zeros, the bounds worked out once per run instead of a clamp
    and a test per element."""
    t, ic = lw.sched.gemm, lw.sched.gemm.im2col
    x = lw.buffers[ic.value]
    tap = Index.flat("j", (ic.channels,) + ic.kernel).digits()
    width, last = ic.out[-1], len(ic.spatial) - 1
    rows = Index.flat("q", ic.out[:-1]).digits() if last else []
    run = [Let("x0", DType.int64, f"{c0} > q * {width} ? {c0} - q * {width} : 0"),
           Let("x1", DType.int64, f"{c1} - q * {width} < {width} ? {c1} - q * {width} "
                                  f": {width}")]
    at, inside = f"bt * {ic.channels} + {tap[0]}", []
    for i in range(last):       # the run's row: one input row per tap
        v, n = f"iy{i}", ic.spatial[i]
        run.append(Let(v, DType.int64, f"{rows[i]} * {ic.strides[i]} - {ic.pads[i]} + "
                                       f"{tap[i + 1]} * {ic.dilations[i]}"))
        inside.append(f"{v} >= 0 && {v} < {n}")
        at = f"({at}) * {n} + {v}"
    # along the run: input column x * stride - pad + tap * dilation, inside the
    # input for x in [ceil(lo / stride), ceil(hi / stride))
    st, n = ic.strides[last], ic.spatial[last]
    shift = f"{tap[last + 1]} * {ic.dilations[last]} - {ic.pads[last]}"
    lo, hi = f"-({shift})", f"{n} - ({shift})"

    def ceil_div(a: str) -> str:           # a / st rounded up, for a of either sign
        return f"(({a}) > 0 ? (({a}) + {st - 1}) / {st} : -(-({a}) / {st}))"
    run += [Let("xa", DType.int64, f"{ceil_div(lo)} > x0 ? {ceil_div(lo)} : x0"),
            Let("xb", DType.int64, f"{ceil_div(hi)} < x1 ? {ceil_div(hi)} : x1")]
    # (xa clamped to the run first: a tap whose left padding covers the whole run
    # has xa past x1, and a row past the edge then gave [x1, xa) -- reads outside
    # the input, a write past the run; found by the fuzzer's convs family)
    run.append(Assign("xa", "xa < x1 ? xa : x1"))
    if inside:                  # a row past the edge: the whole run is zeros
        run.append(Assign("xb", f"({' && '.join(inside)}) ? xb : xa"))
    run.append(Assign("xb", "xb > xa ? xb : xa"))
    to = (f"{base + ' + ' if base else ''}{row or f'j * {t.tile_n}'} + "
          f"(q * {width} + x - {c0}) * {step}")
    src = f"({at}) * {n} + x * {st} + {shift}"
    tap_weight: tuple = ()
    if accumulate is None:
        segments = (("x0", "xa", "0.0f"), ("xa", "xb", None), ("xb", "x1", "0.0f"))
    else:
        # (``direct``: the taps inside the input times the filter's weight j, added
        # into the tile's one row; the ones past an edge add nothing)
        dest, first, filters, w = accumulate
        to = f"{first} + q * {width} + x - {c0}"
        segments = (("xa", "xb", None),)
        tap_weight = (Load("wb_w", filters, f"{w} + j * {t.a.view.col_stride}"),)
    for a, b, zero in segments:
        if zero:
            body = (Store(cols, to, zero),)
        elif accumulate is None:
            body = (Load("xv", x, src), Store(cols, to, "xv"))
        else:
            body = (Load("xv", x, src), Load("wb_d", dest, to),
                    Store(dest, to, "wb_d + wb_w * xv"))
        run.append(Loop("x", width, "block", body, start=a, stop=b))
    return Loop("j", t.k, "serial", (*tap_weight, Loop(
        "q", t.n // width, "serial", tuple(run), start=f"{c0} / {width}",
        stop=f"({c1} - 1) / {width} + 1")))


def pool_planes(lw: Lowerer) -> list | None:
    """A 2-D pooling on the CPU -- a group of a window over the input's last two
    axes and a float32 max (its fill the lowest value), sum or mean (its fill zero)
    over the window's taps, nothing else -- a plane at a time: the plane copied into
    its stride phases bordered with the fill, then one flat loop over its positions,
    each the max or sum of its taps in a register, contiguous vector loads whatever
    the stride (``codegen/planes.py``). The row kernel gathered every tap of each
    output through a flat row index and clamps. None where the group is anything
    else."""
    g, s = lw.g, lw.sched
    if lw.device.is_gpu or not s.gathered or len(lw.group.nodes) != 2:
        return None
    win, red = (g.node(n) for n in lw.group.nodes)
    if win.op != "window" or red.inputs[0] != win.outputs[0]:
        return None
    x, y = g.value(win.inputs[0]), g.value(red.outputs[0])
    # the border holds the window's fill whatever the reduction: a max over zeros
    # too (a zero pad before a max pool, taken into it: frontends/rewrites/pad_folding.py)
    fill = {"lowest": c_literal(-np.inf, DType.float32), "zero": "0.0f"}.get(
        win.attr_map.get("fill", "zero"))
    kernel, strides, dil, pads = window_attrs(x.shape, win.attr_map)
    rank = len(x.shape)
    if (fill is None or red.op not in ("reduce_max", "reduce_sum", "reduce_mean")
            or len(kernel) != 2 or x.dtype is not DType.float32
            or y.dtype is not DType.float32 or lw.io.outputs != (red.outputs[0],)
            or reduce_axes(red.attr_map, rank + 2) != (rank, rank + 1)
            or math.prod(kernel) > POOL_TAPS):
        return None
    (h, w), (oh, ow) = x.shape[-2:], g.value(win.outputs[0]).shape[rank - 2:rank]
    window = Im2col(win.inputs[0], 1, (h, w), tuple(kernel), (oh, ow), tuple(strides),
                    tuple(dil), tuple(pads[:2]))
    if math.prod(window.span) > POOL_PLANE_SPAN or math.prod(strides) > PLANE_PHASES_MAX:
        return None
    ph = planes.Phases(window)
    xp, border, copy = planes.padded_plane(lw.buffers[window.value], ph, f"p * {h * w}",
                                           fill)
    taps = [f"xv{j}" for j in range(math.prod(kernel))]
    lets, total = (), " + ".join(taps)   # (in the taps' order, as the reference does)
    if red.op == "reduce_max":
        lets, total = planes.window_max(taps)
    if red.op == "reduce_mean":    # (an average over every tap, padding counted)
        total = f"({total}) / {len(taps)}"
    lw.flops += y.numel * len(taps)
    rows_out, rows = planes.window_rows(xp, ph, total, lw.buffers[red.outputs[0]],
                                        f"p * {oh * ow}", node=red.id, lets=lets)
    # tiles of several planes, so that the border, written once a tile, serves them all
    n = math.prod(x.shape[:-2])
    per = plane_tile(n, lw.device.units)
    return [Loop("tile", -(-n // per), "grid", (
        DeclareScratch(xp), *map(DeclareScratch, rows_out),
        Comment("the planes' stride phases, bordered with the fill their taps meet "
                "past the edges; each output's taps in a register (codegen/planes.py)"),
        border,
        Loop("p", per, "serial", (*copy, *rows), start=f"tile * {per}",
             stop=f"(tile * {per} + {per} < {n} ? tile * {per} + {per} : {n})")))]
