"""Lowering: a plan group and its schedule become one kernel in the kernel IR.

Every value inside a group is computed *at an index* by walking from an output back
to loads: elementwise ops apply their scalar expression to their inputs at the
broadcast index, layout ops transform the index and read their input there, and a
reduction's result is the per-row accumulator. Results are memoized per (value,
index) so a value used twice at the same point is computed once (the ``local`` stitch
scheme: it stays in a register). Loads of group inputs and stores of group outputs
are the only global-memory traffic.
"""
from __future__ import annotations

import math
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from ..errors import WorkbenchError
from ..device import Device
from ..fusion.gemm.gpu_tiles import GPU_GEMM_RESIDENT
from ..fusion.gemm.legality import VIEWS
from ..fusion.gemm.planes import PLANE_PHASES_MAX, plane_tile
from ..fusion.gemm.tiles import PANEL
from ..fusion.geometry import REDUCE_SLOT_BYTES, Geometry, flat_vector, geometry
from ..fusion.mapping import Mapping, ScheduleKind
from ..fusion.plan import Group
from ..fusion.row_tile import row_shifted
from ..fusion.gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES, PACK_FILTERS,
                                 PACK_ONCE, PACK_PER_RUN, PACK_TILE, Im2col)
from ..fusion.schedule import Schedule, group_io
from ..dtypes import DType
from ..ir import Graph
from ..tolerance import HALF_PRODUCT_ERROR, TF32_PRODUCT_ERROR
from ..dtypes import c_literal
from ..ops import Index, Kind, get_op
from ..ops.index import mod
from ..ops.reduce import reduce_axes
from ..ops.window import window_attrs
from .kir import (Assign, BlockReduce, Buffer, Comment, ConvLanes, DeclareScratch,
                  DepthwiseLanes, Gemm, GridSync, If, Let, Load, Loop, OncePerBlock,
                  OnlineStep, PackA, PackB, Scratch, Store, ThreadTile, WidenOnce)
from .kernel import Kernel, Launch, LibraryCall
from . import planes
from .microkernel import (STATE_SLOTS, a_tile_stride, packed_a_numel, packed_numel,
                          panel_rows)

# Buffers this large (or larger) are indexed in 64 bits: 2^31 less the largest grid
# stride a flat loop takes (65535 blocks x 256 threads x 4), so no loop wraps around.
WIDE_INDEX_FROM = 2**31 - 65535 * 256 * 4
# a CPU pooling of at most this many taps, whose planes with their border hold at most
# POOL_PLANE_SPAN floats (a 181 x 181 plane, 128 KiB of a thread's stack), is lowered a
# plane at a time (_pool_planes), each output's taps read in one unrolled expression.
# (16384 before: Xception's and InceptionV3's first max pools, over 147 x 147, went to
# the row kernel, its taps gathered: Xception's 4.7 ms)
POOL_TAPS = 64
POOL_PLANE_SPAN = 32768
# an elementwise kernel moving elements loops over rows apart from columns only when a
# row is at least this long (a shorter inner loop costs more than the divisions it saves)
ROW_LOOP_MIN = 16
# a concat's loop is split at its parts where the run after its axis is at least this
CONCAT_SPLIT_RUN = 4


def identifier(text: str) -> str:
    """A C identifier made from text: anything outside [A-Za-z0-9_] becomes _."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if s and not s[0].isdigit() else "_" + s



class _Scope:
    """Statements being emitted at one loop level, with their memo table; ``vector``:
    the width a tiled column loop moves per access (1 elsewhere); ``row_base``: where
    a shifted tile's row starts (the offset its vectors align to), "" if not shifted."""

    def __init__(self, parent: "_Scope | None" = None, vector: int = 1, row_base: str = ""):
        self.stmts: list = []
        self.memo: dict = {}
        self.parent = parent
        self.vector = vector
        self.row_base = row_base

    def lookup(self, key):
        s = self
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None


class _IndexContext:
    """What a layout op's index rule sees (``ops.IndexContext``): shapes, and values
    computed at an index into the scope being emitted."""

    def __init__(self, lw: "_Lowerer", scope: _Scope, node: str = ""):
        self.lw, self.scope, self.node = lw, scope, node

    def shape(self, value: str) -> tuple[int, ...]:
        return self.lw.g.value(value).shape

    def dtype(self, value: str) -> DType:
        return self.lw.g.value(value).dtype

    def at(self, value: str, idx: Index) -> str:
        return self.lw.at(self.scope, value, idx)

    def let(self, dtype: DType, expr: str) -> str:
        var = self.lw.fresh()
        self.scope.stmts.append(Let(var, dtype, expr, self.node))
        return var

    def part(self, node: str) -> int | None:
        return self.lw.concat_part.get(node)


class _Lowerer:
    def __init__(self, g: Graph, group: Group, device: Device,
                 buffers: dict[str, Buffer] | None = None, counter: int = 0,
                 prefix: str = ""):
        self.g, self.group, self.sched = g, group, group.schedule
        self.device = device
        self.geometry: Geometry = geometry(group.schedule, device)
        self.io = group_io(g, group.nodes)
        self.members = set(group.nodes)
        self.producer = {o: g.node(n) for n in group.nodes for o in g.node(n).outputs}
        self.prefix = prefix      # keeps a phase's shared arrays apart from the others'
        if buffers is None:
            buffers = _buffers(g, self.io, self._inline_constant)
        self.buffers = buffers
        # offsets past 2^31 - 1 (a grid stride included) need 64-bit index arithmetic
        self.wide = any(b.numel >= WIDE_INDEX_FROM for b in buffers.values())
        self.index_dtype = DType.int64 if self.wide else DType.int32
        self.counter = counter
        self.reduce_var: dict[str, str] = {}
        self.row_scope: _Scope | None = None
        self.flops = 0
        self.scratch: dict[str, Scratch] = {}     # row-cached value -> its on-chip array
        self.cached_in: dict[str, _Scope] = {}    # row-cached value -> the pass storing it
        self.concat_part: dict[str, int] = {}     # concat -> the part a split loop reads

    def _inline_constant(self, v: str) -> bool:
        return _inlined(self.g, self.sched, v)

    def workspace(self, name: str, dt: DType, numel: int, persistent: bool = False,
                  packed: bool = False) -> Buffer:
        key = f"{self.prefix}{name}"
        if key not in self.buffers:
            self.buffers[key] = Buffer(f"ws_{self.prefix}{name}", key, dt, numel, True, True,
                                       persistent, packed)
        return self.buffers[key]

    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    # -- computing a value at an index -----------------------------------------
    def at(self, scope: _Scope, v: str, idx: Index) -> str:
        """The C expression (a variable or literal) for value v at idx, emitted into scope."""
        val = self.g.value(v)
        if self._inline_constant(v):
            return c_literal(self.g.constants[v], val.dtype.compute)
        if v in self.reduce_var:
            return self.reduce_var[v]
        if (self.row_scope is not None and scope is not self.row_scope
                and v in self.sched.per_row):
            # per-row values are computed once per row, before the column loops
            scope = self.row_scope
            idx = self._row_index(idx)
        key = (v, idx.key)
        hit = scope.lookup(key)
        if hit is not None:
            return hit
        node = self.producer.get(v)
        home = self.cached_in.get(v)
        if home is not None and home is not scope:
            # an earlier pass over this row kept it on chip (registers, shared memory)
            var = self.fresh()
            sc = self.scratch[v]
            scope.stmts.append(Load(var, sc, "col",
                                    src_offset=idx.offset() if sc.source else ""))
        elif node is None:
            var = self.fresh()
            scope.stmts.append(Load(var, self.buffers[v], idx.offset(),
                                    self._vector(scope, idx)))
            if v in self.scratch and home is None:
                scope.stmts.append(Store(self.scratch[v], "col", var))
                self.cached_in[v] = scope
        else:
            var = self._compute(scope, node, v, idx)
            if v in self.scratch and home is None:
                scope.stmts.append(Store(self.scratch[v], "col", var))
                self.cached_in[v] = scope
        scope.memo[key] = var
        return var

    def _made_by(self, value: str) -> str:
        """Id of the group's node computing ``value`` ("" for an input passed through)."""
        n = self.producer.get(value)
        return n.id if n is not None else ""

    def _vector(self, scope: _Scope, idx: Index) -> int:
        """The access width at idx in this scope: the tile's vector when the access is
        unit-stride in the column over a run the vector divides, else 1. In a shifted
        tile only the accesses that start where the row does line up with its
        vectors (a row of the domain; not a broadcast row such as LayerNorm's gamma)."""
        run = idx.unit_stride("col") if scope.vector > 1 else 0
        if scope.row_base:
            same = self._row_index(idx).offset() == scope.row_base
            return scope.vector if run == self.sched.cols and same else 1
        return scope.vector if run and run % scope.vector == 0 else 1

    def _row_index(self, idx: Index) -> Index:
        """The same index with the column variable zeroed (per-row values ignore it)."""
        return Index(idx.shape, tuple(("0" if "col" in e else e, lo, hi)
                                      for e, lo, hi in idx.segs))

    def _compute(self, scope: _Scope, node, v: str, idx: Index) -> str:
        op = get_op(node.op)
        g = self.g
        if op.kind is Kind.elementwise:
            args = [self.at(scope, i, idx.broadcast_to(g.value(i).shape)) for i in node.inputs]
            out = g.value(v)
            expr = op.scalar(args, [g.value(i).dtype for i in node.inputs], out.dtype,
                             node.attr_map)
            var = self.fresh()
            scope.stmts.append(Let(var, out.dtype.compute, expr, node.id))
            self.flops += op.flops
            return var
        if op.kind is Kind.layout and op.index is not None:
            # the op's own index rule (ops/layout.py)
            return op.index(_IndexContext(self, scope, node.id), node, node.outputs.index(v), idx)
        raise WorkbenchError(f"internal: {node.op} cannot be computed at an index")

    # -- schedules --------------------------------------------------------------
    def lower(self, name: str) -> Kernel:
        s = self.sched
        if s.kind is ScheduleKind.opaque:
            return self._opaque(name)
        if s.kind is ScheduleKind.gemm:
            return self._gemm(name)
        pooled = self._pool_planes()
        if pooled is not None:
            # (a CPU's form, as its GEMM kernels are: no CUDA rendering -- rendered anyway,
            # its plane buffer went undeclared; found by the fuzzer's convs family)
            return replace(_kernel(name, self.group.id,
                                   s.describe() + ", pooled a plane at a time", self.buffers,
                                   _widen(pooled, self.wide), _launch(self.geometry, s),
                                   self.flops, tuple(self.scratch.values())), host_only=True)
        body = self.lower_body()
        # a split row makes one pass over the grid per reduction, plus the final one
        passes = s.reductions + 1 if s.grid_barriers else 1
        return _kernel(name, self.group.id, s.describe(), self.buffers, _widen(body, self.wide),
                       _launch(self.geometry, s), self.flops, tuple(self.scratch.values()),
                       passes, s.grid_barriers, self.geometry.reduce_slots)

    def _pool_planes(self) -> list | None:
        """A 2-D pooling on the CPU -- a group of a window over the input's last two
        axes and a float32 max (its fill the lowest value), sum or mean (its fill zero)
        over the window's taps, nothing else -- a plane at a time: the plane copied into
        its stride phases bordered with the fill, then one flat loop over its positions,
        each the max or sum of its taps in a register, contiguous vector loads whatever
        the stride (``codegen/planes.py``). The row kernel gathered every tap of each
        output through a flat row index and clamps. None where the group is anything
        else."""
        g, s = self.g, self.sched
        if self.device.is_gpu or not s.gathered or len(self.group.nodes) != 2:
            return None
        win, red = (g.node(n) for n in self.group.nodes)
        if win.op != "window" or red.inputs[0] != win.outputs[0]:
            return None
        x, y = g.value(win.inputs[0]), g.value(red.outputs[0])
        # the border holds the window's fill whatever the reduction: a max over zeros
        # too (a zero pad before a max pool, taken into it: ir/pad_folding.py)
        fill = {"lowest": c_literal(-np.inf, DType.float32), "zero": "0.0f"}.get(
            win.attr_map.get("fill", "zero"))
        kernel, strides, dil, pads = window_attrs(x.shape, win.attr_map)
        rank = len(x.shape)
        if (fill is None or red.op not in ("reduce_max", "reduce_sum", "reduce_mean")
                or len(kernel) != 2 or x.dtype is not DType.float32
                or y.dtype is not DType.float32 or self.io.outputs != (red.outputs[0],)
                or reduce_axes(red.attr_map, rank + 2) != (rank, rank + 1)
                or math.prod(kernel) > POOL_TAPS):
            return None
        (h, w), (oh, ow) = x.shape[-2:], g.value(win.outputs[0]).shape[rank - 2:rank]
        window = Im2col(win.inputs[0], 1, (h, w), tuple(kernel), (oh, ow), tuple(strides),
                        tuple(dil), tuple(pads[:2]))
        if math.prod(window.span) > POOL_PLANE_SPAN or math.prod(strides) > PLANE_PHASES_MAX:
            return None
        ph = planes.Phases(window)
        xp, border, copy = planes.padded_plane(self.buffers[window.value], ph, f"p * {h * w}",
                                               fill)
        taps = [f"xv{j}" for j in range(math.prod(kernel))]
        lets, total = (), " + ".join(taps)   # (in the taps' order, as the reference does)
        if red.op == "reduce_max":
            lets, total = planes.window_max(taps)
        if red.op == "reduce_mean":    # (an average over every tap, padding counted)
            total = f"({total}) / {len(taps)}"
        self.flops += y.numel * len(taps)
        rows_out, rows = planes.window_rows(xp, ph, total, self.buffers[red.outputs[0]],
                                            f"p * {oh * ow}", node=red.id, lets=lets)
        # tiles of several planes, so that the border, written once a tile, serves them all
        n = math.prod(x.shape[:-2])
        per = plane_tile(n, self.device.units)
        return [Loop("tile", -(-n // per), "grid", (
            DeclareScratch(xp), *map(DeclareScratch, rows_out),
            Comment("the planes' stride phases, bordered with the fill their taps meet "
                    "past the edges; each output's taps in a register (codegen/planes.py)"),
            border,
            Loop("p", per, "serial", (*copy, *rows), start=f"tile * {per}",
                 stop=f"(tile * {per} + {per} < {n} ? tile * {per} + {per} : {n})")))]

    def lower_body(self) -> list:
        """The statements of an elementwise or row template."""
        if self.sched.kind is ScheduleKind.elementwise:
            return self._elementwise()
        if self.sched.mapping.info.grid_barrier_per_reduction:
            return self._split_rows()
        return self._row_reduce()

    def _opaque(self, name: str) -> Kernel:
        node = self.g.node(self.group.nodes[0])
        # a result nobody reads (a dead node) still needs somewhere to go
        outs = tuple(self.buffers.get(o) or self.workspace(o, self.g.value(o).dtype,
                                                           self.g.value(o).numel)
                     for o in node.outputs)
        # positional for the call (matmul(x, x) names x twice); params hold each once
        call = LibraryCall(node.op, node.attrs, tuple(self.buffers[i] for i in node.inputs),
                           outs)
        flops = get_op(node.op).library_flops([self.g.value(i).shape for i in node.inputs],
                                              self.g.value(node.outputs[0]).shape,
                                              node.attr_map)
        params = tuple(sorted(self.buffers.values(), key=lambda b: (b.is_output, b.name)))
        return Kernel(name, self.group.id, "opaque", params, (), Launch(1, 1), 0, call,
                      int(flops))

    def _gemm(self, name: str) -> Kernel:
        """One parallel loop over the output's tiles: each tile's product by the host
        BLAS into ``dest``, then the epilogue over the tile, reading the product back
        while it is in cache and writing every output (``dest`` in place: each element
        is read before it is written, by the same thread)."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        if t.block is not None:
            return self._block_gemm(name)
        if self.sched.online is not None:
            return self._online_attention(name)
        mm = g.producer[t.result]
        a, b = t.a.view, t.b.view
        M, N, K = t.m, t.n, t.k
        start, finish, pack = (), (), ()
        if then is None and self.buffers[t.dest].dtype is DType.float32:
            dest, c_off, ldc = self.buffers[t.dest], f"(bt * {M} + r0) * {N} + c0", N
        else:
            # attention: the scores and then the probabilities live in a tile of this
            # thread's own (whole rows), read by the second product, never written out;
            # a product stored in another type (bfloat16) is finished from such a float32
            # tile too, and rounded once, where the epilogue stores
            dest, c_off, ldc = (Scratch("wb_tile", t.result, DType.float32,
                                        t.tile_m * t.tile_n), "0", t.tile_n)
            start = (DeclareScratch(dest),)
            if t.result in self.io.outputs and (not t.epilogue_ops
                                                or self.sched.epilogue is not None):
                finish = (Comment(f"the product, {t.result}, stored from the tile"),
                          self._tile_out(dest, self.buffers[t.result], f"(bt * {M} + r0) * {N}",
                                         N, "c0", "c1", mm.id))
        if t.epilogue_ops:
            epilogue = (self._row_epilogue(mm.id, dest) if self.sched.epilogue is not None
                        else self._elementwise_epilogue(dest))
            finish += (Comment("the epilogue over the tile, while it is in cache"), epilogue)
        if then is not None:
            mm2 = g.producer[then.result]
            v = then.b.view
            out, o_off, ldo = self._attention_out()
            declare, store = (), ()
            if out.dtype is not DType.float32:
                # (bfloat16: the output rows in a float32 tile, stored rounded)
                rows_out = Scratch("wb_o", then.result, DType.float32, t.tile_m * then.n)
                declare = (DeclareScratch(rows_out),)
                store = (self._tile_out(rows_out, out, o_off, ldo, "0", str(then.n), mm2.id),)
                out, o_off, ldo = rows_out, "0", then.n
            if then.packed:
                vp, v_pack, v_off = self._pack_per_run("pack_v", then.b, then.k, then.n, t.batch,
                                                       mm2.id)
                pack += v_pack
                second = Gemm(dest, vp, out, "0", v_off, o_off, "r1 - r0", str(then.n),
                              then.k, N, PANEL, ldo, mm2.id, packed=True)
            else:
                second = Gemm(dest, self.buffers[then.b.value], out, "0", v.batch_offset("bt"),
                              o_off, "r1 - r0", str(then.n), then.k, N, v.ld, ldo, mm2.id,
                              trans_b=v.trans)
            finish += (Comment(f"the tile's rows @ the right operand of {mm2.id}, while "
                               "they are in cache"), *declare, second, *store)
        pairs = self._pairs()
        kw = panel_rows(K, pairs)          # (a panel's rows of words: c0's panel at c0 * kw)
        if t.packed_b == DEPTHWISE_LANES:   # rows an image's channels, whole planes
            ic = t.im2col
            gather, right = (Comment("the tile's channels, a vector of them at a time"),
                             DepthwiseLanes(self.buffers[ic.value], self.buffers[t.a.value],
                                            dest, f"(bt * {M} + r0) * {math.prod(ic.spatial)}",
                                            f"r0 * {K}", c_off, "r1 - r0", ic, mm.id)), None
        elif t.packed_b == DEPTHWISE_PLANES:
            gather, right = self._depthwise_planes(dest, c_off), None
        elif t.packed_b == CONV_DIRECT:     # no patches: the filters in the lanes
            ic = t.im2col.planar()          # (a 1-D convolution: one row)
            packed, packing = self._filters_packed(mm.id)
            pack = packing + pack
            # (c0 and c1 whole output rows; r0 a multiple of two vectors of filters)
            ow = ic.out[1]
            gather, right = (Comment("the tile's output rows: each tap's input times a "
                                     "vector of filters, no patches gathered"),
                             ConvLanes(self.buffers[ic.value], packed, dest,
                                       f"bt * {ic.channels * math.prod(ic.spatial)}", c_off,
                                       ldc, "r0", "r1", f"c0 / {ow}", f"c1 / {ow}", ic,
                                       mm.id)), None
        elif t.packed_b == PACK_FILTERS:    # few positions: the product made transposed
            packed, packing = self._filters_packed(mm.id)
            pack = packing + pack
            # (r0 a whole number of panels of filters, or 0)
            gather, right = (Comment("the tile's positions x filters, stored transposed"),
                             Gemm(self.buffers[t.b.value], packed, dest,
                                  f"{b.batch_offset('bt')} + c0", f"r0 * {K}", c_off,
                                  "r1 - r0", "c1 - c0", K, b.row_stride, PANEL, ldc, mm.id,
                                  packed=True, transposed=True)), None
        elif t.packed_b == PACK_ONCE:       # a constant B, packed by the first run
            packed = self.workspace("pack", DType.float32, packed_numel(K, N, pairs=pairs),
                                    persistent=True, packed=True)
            pack = (Comment("B, a constant, packed into column panels on the first run"),
                    PackB(self.buffers[t.b.value], packed, b.offset, K, N, b.row_stride,
                          b.col_stride, mm.id, pairs=pairs)) + pack
            gather, right = (), (packed, f"c0 * {kw}", PANEL, False)
        elif t.packed_b == PACK_PER_RUN:  # an activation B, packed by every run
            packed, b_pack, b_off = self._pack_per_run("pack", t.b, K, N, t.batch, mm.id,
                                                       pairs)
            pack = b_pack + pack
            gather, right = (), (packed, f"{b_off} + c0 * {kw}", PANEL, False)
        elif t.im2col is None or t.in_place:    # B read in place
            gather, right = (), (self.buffers[t.b.value],
                                 f"{b.batch_offset('bt')} + c0 * {b.col_stride}", b.ld, b.trans)
        elif self._direct():    # one filter per group: its taps straight into the tile
            w = f"{a.batch_offset('bt')} + r0 * {a.row_stride}"
            gather = (
                Comment("one filter per group (a depthwise convolution): each tap times "
                        "the input added into the tile, no patches gathered"),
                Loop("col", t.tile_n, "block", (Store(dest, f"{c_off} + col - c0", "0.0f"),),
                     start="c0", stop="c1"),
                self._im2col(None, accumulate=(dest, c_off, self.buffers[t.a.value], w)))
            right = None
        elif not t.packed_b:    # B is the tile's patches of the input, gathered
            cols = Scratch("wb_cols", t.b.value, DType.float32, K * t.tile_n)
            gather = (DeclareScratch(cols), Comment("the tile's patches of the input, "
                                                    "gathered (im2col)"), self._im2col(cols))
            right = (cols, "0", t.tile_n, False)
        else:       # the tile's patches gathered straight into panels (PACK_TILE):
            # float32, or bfloat16 two rows to a word where the filters are bfloat16
            cols = Scratch("wb_cols", t.b.value, DType.bfloat16 if pairs else DType.float32,
                           (2 * kw if pairs else K) * -(-t.tile_n // PANEL) * PANEL)
            gather = (DeclareScratch(cols), Comment(
                "the tile's patches of the input, gathered (im2col) into column panels"
                + (" in pairs of rows" if pairs else "")), self._im2col_panels(cols, pairs))
            right = (cols, "0", PANEL, False)
        abuf = self.buffers[t.a.value]
        if not pairs and abuf.dtype is DType.bfloat16:
            # (a bfloat16 convolution: its filters widened once, for float32 products)
            wide = self.workspace("wide", DType.float32, abuf.numel + STATE_SLOTS,
                                  persistent=True)
            pack = (Comment(f"{t.a.value}, a bfloat16 constant, widened on the first run"),
                    WidenOnce(abuf, wide, abuf.numel, mm.id)) + pack
            abuf = wide
        a_off, a_packed = f"{a.batch_offset('bt')} + r0 * {a.row_stride}", False
        if (right is not None and t.packed_b and then is None and not pairs
                and abuf is self.buffers[t.a.value] and abuf.dtype is DType.float32
                and t.a.value in g.constants and a.one_matrix):
            # a constant A (a convolution's filters) packed once into the slivers the
            # micro-kernel reads, tile by tile, so that no tile copies them again
            abuf = self.workspace("apack", DType.float32, packed_a_numel(M, K, t.tile_m),
                                  persistent=True)
            pack = (Comment(f"{t.a.value}, a constant, packed into the micro-kernel's "
                            "slivers on the first run"),
                    PackA(self.buffers[t.a.value], abuf, a.offset, M, K, a.row_stride,
                          a.col_stride, t.tile_m, mm.id)) + pack
            a_off, a_packed = f"r0 / {t.tile_m} * {a_tile_stride(K, t.tile_m)}", True
        if right is None:
            product = gather
        else:
            bbuf, b_off, ldb, trans_b = right
            product = gather + (Gemm(abuf, bbuf, dest, a_off, b_off,
                                     c_off, "r1 - r0", "c1 - c0", K, a.ld, ldb, ldc, mm.id,
                                     trans_a=a.trans, trans_b=trans_b,
                                     packed=bool(t.packed_b), pairs=pairs,
                                     a_packed=a_packed),)
        body = start + (
            *self._tile_bounds(),
            *product,
            *finish)
        loop = Loop("tile", t.tiles, "grid", body)
        flops = self.flops * g.value(t.result).numel     # (the epilogue's, per element)
        k = _kernel(name, self.group.id, self.sched.describe(), self.buffers,
                    _widen([*pack, loop], self.wide), _launch(self.geometry, self.sched),
                    int(t.flops) + flops, tuple(self.scratch.values()))
        # the host sgemm is passed in only where a product calls it
        sgemm = not t.packed_b or (then is not None and not then.packed)
        return replace(k, blas="sgemm" if sgemm else "", host_only=True)

    def _tile_bounds(self, columns: bool = True) -> tuple[Let, ...]:
        """The Lets binding a GEMM kernel's work item ``tile`` to its batch item ``bt``
        and its rows ``r0`` to ``r1`` and, with ``columns``, its columns ``c0`` to
        ``c1``; without, ``tile`` counts tiles of whole rows (a fused attention's, its
        keys taken a block at a time)."""
        t, i64 = self.sched.gemm, DType.int64
        tm, M, N = t.tile_m, t.m, t.n
        per, ct = (t.row_tiles * t.col_tiles, t.col_tiles) if columns else (t.row_tiles, 1)
        rows = (Let("bt", i64, f"tile / {per}"),
                Let("r0", i64, f"tile % {per} / {ct} * {tm}" if columns
                    else f"tile % {per} * {tm}"))
        if not columns:
            return rows + (Let("r1", i64, f"r0 + {tm} < {M} ? r0 + {tm} : {M}"),)
        return rows + (Let("c0", i64, f"tile % {ct} * {t.tile_n}"),
                       Let("r1", i64, f"r0 + {tm} < {M} ? r0 + {tm} : {M}"),
                       Let("c1", i64, f"c0 + {t.tile_n} < {N} ? c0 + {t.tile_n} : {N}"))

    def _block_gemm(self, name: str) -> Kernel:
        """A GPU GEMM kernel: a thread block per tile (the grid strides over them), the
        tile's product into each thread's registers (wb_gemm_tile), then the epilogue
        on each element the thread holds, writing every output of the group: the
        product never passes through memory unless it is an output itself."""
        t, blk = self.sched.gemm, self.sched.gemm.block
        if self.sched.then is not None:
            return self._block_attention(name)
        acc = Scratch("wb_acc", t.result, DType.float32, blk.m * blk.n, space="register",
                      slots=blk.thread_m * blk.thread_n)
        body = (
            *self._tile_bounds(),
            DeclareScratch(acc, "this thread's elements of the tile"),
            Comment("the tile's product, each thread's part of it in registers"),
            self._block_product(acc),
            Comment("the epilogue on each element, from the registers"),
            self._elementwise_epilogue(acc))
        return self._block_kernel(name, Loop("tile", t.tiles, "grid", body), t.flops)

    def _block_product(self, acc: Scratch) -> Gemm:
        """The statement multiplying a GPU tile's rows ``r0`` to ``r1`` of A by B's
        columns ``c0`` to ``c1`` into each thread's registers ``acc`` (wb_gemm_tile)."""
        t = self.sched.gemm
        a, b = t.a.view, t.b.view
        return Gemm(self.buffers[t.a.value], self.buffers[t.b.value], acc,
                    f"{a.batch_offset('bt')} + r0 * {a.row_stride}",
                    f"{b.batch_offset('bt')} + c0 * {b.col_stride}", "0", "r1 - r0",
                    "c1 - c0", t.k, a.ld, b.ld, 0, self.g.producer[t.result].id,
                    trans_a=a.trans, trans_b=b.trans, block=t.block)

    def _block_kernel(self, name: str, loop: Loop, product_flops: float,
                      scratch=(), slots: int = 0) -> Kernel:
        """A GPU GEMM kernel of ``loop`` over its tiles, compiled for GPU_GEMM_RESIDENT
        blocks an SM; its flops the products' and the epilogue's (per element of the
        first product); ``slots`` the shared arrays its block reductions use."""
        flops = self.flops * self.g.value(self.sched.gemm.result).numel
        launch = _launch(self.geometry, self.sched)
        launch = replace(launch, resident=GPU_GEMM_RESIDENT,
                         shared_bytes=launch.shared_bytes + slots * REDUCE_SLOT_BYTES)
        return _kernel(name, self.group.id, self.sched.describe(), self.buffers,
                       _widen([loop], self.wide), launch, int(product_flops) + flops,
                       tuple(scratch), slots=slots)

    def _block_attention(self, name: str) -> Kernel:
        """Fused attention on a GPU (FlashAttention's online softmax): a thread block
        per tile of query rows takes the keys a block at a time -- the scores' block
        into each thread's registers (wb_gemm_tile), the prefix ops (scale, mask)
        making the logits in place, the running maximum and sum and the output rows
        rescaled with the probabilities passed through shared memory
        (wb_online_step), and the output rows += the probabilities @ V's block; at the
        end each output element divided by its row's sum and stored where the layout
        ops after the product put it. Scores and probabilities never reach memory."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        on = then.online
        mm2, v = g.producer[then.result], then.b.view
        M, N, D = t.m, t.n, then.n
        blk = t.block
        ob = blk.over(D)
        f32, i64 = DType.float32, DType.int64
        s_blk = Scratch("wb_sc", t.result, f32, blk.m * blk.n, space="register",
                        slots=blk.thread_m * blk.thread_n)
        o_acc = Scratch("wb_o", then.result, f32, ob.m * ob.n, space="register",
                        slots=ob.thread_m * ob.thread_n)
        m_run = Scratch("wb_m", on.logits, f32, blk.m, space="register", slots=blk.thread_m)
        l_run = Scratch("wb_l", then.value, f32, blk.m, space="register", slots=blk.thread_m)
        probs = Scratch("wb_probs", then.value, f32, blk.m * (blk.n + blk.PAD))
        out, o_off, ldo = self._attention_out()
        # the logits of the block, in place: the prefix ops (scale, mask) at (row, col)
        scope = _Scope()
        prod, at = self.fresh(), self._at_rows(t.result)
        scope.stmts.append(Load(prod, s_blk, "wb_s"))
        scope.memo[(t.result, at.key)] = prod
        z = self.at(scope, on.logits, self._at_rows(on.logits))
        scope.stmts.append(Store(s_blk, "wb_s", z))
        logits = ThreadTile(blk, "r0", "r1", "c0", "c1",
                            (Let("row", i64, f"bt * {M} + r"), *scope.stmts))
        step = (
            Let("c0", i64, f"kb * {blk.n}"),
            Let("c1", i64, f"c0 + {blk.n} < {N} ? c0 + {blk.n} : {N}"),
            Comment("the scores' block: Q's rows @ the block of Kᵀ, in registers"),
            self._block_product(s_blk),
            Comment("the logits (the ops before the softmax), in place"), logits,
            Comment("per row: the running maximum and sum, the probabilities (to shared "
                    "memory), the output rows rescaled"),
            OnlineStep(s_blk, o_acc, m_run, l_run, probs, blk, ob, "c1 - c0",
                       self._made_by(then.value)),
            Comment(f"the output rows += the probabilities @ the block of {mm2.id}'s V"),
            Gemm(probs, self.buffers[then.b.value], o_acc, "0",
                 f"{v.batch_offset('bt')} + c0 * {v.row_stride}", "0", "r1 - r0", str(D),
                 "c1 - c0", blk.n + blk.PAD, v.ld, 0, mm2.id, trans_b=v.trans,
                 accumulate=True, block=ob))
        # (each thread checks its rows' maxima, then the block agrees)
        blocks = self._key_blocks(step, blk.n, lambda floor: (
            ThreadTile(blk, "r0", "r1", "0", "1", (
                Load("wb_mr", m_run, "wb_si"), Assign("wb_ok", f"wb_ok && wb_mr > {floor}"))),
            BlockReduce("wb_ok", DType.int32, "({0} && {1})", "1", 0)))
        div = get_op("div").scalar
        finish = ThreadTile(ob, "r0", "r1", "0", str(D), (
            Load("wb_l0", l_run, "wb_si"),
            Load("wb_y", o_acc, "wb_s"),
            Store(out, f"{o_off} + (r - r0) * {ldo} + col",
                  div(["wb_y", "wb_l0"], [f32, f32], f32, {}),
                  node=self._made_by(then.value))))
        body = (*self._tile_bounds(columns=False),
                DeclareScratch(s_blk, "this thread's scores of the block"),
                DeclareScratch(o_acc, "this thread's elements of the output rows", "0.0f"),
                DeclareScratch(m_run, "its rows' running maximum", "-INFINITY"),
                DeclareScratch(l_run, "its rows' running sum", "0.0f"),
                DeclareScratch(probs, "a block's probabilities"),
                *blocks, Comment("each output element divided by its row's sum"), finish)
        return self._block_kernel(name, Loop("tile", t.batch * t.row_tiles, "grid", body),
                                  t.flops + 2.0 * t.batch * M * N * D, (probs,),
                                  slots=int(on.limit is not None))

    def _filters_packed(self, node: str) -> tuple[Buffer, tuple]:
        """A convolution's filters (A: m x k) transposed and packed into column panels
        on the first run, the right operand with the filters in the lanes (PACK_FILTERS,
        CONV_DIRECT): the persistent workspace and the statements packing it."""
        t = self.sched.gemm
        a = t.a.view
        packed = self.workspace("pack", DType.float32, packed_numel(t.k, t.m),
                                persistent=True, packed=True)
        return packed, (Comment(f"{t.a.value}, the filters, transposed and packed into "
                                "column panels on the first run"),
                        PackB(self.buffers[t.a.value], packed, a.offset, t.k, t.m,
                              a.col_stride, a.row_stride, node))

    def _direct(self) -> bool:
        """Whether the convolution is computed tap by tap into its tile (``_gemm``): one
        filter per GEMM (a depthwise convolution; its product has one row), float32
        throughout, on the micro-kernel's path (``blas=1`` keeps sgemm on the gathered
        patches, for the tuner to compare). Gathering the taps of every position into
        panels for a micro-kernel that multiplies WB_MR rows, one of them real, wrote
        and read every tap once more than the product needs (MobileNetV2's depthwise
        kernels: most of its time)."""
        t = self.sched.gemm
        # (float32 filters: never multiplied in pairs; a convolution has no second product)
        return (t.im2col is not None and t.packed_b == PACK_TILE and t.m == 1
                and self.g.value(t.a.value).dtype is DType.float32
                and self.g.value(t.im2col.value).dtype is DType.float32)

    def _depthwise_planes(self, dest, first: str) -> tuple:
        """A 2-D depthwise convolution (``DEPTHWISE_PLANES``), the tile's channels one
        plane at a time: the plane copied into the inside of its stride phases
        (``codegen/planes.py``), whose border of zeros (what the taps meet past the
        edges) is written once per tile, then one flat loop over its positions, each
        the sum of its taps in a register, stored once -- where adding each tap into
        the tile in memory (``_direct``) read and wrote every output once per tap."""
        t, ic = self.sched.gemm, self.sched.gemm.im2col
        f = self.buffers[t.a.value]
        (kh, kw), (oh, ow) = ic.kernel, ic.out
        # the border zeroed once per tile; each channel's plane then copied into its
        # inside
        ph = planes.Phases(ic)
        xp, zero, fill = planes.padded_plane(
            self.buffers[ic.value], ph, f"(bt * {t.m} + r) * {math.prod(ic.spatial)}", "0.0f")
        weights = tuple(Load(f"wb_w{j}", f, f"r * {kh * kw} + {j}") for j in range(kh * kw))
        # (in the taps' order, as the reference adds them)
        total = " + ".join(f"wb_w{j} * xv{j}" for j in range(kh * kw))
        rows_out, rows = planes.window_rows(xp, ph, total, dest,
                                            f"{first} + (r - r0) * {oh * ow}")
        return (DeclareScratch(xp), *map(DeclareScratch, rows_out),
                Comment("a padded plane at a time, split into its stride phases; each "
                        "output's taps summed in a register (codegen/planes.py)"), zero,
                Loop("r", t.m, "serial", (*fill, *weights, *rows), start="r0", stop="r1"))

    def _tile_out(self, tile: Scratch, buf: Buffer, first: str, ld: int, c0: str, c1: str,
                  node: str) -> Loop:
        """Rows r0..r1, columns c0..c1 of a thread's float32 tile (row-major, from
        column c0) stored into ``buf`` in its type: row r0 at ``first``, the rows
        ``ld`` apart."""
        width = tile.numel // self.sched.gemm.tile_m
        return Loop("r", self.sched.gemm.m, "serial", (
            Loop("col", width, "block", (
                Load("wb_t", tile, f"(r - r0) * {width} + col - {c0}"),
                Store(buf, f"{first} + (r - r0) * {ld} + col", "wb_t", node=node)),
                 start=c0, stop=c1),),
            start="r0", stop="r1")

    def _attention_out(self) -> tuple[Buffer, str, int]:
        """Where fused attention's output rows go: (buffer, C offset of the tile's row
        r0 in batch item bt, row stride) -- its own value row-major, or the value the
        layout ops after it make (the heads merged back), each row at its stride."""
        t, then = self.sched.gemm, self.sched.then
        if then.out is None:
            return self.buffers[then.result], f"(bt * {t.m} + r0) * {then.n}", then.n
        o = then.out.view
        return (self.buffers[then.out.value], f"{o.batch_offset('bt')} + r0 * {o.row_stride}",
                o.row_stride)

    def _pairs(self) -> bool:
        """Whether the first product multiplies bfloat16 by a bfloat16 B packed in pairs
        of rows (codegen/microkernel.py): wherever its A is bfloat16 (A and B then are
        both: a matmul's operands share their type)."""
        t = self.sched.gemm
        return bool(t.packed_b) and self.g.value(t.a.value).dtype is DType.bfloat16

    def _pack_per_run(self, name: str, b, k: int, n: int, batch: int, node: str,
                      pairs: bool = False):
        """A right operand (``b``: ``k x n`` per batch item) packed into column panels
        by every run, before the tiles: one parallel loop over (matrix, panel), one
        pack per distinct matrix -- one in all where one matrix serves every item, one
        per key-value head where grouped-query attention's heads share them
        (``MatrixView.distinct``). Returns the packed workspace, the statements, and
        the C offset of tile batch item ``bt``'s pack in it."""
        v = b.view
        items = 1 if v.one_matrix else v.distinct.batch_size
        size, panels = packed_numel(k, n, once=False, pairs=pairs), -(-n // PANEL)
        packed = self.workspace(name, DType.float32, items * size, packed=True)
        i64 = DType.int64
        body = (Let("bt", i64, f"pk / {panels}"),
                PackB(self.buffers[b.value], packed, v.distinct.batch_offset("bt"), k, n,
                      v.row_stride, v.col_stride, node, panel=f"pk % {panels}",
                      packed_off=f"bt * {size}", pairs=pairs))
        stmts = (Comment(f"{b.value} packed into column panels by every run, before the "
                         "tiles"), Loop("pk", items * panels, "grid", body))
        return packed, stmts, "0" if items == 1 else f"({v.distinct_index('bt')}) * {size}"

    def _im2col_panels(self, cols: Scratch, pairs: bool = False) -> Loop:
        """Fill ``cols`` with the patches of the tile's output positions c0..c1 in the
        micro-kernel's panel layout (codegen/microkernel.py): panel by panel, each
        ``C x taps`` rows of PANEL columns -- with ``pairs``, bfloat16 rows ``2 r`` and
        ``2 r + 1`` of a column side by side in one 32-bit word, as ``PackB.pairs``
        packs them -- gathered as ``_im2col`` gathers a tile; a partial last panel's
        columns past c1 zeros, as a packed B's are (the micro-kernel multiplies whole
        blocks of columns and stores the ones it has), and so is an odd row count's
        missing last row of a pair."""
        k, i64 = self.sched.gemm.k, DType.int64
        size = PANEL * (2 * -(-k // 2) if pairs else k)     # (elements of a panel)
        row, step = ((f"j / 2 * {2 * PANEL} + j % 2", 2) if pairs else (f"j * {PANEL}", 1))
        pad = (Loop("j", k, "serial", (Loop("x", PANEL, "block", (
            Store(cols, f"pc * {size} + {row} + x * {step}", "0.0f"),), start="g1 - g0"),)),)
        if pairs and k % 2:
            pad += (Loop("x", PANEL, "block", (
                Store(cols, f"pc * {size} + {(k - 1) * PANEL + 1} + x * 2", "0.0f"),)),)
        return Loop("pc", -(-self.sched.gemm.tile_n // PANEL), "serial", (
            Let("g0", i64, f"c0 + pc * {PANEL}"),
            Let("g1", i64, f"g0 + {PANEL} < c1 ? g0 + {PANEL} : c1"),
            self._im2col(cols, "g0", "g1", row, step, f"pc * {size}"), *pad),
            stop=f"(c1 - c0 + {PANEL - 1}) / {PANEL}")

    def _im2col(self, cols: Scratch | None, c0: str = "c0", c1: str = "c1", row: str = "",
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
        t, ic = self.sched.gemm, self.sched.gemm.im2col
        x = self.buffers[ic.value]
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
            # (``_direct``: the taps inside the input times the filter's weight j, added
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

    def _at_rows(self, v: str) -> Index:
        """The element at (row, col) of a value seen as [rows, N] (the product, or a
        reshape of it keeping its rows; a convolution's columns are its spatial axes):
        a bias [N] is read at col (unit stride, so the loop vectorizes), a residual at
        the element itself."""
        shape = self.g.value(v).shape
        split = len(shape) - self.sched.gemm.col_axes
        return Index.from_runs(shape, [("row", list(range(split))),
                                       ("col", list(range(split, len(shape))))])

    def _online_attention(self, name: str) -> Kernel:
        """Fused attention with the softmax taken a block of keys at a time
        (``OnlineSoftmax``, FlashAttention's recurrence). Per tile of query rows: a
        running maximum ``wb_m`` and sum ``wb_l`` per row and the output rows ``wb_o``;
        for each block of keys the scores' block ``wb_s`` (Q's rows @ the packed Kᵀ's
        block), the prefix ops making the logits in place, then per row the new
        maximum, the probabilities ``exp(z - m_new)`` in place, ``l`` and the output
        rows rescaled by ``exp(m - m_new)``, and ``wb_o += wb_s @ V's block``; at the
        end each output row divided by its ``l``. A row whose logits are all -inf so
        far takes 0 as its base, so exp gives 0, not NaN, until a finite logit comes
        (a softmax over a row that stays all -inf is 0/0, NaN, as NumPy's)."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        on = then.online
        mm, mm2 = g.producer[t.result], g.producer[then.result]
        a = t.a.view
        M, N, K, D, BC, TM = t.m, t.n, t.k, then.n, on.block, t.tile_m
        f32, i64 = DType.float32, DType.int64
        pairs = self._pairs()
        kp, k_pack, k_off = self._pack_per_run("pack", t.b, K, N, t.batch, mm.id, pairs)
        vp, v_pack, v_off = self._pack_per_run("pack_v", then.b, then.k, D, t.batch, mm2.id)
        s_blk = Scratch("wb_s", t.result, f32, TM * BC)
        o_acc = Scratch("wb_o", then.result, f32, TM * D)
        m_run = Scratch("wb_m", on.logits, f32, TM)
        l_run = Scratch("wb_l", then.value, f32, TM)
        out, o_off, ldo = self._attention_out()
        red_max = get_op("reduce_max").combiner
        maximum = red_max.combine("f")
        exp = get_op("exp").scalar
        div = get_op("div").scalar

        def expf(x: str) -> str:
            return exp([x], [f32], f32, {})

        # the logits of the block, in place: the prefix ops (scale, mask) at (row, col)
        scope = _Scope()
        prod, at = self.fresh(), self._at_rows(t.result)
        blk = f"(r - r0) * {BC} + col - c0"
        scope.stmts.append(Load(prod, s_blk, blk))
        scope.memo[(t.result, at.key)] = prod
        z = self.at(scope, on.logits, self._at_rows(on.logits))
        scope.stmts.append(Store(s_blk, blk, z))
        logits = Loop("r", M, "serial", (
            Let("row", i64, f"bt * {M} + r"),
            Loop("col", N, "block", tuple(scope.stmts), start="c0", stop="c1")),
            start="r0", stop="r1")
        cell = f"wb_ri * {BC} + wb_c"
        per_row = Loop("r", M, "serial", (
            Let("wb_ri", i64, "r - r0"),
            Load("wb_m0", m_run, "wb_ri"),
            Let("wb_mx", f32, "wb_m0"),
            Loop("wb_c", BC, "block", (Load("wb_x", s_blk, cell),
                                       Assign("wb_mx", maximum.format("wb_mx", "wb_x"))),
                 reduction=("wb_mx", red_max.simd_op[0]), stop="c1 - c0"),
            Let("wb_base", f32, "wb_mx == -INFINITY ? 0.0f : wb_mx"),
            Let("wb_alpha", f32, expf("wb_m0 - wb_base")),
            Let("wb_sum", f32, "0.0f"),
            Loop("wb_c", BC, "block", (Load("wb_x", s_blk, cell),
                                       Let("wb_e", f32, expf("wb_x - wb_base")),
                                       Store(s_blk, cell, "wb_e"),
                                       Assign("wb_sum", "wb_sum + wb_e")),
                 reduction=("wb_sum", "+"), stop="c1 - c0"),
            Load("wb_l0", l_run, "wb_ri"),
            Store(l_run, "wb_ri", "wb_l0 * wb_alpha + wb_sum"),
            Store(m_run, "wb_ri", "wb_mx"),
            Loop("wb_d", D, "block", (Load("wb_y", o_acc, f"wb_ri * {D} + wb_d"),
                                      Store(o_acc, f"wb_ri * {D} + wb_d", "wb_y * wb_alpha")))),
            start="r0", stop="r1")
        step = (
            Let("c0", i64, f"kb * {BC}"),
            Let("c1", i64, f"c0 + {BC} < {N} ? c0 + {BC} : {N}"),
            Comment("the scores' block: Q's rows @ the block of the packed keys"),
            Gemm(self.buffers[t.a.value], kp, s_blk,
                 f"{a.batch_offset('bt')} + r0 * {a.row_stride}",
                 f"{k_off} + c0 * {panel_rows(K, pairs)}", "0", "r1 - r0", "c1 - c0", K,
                 a.ld, PANEL, BC, mm.id, trans_a=a.trans, packed=True, pairs=pairs),
            Comment("the logits (the ops before the softmax), in place"), logits,
            Comment("per row: the running maximum and sum, the probabilities in place, "
                    "the output rows rescaled"), per_row,
            Comment(f"the output rows += the probabilities @ the block of {mm2.id}'s V"),
            Gemm(s_blk, vp, o_acc, "0", f"{v_off} + c0 * {PANEL}", "0", "r1 - r0", str(D),
                 "c1 - c0", BC, PANEL, D, mm2.id, packed=True, accumulate=True,
                 panel_rows=then.k))
        blocks = self._key_blocks(step, BC, lambda floor: (Loop("r", M, "serial", (
            Load("wb_mr", m_run, "r - r0"), Assign("wb_ok", f"wb_ok && wb_mr > {floor}")),
            start="r0", stop="r1"),))
        finish = Loop("r", M, "serial", (
            Let("wb_ri", i64, "r - r0"),
            Load("wb_l0", l_run, "wb_ri"),
            Loop("wb_d", D, "block", (
                Load("wb_y", o_acc, f"wb_ri * {D} + wb_d"),
                Store(out, f"{o_off} + wb_ri * {ldo} + wb_d",
                      div(["wb_y", "wb_l0"], [f32, f32], f32, {}), node=self._made_by(
                          then.value)),))),
            start="r0", stop="r1")
        per = t.row_tiles
        body = (*(DeclareScratch(x) for x in (s_blk, o_acc, m_run, l_run)),
                *self._tile_bounds(columns=False),
                Loop("r", TM, "serial", (Store(m_run, "r", "-INFINITY"),
                                         Store(l_run, "r", "0.0f"))),
                Loop("i", TM * D, "block", (Store(o_acc, "i", "0.0f"),)),
                *blocks, Comment("each output row divided by its sum"), finish)
        loop = Loop("tile", t.batch * per, "grid", body)
        flops = self.flops * g.value(t.result).numel
        k = _kernel(name, self.group.id, self.sched.describe(), self.buffers,
                    _widen([*k_pack, *v_pack, loop], self.wide),
                    _launch(self.geometry, self.sched), int(t.flops) + flops,
                    tuple(self.scratch.values()))
        return replace(k, host_only=True)   # (both products the micro-kernel's: no sgemm)

    def _key_blocks(self, step: tuple, block: int, rows_above) -> tuple:
        """A fused attention's loop over the blocks of keys, ``step`` each: every block;
        or, under a causal mask (``OnlineSoftmax.limit``, fusion/key_limit.py), the
        blocks the tile's last row takes, then the others only where a check fails:
        before them, the skipped keys' values finite and (an additive mask) their
        scores bounded; after the last block taken, ``rows_above(floor)``, statements
        clearing ``wb_ok`` unless every row's running maximum is above ``floor``. (The
        sums come first, while the output rows hold nothing: the GPU's tile is at the
        edge of its 128 registers.) Skipped or taken, the result is the same
        (key_limit.py)."""
        t, lim = self.sched.gemm, self.sched.key_limit
        nb = -(-t.n // block)
        if lim is None:
            return (Loop("kb", nb, "serial", step),)
        f32, i32 = DType.float32, DType.int32      # (32-bit: key counts; registers)
        last = f"r1 - 1 + {lim.offset}"
        floor = c_literal(lim.floor, f32)
        skipped = (f"wb_khi * {block}", str(t.n))
        sums = self._abs_reduce("wb_tv", self.sched.then.b, skipped,
                                ("0", str(self.sched.then.n)), "+")
        ok = "wb_tv < INFINITY"
        if lim.additive:
            # (each score a sum of k products, each at most max|q| x max|k|)
            scale, bound = c_literal(lim.scale * t.k, f32), c_literal(lim.bound, f32)
            sums += (*self._abs_reduce("wb_tq", t.a, ("r0", "r1"), ("0", str(t.k)), "max"),
                     *self._abs_reduce("wb_tk", t.b, ("0", str(t.k)), skipped, "max"))
            ok += f" && {scale} * wb_tq * wb_tk < {bound}"
        check = (Comment(f"after the tile's last block: every row's maximum above {floor} "
                         "(the masked logits' exp is 0 for each), or the masked blocks "
                         "are taken too"), *rows_above(floor),
                 Assign("wb_kend", f"wb_ok ? wb_khi : {nb}"))
        # (one loop, the check inside it: a second copy of the block's step took the
        # GPU's tile past its 128 registers)
        return (Let("wb_keys", i32, f"{last} < 0 ? 0 : {last} < {t.n} ? {last} : {t.n}"),
                Let("wb_khi", i32, f"(wb_keys + {block - 1}) / {block}"),
                Let("wb_ok", i32, f"wb_khi < {nb}"),
                Comment("the keys past the tile's blocks: their values finite (0 x V adds "
                        "nothing)" + (", their scores bounded (the masked logits stay "
                                      "near the fill)" if lim.additive else "")),
                If("wb_ok", (*sums, Assign("wb_ok", ok))),
                Let("wb_kend", i32, str(nb)),
                Comment(f"the blocks of keys the tile's rows take ({lim.describe()})"),
                Loop("kb", nb, "serial", (*step, If("kb + 1 == wb_khi", check)),
                     stop="wb_kend"))

    def _abs_reduce(self, var: str, op, rows: tuple[str, str], cols: tuple[str, str],
                    how: str) -> tuple:
        """``var`` = the sum (``how`` "+", in any order: an upper bound) or the maximum
        ("max", NaN-propagating) of |x| over rows and columns [lo, hi) of GEMM operand
        ``op`` in batch item bt: on the CPU a loop along its unit stride inside one
        over the other axis (SIMD lanes); on a GPU one loop over the whole rectangle
        dealt out to the block's threads (neighbours along the unit stride), then
        combined across the block."""
        combine = "{0} + {1}" if how == "+" else "wb_fmax({0}, {1})"
        v, f32, i64 = op.view, DType.float32, DType.int64
        # (outer, inner): (variable, [lo, hi), stride, extent), the inner one the unit
        # stride's (the rows', where the operand is stored transposed)
        axes = [("wb_u", rows, v.row_stride, v.rows), ("wb_w", cols, v.col_stride, v.cols)]
        (r, (r0, r1), rs, rn), (c, (c0, c1), cs, cn) = axes[::-1] if v.trans else axes
        at = (Load("wb_x", self.buffers[op.value],
                   f"{v.batch_offset('bt')} + {r} * {rs} + {c} * {cs}"),
              Assign(var, combine.format(var, "fabsf(wb_x)")))
        if not self.device.is_gpu:
            simd = "+" if how == "+" else get_op("reduce_max").combiner.simd_op[0]
            return (Let(var, f32, "0.0f"),
                    Loop(r, rn, "serial", (Loop(c, cn, "block", at, reduction=(var, simd),
                                                start=c0, stop=c1),), start=r0, stop=r1))
        width = f"(({c1}) - ({c0}))"
        return (Let(var, f32, "0.0f"),
                Loop("wb_e", v.rows * v.cols, "block", (
                    Let(r, i64, f"{r0} + wb_e / {width}"),
                    Let(c, i64, f"{c0} + wb_e % {width}"), *at),
                     start="0", stop=f"(({r1}) - ({r0})) * {width}"),
                BlockReduce(var, f32, combine, "0.0f", 0))

    def _elementwise_epilogue(self, dest: Buffer) -> Loop | ThreadTile:
        """The tile's rows and columns, each element of the product read back from
        ``dest`` and finished: every output of the group stored there."""
        g, t = self.g, self.sched.gemm
        at_rows = self._at_rows
        scope = _Scope()
        product, at = self.fresh(), at_rows(t.result)
        tiled = isinstance(dest, Scratch)     # (a thread's tile from column c0: see _gemm)
        scope.stmts.append(Load(product, dest, "wb_s" if t.block is not None else
                                f"(r - r0) * {t.tile_n} + col - c0" if tiled
                                else at.offset()))
        conv = g.producer[t.result]
        if t.im2col is not None and len(conv.inputs) == 3:
            # the convolution's own bias, per output channel: the tile's row, or with
            # groups (a GEMM batch item per batch item and group) the row's channel
            b = conv.inputs[2]
            bias, channels = self.fresh(), g.value(b).numel
            channel = "r" if channels == t.m else f"row % {channels}"
            # (one filter's bias, a one-element constant, is a literal with no buffer)
            scope.stmts += [Let(bias, DType.float32, c_literal(g.constants[b], DType.float32))
                            if self._inline_constant(b) else Load(bias, self.buffers[b], channel),
                            Let(f"{product}b", DType.float32, f"{product} + {bias}", conv.id)]
            product = f"{product}b"
            if t.result in self.io.outputs and not tiled:   # (tiled: stored below)
                scope.stmts.append(Store(dest, at.offset(), product, node=conv.id))
        scope.memo[(t.result, at.key)] = product
        for n in (g.node(x) for x in self.group.nodes):
            if n.op in VIEWS and n.id not in t.views:
                # an epilogue view is its input, element for element
                scope.memo[(n.outputs[0], at_rows(n.outputs[0]).key)] = self.at(
                    scope, n.inputs[0], at_rows(n.inputs[0]))
        for o in self.io.outputs:
            if o != t.result or tiled:        # (else the product is in dest already)
                idx = at_rows(o)
                e = self.at(scope, o, idx)
                scope.stmts.append(Store(self.buffers[o], idx.offset(), e,
                                         node=self._made_by(o)))
        if t.block is not None:
            return ThreadTile(t.block, "r0", "r1", "c0", "c1",
                              (Let("row", DType.int64, f"bt * {t.m} + r"), *scope.stmts))
        return Loop("r", t.m, "serial", (
            Let("row", DType.int64, f"bt * {t.m} + r"),
            Loop("col", t.n, "block", tuple(scope.stmts), start="c0", stop="c1")),
            start="r0", stop="r1")

    def _row_epilogue(self, matmul: str, dest: Buffer) -> Loop:
        """A gemm epilogue reducing rows: the epilogue's nodes lowered by the row
        template (their own schedule), the product read from ``dest`` where the
        matmul's result would be, over the tile's rows (tiles are whole rows) instead
        of a parallel loop over all rows."""
        t, then = self.sched.gemm, self.sched.then
        rest = tuple(n for n in self.group.nodes if n != matmul and n not in t.views
                     and (then is None or then.result not in self.g.node(n).outputs))
        buffers = dict(self.buffers)
        buffers[t.result] = dest
        if then is not None:
            buffers[then.value] = dest      # the probabilities overwrite the scores
        sub = _Lowerer(self.g, Group(self.group.id, rest, self.sched.epilogue), self.device,
                       buffers, self.counter)
        (rows,) = sub._row_reduce()
        self.counter, self.flops = sub.counter, self.flops + sub.flops
        self.scratch.update(sub.scratch)
        rows = replace(rows, bind="serial", start=f"bt * {t.m} + r0", stop=f"bt * {t.m} + r1")
        if isinstance(dest, Scratch):
            # the tile holds rows r0..r1 of batch bt: its offsets are the product's less
            # the first row's
            rows = _rebase(rows, dest, f"(bt * {t.m} + r0) * {t.n}")
        return rows

    def _elementwise(self):
        # One flat loop per distinct output shape ("independent" packing when >1).
        by_shape: dict[tuple, list[str]] = {}
        for o in self.io.outputs:
            by_shape.setdefault(self.g.value(o).shape, []).append(o)
        body = []
        for k, (shape, outs) in enumerate(by_shape.items()):
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            var = "i" if len(by_shape) == 1 else f"i{k}"
            concat = self._split_concat(shape)
            if concat is not None:
                body.append(self._split_at_concat(concat, shape, outs, var))
                continue
            scope = _Scope()
            rows = self._row_loop(shape)
            if rows:
                # rows apart, the last axis innermost: what the layout ops read is found
                # once per row, and a row of a transposed or sliced input is contiguous
                # (one flat index would need a division per element and per axis)
                r, c = f"r{var}", f"c{var}"
                idx = Index.from_runs(shape, [(r, list(range(len(shape) - 1))),
                                              (c, [len(shape) - 1])])
            else:
                idx = Index.flat(var, shape)
            for o in outs:
                e = self.at(scope, o, idx)
                scope.stmts.append(Store(self.buffers[o], idx.offset() if rows else var, e,
                                         node=self._made_by(o)))
            if rows:
                body.append(Loop(r, rows, "grid", (Loop(c, shape[-1], "block",
                                                        tuple(scope.stmts)),)))
            else:
                body.append(Loop(var, n, "flat", tuple(scope.stmts), self._flat_vector(
                    n, scope.stmts, var)))
        return body

    @staticmethod
    def _flat_vector(n: int, stmts, var: str) -> int:
        """A flat loop's vector, by geometry.flat_vector's rule over the buffers the loop
        moves at its own index. (The launch is sized by the schedule's, the same rule
        over the group's values: they differ only where a stitched phase also moves a
        wider workspace buffer, and then the grid-stride loop covers the difference.)"""
        at = [x.buf.dtype.itemsize for x in stmts
              if isinstance(x, (Load, Store)) and x.offset == var]
        return flat_vector(n, max(at, default=4))

    def _split_concat(self, shape):
        """The concat an elementwise loop over ``shape`` is split at on a CPU (None:
        not split): one whose result has that shape, joined along an axis before the
        last, whose every consumer in the group is elementwise at that shape (so the
        loop's index is its index). Unsplit, each element reads every part and keeps
        one: DenseNet's concat of 25 parts, then BatchNorm and ReLU, read 25 times its
        data (2 ms a kernel at 224 px; onnxruntime copies each part once)."""
        if self.device.is_gpu or len(shape) < 2:
            return None
        g = self.g
        best = None
        for nid in self.group.nodes:
            n = g.node(nid)
            if n.op != "concat" or g.value(n.outputs[0]).shape != tuple(shape):
                continue
            axis = int(n.attr("axis")) % len(shape)
            if axis == len(shape) - 1 or math.prod(shape[axis + 1:]) < CONCAT_SPLIT_RUN:
                continue
            if all(self._elementwise_downstream(o, shape) for o in n.outputs) and \
                    (best is None or len(n.inputs) > len(best.inputs)):
                best = n
        return best

    def _elementwise_downstream(self, v: str, shape) -> bool:
        """Every op of the group reading ``v``, and what reads theirs, is elementwise
        with a result of ``shape`` (each op looked at once: a chain of diamonds, x *
        sigmoid(x) after x * sigmoid(x), would double the paths at each)."""
        todo, seen = [v], set()
        while todo:
            for n in self.g.consumers.get(todo.pop(), ()):
                if n.id not in self.members or n.id in seen:
                    continue
                seen.add(n.id)
                if get_op(n.op).kind is not Kind.elementwise or \
                        any(self.g.value(o).shape != tuple(shape) for o in n.outputs):
                    return False
                todo.extend(n.outputs)
        return True

    def _split_at_concat(self, concat, shape, outs, var: str) -> Loop:
        """The loop over ``shape`` with a row per index up to the concat's axis and the
        rest of the index contiguous within it: each row falls in one part, and the
        row's elements are computed by that part's loop, reading that input alone."""
        axis = int(concat.attr("axis")) % len(shape)
        r, c = f"r{var}", f"c{var}"
        idx = Index.from_runs(shape, [(r, list(range(axis + 1))),
                                      (c, list(range(axis + 1, len(shape))))])
        at = self.fresh()
        body: list = [Let(at, self.index_dtype, mod(r, shape[axis]), concat.id)]
        cols = math.prod(shape[axis + 1:])
        start = 0
        for part, src in enumerate(concat.inputs):
            n = self.g.value(src).shape[axis]
            scope = _Scope()
            self.concat_part[concat.id] = part
            for o in outs:
                e = self.at(scope, o, idx)
                scope.stmts.append(Store(self.buffers[o], idx.offset(), e,
                                         node=self._made_by(o)))
            body.append(If(f"{at} >= {start} && {at} < {start + n}",
                           (Loop(c, cols, "block", tuple(scope.stmts)),)))
            start += n
        del self.concat_part[concat.id]
        return Loop(r, math.prod(shape[:axis + 1]), "grid", tuple(body))

    def _row_loop(self, shape) -> int:
        """Rows of an elementwise kernel looped apart from its last axis (0: one flat
        loop): on a CPU, when a layout op moves elements (a transpose, slice, concat..:
        index arithmetic per axis) and the rows are long enough to vectorize. A GPU
        keeps the flat grid-stride loop (coalesced either way)."""
        if self.device.is_gpu or len(shape) < 2 or shape[-1] < ROW_LOOP_MIN:
            return 0
        moves = any(get_op(self.g.node(n).op).kind is Kind.layout
                    and self.g.node(n).op not in VIEWS for n in self.group.nodes)
        rows = math.prod(shape[:-1])
        return rows if moves and rows > 1 else 0

    def _domain(self) -> Index:
        s = self.sched
        kept = [d for d in range(len(s.domain)) if d not in s.reduce_axes]
        return Index.from_runs(s.domain, [("row", kept), ("col", list(s.reduce_axes))])

    def _reductions(self):
        return [n for n in (self.g.node(x) for x in self.group.nodes)
                if get_op(n.op).kind is Kind.reduce]

    def _accumulate(self, scope: _Scope, slot: int, r, dom: Index, extent: int,
                    bind: str, **loop_kw):
        """Emit reduction ``r``'s accumulator ``acc<slot>`` and its loop over the row's
        columns into scope; returns (acc, compute dtype, combiner, identity)."""
        dt, ident, comb = self._accumulator(r)
        acc = f"acc{slot}"
        col_scope = self._col_scope(scope, self._tile())
        e = self.at(col_scope, r.inputs[0], dom)
        scope.stmts.append(Let(acc, dt, ident, r.id))
        simd = comb.simd_op[0 if dt.kind == "f" else 1]
        if bind == "serial" and dt.kind == "f" and simd == "+":
            # one thread sums a whole row (a column reduction): compensated (Kahan) so
            # a long row stays within float32's bound against NumPy's pairwise sum; a
            # non-finite partial sum drops the compensation (inf stays inf)
            c, y, t = f"{acc}_c", self.fresh(), self.fresh()
            scope.stmts.append(Let(c, dt, "0.0f", r.id))
            col_scope.stmts += [Let(y, dt, f"{e} - {c}", r.id), Let(t, dt, f"{acc} + {y}", r.id),
                                Assign(c, f"({t} - {t} == 0.0f) ? (({t} - {acc}) - {y}) "
                                          ": 0.0f", r.id),
                                Assign(acc, t, r.id)]
            simd = ""                      # the order is the point: no SIMD reordering
        else:
            col_scope.stmts.append(Assign(acc, comb.combine(dt.kind).format(acc, e), r.id))
        scope.stmts.append(Loop("col", extent, bind, tuple(col_scope.stmts),
                                reduction=(acc, simd), tile=self._tile(), **loop_kw))
        return acc, dt, comb, ident

    def _tile(self) -> tuple[int, int, int, str] | None:
        """How a row kept on chip deals its columns to threads (threads, per_thread,
        vector, shift), or None when a row is not kept in one block; shift: the C
        expression of the row's first offset mod vector when the vector does not
        divide the row ("" when it does)."""
        s = self.sched
        if s.kind is not ScheduleKind.row_reduce or not s.mapping.info.on_chip:
            return None
        shift = ""
        if row_shifted(s.cols, s.vector):
            shift = f"(int)({self._row_base()} % {s.vector})"
        return (s.threads, s.tile_steps, s.vector, shift)

    def _row_base(self) -> str:
        """The offset of a row's first element in a buffer of the domain's shape."""
        return self._row_index(self._domain()).offset()

    def _col_scope(self, parent: _Scope, tile) -> _Scope:
        """The scope of a column loop over a tile (or over a row not kept on chip)."""
        if tile is None:
            return _Scope(parent)
        return _Scope(parent, tile[2], self._row_base() if tile[3] else "")

    def _accumulator(self, r):
        """(accumulator type, identity, combiner) of reduction r: integers accumulate
        in 64 bits (a mean of int32 must not wrap at 2^31; NumPy sums them in int64),
        unsigned ones unsigned (a uint64 past 2^63 is no long long)."""
        src = self.g.value(r.inputs[0]).dtype.compute
        comb = get_op(r.op).combiner
        dt = src if src.kind != "i" else (DType.int64 if src.signed else DType.uint64)
        return dt, comb.identity(src.kind, src.value), comb

    def _result(self, r, acc: str, dt: DType) -> str:
        """Reduction r's value as its consumers in the kernel read it: a 64-bit integer
        accumulator wrapped to the output's type first (an int8 sum is an int8, also
        when a cast to float follows it in the same kernel)."""
        out = self.g.value(r.outputs[0]).dtype.compute
        return acc if out is dt else f"(({out.c_compute}){acc})"

    def _finish(self, comb, acc: str, dt: DType, node: str = "") -> Assign:
        cols = self.sched.cols
        if dt.kind == "f":
            return Assign(acc, f"{acc} * (1.0f / {cols}.0f)", node)
        # an integer mean over an empty axis is 0 (and no division by zero)
        return Assign(acc, f"{acc} / {cols}LL" if cols else "0", node)

    def _row_reduce(self) -> list:
        """Mappings warp, block and thread: every row is owned by one warp, one block
        or one thread, which runs the row's passes one after another."""
        s: Schedule = self.sched
        g = self.g
        dom = self._domain()
        info = s.mapping.info
        width = info.reduce_width        # "" when one thread owns the row
        row_scope = _Scope()
        self.row_scope = row_scope
        tile = self._tile()
        for k, v in enumerate(s.row_cached):
            if v == s.hybrid:       # (an input: its first tile steps in registers)
                T, K, V = tile[0], tile[1], tile[2]
                self.scratch[v] = Scratch(f"wb_{self.prefix}row{k}", v,
                                          g.value(v).dtype.compute, (K - s.hybrid_steps) * V * T,
                                          1, "hybrid", s.hybrid_steps * V, self.buffers[v], T)
            else:
                self.scratch[v] = Scratch(f"wb_{self.prefix}row{k}", v,
                                          g.value(v).dtype.compute, s.cols, s.rows_per_block)
            row_scope.stmts.append(DeclareScratch(self.scratch[v]))
        for k, v in enumerate(s.row_registers):
            self.scratch[v] = Scratch(f"wb_{self.prefix}reg{k}", v, g.value(v).dtype.compute,
                                      s.cols, 1, "register", tile[1] * tile[2],
                                      None if v in self.producer else self.buffers[v])
            row_scope.stmts.append(DeclareScratch(self.scratch[v]))
        reduces = self._reductions()
        for slot, r in enumerate(reduces):
            row_scope.stmts.append(Comment(f"{r.op} over {list(s.reduce_axes)}"))
            acc, dt, comb, ident = self._accumulate(row_scope, slot, r, dom, s.cols,
                                                    info.col_bind)
            if width:
                row_scope.stmts.append(BlockReduce(acc, dt, comb.combine(dt.kind), ident,
                                                   slot, width))
            if comb.finish_mean:
                row_scope.stmts.append(self._finish(comb, acc, dt, r.id))
            self.reduce_var[r.outputs[0]] = self._result(r, acc, dt)
            self.flops += 1
        stores = self._per_row_stores(row_scope, dom)
        if stores:
            if width:
                row_scope.stmts.append(OncePerBlock(tuple(stores), width))
            else:
                row_scope.stmts.extend(stores)
        self._element_pass(row_scope, dom, info.col_bind)
        per_block = s.rows_per_block if s.mapping is Mapping.warp else 1
        return [Loop("row", s.rows, info.row_bind, tuple(row_scope.stmts),
                     per_block=per_block)]

    def _per_row_stores(self, row_scope: _Scope, dom: Index) -> list:
        g, s = self.g, self.sched
        stores = []
        for o in self.io.outputs:
            if o not in s.per_row:
                continue
            shape = g.value(o).shape
            idx = dom.broadcast_to(shape) if len(shape) == len(s.domain) \
                else Index.flat("row", shape)
            e = self.at(row_scope, o, self._row_index(idx))
            stores.append(Store(self.buffers[o], "row", e, node=self._made_by(o)))
        return stores

    def _element_pass(self, row_scope: _Scope, dom: Index, col_bind: str,
                      start: str = "", stop: str = "", only_if: str = "") -> None:
        elem_out = [o for o in self.io.outputs if o not in self.sched.per_row]
        if not elem_out:
            return
        tile = None if start else self._tile()
        col_scope = self._col_scope(row_scope, tile)
        for o in elem_out:
            e = self.at(col_scope, o, dom)
            col_scope.stmts.append(Store(self.buffers[o], dom.offset(), e,
                                         self._vector(col_scope, dom), self._made_by(o)))
        row_scope.stmts.append(Comment("write the row's elements"))
        row_scope.stmts.append(Loop("col", self.sched.cols, col_bind, tuple(col_scope.stmts),
                                    start=start, stop=stop, tile=tile))

    def _split_rows(self):
        """Mapping split: each row is cut into ``splits`` chunks of columns, one block
        per chunk. Each reduction is one pass over the grid: every block reduces its
        chunk and writes a partial to global memory; after a grid barrier every block
        combines its row's partials (in a fixed order, so all agree bit for bit) and
        goes on. The last pass writes the outputs."""
        s: Schedule = self.sched
        dom = self._domain()
        S, cols, rows = s.splits, s.cols, s.rows
        chunk = -(-cols // S)
        start = f"part * {chunk}"
        stop = f"((part + 1) * {chunk} < {cols} ? (part + 1) * {chunk} : {cols})"
        reduces = self._reductions()
        partials = []
        body = []

        def new_pass(upto: int) -> _Scope:
            scope = _Scope()
            self.row_scope = scope
            scope.stmts.append(Let("row", self.index_dtype, f"vb / {S}"))
            scope.stmts.append(Let("part", self.index_dtype, f"vb % {S}"))
            for j in range(upto):
                r = reduces[j]
                dt, ident, comb = self._accumulator(r)
                acc = f"acc{j}"
                scope.stmts.append(Let(acc, dt, ident, r.id))
                t = self.fresh()
                scope.stmts.append(Loop("s", S, "serial", (
                    Load(t, partials[j], f"row * {S} + s"),
                    Assign(acc, comb.combine(dt.kind).format(acc, t), r.id))))
                if comb.finish_mean:
                    scope.stmts.append(self._finish(comb, acc, dt, r.id))
                self.reduce_var[r.outputs[0]] = self._result(r, acc, dt)
            return scope

        for j, r in enumerate(reduces):
            dt, _, _ = self._accumulator(r)
            part_buf = self.workspace(f"part{j}", dt, rows * S)
            scope = new_pass(j)
            scope.stmts.append(Comment(f"{r.op}: this block's chunk of the row"))
            acc, dt, comb, ident = self._accumulate(scope, j, r, dom, cols, "block",
                                                    start=start, stop=stop)
            scope.stmts.append(BlockReduce(acc, dt, comb.combine(dt.kind), ident, 0))
            scope.stmts.append(OncePerBlock((Store(part_buf, "vb", acc),)))
            partials.append(part_buf)
            body.append(Loop("vb", rows * S, "grid", tuple(scope.stmts)))
            body.append(GridSync(f"the partials of {r.op} are complete"))
            self.flops += 1
        scope = new_pass(len(reduces))
        stores = self._per_row_stores(scope, dom)
        if stores:
            # (every block of the row knows the result; the first one writes it)
            scope.stmts.append(If("part == 0", (OncePerBlock(tuple(stores)),)))
        self._element_pass(scope, dom, "block", start, stop)
        body.append(Loop("vb", rows * S, "grid", tuple(scope.stmts)))
        return body


def _rebase(stmt, tile: Scratch, base: str):
    """``stmt`` with every load from and store to ``tile`` offset by ``- base``."""
    if isinstance(stmt, (Load, Store)) and stmt.buf is tile:
        return replace(stmt, offset=f"{stmt.offset} - {base}")
    if (isinstance(stmt, Load) and isinstance(stmt.buf, Scratch)
            and stmt.buf.source is tile):     # a register copy of the tile's row
        return replace(stmt, src_offset=f"{stmt.src_offset} - {base}")
    if isinstance(stmt, (Loop, If, OncePerBlock, ThreadTile)):
        return replace(stmt, body=tuple(_rebase(x, tile, base) for x in stmt.body))
    return stmt


def _inlined(g: Graph, s: Schedule, v: str) -> bool:
    """Whether value v is a literal in the generated code rather than a buffer: a
    one-element constant, except where a library call reads it (it takes every input
    as an array) or a GEMM does (its operands pass through panels and packs: a 1 x 1
    convolution's one filter of one channel, found by the fuzzer, had no buffer)."""
    if s.kind is ScheduleKind.opaque or v not in g.constants or g.value(v).numel != 1:
        return False
    return v not in _gemm_operands(s)


def _gemm_operands(s: Schedule) -> set[str]:
    """The values the GEMMs of s (a stitched one's phases too) read as operands."""
    if s.kind is ScheduleKind.stitched:
        return set().union(*(_gemm_operands(p.schedule) for p in s.phases))
    if s.kind is not ScheduleKind.gemm:
        return set()
    t = s.gemm
    out = {t.a.value, t.b.value}
    if t.im2col is not None:
        out.add(t.im2col.value)
    if s.then is not None:
        out.add(s.then.b.value)
    return out


def _buffers(g: Graph, io, inline) -> dict[str, Buffer]:
    """Kernel parameters for a group's inputs (scalar constants inlined) and outputs."""
    buffers: dict[str, Buffer] = {}
    for v in io.inputs:
        if not inline(v):
            val = g.value(v)
            buffers[v] = Buffer(f"in{len(buffers)}", v, val.dtype, val.numel, False)
    for k, v in enumerate(io.outputs):
        val = g.value(v)
        buffers[v] = Buffer(f"out{k}", v, val.dtype, val.numel, True)
    return buffers


def _launch(geo: Geometry, s: Schedule) -> Launch:
    """The IR's record of how a kernel is launched (its geometry, see fusion.geometry)."""
    mapping = s.mapping if s.kind is ScheduleKind.row_reduce else None
    return Launch(geo.grid, geo.threads, mapping,
                  geo.rows_per_block if mapping is not None else 0, geo.cooperative,
                  geo.splits, geo.shared_bytes, stitched=s.kind is ScheduleKind.stitched)


def _widen(body, wide: bool) -> list:
    """Every loop of a kernel that needs 64-bit index arithmetic, marked so."""
    if not wide:
        return list(body)
    out = []
    for x in body:
        if isinstance(x, Loop):
            x = replace(x, wide=True, body=tuple(_widen(x.body, True)))
        elif isinstance(x, (If, OncePerBlock, ThreadTile)):
            x = replace(x, body=tuple(_widen(x.body, True)))
        out.append(x)
    return out


def _kernel(name, group, schedule, buffers, body, launch: Launch, flops, scratch,
            phases=1, barriers=0, slots: int = 0) -> Kernel:
    params = tuple(sorted(buffers.values(), key=lambda b: (b.workspace, b.is_output, b.name)))
    return Kernel(name, group, schedule, params, tuple(body), launch, slots, None,
                  flops, tuple(scratch), phases, barriers)


def _lower_stitched(g: Graph, group: Group, name: str, device: Device) -> Kernel:
    """A stitched group: each phase lowered by its own template into one kernel, a
    grid barrier where a phase reads what a phase since the last barrier wrote.

    Values passed between phases live in workspace buffers (global memory, kept in
    the compute type) unless they are group outputs anyway. One block size serves all
    phases (the largest any wants; every loop strides, so more threads only idle)."""
    s = group.schedule
    io = group_io(g, group.nodes)
    buffers = _buffers(g, io, lambda v: _inlined(g, s, v))
    for v in s.through_global:
        if v not in buffers:
            val = g.value(v)
            buffers[v] = Buffer(f"ws{len([b for b in buffers.values() if b.workspace])}", v,
                                val.dtype.compute, val.numel, True, True)
    body, scratch, counter, flops, wide = [], [], 0, 0, False
    for k, p in enumerate(s.phases):
        lw = _Lowerer(g, Group(f"{group.id}p{k}", p.nodes, p.schedule), device, buffers,
                      counter, f"p{k}_")
        stmts = lw.lower_body()
        counter, flops, wide = lw.counter, flops + lw.flops, wide or lw.wide
        scratch += list(lw.scratch.values())
        if p.barrier:
            body.append(GridSync(f"phase {k} reads " + ", ".join(
                identifier(v) for v in p.reads_from_phases[:3])))
        body.append(Comment(f"phase {k}: {p.schedule.describe()}"))
        body += stmts
    geo = geometry(s, device)
    return _kernel(name, group.id, s.describe(), buffers, _widen(body, wide), _launch(geo, s),
                   flops,
                   tuple(scratch), len(s.phases), s.grid_barriers, geo.reduce_slots)


def lower_group(g: Graph, group: Group, device: Device) -> Kernel:
    """Lower one group to a kernel named after its id and its ops (sanitized); its
    launch is sized for ``device`` (the plan's)."""
    ops = []
    for n in group.nodes:
        op = g.node(n).op
        if op not in ops:
            ops.append(op)
    name = identifier(f"{group.id}_{'_'.join(ops[:3])}" + ("_etc" if len(ops) > 3 else ""))
    with _recursion_room(len(group.nodes)):
        if group.schedule.kind is ScheduleKind.stitched:
            k = _lower_stitched(g, group, name, device)
        else:
            k = _Lowerer(g, group, device).lower(name)
    err = _product_error(group, device)
    return replace(k, nodes=tuple(group.nodes), tf32=err > 0, product_error=err)


def _product_error(group: Group, device: Device) -> float:
    """How far the rounding of its operands may take a product of the group's matmuls
    (relative to |A| @ |B|): none on the CUDA cores; on tensor cores (the schedule's
    ``tensor_cores``, where the device has them) a half type's in a GPU tile of that
    type (its computed operands rounded into it), else TF32's (cuBLAS in TF32, a TF32
    tile; half operands are exact in TF32, but a fused attention's probabilities are
    not)."""
    s = group.schedule
    block = s.gemm.block if s.kind is ScheduleKind.gemm else None
    half = block is not None and block.tensor and block.operands.is_half
    each = HALF_PRODUCT_ERROR[block.operands] if half else TF32_PRODUCT_ERROR
    return each if s.tensor_cores and device.has_tf32 else 0.0


# Lowering is demand-driven: an op's expression asks for its inputs' (``_Lowerer.at``),
# so a chain of n fused ops recurses a few frames per op -- past Python's default limit
# of 1000 at ~330 ops. The limit is raised for as long as any lowering runs (and put
# back by the last one out: other threads may be lowering too).
FRAMES_PER_OP = 6
_room_lock = threading.Lock()
_room_users = 0
_room_saved = 0


@contextmanager
def _recursion_room(ops: int):
    global _room_users, _room_saved
    need = 1000 + FRAMES_PER_OP * ops
    with _room_lock:
        if _room_users == 0:
            _room_saved = sys.getrecursionlimit()
        _room_users += 1
        if need > sys.getrecursionlimit():
            sys.setrecursionlimit(need)
    try:
        yield
    finally:
        with _room_lock:
            _room_users -= 1
            if _room_users == 0:
                sys.setrecursionlimit(_room_saved)
