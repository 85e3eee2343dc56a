"""The row_reduce template's analysis: the one domain a group's reductions share, which
values are constant along a row, how rows meet the hardware (the thread mapping, rows
per block, threads sharing a row, elements per access, splits) and which launch
parameters a user or the tuner may set; where the row's values are kept is
:mod:`.row_cache`'s.

    >>> launch_param({"threads": 256}, "threads", 128, "a block-mapped row", ("threads",))
    256
"""
from __future__ import annotations

import functools
import math

from ..device import CUDA_MAX_BLOCK_THREADS, CUDA_WARP, Device

from ..errors import FusionRefused
from ..ops import Kind, RowRole, get_op
from .geometry import row_threads, row_vector, rows_per_block, split_count, two_phase_splits
from .mapping import MAPPINGS, Mapping, ScheduleKind, choose_mapping
from .row_cache import RowDomain, hybrid_bytes, kept_bytes, row_storage
from .schedule import Schedule


# (memoized: a row kernel's analysis asks both of every value, and the rules planner
# analyses a kernel again at each op it grows by -- the same few shapes each time)
@functools.lru_cache(maxsize=4096)
def _broadcasts_to(shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    if len(shape) > len(domain):
        return False
    tail = domain[len(domain) - len(shape):]
    return all(s == d or s == 1 for s, d in zip(shape, tail))


@functools.lru_cache(maxsize=4096)
def _is_per_row(shape, domain, axes) -> bool:
    """Broadcastable to the domain and constant along every reduced axis."""
    off = len(domain) - len(shape)
    return _broadcasts_to(shape, domain) and all(
        a < off or shape[a - off] == 1 for a in axes)


def candidate_mappings(schedule: Schedule, device: Device) -> tuple[Mapping, ...]:
    """The mappings a cost model may choose from for this schedule, the rule's first.

    Every mapping is correct for every row group, but only ``thread`` reads memory
    coalesced when the reduced axes are not innermost (the others would have a
    block's threads walk down a column), so a column reduction offers only that.
    Non-row schedules have none.
    """
    if schedule.kind is not ScheduleKind.row_reduce:
        return ()
    if not schedule.innermost:
        # (two_phase only on a GPU: it fills the SMs a few outputs' threads leave idle;
        # a CPU's few threads are busy with thread per row already, and its tile of
        # outputs, spread over blocks of rows, would gather -- measured 4-10x slower:
        # benchmarks/two_phase_columns.py)
        # (nor for a window's taps, which are no column; nor where a warp's threads
        # would straddle two blocks of rows: outputs not a multiple of the warp)
        two = device.is_gpu and not schedule.gathered and schedule.rows % device.warp == 0
        return (Mapping.thread, Mapping.two_phase) if two else (Mapping.thread,)
    first = choose_mapping(schedule.rows, schedule.cols, True, device.units)
    # (two_phase walks a block of rows a thread per output: a column reduction's form)
    return (first,) + tuple(m for m in MAPPINGS if m is not first
                            and not m.info.partials_by_rows)


def launch_param(launch: dict, key: str, rule: int, what: str, allowed) -> int:
    """The launch parameter ``key`` a user or the tuner set (checked), else the rule's;
    refused when the schedule has no such parameter or the value is out of range."""
    for k in launch:
        if k not in allowed:
            raise FusionRefused(f"{what} kernel has no launch parameter {k!r}; it takes "
                                f"{', '.join(allowed) or 'none'}")
    if key not in launch:
        return rule
    v = launch[key]
    # (every kernel also renders as CUDA: its blocks within CUDA's, a warp-mapped one's
    # warps too)
    most_rows = CUDA_MAX_BLOCK_THREADS // CUDA_WARP
    ok = {"threads": lambda x: CUDA_WARP <= x <= CUDA_MAX_BLOCK_THREADS and x & (x - 1) == 0,
          "rows_per_block": lambda x: 1 <= x <= most_rows and x & (x - 1) == 0,
          "splits": lambda x: 2 <= x <= 1024}[key]
    if not isinstance(v, int) or not ok(v):
        raise FusionRefused(f"{key}={v!r} is out of range for {what} kernel (threads: a "
                            f"power of two from {CUDA_WARP} to {CUDA_MAX_BLOCK_THREADS}; "
                            f"rows_per_block: a power of two up to {most_rows}; splits: 2 "
                            "to 1024)")
    return v


def analyze_rows(g, ns, reduces, io, forced: Mapping | None, auto: bool,
                 regional: set, local: set, device: Device, launch: dict) -> Schedule:
    """The row_reduce schedule of a group whose ``reduces`` share one domain, or
    FusionRefused: its mapping ``forced``, chosen by the rule (``auto``), or the
    reduced-axes-innermost default; ``regional`` and ``local`` values a user keeps in
    shared memory or recomputes; ``launch`` the parameters set in place of the rule's."""
    dom = row_domain(g, reduces)
    per_row = _per_row_values(g, ns, dom)
    for o in io.outputs:
        check_row_output(g, o, o in per_row, dom)
    return row_schedule(g, ns, reduces, io, per_row, dom, forced, auto, regional, local,
                        device, launch)


def row_schedule(g, ns, reduces, io, per_row: set, dom: RowDomain, forced: Mapping | None,
                 auto: bool, regional: set, local: set, device: Device, launch: dict
                 ) -> Schedule:
    """:func:`analyze_rows`'s schedule once its ops and outputs are checked (``per_row``:
    the values constant along a row): the mapping, the launch and where the row's
    values are kept."""
    widest = max((g.value(v).dtype.itemsize for v in io.inputs + io.outputs
                  if g.value(v).shape == dom.domain), default=4)
    mapping, what, tunable, rpb, threads, vector = row_launch(dom, forced, auto, device,
                                                              launch, widest)
    registers, cached, hybrid, steps = row_storage(g, ns, reduces, io, per_row, dom, mapping,
                                                   rpb, threads, vector, device, regional,
                                                   local)
    cache_bytes = sum(kept_bytes(g, v, dom, rpb) for v in cached if v != hybrid)
    if hybrid:
        cache_bytes += hybrid_bytes(g, hybrid, dom, threads, vector, steps)
    splits = launch_param(launch, "splits", split_count(dom.rows, dom.cols, device.units)
                          if mapping is Mapping.split else 1, what, tunable)
    if mapping.info.partials_by_rows:
        splits = _two_phase_splits(g, ns, reduces, io, per_row, dom, device, launch)
    return Schedule(ScheduleKind.row_reduce, dom.domain, dom.axes, mapping,
                    frozenset(per_row), cached, rpb, splits, len(reduces),
                    cache_bytes=cache_bytes, threads=threads, vector=vector,
                    row_registers=registers, hybrid=hybrid, hybrid_steps=steps,
                    gathered=dom.gathered)


def row_launch(dom: RowDomain, forced: Mapping | None, auto: bool, device: Device,
               launch: dict, widest: int) -> tuple[Mapping, str, tuple, int, int, int]:
    """A row group's thread mapping (``forced``, the rule's where ``auto``, else the
    reduced-axes-innermost default), what a refusal calls the kernel, its tunable launch
    parameters, rows per block, threads sharing a row and elements per access
    (``widest``: the widest element of the row-long buffers)."""
    if auto:
        mapping = choose_mapping(dom.rows, dom.cols, dom.innermost, device.units)
    else:
        mapping = forced or (Mapping.block if dom.innermost else Mapping.thread)
    what = f"a {mapping.value}-mapped row"
    tunable = {Mapping.block: ("threads",), Mapping.warp: ("rows_per_block",),
               Mapping.split: ("splits", "threads"), Mapping.thread: (),
               Mapping.two_phase: ("splits",)}[mapping]
    rpb = launch_param(launch, "rows_per_block", rows_per_block(mapping, dom.rows, device.units),
                       what, tunable)
    threads, vector = _row_tiling(mapping, dom, widest)
    threads = launch_param(launch, "threads", threads, what, tunable)
    return mapping, what, tunable, rpb, threads, vector


def _two_phase_splits(g, ns, reduces, io, per_row, dom: RowDomain, device: Device,
                      launch: dict) -> int:
    """The blocks of a two-phase reduction's reduced axis, or FusionRefused: phase one
    makes every reduction's partials in one pass and phase two writes per-row results
    only, so no reduction may read another's result and no output be per element."""
    what = "a two_phase-mapped row"
    if dom.gathered:
        raise FusionRefused(f"{what} kernel sums blocks of a column; a window's taps are "
                            "gathered, not a column: map it as thread")
    elem = [o for o in io.outputs if o not in per_row]
    if elem:
        raise FusionRefused(f"{what} kernel writes per-row results only, but output "
                            f"{elem[0]} has one value per element; map it as thread")
    inside = {o: n for n in ns for o in n.outputs}
    for r in reduces:
        stack, seen = [r.inputs[0]], set()
        while stack:
            v = stack.pop()
            if v in seen or v not in inside:
                continue
            seen.add(v)
            if get_op(inside[v].op).kind is Kind.reduce:
                raise FusionRefused(f"{r.id} reduces a value computed from {inside[v].id}'s "
                                    "result: one pass makes every partial of a two_phase "
                                    "kernel; map it as thread")
            stack.extend(inside[v].inputs)
    rule = two_phase_splits(dom.rows, dom.cols, device.units)
    if rule < 2 and "splits" not in launch:
        raise FusionRefused(f"the reduced length {dom.cols} has no divisor from 2 that "
                            "leaves blocks of 64 rows or more; map it as thread")
    splits = launch_param(launch, "splits", rule, what, ("splits",))
    if dom.cols % splits:
        raise FusionRefused(f"splits={splits} does not divide the reduced length "
                            f"{dom.cols}; choose a divisor")
    return splits


def _row_tiling(mapping: Mapping, dom: RowDomain, itemsize: int) -> tuple[int, int]:
    """(threads sharing a row, elements per access) of a row kept on chip: a block's
    threads or a warp's lanes, 16 bytes wide where the row length allows (``itemsize``:
    the widest element of the row-long buffers); (0, 1) for the mappings that do not
    keep a row in one block."""
    if not mapping.info.on_chip:
        return 0, 1
    threads = CUDA_WARP if mapping is Mapping.warp else row_threads(dom.cols)
    return threads, row_vector(dom.cols, itemsize)


def row_domain(g, reduces) -> RowDomain:
    """The one domain and axes every reduction of the group reduces over."""
    first = reduces[0]
    domain = g.value(first.inputs[0]).shape
    axes = tuple(first.attr("axes"))
    for r in reduces[1:]:
        d, a = g.value(r.inputs[0]).shape, tuple(r.attr("axes"))
        if d != domain or a != axes:
            raise FusionRefused(
                f"{r.id} reduces {list(d)} over axes {list(a)} but {first.id} reduces "
                f"{list(domain)} over {list(axes)}; one kernel needs one reduction domain")
    rows = math.prod(d for i, d in enumerate(domain) if i not in axes)
    cols = math.prod(domain[a] for a in axes)
    gathered = any(getattr(g.producer.get(r.inputs[0]), "op", None) == "window"
                   for r in reduces)
    return RowDomain(tuple(domain), axes, rows, cols, gathered)


def _per_row_values(g, ns, dom: RowDomain) -> set[str]:
    """The values constant along a row (reductions and what is computed from them at
    row shape), after checking each op may sit in a row kernel (its ``row_role``)."""
    per_row: set[str] = set()
    for n in ns:
        per_row.update(o for o, p in row_node(g, n, dom, per_row.__contains__).items() if p)
    return per_row


def row_node(g, n, dom: RowDomain, is_per_row) -> dict[str, bool]:
    """Whether each output of op ``n`` is constant along a row of ``dom``, after
    checking the op may sit in a row kernel of that domain (its ``row_role``, its
    shapes); ``is_per_row(v)``: whether v is a per-row value made earlier in the kernel
    (False for what the kernel reads from outside). The rules planner's incremental
    check (:mod:`.row_fit`) asks the same per op."""
    op = get_op(n.op)
    out: dict[str, bool] = {}
    for o in n.outputs:
        shape = g.value(o).shape
        if op.kind is Kind.reduce:
            out[o] = True
        elif op.row_role is RowRole.per_row_view:
            src = g.value(n.inputs[0])
            if not (is_per_row(n.inputs[0]) and src.numel == dom.rows
                    and g.value(o).numel == dom.rows):
                raise FusionRefused(f"{n.id} ({n.op}) reshapes element data; only "
                                    "per-row results may be reshaped inside a "
                                    "reduction kernel")
            out[o] = True
        elif op.row_role is RowRole.never:
            raise FusionRefused(f"{n.id} ({n.op}) moves elements and cannot join a "
                                "reduction kernel")
        elif not _broadcasts_to(shape, dom.domain):
            raise FusionRefused(f"{n.id} ({n.op}) output {list(shape)} does not broadcast "
                                f"to the reduction domain {list(dom.domain)}")
        else:
            out[o] = _is_per_row(shape, dom.domain, dom.axes)
    if op.row_role is RowRole.per_row_view:
        return out
    for i in n.inputs:
        if not is_per_row(i) or _broadcasts_to(g.value(i).shape, dom.domain):
            continue
        if op.kind is Kind.layout:
            # a window over a reduction's result (a max pool then an average pool,
            # Inception's) reads other rows' results, which no row has yet
            raise FusionRefused(f"{n.id} ({n.op}) reads the per-row result {i} at "
                                "other rows' positions; the rows it reads must be "
                                "reduced first, by another kernel or phase")
        raise FusionRefused(f"{n.id} ({n.op}) reads the per-row result {i} of shape "
                            f"{list(g.value(i).shape)}, which does not broadcast to "
                            f"{list(dom.domain)}; unsqueeze it first")
    return out


def check_row_output(g, o: str, per_row: bool, dom: RowDomain) -> None:
    """Refuse a row kernel's output ``o`` (``per_row``: constant along a row) that is
    neither one value per element of ``dom`` nor one per row."""
    shape = g.value(o).shape
    if not per_row and shape != dom.domain:
        raise FusionRefused(f"output {o} of shape {list(shape)} is neither one value per "
                            f"element nor one per row of {list(dom.domain)}")
    if per_row and g.value(o).numel != dom.rows:
        # a row kernel stores a per-row result once per row: out[row]
        raise FusionRefused(f"output {o} of shape {list(shape)} holds "
                            f"{g.value(o).numel} values, not one per row of the "
                            f"{dom.rows} rows of {list(dom.domain)}; compute it in a "
                            "kernel of its own")
