"""Which schedule template a group of nodes gets, or why none fits.

A group is legal only if one template can run it as one kernel:

- ``opaque``: a single library op (matmul, conv2d).
- ``elementwise``: elementwise and layout ops; one flat loop per distinct output shape,
  every value computed at the loop index through index transforms (nothing between the
  ops is materialized).
- ``row_reduce``: one or more reductions over the same domain and axes, with their
  elementwise producers and consumers. One *row* is one point of the kept axes; the
  reductions run one after another over the row's *columns* (the reduced axes), and the
  per-row results are broadcast back to the row's elements. LayerNorm, softmax and
  RMSNorm are each one such kernel. ``mapping`` says how rows meet the hardware:
  ``block`` (one thread block per row, threads across the columns: coalesced when the
  reduced axes are innermost) or ``thread`` (one thread per row, a serial loop over
  columns: coalesced when the kept axes are innermost -- the column-reduction template).
  Adaptive thread mapping (AStitch) adds ``warp`` (one warp per row, several short rows
  packed per block) and ``split`` (few long rows: each row split across several blocks,
  the partial results combined after a grid barrier). ``choose_mapping`` is the rule;
  ``candidate_mappings`` lists what a cost model may pick from; every mapping is legal
  for every row group, so a mapping is a speed choice, never a correctness one.
- ``stitched``: (AStitch) a group no single template fits, run as one kernel of
  *phases*, each phase one of the templates above (never opaque), in topological
  order. A value made in one phase and read in a later one passes through global
  memory (the ``global`` stitch scheme) behind a grid-wide barrier; a phase that reads
  nothing from the phases since the last barrier needs none (``independent``). Every
  loop strides over the grid, so the grid can be capped to what is co-resident (one
  wave) and the barrier cannot deadlock.

Analysis lives in fusion (not codegen) because legality needs it; codegen lowers it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op

# Per-block shared memory a kernel may use without opting in (bytes, every CUDA GPU).
SHARED_MEMORY_LIMIT = 48 * 1024
# Words of shared memory one block-wide reduction uses (one per warp + the result).
_REDUCE_SMEM_WORDS = 33
# Shared memory a row kernel may spend keeping expensive values of its row on chip.
ROW_CACHE_BUDGET = 32 * 1024
# An op this costly (flops per element, see OpDef.flops) is worth not recomputing.
_EXPENSIVE_FLOPS = 4
INDEX_LIMIT = 2**31 - 1   # kernels index with 32-bit ints

# The device the mapping rule sizes for when none is given: an H100 SXM (132 SMs).
DEFAULT_SMS = 132
MAPPINGS = ("warp", "block", "split", "thread")
WARP_ROW_MAX_COLS = 1024      # rows up to this long: one warp per row (AStitch)
WARP_ROWS_PER_BLOCK = 8       # short rows packed per block (256 threads)
SPLIT_MIN_COLS = 8192         # rows at least this long may be split across blocks
SPLIT_CHUNK_COLS = 1024       # ... into chunks of at least this many columns
FLAT_BLOCK = 256              # threads per block of flat loops (and of thread per row)


@dataclass(frozen=True)
class GroupIO:
    """The values a group reads from outside and the values it must write out."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    """How one kernel runs a group (see the module docstring for the templates).

    Example: ``Schedule("row_reduce", (4096, 1024), (1,), "warp", rows_per_block=8)``
    is one warp per row, eight rows per block.
    """
    kind: str                              # opaque | elementwise | row_reduce | stitched
    domain: tuple[int, ...] = ()           # row_reduce: the reductions' input shape
    reduce_axes: tuple[int, ...] = ()
    mapping: str = ""                      # row_reduce: warp | block | split | thread
    per_row: frozenset = frozenset()       # row_reduce: values constant along the row
    # row_reduce: element values kept on chip for the row (regional stitching) instead
    # of being recomputed by each later pass over the row, in topological order
    row_cached: tuple[str, ...] = ()
    rows_per_block: int = 1                # warp: rows packed per block; thread: 256
    splits: int = 1                        # split: blocks sharing one row
    reductions: int = 0                    # row_reduce: reductions run over each row
    phases: tuple["Phase", ...] = ()       # stitched: the phases, in order

    @property
    def through_global(self) -> tuple[str, ...]:
        """stitched: values made in one phase and read by a later one (global scheme)."""
        if self.kind != "stitched":
            return ()
        out = []
        for p in self.phases:
            for v in p.reads_from_phases:
                if v not in out:
                    out.append(v)
        return tuple(out)

    @property
    def grid_barriers(self) -> int:
        """Grid-wide barriers the kernel needs (stitched phases; split row reductions)."""
        if self.kind == "stitched":
            return sum(p.barrier for p in self.phases) + sum(
                p.schedule.grid_barriers for p in self.phases)
        if self.kind == "row_reduce" and self.mapping == "split":
            return self.reductions    # each reduction's partials meet after a barrier
        return 0

    @property
    def shared_bytes(self) -> int:
        """Static shared memory per block: block-reduction slots (shared by phases, one
        set per reduction) plus the row caches (each phase its own)."""
        return self.reduction_slot_bytes + self.row_cache_bytes

    @property
    def reduction_slot_bytes(self) -> int:
        if self.kind == "stitched":
            return max((p.schedule.reduction_slot_bytes for p in self.phases), default=0)
        if self.kind == "row_reduce" and self.mapping in ("block", "split"):
            return (self.reductions if self.mapping == "block" else 1) \
                * _REDUCE_SMEM_WORDS * 8
        return 0

    @property
    def row_cache_bytes(self) -> int:
        if self.kind == "stitched":
            return sum(p.schedule.row_cache_bytes for p in self.phases)
        rows = self.rows_per_block if self.mapping == "warp" else 1
        return len(self.row_cached) * self.cols * 4 * rows

    @property
    def cooperative(self) -> bool:
        """Whether the GPU must launch it cooperatively (all blocks co-resident)."""
        return self.grid_barriers > 0

    @property
    def rows(self) -> int:
        return int(np.prod([d for i, d in enumerate(self.domain) if i not in self.reduce_axes],
                           dtype=np.int64))

    @property
    def cols(self) -> int:
        return int(np.prod([self.domain[a] for a in self.reduce_axes], dtype=np.int64))

    def describe(self) -> str:
        if self.kind == "row_reduce":
            cached = f", {len(self.row_cached)} cached on chip" if self.row_cached else ""
            how = {"block": "block per row", "thread": "thread per row",
                   "warp": f"warp per row x{self.rows_per_block} rows/block",
                   "split": f"row split over {self.splits} blocks"}[self.mapping]
            return f"row_reduce rows={self.rows} cols={self.cols} {how}{cached}"
        if self.kind == "stitched":
            return (f"stitched {len(self.phases)} phases, {self.grid_barriers} grid "
                    f"barrier{'s' if self.grid_barriers != 1 else ''}: "
                    + " | ".join(p.schedule.describe() for p in self.phases))
        return self.kind


@dataclass(frozen=True)
class Phase:
    """One phase of a stitched kernel: nodes run by one template, after a grid barrier
    when it reads a value some phase since the previous barrier made."""
    nodes: tuple[str, ...]
    schedule: Schedule
    reads_from_phases: tuple[str, ...] = ()   # values made by earlier phases (global)
    after: tuple[int, ...] = ()               # indices of the phases it reads from
    barrier: bool = False                     # a grid barrier runs before it


def group_io(g: Graph, nodes: tuple[str, ...]) -> GroupIO:
    members = set(nodes)
    made = [o for nid in nodes for o in g.node(nid).outputs]
    made_set = set(made)
    inputs = []
    for nid in nodes:
        for i in g.node(nid).inputs:
            if i not in made_set and i not in inputs:
                inputs.append(i)
    graph_outs = set(g.outputs)
    outputs = tuple(o for o in made if o in graph_outs
                    or any(c.id not in members for c in g.consumers[o]))
    internal = tuple(o for o in made if o not in outputs)
    return GroupIO(tuple(inputs), outputs, internal)


def _broadcasts_to(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    if len(shape) > len(domain):
        return False
    tail = domain[len(domain) - len(shape):]
    return all(s == d or s == 1 for s, d in zip(shape, tail))


def _is_per_row(shape, domain, axes) -> bool:
    """Broadcastable to the domain and constant along every reduced axis."""
    off = len(domain) - len(shape)
    return _broadcasts_to(shape, domain) and all(
        a < off or shape[a - off] == 1 for a in axes)


def choose_mapping(rows: int, cols: int, innermost: bool, sms: int = DEFAULT_SMS) -> str:
    """The mapping rule for a row reduction (AStitch's adaptive thread mapping).

    Reduced axes not innermost -> ``thread`` (coalesced column reduction); short rows
    -> ``warp``; too few long rows to give every SM a block -> ``split``; else
    ``block``.

    >>> choose_mapping(4096, 768, True), choose_mapping(16, 65536, True)
    ('warp', 'split')
    """
    if not innermost:
        return "thread"
    if cols <= WARP_ROW_MAX_COLS:
        return "warp"
    if rows < sms and cols >= SPLIT_MIN_COLS:
        return "split"
    return "block"


def rows_per_block(mapping: str, rows: int, sms: int = DEFAULT_SMS) -> int:
    """Rows one block handles: warp packs up to 8 short rows (fewer when rows are too
    few to give every SM a block), thread takes 256, block and split one."""
    if mapping == "warp":
        r = WARP_ROWS_PER_BLOCK
        while r > 1 and rows < r * sms:
            r //= 2
        return r
    return FLAT_BLOCK if mapping == "thread" else 1


def split_count(rows: int, cols: int, sms: int = DEFAULT_SMS) -> int:
    """Blocks per row for the split mapping: enough to give every SM two blocks, each
    chunk at least SPLIT_CHUNK_COLS columns, and never fewer than two."""
    want = -(-2 * sms // max(rows, 1))
    most = max(2, cols // SPLIT_CHUNK_COLS)
    return max(2, min(want, most))


def candidate_mappings(schedule: Schedule) -> tuple[str, ...]:
    """The mappings a cost model may choose from for this schedule, the rule's first.

    Every mapping is correct for every row group, but only ``thread`` reads memory
    coalesced when the reduced axes are not innermost (the others would have a
    block's threads walk down a column), so a column reduction offers only that.
    Non-row schedules have none.
    """
    if schedule.kind != "row_reduce":
        return ()
    innermost = (len(schedule.domain) - 1) in schedule.reduce_axes
    if not innermost:
        return ("thread",)
    first = choose_mapping(schedule.rows, schedule.cols, innermost)
    return (first,) + tuple(m for m in MAPPINGS if m != first)


def analyze(g: Graph, nodes: tuple[str, ...], mapping: str | None = None,
            regional: Iterable[str] = (), local: Iterable[str] = ()) -> Schedule:
    """The schedule for a group, or FusionRefused with a reason a person can read.

    ``mapping`` forces a row reduction's thread mapping (one of MAPPINGS, or ``auto``
    for :func:`choose_mapping`); by default the reduced-axes-innermost rule picks
    ``block`` or ``thread``. ``regional`` / ``local`` force element values into or out
    of the on-chip row cache (a user's stitch schemes).
    """
    if mapping is not None and mapping != "auto" and mapping not in MAPPINGS:
        raise FusionRefused(f"unknown mapping {mapping!r}; choose one of "
                            f"{', '.join(MAPPINGS)} or auto")
    ns = [g.node(n) for n in nodes]
    kinds = {n.id: get_op(n.op).kind for n in ns}
    io = group_io(g, nodes)
    for name in io.inputs + io.outputs + io.internal:
        if g.value(name).numel > INDEX_LIMIT:
            raise FusionRefused(f"value {name} has {g.value(name).numel} elements, more than "
                                "32-bit kernel indexing allows")
    opaque = [n for n in ns if kinds[n.id] is Kind.opaque]
    if opaque:
        if len(ns) > 1:
            raise FusionRefused(f"{opaque[0].id} ({opaque[0].op}) is a library call and "
                                "cannot share a kernel with other ops")
        sched = Schedule("opaque")
    else:
        reduces = [n for n in ns if kinds[n.id] is Kind.reduce]
        if not reduces:
            sched = Schedule("elementwise")
        else:
            return _analyze_row_group(g, ns, kinds, reduces, io, mapping, set(regional),
                                      set(local))
    if mapping is not None:
        raise FusionRefused(f"a thread mapping applies to a row-reduction kernel; this "
                            f"one is {sched.kind}")
    return sched


def _analyze_row_group(g, ns, kinds, reduces, io, forced_mapping, regional,
                       local) -> Schedule:
    first = reduces[0]
    domain = g.value(first.inputs[0]).shape
    axes = tuple(first.attr("axes"))
    for r in reduces[1:]:
        d, a = g.value(r.inputs[0]).shape, tuple(r.attr("axes"))
        if d != domain or a != axes:
            raise FusionRefused(
                f"{r.id} reduces {list(d)} over axes {list(a)} but {first.id} reduces "
                f"{list(domain)} over {list(axes)}; one kernel needs one reduction domain")
    smem = len(reduces) * _REDUCE_SMEM_WORDS * 8
    if smem > SHARED_MEMORY_LIMIT:
        raise FusionRefused(f"shared memory {smem // 1024} KB > "
                            f"{SHARED_MEMORY_LIMIT // 1024} KB limit")
    rows = math.prod(d for i, d in enumerate(domain) if i not in axes)
    per_row = set()
    for n in ns:
        k = kinds[n.id]
        for o in n.outputs:
            shape = g.value(o).shape
            if k is Kind.reduce:
                per_row.add(o)
            elif k is Kind.layout and n.op in ("reshape", "squeeze", "unsqueeze"):
                src = g.value(n.inputs[0])
                if not (n.inputs[0] in per_row and src.numel == rows
                        and g.value(o).numel == rows):
                    raise FusionRefused(f"{n.id} ({n.op}) reshapes element data; only "
                                        "per-row results may be reshaped inside a "
                                        "reduction kernel")
                per_row.add(o)
            elif k is Kind.layout and n.op != "expand":
                raise FusionRefused(f"{n.id} ({n.op}) moves elements and cannot join a "
                                    "reduction kernel")
            elif not _broadcasts_to(shape, domain):
                raise FusionRefused(f"{n.id} ({n.op}) output {list(shape)} does not broadcast "
                                    f"to the reduction domain {list(domain)}")
            elif _is_per_row(shape, domain, axes):
                per_row.add(o)
        if k is not Kind.layout:
            for i in n.inputs:
                if i in per_row and not _broadcasts_to(g.value(i).shape, domain):
                    raise FusionRefused(f"{n.id} ({n.op}) reads the per-row result {i} "
                                        f"of shape {list(g.value(i).shape)}, which does not "
                                        f"broadcast to {list(domain)}; unsqueeze it first")
    for o in io.outputs:
        shape = g.value(o).shape
        if o not in per_row and shape != domain:
            raise FusionRefused(f"output {o} of shape {list(shape)} is neither one value per "
                                f"element nor one per row of {list(domain)}")
    # reduced axes innermost -> threads of a block walk a row contiguously
    innermost = (len(domain) - 1) in axes
    cols = math.prod(domain[a] for a in axes)
    if forced_mapping == "auto":
        mapping = choose_mapping(rows, cols, innermost)
    else:
        mapping = forced_mapping or ("block" if innermost else "thread")
    rpb = rows_per_block(mapping, rows)
    on_chip = mapping in ("block", "warp")   # the row lives in one block's threads
    cached = _row_cache(g, ns, reduces, io, per_row, domain, axes, rpb) if on_chip else ()
    cached = tuple(v for v in cached if v not in local)
    for v in sorted(regional - set(cached), key=[n for m in ns for n in m.outputs].index):
        if not on_chip:
            raise FusionRefused(f"regional {v}: the {mapping} mapping does not keep a row "
                                "in one block, so there is no block-shared memory to keep "
                                "it in; use mapping block or warp")
        if v in per_row or g.value(v).shape != tuple(domain):
            continue    # a per-row value: its scheme follows from who reads it (plan)
        used = (len(cached) + 1) * cols * 4 * rpb
        if used > ROW_CACHE_BUDGET:
            raise FusionRefused(f"regional {v}: shared memory {used // 1024} KB > "
                                f"{ROW_CACHE_BUDGET // 1024} KB row-cache budget "
                                f"({cols} columns x {rpb} rows x 4 B per cached value)")
        cached = cached + (v,)
    order = {o: i for i, n in enumerate(ns) for o in n.outputs}
    cached = tuple(sorted(cached, key=order.__getitem__))
    splits = split_count(rows, cols) if mapping == "split" else 1
    return Schedule("row_reduce", tuple(domain), axes, mapping, frozenset(per_row), cached,
                    rpb, splits, len(reduces))


def pass_needs(ns, reduces, element: set[str], outputs) -> dict[str, int]:
    """Which passes over a row need each element value, as a bit mask: bit j for
    reduction j's pass, the top bit for the final pass that writes the outputs. Flows
    backward from each pass's roots, so it is linear in the group."""
    need: dict[str, int] = dict.fromkeys(element, 0)
    final = 1 << len(reduces)
    for j, r in enumerate(reduces):
        if r.inputs[0] in element:
            need[r.inputs[0]] |= 1 << j
    for o in outputs:
        if o in element:
            need[o] |= final
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            mask |= need.get(o, 0)
        if mask:
            for i in n.inputs:
                if i in element:
                    need[i] |= mask
    return need


def _row_cache(g, ns, reduces, io, per_row, domain, axes, rpb=1) -> tuple[str, ...]:
    """Element values worth keeping on chip: needed by two or more passes over the row
    (the reductions' passes and the final write), full-domain, and costly to recompute
    (an exp, erf, tanh... in what they are computed from). AStitch's regional scheme.

    Linear in the group: costliness flows forward through the element values, and the
    set of passes needing each value (a bit mask) flows backward from the passes' roots.
    """
    made = {o: n for n in ns for o in n.outputs}
    element = {o for o in made if o not in per_row}
    costly: dict[str, bool] = {}
    for n in ns:
        here = get_op(n.op).flops >= _EXPENSIVE_FLOPS or any(
            costly.get(i, False) for i in n.inputs if i in element)
        for o in n.outputs:
            costly[o] = here
    need = pass_needs(ns, reduces, element, io.outputs)
    cols = math.prod(domain[a] for a in axes)
    chosen, budget = [], ROW_CACHE_BUDGET
    for n in ns:
        for v in n.outputs:
            if (v in element and bin(need[v]).count("1") >= 2 and costly[v]
                    and g.value(v).shape == tuple(domain) and cols * 4 * rpb <= budget):
                chosen.append(v)
                budget -= cols * 4 * rpb
    return tuple(chosen)


def analyze_stitched(g: Graph, nodes: tuple[str, ...], through_global: Iterable[str] = (),
                     regional: Iterable[str] = (), local: Iterable[str] = ()) -> Schedule:
    """A stitched schedule: the nodes (topological order) split into phases, each one
    template, or FusionRefused.

    Greedy in topological order: a node joins the first phase, at or after the latest
    phase it reads from, whose template still fits with it (a later unrelated phase is
    *independent* packing); else it opens a new phase. A value in ``through_global``
    (a user's ``global`` scheme) forces its readers into a later phase than its maker.
    A barrier precedes a phase that reads from a phase since the previous barrier.

    >>> analyze_stitched(g, ("n0", "n1")).phases[1].barrier    # doctest: +SKIP
    True
    """
    forced = set(through_global)
    regional, local = set(regional), set(local)
    for nid in nodes:
        n = g.node(nid)
        if get_op(n.op).kind is Kind.opaque:
            raise FusionRefused(f"{nid} ({n.op}) is a library call and cannot share a "
                                "kernel with other ops, stitched or not")
    made_by = {o: nid for nid in nodes for o in g.node(nid).outputs}
    phases: list[list[str]] = []
    phase_of: dict[str, int] = {}

    def fits(members) -> bool:
        try:
            analyze(g, tuple(members), regional=regional & _outs(g, members),
                    local=local)
            return True
        except FusionRefused:
            return False

    for nid in nodes:
        lo = 0
        for i in g.node(nid).inputs:
            if i in made_by:
                lo = max(lo, phase_of[made_by[i]] + (1 if i in forced else 0))
        for k in range(lo, len(phases)):
            if fits(phases[k] + [nid]):
                phases[k].append(nid)
                phase_of[nid] = k
                break
        else:
            analyze(g, (nid,))          # a single op that fits no template says why
            phases.append([nid])
            phase_of[nid] = len(phases) - 1
    out, since_barrier, cache_left = [], set(), SHARED_MEMORY_LIMIT - 33 * 8 * 8
    for k, members in enumerate(phases):
        reads, after = [], set()
        for nid in members:
            for i in g.node(nid).inputs:
                if i in made_by and phase_of[made_by[i]] != k:
                    after.add(phase_of[made_by[i]])
                    if i not in reads:
                        reads.append(i)
        barrier = bool(after & since_barrier)
        if barrier:
            since_barrier = set()
        since_barrier.add(k)
        mine = regional & _outs(g, members)
        sched = analyze(g, tuple(members), regional=mine, local=local)
        if sched.row_cache_bytes > cache_left:
            # the phases' row caches share one block's shared memory: recompute
            # this phase's values instead of keeping them (unless a user asked)
            if mine:
                need = SHARED_MEMORY_LIMIT - cache_left + sched.row_cache_bytes
                raise FusionRefused(
                    f"shared memory {need // 1024} KB > {SHARED_MEMORY_LIMIT // 1024} KB "
                    "limit: the phases' row caches do not fit together (regional "
                    f"{', '.join(sorted(mine))})")
            sched = analyze(g, tuple(members), local=local | set(sched.row_cached))
        cache_left -= sched.row_cache_bytes
        out.append(Phase(tuple(members), sched, tuple(reads), tuple(sorted(after)),
                         barrier))
    stitched = Schedule("stitched", phases=tuple(out))
    if stitched.shared_bytes > SHARED_MEMORY_LIMIT:
        raise FusionRefused(f"shared memory {stitched.shared_bytes // 1024} KB > "
                            f"{SHARED_MEMORY_LIMIT // 1024} KB limit")
    return stitched


def _outs(g: Graph, members) -> set[str]:
    return {o for nid in members for o in g.node(nid).outputs}
