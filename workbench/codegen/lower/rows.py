"""The row-reduction template: reductions over rows, with their stitched neighbours,
under each thread mapping (``fusion/mapping.py``).

Warp, block and thread: one warp, block or thread owns a row and makes its passes one
after another (``_row_reduce``), a row kept on chip dealt out to threads as a tile
(``_tile``). Split: a long row's chunks go to several blocks, each reduction a pass over
the grid with a grid barrier after it (``_split_rows``). A CPU's 2-D pooling is lowered a
plane at a time where it can be (``convolution.pool_planes``).
"""
from __future__ import annotations

from dataclasses import replace

from ...device import Device
from ...dtypes import DType
from ...fusion.mapping import Mapping, ScheduleKind
from ...fusion.plan import Group
from ...fusion.row_tile import row_shifted
from ...fusion.schedule import Schedule
from ...fusion.spills import accumulator, split_partials
from ...ir import Graph
from ...ops import Index, Kind, get_op
from ..kernel import Kernel
from ..kir import (Assign, BlockReduce, Comment, DeclareScratch, GridSync, If, Let, Load,
                   Loop, OncePerBlock, Scratch, Store)
from .base import Lowerer, Scope, launch_of, make_kernel, widen
from .convolution import pool_planes


# A row this long is summed with compensation whatever the mapping: its terms per
# accumulator (a thread's or a SIMD lane's share) may pass 2^24, float32's exact count.
COMPENSATED_FROM = 1 << 24


class RowLowerer(Lowerer):
    """A row-reduction group (or a stitched kernel's row phase, or a GEMM epilogue
    reducing rows: ``GemmLowerer._row_epilogue``)."""

    def lower(self, name: str) -> Kernel:
        pooled = pool_planes(self)
        if pooled is None:
            return super().lower(name)
        # (a CPU's form, as its GEMM kernels are: no CUDA rendering -- rendered anyway,
        # its plane buffer went undeclared; found by the fuzzer's convs family)
        s = self.sched
        return replace(make_kernel(name, self.group.id,
                                   s.describe() + ", pooled a plane at a time", self.buffers,
                                   widen(pooled, self.wide), launch_of(self.geometry, s),
                                   self.flops, tuple(self.scratch.values())), host_only=True)

    def lower_body(self) -> list:
        if self.sched.mapping.info.grid_barrier_per_reduction:
            return self._split_rows()
        if self.sched.mapping.info.partials_by_rows:
            return self._two_phase()
        return self._row_reduce()

    def _domain(self) -> Index:
        s = self.sched
        kept = [d for d in range(len(s.domain)) if d not in s.reduce_axes]
        return Index.from_runs(s.domain, [("row", kept), ("col", list(s.reduce_axes))])

    def _reductions(self):
        return [n for n in (self.g.node(x) for x in self.group.nodes)
                if get_op(n.op).kind is Kind.reduce]

    def _accumulate(self, scope: Scope, slot: int, r, dom: Index, extent: int,
                    bind: str, col_from: str = "", **loop_kw):
        """Emit reduction ``r``'s accumulator ``acc<slot>`` and its loop over the row's
        columns into scope; returns (acc, compute dtype, combiner, identity).
        ``col_from``: a C expression, the first of ``extent`` columns the loop takes
        (a two-phase block's run; the loop counts from 0 so a CPU's tile of rows with
        different runs still shares one loop)."""
        dt, ident, comb = self._accumulator(r)
        acc = f"acc{slot}"
        col_scope = self._col_scope(scope, self._tile())
        var = "col"
        if col_from:
            var = "c_"
            col_scope.stmts += [Let("row", self.index_dtype, f"vr % {self.sched.rows}"),
                                Let("col", self.index_dtype, f"{col_from} + c_")]
        e = self.at(col_scope, r.inputs[0], dom)
        scope.stmts.append(Let(acc, dt, ident, r.id))
        simd = comb.simd_op[0 if dt.kind == "f" else 1]
        if (bind == "serial" or extent > COMPENSATED_FROM) and dt.kind == "f" \
                and simd == "+":
            # one thread sums a whole row (a column reduction), or a row so long that a
            # thread's (or SIMD lane's) share of it passes float32's 2^24 (where adding
            # 1 to a sum of ones no longer counts): compensated (Kahan) so a long row
            # stays within float32's bound against NumPy's pairwise sum; a non-finite
            # partial sum drops the compensation (inf stays inf)
            c, y, t = f"{acc}_c", self.fresh(), self.fresh()
            scope.stmts.append(Let(c, dt, "0.0f", r.id))
            col_scope.stmts += [Let(y, dt, f"{e} - {c}", r.id), Let(t, dt, f"{acc} + {y}", r.id),
                                Assign(c, f"({t} - {t} == 0.0f) ? (({t} - {acc}) - {y}) "
                                          ": 0.0f", r.id),
                                Assign(acc, t, r.id)]
            simd = ""                      # the order is the point: no SIMD reordering
        else:
            col_scope.stmts.append(Assign(acc, comb.combine(dt.kind).format(acc, e), r.id))
        scope.stmts.append(Loop(var, extent, bind, tuple(col_scope.stmts),
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

    def _col_scope(self, parent: Scope, tile) -> Scope:
        """The scope of a column loop over a tile (or over a row not kept on chip)."""
        if tile is None:
            return Scope(parent)
        return Scope(parent, tile[2], self._row_base() if tile[3] else "")

    def _accumulator(self, r):
        """(accumulator type, identity, combiner) of reduction r: integers accumulate
        in 64 bits (a mean of int32 must not wrap at 2^31; NumPy sums them in int64),
        unsigned ones unsigned (a uint64 past 2^63 is no long long)."""
        src = self.g.value(r.inputs[0]).dtype.compute
        comb = get_op(r.op).combiner
        return accumulator(src), comb.identity(src.kind, src.value), comb

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

    def _compute(self, scope: Scope, node, v: str, idx: Index) -> str:
        # a CPU's quotient by a softmax's denominator: a product by its reciprocal,
        # taken once per row. A vector division costs 3x a product (0.10 against
        # 0.035 ns per element, GCC 12, AVX-512) and was most of softmax's last pass;
        # the product is within 1 ulp of the quotient, not 0.5 (the float32 bound is
        # 1e-4). Only for this divisor: a sum of e^(x - max x) is in [1, cols] (its
        # largest term is e^0 = 1) or not finite, so its reciprocal is a normal float,
        # where a reciprocal of any divisor may be subnormal or inf (and the product
        # then far off the quotient). The GPU's division stays as written.
        if (node.op == "div" and self.device.kind == "cpu" and self.row_scope is not None
                and scope is not self.row_scope and self._softmax_denominator(node.inputs[1])
                and self.g.value(v).dtype.compute.c_compute == "float"):
            g = self.g
            den = self.at(scope, node.inputs[1], idx.broadcast_to(g.value(node.inputs[1]).shape))
            rec = self.row_scope.memo.get(("reciprocal", den))
            if rec is None:
                rec = self.fresh()
                self.row_scope.stmts.append(Let(rec, g.value(v).dtype.compute, f"1.0f / {den}",
                                                node.id))
                self.row_scope.memo[("reciprocal", den)] = rec
            num = self.at(scope, node.inputs[0], idx.broadcast_to(g.value(node.inputs[0]).shape))
            var = self.fresh()
            scope.stmts.append(Let(var, g.value(v).dtype.compute, f"({num} * {rec})", node.id))
            self.flops += get_op(node.op).flops
            return var
        return super()._compute(scope, node, v, idx)

    def _softmax_denominator(self, d: str) -> bool:
        """Whether value d is one of this kernel's row sums of e^(x - max x), the max
        one of its row maxima of the same x."""
        g = self.g
        made = self.producer.get(d)
        if made is None or made.op != "reduce_sum" or d not in self.reduce_var:
            return False
        e = self.producer.get(made.inputs[0])
        if e is None or e.op != "exp":
            return False
        sub = self.producer.get(e.inputs[0])
        if sub is None or sub.op != "sub" or sub.inputs[1] not in self.reduce_var:
            return False
        mx = self.producer.get(sub.inputs[1])
        return mx is not None and mx.op == "reduce_max" and mx.inputs[0] == sub.inputs[0] \
            and g.value(d).dtype.compute.c_compute == "float"

    def _row_reduce(self) -> list:
        """Mappings warp, block and thread: every row is owned by one warp, one block
        or one thread, which runs the row's passes one after another."""
        s: Schedule = self.sched
        g = self.g
        dom = self._domain()
        info = s.mapping.info
        width = info.reduce_width        # "" when one thread owns the row
        row_scope = Scope()
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
        homes: set[str] = set()
        for k, v in enumerate(s.row_registers):
            self.scratch[v] = Scratch(f"wb_{self.prefix}reg{k}", v, g.value(v).dtype.compute,
                                      s.cols, 1, "register", tile[1] * tile[2],
                                      None if v in self.producer else self.buffers[v],
                                      home=self._home(v, homes))
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

    def _home(self, v: str, taken: set[str]):
        """On the CPU, the output buffer whose row keeps computed value v between the
        passes, instead of an array on the thread's stack (None: no such output, or
        not a CPU): an output the last pass writes element by element, of v's shape
        (the domain's) and type (float32), computed from v's element at the same
        column -- so the last pass reads each element back before it overwrites it
        (an output computed without it would be stored first, and a later output
        would read that instead: test). Why: softmax's exp pass then takes the output's lines
        into the cache while it computes, where the last pass took them (and waited
        on memory, with nothing to compute): a 512 x 32000 softmax 9.1 ms against
        14.5 on one core, the same at 8192 x 512 (2 KB rows stay in L1 either way)."""
        g, s = self.g, self.sched
        if self.device.kind != "cpu" or v not in self.producer \
                or g.value(v).dtype is not DType.float32 or g.value(v).shape != tuple(s.domain):
            return None
        for o in self.io.outputs:
            if o in s.per_row or o in taken or o not in self.buffers or \
                    g.value(o).shape != g.value(v).shape or g.value(o).dtype is not DType.float32:
                continue
            # (not an output whose buffer holds another value too: a GEMM's product
            # lives in its epilogue's output until the epilogue overwrites it)
            if any(b is self.buffers[o] for k, b in self.buffers.items() if k != o):
                continue
            if not self._reads_at_column(o, v):
                continue
            taken.add(o)
            return self.buffers[o]
        return None

    def _reads_at_column(self, o: str, v: str) -> bool:
        """Whether computing value o at a column reads value v at that column: a path
        from v to o through this kernel's nodes, none of them a reduction (whose value
        is the row's) nor a per-row value."""
        seen, todo = set(), [o]
        while todo:
            x = todo.pop()
            if x == v:
                return True
            n = self.producer.get(x)
            if n is None or x in seen or x in self.sched.per_row \
                    or get_op(n.op).kind is Kind.reduce:
                continue
            seen.add(x)
            todo.extend(n.inputs)
        return False

    def _per_row_stores(self, row_scope: Scope, dom: Index) -> list:
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

    def _element_pass(self, row_scope: Scope, dom: Index, col_bind: str,
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

        def new_pass(upto: int) -> Scope:
            scope = Scope()
            self.row_scope = scope
            scope.stmts.append(Let("row", self.index_dtype, f"vb / {S}"))
            scope.stmts.append(Let("part", self.index_dtype, f"vb % {S}"))
            for j in range(upto):
                scope.stmts += self._sum_partials(j, reduces[j], S, partials[j],
                                                  f"row * {S} + s")
            return scope

        # (the partials' sizes are the cost model's: fusion/spills.py)
        for j, (r, (dt, numel)) in enumerate(zip(reduces, split_partials(
                self.g, self.group.nodes, s))):
            part_buf = self.workspace(f"part{j}", dt, numel)
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


    def _sum_partials(self, j: int, r, parts: int, buf: str, at: str) -> list:
        """Reduction ``r``'s ``parts`` partials (buffer ``buf``, partial ``s`` at offset
        ``at``) combined in order into accumulator ``acc{j}``, which becomes its value:
        the second phase of a split row and of a two-phase column reduction."""
        dt, ident, comb = self._accumulator(r)
        acc, t = f"acc{j}", self.fresh()
        out = [Let(acc, dt, ident, r.id),
               Loop("s", parts, "serial", (Load(t, buf, at),
                                           Assign(acc, comb.combine(dt.kind).format(acc, t),
                                                  r.id)))]
        if comb.finish_mean:
            out.append(self._finish(comb, acc, dt, r.id))
        self.reduce_var[r.outputs[0]] = self._result(r, acc, dt)
        return out

    def _two_phase(self) -> list:
        """Mapping two_phase (a column reduction): the reduced axis cut into ``splits``
        equal blocks of rows. Phase one: a thread per (output, block) sums its block
        into a partial in global memory, laid out [block, output] so neighbouring
        threads read and write neighbours, every reduction in this one pass. After a
        grid barrier, phase two: a thread per output sums its partials in block order
        (the same bits every run) and writes the per-row results."""
        s: Schedule = self.sched
        dom, S, rows = self._domain(), s.splits, s.rows
        chunk = s.cols // S
        reduces = self._reductions()
        one = Scope()
        self.row_scope = one
        parts = []
        for j, r in enumerate(reduces):
            one.stmts.append(Comment(f"{r.op} over this block of {chunk} of axes "
                                     f"{list(s.reduce_axes)}"))
            acc, dt, _, _ = self._accumulate(one, j, r, dom, chunk, "serial",
                                             col_from=f"vr / {rows} * {chunk}")
            parts.append(self.workspace(f"part{j}", dt, rows * S))
            one.stmts.append(Store(parts[j], "vr", acc))
            self.flops += 1
        body = [Loop("vr", rows * S, "flat", tuple(one.stmts)),
                GridSync("every block's partials are complete")]
        two = Scope()
        self.row_scope = two
        for j, r in enumerate(reduces):
            two.stmts += self._sum_partials(j, r, S, parts[j], f"s * {rows} + row")
        two.stmts += self._per_row_stores(two, dom)
        body.append(Loop("row", rows, "flat", tuple(two.stmts)))
        return body


def lower_rows(g: Graph, group: Group, device: Device, name: str) -> Kernel:
    """The kernel of a row-reduction group."""
    return RowLowerer(g, group, device).lower(name)
