"""GEMM kernels: a matmul or convolution by tiles of its output, the elementwise or
row-reducing ops after it fused as the tile's epilogue.

On a CPU (``_cpu_gemm``) each work item's tile is multiplied by the host BLAS or the
micro-kernel into a destination (the product's buffer, or a float32 tile of the
thread's own), then finished while it is in cache; B comes in the form the planner chose
(``GemmShape.packed_b``: read in place, packed, or a convolution's patches, whose forms
are :mod:`.convolution`'s), and a CPU's attention over whole rows multiplies the tile's
probabilities by V as a second product. On a GPU (``_block_gemm``) a thread block per
tile holds the product in registers and finishes it there. Fused attention that takes
the softmax a block of keys at a time is :mod:`.attention`'s; ``lower_gemm`` picks.
"""
from __future__ import annotations

from dataclasses import replace

from ...device import Device
from ...dtypes import DType, c_literal
from ...fusion.gemm.tiles import PANEL
from ...fusion.gemm.left_pack import (SLIVER_ROWS_MIN, left_items, left_pack_words,
                                      packs_a_per_run)
from ...fusion.gemm.legality import VIEWS
from ...fusion.gemm.right_pack import in_tile_rows, packs_b_in_tile
from ...fusion.gemm.transposed import a_transposed
from ...fusion.spills import right_pack_words
from ...fusion.plan import Group
from ...fusion.gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES, PACK_FILTERS,
                                  PACK_ONCE, PACK_PER_RUN, TRANSPOSED_PER_RUN)
from ...ir import Graph
from ..kernel import Kernel
from ..kir import (Buffer, Comment, DeclareScratch, Gemm, If, Let, Load, Loop, OncePerBlock,
                   PackA, PackB, Scratch, Store, ThreadTile, WidenOnce)
from ..microkernel import STATE_SLOTS, a_tile_stride, packed_a_numel, packed_numel, panel_rows
from . import convolution
from .attention import AttentionLowerer
from .base import Scope, launch_of, make_kernel, widen
from .rows import RowLowerer
from .tiles import TileLowerer


class GemmLowerer(TileLowerer):
    """A GEMM group's tile kernel (its fused attention aside: ``AttentionLowerer``)."""

    def lower(self, name: str) -> Kernel:
        if self.sched.gemm.block is not None:
            return self._block_gemm(name)
        return self._cpu_gemm(name)

    def _cpu_gemm(self, name: str) -> Kernel:
        """One parallel loop over the output's tiles: each tile's product by the host
        BLAS into ``dest``, then the epilogue over the tile, reading the product back
        while it is in cache and writing every output (``dest`` in place: each element
        is read before it is written, by the same thread)."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        mm = g.producer[t.result]
        a = t.a.view
        dest, c_off, ldc, start, finish = self._destination()
        if t.epilogue_ops:
            epilogue = (self._row_epilogue(mm.id, dest) if self.sched.epilogue is not None
                        else self._elementwise_epilogue(dest))
            finish += (Comment("the epilogue over the tile, while it is in cache"), epilogue)
        v_pack = ()
        if then is not None:
            v_pack, second = self._second_product(dest)
            finish += second
        pairs = self._pairs()
        gather, right, b_pack = self._right_operand(dest, c_off, ldc, pairs)
        abuf, a_off, a_packed, a_pack = self._left_operand(right is not None, pairs)
        if right is None:
            product = gather
        else:
            bbuf, b_off, ldb, trans_b, *own = right
            product = gather + (Gemm(abuf, bbuf, dest, a_off, b_off,
                                     c_off, "r1 - r0", "c1 - c0", t.k, a.ld, ldb, ldc, mm.id,
                                     trans_a=a.trans, trans_b=trans_b,
                                     packed=bool(t.packed_b), pairs=pairs,
                                     a_packed=a_packed, packs_b=own[0] if own else None),)
        body = start + (
            *self._tile_bounds(),
            *product,
            *finish)
        loop = Loop("tile", t.tiles, "grid", body)
        flops = self.flops * g.value(t.result).numel     # (the epilogue's, per element)
        k = make_kernel(name, self.group.id, self.sched.describe(), self.buffers,
                        widen([*a_pack, *b_pack, *v_pack, loop], self.wide),
                        launch_of(self.geometry, self.sched), int(t.flops) + flops,
                        tuple(self.scratch.values()))
        # the host sgemm is passed in only where a product calls it
        sgemm = not t.packed_b or (then is not None and not then.packed)
        return replace(k, blas="sgemm" if sgemm else "", host_only=True)

    def _destination(self) -> tuple:
        """Where a CPU tile's first product goes: (``dest``, the C offset of the tile's
        first element in it, its row stride, the statements declaring it, the
        statements storing the product from it) -- the product's own float32 buffer,
        or else a float32 tile of the thread's own."""
        t, then = self.sched.gemm, self.sched.then
        M, N = t.m, t.n
        if then is None and self.buffers[t.dest].dtype is DType.float32:
            return self.buffers[t.dest], f"(bt * {M} + r0) * {N} + c0", N, (), ()
        # attention: the scores and then the probabilities live in a tile of this
        # thread's own (whole rows), read by the second product, never written out;
        # a product stored in another type (bfloat16) is finished from such a float32
        # tile too, and rounded once, where the epilogue stores
        dest = Scratch("wb_tile", t.result, DType.float32, t.tile_m * t.tile_n)
        finish = ()
        if t.result in self.io.outputs and (not t.epilogue_ops
                                            or self.sched.epilogue is not None):
            finish = (Comment(f"the product, {t.result}, stored from the tile"),
                      self._tile_out(dest, self.buffers[t.result], f"(bt * {M} + r0) * {N}",
                                     N, "c0", "c1", self.g.producer[t.result].id))
        return dest, "0", t.tile_n, (DeclareScratch(dest),), finish

    def _second_product(self, dest: Scratch) -> tuple[tuple, tuple]:
        """A CPU's attention over whole rows: the tile's rows (the probabilities, in
        ``dest``) @ the second product's right operand (V), while they are in cache --
        (the statements packing V before the tiles, the statements after the
        epilogue)."""
        t, then = self.sched.gemm, self.sched.then
        mm2 = self.g.producer[then.result]
        v = then.b.view
        out, o_off, ldo = self._attention_out()
        declare, store, v_pack = (), (), ()
        if out.dtype is not DType.float32:
            # (bfloat16: the output rows in a float32 tile, stored rounded)
            rows_out = Scratch("wb_o", then.result, DType.float32, t.tile_m * then.n)
            declare = (DeclareScratch(rows_out),)
            store = (self._tile_out(rows_out, out, o_off, ldo, "0", str(then.n), mm2.id),)
            out, o_off, ldo = rows_out, "0", then.n
        if then.packed:
            vp, v_pack, v_off = self._pack_per_run("pack_v", then.b, then.k, then.n, t.batch,
                                                   mm2.id)
            second = Gemm(dest, vp, out, "0", v_off, o_off, "r1 - r0", str(then.n),
                          then.k, t.n, PANEL, ldo, mm2.id, packed=True)
        else:
            second = Gemm(dest, self.buffers[then.b.value], out, "0", v.batch_offset("bt"),
                          o_off, "r1 - r0", str(then.n), then.k, t.n, v.ld, ldo, mm2.id,
                          trans_b=v.trans)
        return v_pack, (Comment(f"the tile's rows @ the right operand of {mm2.id}, while "
                                "they are in cache"), *declare, second, *store)

    def _right_operand(self, dest, c_off: str, ldc: int, pairs: bool) -> tuple:
        """The first product's right operand B, in the form the planner chose
        (``packed_b``; a convolution's from :mod:`.convolution`): (the statements
        gathering the tile's part of it, B as (buffer, C offset of column c0, leading
        dimension, transposed) -- None where the gathering computed the product
        itself --, the statements packing before the tiles)."""
        t = self.sched.gemm
        b, K, N, node = t.b.view, t.k, t.n, self.g.producer[t.result].id
        kw = panel_rows(K, pairs)          # (a panel's rows of words: c0's panel at c0 * kw)
        if t.packed_b == DEPTHWISE_LANES:   # rows an image's channels, whole planes
            return convolution.depthwise_lanes(self, dest, c_off), None, ()
        if t.packed_b == DEPTHWISE_PLANES:
            return convolution.depthwise_planes(self, dest, c_off), None, ()
        if t.packed_b == CONV_DIRECT:     # no patches: the filters in the lanes
            gather, pack = convolution.filters_in_lanes(self, dest, c_off, ldc)
            return gather, None, pack
        if t.packed_b == PACK_FILTERS:    # few positions: the product made transposed
            gather, pack = convolution.transposed_product(self, dest, c_off, ldc)
            return gather, None, pack
        if t.packed_b == TRANSPOSED_PER_RUN:   # few rows of A: the product made transposed
            return self._transposed_product(dest, c_off, ldc)
        if t.packed_b == PACK_ONCE:       # a constant B, packed by the first run
            packed = self.workspace("pack", DType.float32, packed_numel(K, N, pairs=pairs),
                                    persistent=True, packed=True)
            pack = (Comment("B, a constant, packed into column panels on the first run"),
                    PackB(self.buffers[t.b.value], packed, b.offset, K, N, b.row_stride,
                          b.col_stride, node, pairs=pairs))
            return (), (packed, f"c0 * {kw}", PANEL, False), pack
        if t.packed_b == PACK_PER_RUN and not pairs and packs_b_in_tile(t):
            # B's panels packed by the one tile that reads them, a block of rows of k
            # at a time just before its product: the tile's part of the workspace is
            # that block of its panels (in_tile_rows), reused block after block
            rows = in_tile_rows(t)
            packed = self.workspace("pack", DType.float32, right_pack_words(t), packed=True)
            own = PackB(self.buffers[t.b.value], packed, b.offset, K, N, b.row_stride,
                        b.col_stride, node, panel=f"c0 / {PANEL}")
            return (), (packed, f"c0 * {rows}", PANEL, False, own), ()
        if t.packed_b == PACK_PER_RUN:  # an activation B, packed by every run
            packed, pack, b_off = self._pack_per_run("pack", t.b, K, N, t.batch, node, pairs)
            return (), (packed, f"{b_off} + c0 * {kw}", PANEL, False), pack
        if t.im2col is None or t.in_place:    # B read in place
            return (), (self.buffers[t.b.value],
                        f"{b.batch_offset('bt')} + c0 * {b.col_stride}", b.ld, b.trans), ()
        if convolution.direct(self):    # one filter per group: its taps straight into the tile
            return convolution.direct_taps(self, dest, c_off), None, ()
        if not t.packed_b:    # B is the tile's patches of the input, gathered
            return (*convolution.patches(self), ())
        # the tile's patches gathered straight into panels (PACK_TILE)
        return (*convolution.patch_panels(self, pairs), ())

    def _transposed_product(self, dest, c_off: str, ldc: int) -> tuple:
        """``TRANSPOSED_PER_RUN`` (fusion/gemm/transposed.py): A transposed, packed into
        column panels by every run before the tiles; each tile's product made
        transposed against them, B's elements broadcast from where B lies -- (the
        statements computing the tile's product, None, the statements packing A)."""
        t = self.sched.gemm
        b, node = t.b.view, self.g.producer[t.result].id
        packed, pack, a_off = self._pack_per_run("apack", a_transposed(t), t.k, t.m,
                                                 t.batch, node)
        # (B^T's element (column i, row r of k) at i * col_stride + r * row_stride: a
        # transposed view, W^T, has its columns contiguous -- trans_a below)
        return (Comment("the tile's product made transposed: B's columns broadcast in "
                        "place against A's panels, each block stored transposed"),
                Gemm(self.buffers[t.b.value], packed, dest,
                     f"{b.batch_offset('bt')} + c0 * {b.col_stride}", f"{a_off} + r0 * {t.k}",
                     c_off,
                     "r1 - r0", "c1 - c0", t.k, b.ld, PANEL, ldc, node, trans_a=b.trans,
                     packed=True, transposed=True, a_in_place=True)), None, pack

    def _left_operand(self, multiplied: bool, pairs: bool) -> tuple:
        """The first product's left operand A: (buffer, C offset of the tile's row r0,
        whether packed into the micro-kernel's slivers, the statements before the
        tiles) -- A in place, a bfloat16 convolution's filters widened once, or a
        constant A packed once (where a product of A and B is ``multiplied``, not
        made by gathering B)."""
        g, t, then = self.g, self.sched.gemm, self.sched.then
        a, M, K, node = t.a.view, t.m, t.k, g.producer[t.result].id
        abuf, pack = self.buffers[t.a.value], ()
        if not pairs and abuf.dtype is DType.bfloat16:
            # (a bfloat16 convolution: its filters widened once, for float32 products)
            wide = self.workspace("wide", DType.float32, abuf.numel + STATE_SLOTS,
                                  persistent=True)
            pack = (Comment(f"{t.a.value}, a bfloat16 constant, widened on the first run"),
                    WidenOnce(abuf, wide, abuf.numel, node))
            abuf = wide
        a_off, a_packed = f"{a.batch_offset('bt')} + r0 * {a.row_stride}", False
        if (multiplied and t.packed_b and then is None and not pairs
                and abuf is self.buffers[t.a.value] and abuf.dtype is DType.float32
                and t.a.value in g.constants and a.one_matrix):
            # a constant A (a convolution's filters) packed once into the slivers the
            # micro-kernel reads, tile by tile, so that no tile copies them again
            abuf = self.workspace("apack", DType.float32, packed_a_numel(M, K, t.tile_m),
                                  persistent=True)
            pack = (Comment(f"{t.a.value}, a constant, packed into the micro-kernel's "
                            "slivers on the first run"),
                    PackA(self.buffers[t.a.value], abuf, a.offset, M, K, a.row_stride,
                          a.col_stride, t.tile_m, node)) + pack
            a_off, a_packed = f"r0 / {t.tile_m} * {a_tile_stride(K, t.tile_m)}", True
        elif multiplied and not pairs and packs_a_per_run(g, t, then, self.sched.online):
            abuf, pack, a_off = self._pack_a_per_run()
            a_packed = True
        return abuf, a_off, a_packed, pack

    def _pack_a_per_run(self) -> tuple:
        """An activation A packed into the micro-kernel's slivers by every run, before
        the tiles (fusion/gemm/left_pack.py): one parallel loop over (distinct matrix,
        row tile, sliver slot). Returns the workspace, the statements, and the C offset
        of tile (``bt``, ``r0``)'s slivers in it."""
        t = self.sched.gemm
        a, node = t.a.view, self.g.producer[t.result].id
        items, stride = left_items(t), a_tile_stride(t.k, t.tile_m)
        slots = -(-t.tile_m // SLIVER_ROWS_MIN)      # (a sliver of WB_MR rows each)
        per_item = t.row_tiles * slots
        packed = self.workspace("apack", DType.float32, left_pack_words(t))
        i64 = DType.int64
        body = (Let("bt", i64, f"pk / {per_item}"),
                PackA(self.buffers[t.a.value], packed, a.distinct.batch_offset("bt"), t.m,
                      t.k, a.row_stride, a.col_stride, t.tile_m, node,
                      tile=f"pk % {per_item} / {slots}", sliver=f"pk % {slots}",
                      packed_off=f"bt * {t.row_tiles * stride}"))
        stmts = (Comment(f"{t.a.value} packed into the micro-kernel's slivers by every "
                         "run, before the tiles (each column tile reads them)"),
                 Loop("pk", items * per_item, "grid", body))
        item = "0" if items == 1 else f"({a.distinct_index('bt')}) * {t.row_tiles * stride}"
        return packed, stmts, f"{item} + r0 / {t.tile_m} * {stride}"

    def _block_gemm(self, name: str) -> Kernel:
        """A GPU GEMM kernel: a thread block per tile (the grid strides over them), the
        tile's product into each thread's registers (wb_gemm_tile), then the epilogue
        on each element the thread holds, writing every output of the group: the
        product never passes through memory unless it is an output itself."""
        t, blk = self.sched.gemm, self.sched.gemm.block
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

    def _elementwise_epilogue(self, dest: Buffer) -> Loop | ThreadTile:
        """The tile's rows and columns, each element of the product read back from
        ``dest`` and finished: every output of the group stored there."""
        g, t = self.g, self.sched.gemm
        at_rows = self._at_rows
        scope = Scope()
        product, at = self.fresh(), at_rows(t.result)
        tiled = isinstance(dest, Scratch)     # (a thread's tile from column c0: see _destination)
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
        sub = RowLowerer(self.g, Group(self.group.id, rest, self.sched.epilogue), self.device,
                         buffers, self.counter)
        (rows,) = sub._row_reduce()
        self.counter, self.flops = sub.counter, self.flops + sub.flops
        self.scratch.update(sub.scratch)
        rows = replace(rows, bind="serial", start=f"bt * {t.m} + r0", stop=f"bt * {t.m} + r1")
        rows = _reads_before_overwrite(rows, dest)
        if isinstance(dest, Scratch):
            # the tile holds rows r0..r1 of batch bt: its offsets are the product's less
            # the first row's
            rows = _rebase(rows, dest, f"(bt * {t.m} + r0) * {t.n}")
        return rows


def _reads_before_overwrite(stmt, dest):
    """``stmt`` with every store into ``dest`` (an output the product lives in until
    the epilogue overwrites it) moved after the last read of the product in the same
    loop body: a row's final loop storing that output first and then recomputing
    another output from the product (a training graph's LayerNorm output, then the
    GELU gradient at the pre-LayerNorm value) read the output instead. Bodies already
    in that order are returned as they are."""
    if not isinstance(stmt, (Loop, If, OncePerBlock, ThreadTile)):
        return stmt
    body = tuple(_reads_before_overwrite(x, dest) for x in stmt.body)
    # (a load from a register copy of the product's row reads dest where the renderer
    # keeps no copy)
    reads = [i for i, x in enumerate(body) if isinstance(x, Load)
             and (x.buf is dest or getattr(x.buf, "source", None) is dest)]
    early = [i for i, x in enumerate(body)
             if isinstance(x, Store) and x.buf is dest and reads and i < reads[-1]]
    if early:
        after = reads[-1] + 1
        body = (*(x for i, x in enumerate(body[:after]) if i not in early),
                *(body[i] for i in early), *body[after:])
    return replace(stmt, body=body) if body != stmt.body else stmt


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


def lower_gemm(g: Graph, group: Group, device: Device, name: str) -> Kernel:
    """The kernel of a GEMM group: fused attention taking the softmax a block of keys
    at a time (a GPU tile's second product always does; a CPU's where the schedule
    says ``online``) is ``AttentionLowerer``'s, every other ``GemmLowerer``'s."""
    s = group.schedule
    online = s.then is not None if s.gemm.block is not None else s.online is not None
    return (AttentionLowerer if online else GemmLowerer)(g, group, device).lower(name)
