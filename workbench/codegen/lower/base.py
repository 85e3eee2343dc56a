"""Lowering's shared machinery: a group's buffers, and every value computed at an index.

Every value inside a group is computed *at an index* by walking from an output back
to loads: elementwise ops apply their scalar expression to their inputs at the
broadcast index, layout ops transform the index and read their input there, and a
reduction's result is the per-row accumulator. Results are memoized per (value,
index) so a value used twice at the same point is computed once (the ``local`` stitch
scheme: it stays in a register). Loads of group inputs and stores of group outputs
are the only global-memory traffic.

:class:`Lowerer` holds that walk and a group's state while its kernel is built; each
family of kernels (``elementwise``, ``rows``, ``gemm``, ``attention``, ``library``) is
a subclass in a module of its own. The functions below make the kernel value: its
parameters, its launch, its loops widened to 64-bit indices where buffers need them.
"""
from __future__ import annotations

import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace

from ...device import CUDA_MAX_BLOCK_THREADS, Device
from ...dtypes import DType, c_literal
from ...errors import WorkbenchError
from ...fusion.footprint import read_elements
from ...fusion.geometry import FLAT_VECTOR_MIN, MAX_GRID, Geometry, flat_vector, geometry
from ...fusion.mapping import ScheduleKind
from ...fusion.plan import Group
from ...fusion.schedule import Schedule, group_io
from ...ir import Graph
from ...ops import Index, Kind, get_op
from ..kernel import Kernel, Launch
from ..kir import Buffer, If, Let, Load, Loop, OncePerBlock, Scratch, Store, ThreadTile

# A kernel whose values (buffers, or values it never stores: an expand it reduces) hold
# this many elements or more is indexed in 64 bits: 2^31 less the largest grid stride a
# flat loop takes -- MAX_GRID = 65535 blocks x the most threads a block may take
# (CUDA_MAX_BLOCK_THREADS, which the tuner tries) x the widest vector (a 1- or 2-byte type's
# 16-byte access, 8 elements) -- so no loop wraps around.
WIDE_INDEX_FROM = 2**31 - MAX_GRID * CUDA_MAX_BLOCK_THREADS * flat_vector(FLAT_VECTOR_MIN, 1)


def identifier(text: str) -> str:
    """A C identifier made from text: anything outside [A-Za-z0-9_] becomes _."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return s if s and not s[0].isdigit() else "_" + s


class Scope:
    """Statements being emitted at one loop level, with their memo table; ``vector``:
    the width a tiled column loop moves per access (1 elsewhere); ``row_base``: where
    a shifted tile's row starts (the offset its vectors align to), "" if not shifted."""

    def __init__(self, parent: "Scope | None" = None, vector: int = 1, row_base: str = ""):
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

    def __init__(self, lw: "Lowerer", scope: Scope, node: str = ""):
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


class Lowerer:
    """One group being lowered: its graph, schedule and launch geometry, its buffers,
    and what the walk has emitted so far (fresh variable names, flops, on-chip arrays,
    per-row results). A family's subclass gives ``lower`` (the kernel) or
    ``lower_body`` (the template's statements, which the default ``lower`` wraps)."""

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
            buffers = group_buffers(g, self.io, self._inline_constant, group)
        self.buffers = buffers
        # offsets past 2^31 - 1 (a grid stride included) need 64-bit index arithmetic:
        # of a buffer, or of a value the kernel computes without storing it (a row of
        # 2^31 elements expanded from one and summed: its loop counts past int)
        io = self.io
        self.wide = any(b.numel >= WIDE_INDEX_FROM for b in buffers.values()) or any(
            g.value(v).numel >= WIDE_INDEX_FROM for v in (*io.inputs, *io.outputs,
                                                          *io.internal))
        self.index_dtype = DType.int64 if self.wide else DType.int32
        self.counter = counter
        self.reduce_var: dict[str, str] = {}
        self.row_scope: Scope | None = None
        self.flops = 0
        self.scratch: dict[str, Scratch] = {}     # row-cached value -> its on-chip array
        self.cached_in: dict[str, Scope] = {}    # row-cached value -> the pass storing it
        self.concat_part: dict[str, int] = {}     # concat -> the part a split loop reads

    def _inline_constant(self, v: str) -> bool:
        return inlined(self.g, self.sched, v)

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
    def at(self, scope: Scope, v: str, idx: Index) -> str:
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
            scope.stmts.append(Load(var, sc, "col", src_offset=idx.offset()
                                    if sc.source or sc.home else ""))
        elif node is None:
            var = self.fresh()
            scope.stmts.append(Load(var, self.buffers[v], idx.offset(),
                                    self._vector(scope, idx)))
            if v in self.scratch and home is None:
                scope.stmts.append(self._keep(v, var, idx))
                self.cached_in[v] = scope
        else:
            var = self._compute(scope, node, v, idx)
            if v in self.scratch and home is None:
                scope.stmts.append(self._keep(v, var, idx))
                self.cached_in[v] = scope
        scope.memo[key] = var
        return var

    def _keep(self, v: str, var: str, idx: Index) -> Store:
        """The store keeping value v's element (variable var, at idx) in its row array."""
        sc = self.scratch[v]
        return Store(sc, "col", var, dst_offset=idx.offset() if sc.home else "")

    def _made_by(self, value: str) -> str:
        """Id of the group's node computing ``value`` ("" for an input passed through)."""
        n = self.producer.get(value)
        return n.id if n is not None else ""

    def _vector(self, scope: Scope, idx: Index) -> int:
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

    def _compute(self, scope: Scope, node, v: str, idx: Index) -> str:
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
    # -- the kernel ---------------------------------------------------------------
    def lower(self, name: str) -> Kernel:
        """The group's kernel: by default the template's statements (``lower_body``)
        in one kernel launched by the schedule's geometry."""
        s = self.sched
        body = self.lower_body()
        # a split row makes one pass over the grid per reduction, plus the final one
        passes = s.reductions + 1 if s.grid_barriers else 1
        return make_kernel(name, self.group.id, s.describe(), self.buffers,
                           widen(body, self.wide), launch_of(self.geometry, s), self.flops,
                           tuple(self.scratch.values()), passes, s.grid_barriers,
                           self.geometry.reduce_slots)

    def lower_body(self) -> list:
        """The statements of the group's template (an elementwise or row template's:
        a stitched kernel's phases are these)."""
        raise NotImplementedError(type(self).__name__)


def inlined(g: Graph, s: Schedule, v: str) -> bool:
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


def group_buffers(g: Graph, io, inline, group) -> dict[str, Buffer]:
    """Kernel parameters for a group's inputs (scalar constants inlined), each with the
    elements the kernel loads of it (the cost model's count: fusion/footprint.py), and
    outputs."""
    buffers: dict[str, Buffer] = {}
    library = group.schedule.kind is ScheduleKind.opaque
    for v in io.inputs:
        if not inline(v):
            val = g.value(v)
            buffers[v] = Buffer(f"in{len(buffers)}", v, val.dtype, val.numel, False,
                                unread=val.numel - read_elements(g, group.nodes, v,
                                                                 io.outputs, library))
    for k, v in enumerate(io.outputs):
        val = g.value(v)
        buffers[v] = Buffer(f"out{k}", v, val.dtype, val.numel, True)
    return buffers


def launch_of(geo: Geometry, s: Schedule) -> Launch:
    """The IR's record of how a kernel is launched (its geometry, see fusion.geometry)."""
    mapping = s.mapping if s.kind is ScheduleKind.row_reduce else None
    return Launch(geo.grid, geo.threads, mapping,
                  geo.rows_per_block if mapping is not None else 0, geo.cooperative,
                  geo.splits, geo.shared_bytes, stitched=s.kind is ScheduleKind.stitched)


def widen(body, wide: bool) -> list:
    """Every loop of a kernel that needs 64-bit index arithmetic, marked so."""
    if not wide:
        return list(body)
    out = []
    for x in body:
        if isinstance(x, Loop):
            x = replace(x, wide=True, body=tuple(widen(x.body, True)))
        elif isinstance(x, (If, OncePerBlock, ThreadTile)):
            x = replace(x, body=tuple(widen(x.body, True)))
        out.append(x)
    return out


def make_kernel(name, group, schedule, buffers, body, launch: Launch, flops, scratch,
                phases=1, barriers=0, slots: int = 0) -> Kernel:
    """The kernel value: its parameters the buffers, inputs before outputs before
    workspaces, each in name order."""
    params = tuple(sorted(buffers.values(), key=lambda b: (b.workspace, b.is_output, b.name)))
    return Kernel(name, group, schedule, params, tuple(body), launch, slots, None,
                  flops, tuple(scratch), phases, barriers)


# Lowering is demand-driven: an op's expression asks for its inputs' (``Lowerer.at``),
# so a chain of n fused ops recurses a few frames per op -- past Python's default limit
# of 1000 at ~330 ops. The limit is raised for as long as any lowering runs (and put
# back by the last one out: other threads may be lowering too).
FRAMES_PER_OP = 6
_room_lock = threading.Lock()
_room_users = 0
_room_saved = 0


@contextmanager
def recursion_room(ops: int):
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
