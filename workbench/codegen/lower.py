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

import re

import numpy as np

from ..errors import WorkbenchError
from ..fusion.plan import Group
from ..fusion.schedule import FLAT_BLOCK, Schedule, group_io
from ..ir import DType, Graph
from ..ops import COMBINERS, Kind, get_op
from ..ops.layout import slice_params
from .index import Index, add
from .kir import (Assign, BlockReduce, Buffer, Comment, DeclareScratch, GridSync, If, Kernel,
                  Launch, LibraryCall, Let, Load, Loop, OncePerBlock, Scratch, Store)

MAX_GRID = 65535
ROW_GRID_MAX = 1 << 20

# What one SM of the default device (H100) holds, for the co-residency estimate of a
# cooperative kernel's grid (CUDA occupancy limits; registers assumed <= 64/thread --
# the GPU backend re-checks with the compiled kernel's real register count).
SMS = 132
SM_MAX_THREADS = 2048
SM_MAX_BLOCKS = 32
SM_SHARED_BYTES = 228 * 1024
SM_REGISTERS = 65536
EST_REGISTERS = 64


def co_resident_grid(threads: int, shared_bytes: int, sms: int = SMS) -> int:
    """Blocks that fit on the device at once (one wave): what a kernel with a grid
    barrier may launch. Each block also reserves 1 KB of shared memory.

    >>> co_resident_grid(256, 0)
    528
    """
    per_sm = min(SM_MAX_BLOCKS, SM_MAX_THREADS // threads,
                 SM_REGISTERS // (EST_REGISTERS * threads))
    if shared_bytes:
        per_sm = min(per_sm, SM_SHARED_BYTES // (shared_bytes + 1024))
    return max(1, per_sm) * sms


def _block_threads(cols: int) -> int:
    """Threads of a block that walks one row (or chunk) of ``cols`` columns: a warp,
    doubled while each thread would still get more than 4 columns, at most 512."""
    threads = 32
    while threads < 512 and threads * 4 < cols:
        threads *= 2
    return threads


def identifier(text: str) -> str:
    """A C identifier made from text: anything outside [A-Za-z0-9_] becomes _."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if s and not s[0].isdigit() else "_" + s


def c_literal(x, dt: DType) -> str:
    """A scalar constant as C text in the compute type."""
    x = np.asarray(x).reshape(()).item()
    if dt.kind == "b":
        return "1" if x else "0"
    if dt.kind == "i":
        return f"{int(x)}LL" if dt is DType.int64 else str(int(x))
    f = float(np.float32(x))
    if np.isnan(f):
        return "NAN"
    if np.isinf(f):
        return "INFINITY" if f > 0 else "(-INFINITY)"
    r = repr(f)
    if "e" not in r and "." not in r:
        r += ".0"
    return f"{r}f" if not r.startswith("-") else f"({r}f)"


class _Scope:
    """Statements being emitted at one loop level, with their memo table."""

    def __init__(self, parent: "_Scope | None" = None):
        self.stmts: list = []
        self.memo: dict = {}
        self.parent = parent

    def lookup(self, key):
        s = self
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None


class _Lowerer:
    def __init__(self, g: Graph, group: Group, buffers: dict[str, Buffer] | None = None,
                 counter: int = 0, prefix: str = ""):
        self.g, self.group, self.sched = g, group, group.schedule
        self.io = group_io(g, group.nodes)
        self.members = set(group.nodes)
        self.producer = {o: g.node(n) for n in group.nodes for o in g.node(n).outputs}
        self.prefix = prefix      # keeps a phase's shared arrays apart from the others'
        if buffers is None:
            buffers = _buffers(g, self.io, self._inline_constant)
        self.buffers = buffers
        self.counter = counter
        self.reduce_var: dict[str, str] = {}
        self.row_scope: _Scope | None = None
        self.flops = 0
        self.scratch: dict[str, Scratch] = {}     # row-cached value -> its on-chip array
        self.cached_in: dict[str, _Scope] = {}    # row-cached value -> the pass storing it

    def _inline_constant(self, v: str) -> bool:
        # a library call takes every input as an array; generated code inlines scalars
        return (self.sched.kind != "opaque" and v in self.g.constants
                and self.g.value(v).numel == 1)

    def workspace(self, name: str, dt: DType, numel: int) -> Buffer:
        key = f"{self.prefix}{name}"
        if key not in self.buffers:
            self.buffers[key] = Buffer(f"ws_{self.prefix}{name}", key, dt, numel, True, True)
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
            # regional stitching: an earlier pass over this row kept it on chip
            var = self.fresh()
            scope.stmts.append(Load(var, self.scratch[v], "col"))
        elif node is None:
            var = self.fresh()
            scope.stmts.append(Load(var, self.buffers[v], idx.offset()))
        else:
            var = self._compute(scope, node, v, idx)
            if v in self.scratch and home is None:
                scope.stmts.append(Store(self.scratch[v], "col", var))
                self.cached_in[v] = scope
        scope.memo[key] = var
        return var

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
            scope.stmts.append(Let(var, out.dtype.compute, expr))
            self.flops += op.flops
            return var
        if op.kind is Kind.layout:
            return self._layout(scope, node, v, idx)
        raise WorkbenchError(f"internal: {node.op} cannot be computed at an index")

    def _layout(self, scope: _Scope, node, v: str, idx: Index) -> str:
        g = self.g
        x = g.value(node.inputs[0])
        if node.op in ("reshape", "squeeze", "unsqueeze"):
            return self.at(scope, node.inputs[0], idx.reshape_to(x.shape))
        if node.op == "expand":
            return self.at(scope, node.inputs[0], idx.broadcast_to(x.shape))
        if node.op == "transpose":
            perm = node.attr("perm") or tuple(reversed(range(len(x.shape))))
            return self.at(scope, node.inputs[0], idx.transpose(perm))
        if node.op == "slice":
            return self.at(scope, node.inputs[0],
                           idx.slice_of(x.shape, slice_params(x.shape, node.attr_map)))
        if node.op == "split":
            axis = int(node.attr("axis")) % len(x.shape)
            k = node.outputs.index(v)
            start = int(sum(node.attr("sizes")[:k]))
            d = idx.digits()
            d[axis] = add(d[axis], str(start))
            return self.at(scope, node.inputs[0], Index.from_digits(d, x.shape))
        if node.op == "concat":
            return self._concat(scope, node, idx)
        if node.op == "gather":
            return self._gather(scope, node, idx)
        raise WorkbenchError(f"internal: no index rule for layout op {node.op}")

    def _concat(self, scope, node, idx: Index) -> str:
        # Branch-free: read every part at a clamped (always valid) index, then select.
        g = self.g
        axis = int(node.attr("axis")) % len(idx.shape)
        d = idx.digits()
        parts, off = [], 0
        for name in node.inputs:
            n = g.value(name).shape[axis]
            dd = list(d)
            dd[axis] = f"wb_clampi({add(d[axis], str(-off))}, 0, {n - 1})"
            parts.append((off, self.at(scope, name, Index.from_digits(dd, g.value(name).shape))))
            off += n
        expr = parts[-1][1]
        for (o, var), (o_next, _) in reversed(list(zip(parts[:-1], parts[1:]))):
            expr = f"({d[axis]} < {o_next} ? {var} : {expr})"
        var = self.fresh()
        scope.stmts.append(Let(var, g.value(node.outputs[0]).dtype.compute, expr))
        return var

    def _gather(self, scope, node, idx: Index) -> str:
        g = self.g
        data, ind = g.value(node.inputs[0]), g.value(node.inputs[1])
        axis = int(node.attr("axis", 0)) % len(data.shape)
        d = idx.digits()
        r = len(ind.shape)
        k = self.at(scope, node.inputs[1], Index.from_digits(d[axis:axis + r], ind.shape))
        n = data.shape[axis]
        # negative indices count from the end; out-of-range ones are clamped
        sel = self.fresh()
        scope.stmts.append(Let(sel, DType.int32,
                               f"wb_clampi((int)({k} < 0 ? {k} + {n} : {k}), 0, {n - 1})"))
        dd = d[:axis] + [sel] + d[axis + r:]
        return self.at(scope, node.inputs[0], Index.from_digits(dd, data.shape))

    # -- schedules --------------------------------------------------------------
    def lower(self, name: str) -> Kernel:
        s = self.sched
        if s.kind == "opaque":
            return self._opaque(name)
        body, launch, reductions = self.lower_body()
        return _kernel(name, self.group.id, s.describe(), self.buffers, body, launch,
                       reductions, self.flops, tuple(self.scratch.values()),
                       1 if s.kind != "row_reduce" or s.mapping != "split"
                       else s.reductions + 1, s.grid_barriers)

    def lower_body(self):
        """(statements, launch, reduction slots) of an elementwise or row template."""
        if self.sched.kind == "elementwise":
            body, launch = self._elementwise()
            return body, launch, 0
        if self.sched.mapping == "split":
            return self._split_rows()
        return self._row_reduce()

    def _opaque(self, name: str) -> Kernel:
        node = self.g.node(self.group.nodes[0])
        # positional for the call (matmul(x, x) names x twice); params hold each once
        call = LibraryCall(node.op, node.attrs, tuple(self.buffers[i] for i in node.inputs),
                           tuple(self.buffers[o] for o in node.outputs))
        out = self.g.value(node.outputs[0])
        flops = 2 * out.numel * (self.g.value(node.inputs[0]).shape[-1]
                                 if node.op == "matmul" else 1)
        params = tuple(sorted(self.buffers.values(), key=lambda b: (b.is_output, b.name)))
        return Kernel(name, self.group.id, "opaque", params, (), Launch(1, 1), 0, call, flops)

    def _elementwise(self):
        # One flat loop per distinct output shape ("independent" packing when >1).
        by_shape: dict[tuple, list[str]] = {}
        for o in self.io.outputs:
            by_shape.setdefault(self.g.value(o).shape, []).append(o)
        body, biggest = [], 1
        for k, (shape, outs) in enumerate(by_shape.items()):
            n = int(np.prod(shape, dtype=np.int64)) if shape else 1
            var = "i" if len(by_shape) == 1 else f"i{k}"
            scope = _Scope()
            idx = Index.flat(var, shape)
            for o in outs:
                e = self.at(scope, o, idx)
                scope.stmts.append(Store(self.buffers[o], var, e))
            vec = 4 if n % 4 == 0 and n >= 1024 else 1
            body.append(Loop(var, n, "flat", tuple(scope.stmts), vec))
            biggest = max(biggest, n)
        threads = FLAT_BLOCK
        vec = 4 if biggest % 4 == 0 and biggest >= 1024 else 1
        grid = max(1, min(MAX_GRID, -(-biggest // (threads * vec))))
        return body, Launch(grid, threads)

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
        dt = self.g.value(r.inputs[0]).dtype.compute
        comb = COMBINERS[r.op]
        acc = f"acc{slot}"
        ident = comb.identity(dt.kind, dt.value)
        col_scope = _Scope(scope)
        e = self.at(col_scope, r.inputs[0], dom)
        col_scope.stmts.append(Assign(acc, comb.combine(dt.kind).format(acc, e)))
        scope.stmts.append(Let(acc, dt, ident))
        scope.stmts.append(Loop("col", extent, bind, tuple(col_scope.stmts),
                                reduction=(acc, comb.simd_op[0 if dt.kind == "f" else 1]),
                                **loop_kw))
        return acc, dt, comb, ident

    def _finish(self, comb, acc: str, dt: DType) -> Assign:
        cols = self.sched.cols
        return Assign(acc, f"{acc} * (1.0f / {cols}.0f)" if dt.kind == "f"
                      else f"{acc} / {cols}")

    def _row_reduce(self):
        """Mappings warp, block and thread: every row is owned by one warp, one block
        or one thread, which runs the row's passes one after another."""
        s: Schedule = self.sched
        g = self.g
        dom = self._domain()
        mapping = s.mapping
        col_bind = {"block": "block", "warp": "lane", "thread": "serial"}[mapping]
        width = "warp" if mapping == "warp" else "block"
        row_scope = _Scope()
        self.row_scope = row_scope
        for k, v in enumerate(s.row_cached):
            self.scratch[v] = Scratch(f"wb_{self.prefix}row{k}", v, g.value(v).dtype.compute,
                                      s.cols, s.rows_per_block if mapping == "warp" else 1)
            row_scope.stmts.append(DeclareScratch(self.scratch[v]))
        reduces = self._reductions()
        for slot, r in enumerate(reduces):
            row_scope.stmts.append(Comment(f"{r.op} over {list(s.reduce_axes)}"))
            acc, dt, comb, ident = self._accumulate(row_scope, slot, r, dom, s.cols,
                                                    col_bind)
            if mapping != "thread":
                row_scope.stmts.append(BlockReduce(acc, dt, comb.combine(dt.kind), ident,
                                                   slot, width))
            if comb.finish_mean:
                row_scope.stmts.append(self._finish(comb, acc, dt))
            self.reduce_var[r.outputs[0]] = acc
            self.flops += 1
        stores = self._per_row_stores(row_scope, dom)
        if stores:
            if mapping == "thread":
                row_scope.stmts.extend(stores)
            else:
                row_scope.stmts.append(OncePerBlock(tuple(stores), width))
        self._element_pass(row_scope, dom, col_bind)
        rows = s.rows
        if mapping == "block":
            launch = Launch(max(1, min(rows, ROW_GRID_MAX)), _block_threads(s.cols),
                            "block", 1)
            body = [Loop("row", rows, "grid", tuple(row_scope.stmts))]
        elif mapping == "warp":
            rpb = s.rows_per_block
            launch = Launch(max(1, min(-(-rows // rpb), ROW_GRID_MAX)), 32 * rpb, "warp", rpb)
            body = [Loop("row", rows, "warp", tuple(row_scope.stmts), per_block=rpb)]
        else:
            launch = Launch(max(1, min(MAX_GRID, -(-rows // FLAT_BLOCK))), FLAT_BLOCK,
                            "thread", FLAT_BLOCK)
            body = [Loop("row", rows, "flat", tuple(row_scope.stmts))]
        # block reductions need shared slots; warp ones live in registers
        return body, launch, len(reduces) if mapping == "block" else 0

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
            stores.append(Store(self.buffers[o], "row", e))
        return stores

    def _element_pass(self, row_scope: _Scope, dom: Index, col_bind: str,
                      start: str = "", stop: str = "", only_if: str = "") -> None:
        elem_out = [o for o in self.io.outputs if o not in self.sched.per_row]
        if not elem_out:
            return
        col_scope = _Scope(row_scope)
        for o in elem_out:
            e = self.at(col_scope, o, dom)
            col_scope.stmts.append(Store(self.buffers[o], dom.offset(), e))
        row_scope.stmts.append(Comment("write the row's elements"))
        row_scope.stmts.append(Loop("col", self.sched.cols, col_bind, tuple(col_scope.stmts),
                                    start=start, stop=stop))

    def _split_rows(self):
        """Mapping split: each row is cut into ``splits`` chunks of columns, one block
        per chunk. Each reduction is one pass over the grid: every block reduces its
        chunk and writes a partial to global memory; after a grid barrier every block
        combines its row's partials (in a fixed order, so all agree bit for bit) and
        goes on. The last pass writes the outputs."""
        s: Schedule = self.sched
        g = self.g
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
            scope.stmts.append(Let("row", DType.int32, f"vb / {S}"))
            scope.stmts.append(Let("part", DType.int32, f"vb % {S}"))
            for j in range(upto):
                r = reduces[j]
                dt = g.value(r.inputs[0]).dtype.compute
                comb = COMBINERS[r.op]
                acc = f"acc{j}"
                scope.stmts.append(Let(acc, dt, comb.identity(dt.kind, dt.value)))
                t = self.fresh()
                scope.stmts.append(Loop("s", S, "serial", (
                    Load(t, partials[j], f"row * {S} + s"),
                    Assign(acc, comb.combine(dt.kind).format(acc, t)))))
                if comb.finish_mean:
                    scope.stmts.append(self._finish(comb, acc, dt))
                self.reduce_var[r.outputs[0]] = acc
            return scope

        for j, r in enumerate(reduces):
            dt = g.value(r.inputs[0]).dtype.compute
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
        threads = _block_threads(chunk)
        grid = min(rows * S, co_resident_grid(threads, 33 * 8))
        return body, Launch(grid, threads, "split", 1, True, S), 1


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


def _kernel(name, group, schedule, buffers, body, launch: Launch, reductions, flops,
            scratch, phases=1, barriers=0) -> Kernel:
    params = tuple(sorted(buffers.values(), key=lambda b: (b.workspace, b.is_output, b.name)))
    shared = reductions * 33 * 8 + sum(x.numel * x.rows * x.dtype.itemsize for x in scratch)
    launch = Launch(launch.grid, launch.block, launch.mapping, launch.rows_per_block,
                    launch.cooperative, launch.splits, shared)
    return Kernel(name, group, schedule, params, tuple(body), launch, reductions, None,
                  flops, tuple(scratch), phases, barriers)


def _lower_stitched(g: Graph, group: Group, name: str) -> Kernel:
    """A stitched group: each phase lowered by its own template into one kernel, a
    grid barrier where a phase reads what a phase since the last barrier wrote.

    Values passed between phases live in workspace buffers (global memory, kept in
    the compute type) unless they are group outputs anyway. One block size serves all
    phases (the largest any wants; every loop strides, so more threads only idle)."""
    s = group.schedule
    io = group_io(g, group.nodes)
    def inline(v):     # as _Lowerer._inline_constant: scalar constants are literals
        return v in g.constants and g.value(v).numel == 1

    buffers = _buffers(g, io, inline)
    for v in s.through_global:
        if v not in buffers:
            val = g.value(v)
            buffers[v] = Buffer(f"ws{len([b for b in buffers.values() if b.workspace])}", v,
                                val.dtype.compute, val.numel, True, True)
    body, launches, scratch, counter, flops, reductions = [], [], [], 0, 0, 0
    for k, p in enumerate(s.phases):
        lw = _Lowerer(g, Group(f"{group.id}p{k}", p.nodes, p.schedule), buffers, counter,
                      f"p{k}_")
        stmts, launch, red = lw.lower_body()
        counter, flops = lw.counter, flops + lw.flops
        reductions = max(reductions, red)
        scratch += list(lw.scratch.values())
        launches.append(launch)
        if p.barrier:
            body.append(GridSync(f"phase {k} reads " + ", ".join(
                identifier(v) for v in p.reads_from_phases[:3])))
        body.append(Comment(f"phase {k}: {p.schedule.describe()}"))
        body += stmts
    block = max(la.block for la in launches)
    shared = reductions * 33 * 8 + sum(x.numel * x.rows * x.dtype.itemsize for x in scratch)
    coop = s.cooperative
    grid = max(la.grid for la in launches)
    if coop:
        grid = min(grid, co_resident_grid(block, shared))
    launch = Launch(max(1, grid), block, "stitched", 0, coop)
    return _kernel(name, group.id, s.describe(), buffers, body, launch, reductions, flops,
                   tuple(scratch), len(s.phases), s.grid_barriers)


def lower_group(g: Graph, group: Group) -> Kernel:
    """Lower one group to a kernel named after its id and its ops (sanitized)."""
    ops = []
    for n in group.nodes:
        op = g.node(n).op
        if op not in ops:
            ops.append(op)
    name = identifier(f"{group.id}_{'_'.join(ops[:3])}" + ("_etc" if len(ops) > 3 else ""))
    if group.schedule.kind == "stitched":
        return _lower_stitched(g, group, name)
    return _Lowerer(g, group).lower(name)
