"""What the GEMM family's kernels share: a work item's tile of rows and columns, the
operands of its products (packed, in pairs), a GPU tile's product in registers, the
rows fused attention writes.

A GEMM kernel is one parallel loop over the output's tiles (``tile``: batch item ``bt``,
rows ``r0`` to ``r1``, columns ``c0`` to ``c1``); :mod:`.gemm` builds the GEMM and
convolution kernels on it, :mod:`.attention` the fused attention kernels.
"""
from __future__ import annotations

from dataclasses import replace

from ...dtypes import DType
from ...fusion.gemm.gpu_tiles import GPU_GEMM_RESIDENT
from ...fusion.gemm.tiles import PANEL
from ...fusion.geometry import REDUCE_SLOT_BYTES
from ...fusion.spills import pack_words
from ...ops import Index
from ..kernel import Kernel
from ..kir import Buffer, Comment, Gemm, Let, Loop, PackB, Scratch
from ..microkernel import packed_numel
from .base import Lowerer, launch_of, make_kernel, widen


class TileLowerer(Lowerer):
    """A GEMM group's lowerer: the pieces every GEMM family kernel is built of."""

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

    def _at_rows(self, v: str) -> Index:
        """The element at (row, col) of a value seen as [rows, N] (the product, or a
        reshape of it keeping its rows; a convolution's columns are its spatial axes):
        a bias [N] is read at col (unit stride, so the loop vectorizes), a residual at
        the element itself."""
        shape = self.g.value(v).shape
        split = len(shape) - self.sched.gemm.col_axes
        return Index.from_runs(shape, [("row", list(range(split))),
                                       ("col", list(range(split, len(shape))))])

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
        # (sized as the cost model counts it: fusion/spills.py)
        packed = self.workspace(name, DType.float32, pack_words(v, k, n, pairs), packed=True)
        i64 = DType.int64
        body = (Let("bt", i64, f"pk / {panels}"),
                PackB(self.buffers[b.value], packed, v.distinct.batch_offset("bt"), k, n,
                      v.row_stride, v.col_stride, node, panel=f"pk % {panels}",
                      packed_off=f"bt * {size}", pairs=pairs))
        stmts = (Comment(f"{b.value} packed into column panels by every run, before the "
                         "tiles"), Loop("pk", items * panels, "grid", body))
        return packed, stmts, "0" if items == 1 else f"({v.distinct_index('bt')}) * {size}"

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
        launch = launch_of(self.geometry, self.sched)
        launch = replace(launch, resident=GPU_GEMM_RESIDENT,
                         shared_bytes=launch.shared_bytes + slots * REDUCE_SLOT_BYTES)
        return make_kernel(name, self.group.id, self.sched.describe(), self.buffers,
                           widen([loop], self.wide), launch, int(product_flops) + flops,
                           tuple(scratch), slots=slots)
