"""Which schedule a group of nodes gets on a device, or why none fits (legality).

:func:`analyze` fits one template (:mod:`.schedule` describes them) to a group;
:func:`analyze_stitched` cuts a group no single template fits into phases (AStitch).
Analysis is made for a device: its SM (or core) count sizes the mapping rule's choices
(rows per block, split count; :mod:`.geometry`), and a schedule needing more than the
device gives a block (shared memory, threads) is refused with the numbers. It lives in
fusion (not codegen) because legality needs it; codegen lowers its result.

Example::

    >>> analyze(g, ("n0", "n1", "n2"), device=H100).kind      # doctest: +SKIP
    <ScheduleKind.row_reduce: 'row_reduce'>
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable

from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, RowRole, get_op
from ..ops.conv import CONVS
from ..device import Device
from .gemm.analyze import analyze_gemm
from .geometry import (REDUCE_SLOT_BYTES, flat_vector, geometry, register_budget, row_threads,
                       row_vector, rows_per_block, shared_bytes, split_count)
from .mapping import MAPPINGS, Mapping, ScheduleKind, choose_mapping
from .row_tile import row_shifted, row_slots
from .schedule import Phase, Schedule, group_io

# Shared memory a row kernel may spend keeping expensive values of its row on chip
# (a policy: the rest of the block's shared memory stays free for occupancy).
ROW_CACHE_BUDGET = 32 * 1024
# An op this costly (flops per element, see OpDef.flops) is worth not recomputing.
_EXPENSIVE_FLOPS = 4
INDEX_LIMIT = 2**62      # kernels index in 64 bits where offsets pass 2^31 - 1


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
        return (Mapping.thread,)
    first = choose_mapping(schedule.rows, schedule.cols, True, device.units)
    return (first,) + tuple(m for m in MAPPINGS if m is not first)


def analyze(g: Graph, nodes: tuple[str, ...], mapping: "Mapping | str | None" = None,
            regional: Iterable[str] = (), local: Iterable[str] = (), *, device: Device,
            launch: Iterable[tuple[str, int]] = (), tf32: bool = False) -> Schedule:
    """The schedule for a group on ``device``, or FusionRefused with a reason a person
    can read.

    ``mapping`` forces a row reduction's thread mapping (a :class:`Mapping` or its
    name, or ``auto`` for :func:`~.mapping.choose_mapping` on this device); by default
    the reduced-axes-innermost rule picks ``block`` or ``thread``. ``regional`` /
    ``local`` force element values into or out of the on-chip row cache (a user's
    stitch schemes). ``launch`` overrides the rule's launch parameters (what the tuner
    searches: ``threads`` of a block-mapped row or a flat loop's block,
    ``rows_per_block`` of the warp mapping, ``splits`` of the split mapping). A
    schedule that needs more than the device gives (shared memory, threads per block)
    is refused here, with the numbers. ``tf32``: the plan lets float32 matmuls round
    to TF32 (``Plan.tf32``); the schedule records whether its matmuls run on tensor
    cores (``Schedule.tensor_cores``), which its kernel and its price follow.
    """
    sched = _analyze(g, nodes, mapping, regional, local, device, dict(launch), tf32)
    if any(g.node(n).op == "matmul" and device.on_tensor_cores(
            g.value(g.node(n).inputs[0]).dtype, tf32) for n in nodes):
        return replace(sched, tensor_cores=True)
    return sched


def _analyze(g: Graph, nodes: tuple[str, ...], mapping, regional, local, device: Device,
             launch: dict, tf32: bool) -> Schedule:
    """:func:`analyze`'s schedule, before its matmuls' tensor cores are recorded."""
    auto = mapping == "auto"
    forced = None if auto else Mapping.parse(mapping)
    ns = [g.node(n) for n in nodes]
    kinds = {n.id: get_op(n.op).kind for n in ns}
    io = group_io(g, nodes)
    for name in io.inputs + io.outputs + io.internal:
        if g.value(name).numel > INDEX_LIMIT:
            raise FusionRefused(f"value {name} has {g.value(name).numel} elements, more than "
                                "kernel indexing allows")
    spread = [n for n in ns if n.op == "window" and n.outputs[0] in io.outputs]
    if spread and len(ns) > 1:
        # (stitch fused Keras InceptionV3's ReLUs and concat with the window of the
        # average pool that reads them, leaving the sum to another kernel: each such
        # kernel wrote 9 floats per pooled one, 3.9 ms against 0.2)
        n = spread[0]
        raise FusionRefused(f"{n.id} (window): its taps ({g.value(n.outputs[0]).numel} "
                            "elements, one per tap of every window) would be written out; "
                            "a window joins a kernel only with the reductions of its taps")
    opaque = [n for n in ns if kinds[n.id] is Kind.opaque]
    if opaque:
        if len(ns) > 1:
            # a matmul shares its kernel only with an epilogue (the gemm template)
            sched = analyze_gemm(g, ns, io, device, lambda rest: analyze(
                g, rest, mapping=Mapping.block, device=device), launch.items(), tf32=tf32)
        else:
            sched = _lone_library_op(g, ns, io, device, launch)
    else:
        reduces = [n for n in ns if kinds[n.id] is Kind.reduce]
        if reduces:
            sched = _analyze_row_group(g, ns, reduces, io, forced, auto, set(regional),
                                       set(local), device, launch)
            check_resources(sched, device)
            return sched
        n = max((g.value(o).numel for o in io.outputs), default=1)
        # (the widest element of what the loop over n moves at its own index)
        itemsize = max((g.value(v).dtype.itemsize for v in (*io.inputs, *io.outputs)
                        if g.value(v).numel == n), default=4)
        sched = Schedule(ScheduleKind.elementwise, elements=n,
                         threads=_launch_param(launch, "threads", 0, "an elementwise",
                                               ("threads",)),
                         vector=flat_vector(n, itemsize))
    if forced is not None or auto:
        raise FusionRefused(f"a thread mapping applies to a row-reduction kernel; this "
                            f"one is {sched.kind.value}")
    if launch and sched.kind is ScheduleKind.opaque:
        raise FusionRefused("a library call has no launch parameters to set")
    if tuple(regional) and sched.kind is ScheduleKind.gemm:
        raise FusionRefused("a GEMM kernel has no regional values to set: its epilogue is "
                            "local")
    return sched


def _lone_library_op(g: Graph, ns, io, device: Device, launch: dict) -> Schedule:
    """A library op alone: a matmul (or convolution) the gemm template takes is a gemm
    kernel without an epilogue on the CPU, so its tiles run on the kernels' OpenMP threads (every
    core, one thread pool) where the library call would run on one BLAS thread (see
    runtime/threads.py); anything else is the library call."""
    if ns[0].op in ("matmul",) + CONVS and not device.is_gpu:
        try:
            return analyze_gemm(g, ns, io, device, launch=launch.items())
        except FusionRefused:
            if launch:
                raise   # with a launch set, the refusal is the answer (no library call takes one)
    return Schedule(ScheduleKind.opaque)


def _launch_param(launch: dict, key: str, rule: int, what: str, allowed) -> int:
    """The launch parameter ``key`` a user or the tuner set (checked), else the rule's;
    refused when the schedule has no such parameter or the value is out of range."""
    for k in launch:
        if k not in allowed:
            raise FusionRefused(f"{what} kernel has no launch parameter {k!r}; it takes "
                                f"{', '.join(allowed) or 'none'}")
    if key not in launch:
        return rule
    v = launch[key]
    ok = {"threads": lambda x: 32 <= x <= 1024 and x & (x - 1) == 0,
          "rows_per_block": lambda x: 1 <= x <= 32 and x & (x - 1) == 0,
          "splits": lambda x: 2 <= x <= 1024}[key]
    if not isinstance(v, int) or not ok(v):
        raise FusionRefused(f"{key}={v!r} is out of range for {what} kernel (threads: a "
                            "power of two from 32 to 1024; rows_per_block: a power of two "
                            "up to 32; splits: 2 to 1024)")
    return v


def check_resources(s: Schedule, device: Device) -> None:
    """Refuse a schedule whose blocks need more than the device gives a block."""
    smem, limit = shared_bytes(s), device.shared_optin_limit
    if smem > limit:
        raise FusionRefused(f"shared memory {smem // 1024} KB > {limit // 1024} KB "
                            f"limit per block on {device.name}")
    if s.kind is ScheduleKind.row_reduce and s.mapping is not None and device.is_gpu:
        threads = geometry(s, device).threads
        if threads > device.max_threads_per_block:
            raise FusionRefused(f"{threads} threads per block > "
                                f"{device.max_threads_per_block} on {device.name}")


# -- the row-reduction template, step by step -------------------------------------------
@dataclass(frozen=True)
class _RowDomain:
    domain: tuple[int, ...]
    axes: tuple[int, ...]
    rows: int
    cols: int
    gathered: bool = False      # the reductions read a window's taps (pooling)

    @property
    def innermost(self) -> bool:
        # a window's taps (a 3 x 3 max-pool's 9) lie on three input rows, under every
        # mapping; a thread per output position reads neighbouring positions together.
        # Measured (ResNet's max-pool, 2 cores): 0.076 ms with a SIMD loop per window
        # (block), 0.039 with SIMD over the output positions (thread)
        return (len(self.domain) - 1) in self.axes and not self.gathered


def _analyze_row_group(g, ns, reduces, io, forced: Mapping | None, auto: bool,
                       regional: set, local: set, device: Device, launch: dict) -> Schedule:
    dom = _row_domain(g, reduces)
    per_row = _per_row_values(g, ns, dom)
    _check_row_outputs(g, io, per_row, dom)
    if auto:
        mapping = choose_mapping(dom.rows, dom.cols, dom.innermost, device.units)
    else:
        mapping = forced or (Mapping.block if dom.innermost else Mapping.thread)
    what = f"a {mapping.value}-mapped row"
    tunable = {Mapping.block: ("threads",), Mapping.warp: ("rows_per_block",),
               Mapping.split: ("splits", "threads"), Mapping.thread: ()}[mapping]
    rpb = _launch_param(launch, "rows_per_block", rows_per_block(mapping, dom.rows, device.units),
                        what, tunable)
    widest = max((g.value(v).dtype.itemsize for v in io.inputs + io.outputs
                  if g.value(v).shape == dom.domain), default=4)
    threads, vector = _row_tiling(mapping, dom, widest)
    threads = _launch_param(launch, "threads", threads, what, tunable)
    registers, cached, hybrid, steps = _row_storage(g, ns, reduces, io, per_row, dom, mapping,
                                                    rpb, threads, vector, device, regional,
                                                    local)
    cache_bytes = sum(_cache_bytes(g, v, dom, rpb) for v in cached if v != hybrid)
    if hybrid:
        cache_bytes += _hybrid_bytes(g, hybrid, dom, threads, vector, steps)
    splits = _launch_param(launch, "splits", split_count(dom.rows, dom.cols, device.units)
                           if mapping is Mapping.split else 1, what, tunable)
    return Schedule(ScheduleKind.row_reduce, dom.domain, dom.axes, mapping,
                    frozenset(per_row), cached, rpb, splits, len(reduces),
                    cache_bytes=cache_bytes, threads=threads, vector=vector,
                    row_registers=registers, hybrid=hybrid, hybrid_steps=steps,
                    gathered=dom.gathered)


def _row_tiling(mapping: Mapping, dom: "_RowDomain", itemsize: int) -> tuple[int, int]:
    """(threads sharing a row, elements per access) of a row kept on chip: a block's
    threads or a warp's lanes, 16 bytes wide where the row length allows (``itemsize``:
    the widest element of the row-long buffers); (0, 1) for the mappings that do not
    keep a row in one block."""
    if not mapping.info.on_chip:
        return 0, 1
    threads = 32 if mapping is Mapping.warp else row_threads(dom.cols)
    return threads, row_vector(dom.cols, itemsize)


def _row_domain(g, reduces) -> _RowDomain:
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
    return _RowDomain(tuple(domain), axes, rows, cols, gathered)


def _per_row_values(g, ns, dom: _RowDomain) -> set[str]:
    """The values constant along a row (reductions and what is computed from them at
    row shape), after checking each op may sit in a row kernel (its ``row_role``)."""
    per_row: set[str] = set()
    for n in ns:
        op = get_op(n.op)
        for o in n.outputs:
            shape = g.value(o).shape
            if op.kind is Kind.reduce:
                per_row.add(o)
            elif op.row_role is RowRole.per_row_view:
                src = g.value(n.inputs[0])
                if not (n.inputs[0] in per_row and src.numel == dom.rows
                        and g.value(o).numel == dom.rows):
                    raise FusionRefused(f"{n.id} ({n.op}) reshapes element data; only "
                                        "per-row results may be reshaped inside a "
                                        "reduction kernel")
                per_row.add(o)
            elif op.row_role is RowRole.never:
                raise FusionRefused(f"{n.id} ({n.op}) moves elements and cannot join a "
                                    "reduction kernel")
            elif not _broadcasts_to(shape, dom.domain):
                raise FusionRefused(f"{n.id} ({n.op}) output {list(shape)} does not broadcast "
                                    f"to the reduction domain {list(dom.domain)}")
            elif _is_per_row(shape, dom.domain, dom.axes):
                per_row.add(o)
        if op.row_role is RowRole.per_row_view:
            continue
        for i in n.inputs:
            if i not in per_row or _broadcasts_to(g.value(i).shape, dom.domain):
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
    return per_row


def _hybrid_bytes(g, v: str, dom: _RowDomain, threads: int, vector: int, steps: int) -> int:
    """Shared memory of a hybrid row copy: the tile's steps past the first ``steps``
    (those in registers), every thread's."""
    total = row_slots(dom.cols, threads, vector) // vector
    return (total - steps) * vector * threads * g.value(v).dtype.compute.itemsize


def _cache_bytes(g, v: str, dom: _RowDomain, rpb: int) -> int:
    """Shared memory keeping value v of a row (of each of a block's rows) takes."""
    return dom.cols * g.value(v).dtype.compute.itemsize * rpb


def _check_row_outputs(g, io, per_row, dom: _RowDomain) -> None:
    for o in io.outputs:
        shape = g.value(o).shape
        if o not in per_row and shape != dom.domain:
            raise FusionRefused(f"output {o} of shape {list(shape)} is neither one value per "
                                f"element nor one per row of {list(dom.domain)}")
        if o in per_row and g.value(o).numel != dom.rows:
            # a row kernel stores a per-row result once per row: out[row]
            raise FusionRefused(f"output {o} of shape {list(shape)} holds "
                                f"{g.value(o).numel} values, not one per row of the "
                                f"{dom.rows} rows of {list(dom.domain)}; compute it in a "
                                "kernel of its own")


def _row_storage(g, ns, reduces, io, per_row, dom: _RowDomain, mapping: Mapping, rpb: int,
                 threads: int, vector: int, device: Device, regional: set, local: set
                 ) -> tuple[tuple[str, ...], tuple[str, ...], str, int]:
    """Where the row's later passes find what an earlier pass read or made: (values in
    registers, values in shared memory, the hybrid input, its register steps), each in
    topological order (group inputs first). Only mappings that keep a row in one block
    keep anything.

    One backward sweep over the group (consumers before producers), so each value's
    set of passes is complete when it is decided: a full-row value that two or more
    passes need -- a group input, or a costly result (an exp, erf, tanh... in what it
    is computed from) -- is kept: in registers while the register budget lasts (each
    thread keeps its own columns, so each element is read from global memory once),
    else, if costly, in shared memory within the row-cache budget (AStitch's regional
    scheme). A kept value is needed upstream only by the pass that first computes it,
    so what it is computed from is not kept too. Inputs come first: when one that two
    passes read finds no register left, the latest result kept in registers gives its
    place up (recomputing is cheaper than reading the row again) and the sweep runs
    again. The user's ``regional`` values go to shared memory; their ``local`` ones
    are recomputed. Refused when a user's ``regional`` cannot be kept."""
    on_chip = mapping.info.on_chip
    if not on_chip or dom.cols == 0:      # (an empty row has nothing to keep)
        if regional and dom.cols:
            raise FusionRefused(f"regional {sorted(regional)[0]}: the {mapping.value} "
                                "mapping does not keep a row in one block, so there is no "
                                "block-shared memory to keep it in; use mapping block or "
                                "warp")
        return (), (), "", 0
    made = {o: n for n in ns for o in n.outputs}
    element = {o for o in made if o not in per_row}
    full_inputs = [i for i in io.inputs if g.value(i).shape == dom.domain
                   and not (i in g.constants and g.value(i).numel == 1)]
    costly = _costly(ns, element)
    slots, reg_budget = row_slots(dom.cols, threads, vector), register_budget(threads, device)
    no_registers: set[str] = set()
    input_budget, spill_budget = 0, input_cache_budget(device, threads)
    while True:
        registers, shared, shared_total, starved = _sweep(
            g, ns, reduces, io, per_row, dom, rpb, made, element, full_inputs, costly, slots,
            reg_budget, regional, local, no_registers, input_budget)
        results = [v for v in registers if v in made and v not in regional]
        if starved and results and not input_budget:
            no_registers.add(results[-1])
            continue
        if starved and not input_budget and spill_budget:
            # no register left for an input even with every result recomputed: keep
            # it in shared memory past the static limit (the results keep registers)
            input_budget, no_registers = spill_budget, set()
            continue
        break
    hybrid, steps = "", 0
    if starved and input_budget and mapping is Mapping.block:
        # a row neither holds alone (65536 float32: 64 slots a thread, 32 registers
        # left; 256 KB): the tile's first steps in the registers left, the rest in
        # shared memory -- the row still read from global memory once
        # (a shifted tile's two paths hold more registers: ptxas spilled 52-64 bytes a
        # thread at 65537 and 70001 columns with 8 steps in registers, 16 at 70001 with
        # 6, none with 5)
        total = slots // vector
        steps = min(total - 1, (reg_budget - slots * len(registers)) // vector
                    - (3 if row_shifted(dom.cols, vector) else 0))
        if steps > 0 and shared_total + _hybrid_bytes(g, starved, dom, threads, vector,
                                                      steps) <= input_budget:
            hybrid = starved
            shared = shared + [starved]
        else:
            steps = 0
    shared_used = sum(_cache_bytes(g, v, dom, rpb) for v in shared if v in made)
    if shared_used > ROW_CACHE_BUDGET:
        v = next(x for x in shared if x in regional)
        raise FusionRefused(f"regional {v}: shared memory {shared_used // 1024} KB > "
                            f"{ROW_CACHE_BUDGET // 1024} KB row-cache budget "
                            f"({dom.cols} columns x {rpb} rows x "
                            f"{g.value(v).dtype.compute.itemsize} B per cached value)")
    order = {o: i for i, n in enumerate(ns) for o in n.outputs}
    order.update({i: -len(full_inputs) + k for k, i in enumerate(full_inputs)})
    return (tuple(sorted(registers, key=order.__getitem__)),
            tuple(sorted(shared, key=order.__getitem__)), hybrid, steps)


def _sweep(g, ns, reduces, io, per_row, dom, rpb, made, element, full_inputs, costly, slots,
           reg_budget, regional, local, no_registers, input_budget=0):
    """One backward sweep of :func:`_row_storage`: (registers, shared, shared bytes,
    a full-row input two passes read that found no place on chip, or ""); an input
    finds one in shared memory within ``input_budget`` bytes (0: registers only)."""
    registers, shared = [], []
    shared_used = 0

    def keep(v: str, mask: int) -> bool:
        nonlocal shared_used
        if v in regional and v in element and g.value(v).shape == dom.domain:
            shared.append(v)
            shared_used += _cache_bytes(g, v, dom, rpb)
            return True
        if (v in local or bin(mask).count("1") < 2 or g.value(v).shape != dom.domain
                or not (v not in made or costly.get(v))):
            return False
        if v not in no_registers and slots * (len(registers) + 1) <= reg_budget:
            registers.append(v)
            return True
        if shared_used + _cache_bytes(g, v, dom, rpb) <= (
                ROW_CACHE_BUDGET if v in made else input_budget):
            shared.append(v)
            shared_used += _cache_bytes(g, v, dom, rpb)
            return True
        return False

    need = _pass_roots(reduces, element | set(full_inputs), io.outputs)
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            m = need.get(o, 0)
            mask |= (m & -m) if m and keep(o, m) else m   # kept: only its first pass
        if mask:
            for i in n.inputs:
                if i in need:
                    need[i] |= mask
    starved = ""
    for i in full_inputs:
        if not keep(i, need[i]) and bin(need[i]).count("1") >= 2 and i not in local:
            starved = starved or i
    # a kept result one cheap op away from kept (or per-row, or broadcast) values is
    # recomputed instead: LayerNorm's h - mean once h is kept
    for n in ns:
        for o in n.outputs:
            kept = registers if o in registers else shared if o in shared else None
            if (kept is not None and o not in regional
                    and get_op(n.op).flops < _EXPENSIVE_FLOPS
                    and all(i in registers or i in shared or i in per_row
                            or g.value(i).shape != dom.domain for i in n.inputs)):
                kept.remove(o)
                if kept is shared:
                    shared_used -= _cache_bytes(g, o, dom, rpb)
    return registers, shared, shared_used, starved


def input_cache_budget(device: Device, threads: int) -> int:
    """Shared memory a row kernel of ``threads`` per block may keep a group input's
    rows in when registers cannot hold them (a 50257-word vocabulary's logits): what
    the device lets a kernel opt in to past the static limit, less room for eight
    block-reduction slots, and no more than lets blocks of half the SM's threads be
    resident (a 1024-thread block may take 227 KB on an H100, a warp of 32 lanes 7 KB:
    a long row is a block's, not a warp's); 0 where there is no opt-in (a CPU plan:
    its kernels also render as CUDA within the portable static limit). The row is
    then read from global memory once, not once per pass (QuACK keeps it in shared
    memory too)."""
    if not device.is_gpu or device.shared_optin_limit <= device.shared_limit:
        return 0
    occupancy = 2 * threads * device.shared_per_unit // max(device.max_threads_per_unit, 1)
    return min(device.shared_optin_limit - 8 * REDUCE_SLOT_BYTES, occupancy)


def _costly(ns, element: set[str]) -> dict[str, bool]:
    """Whether each element value is costly to recompute: an op of OpDef.flops >=
    _EXPENSIVE_FLOPS in what it is computed from (flows forward, linear)."""
    costly: dict[str, bool] = {}
    for n in ns:
        here = get_op(n.op).flops >= _EXPENSIVE_FLOPS or any(
            costly.get(i, False) for i in n.inputs if i in element)
        for o in n.outputs:
            if o in element:
                costly[o] = here
    return costly


def _pass_roots(reduces, element: set[str], outputs) -> dict[str, int]:
    """The passes each value is read by directly: bit j for reduction j's input, the
    top bit for an output the final pass writes."""
    need: dict[str, int] = dict.fromkeys(element, 0)
    final = 1 << len(reduces)
    for j, r in enumerate(reduces):
        if r.inputs[0] in element:
            need[r.inputs[0]] |= 1 << j
    for o in outputs:
        if o in element:
            need[o] |= final
    return need


def pass_needs(ns, reduces, element: set[str], outputs, kept=frozenset()
               ) -> dict[str, int]:
    """Which passes over a row need each element value, as a bit mask: bit j for
    reduction j's pass, the top bit for the final pass that writes the outputs. Flows
    backward from each pass's roots, so it is linear in the group. A ``kept`` value
    (in registers or shared memory) needs what it is computed from only in the pass
    that first computes it."""
    need = _pass_roots(reduces, element, outputs)
    for n in reversed(ns):
        mask = 0
        for o in n.outputs:
            m = need.get(o, 0)
            mask |= (m & -m) if o in kept else m
        if mask:
            for i in n.inputs:
                if i in element:
                    need[i] |= mask
    return need


def analyze_stitched(g: Graph, nodes: tuple[str, ...], through_global: Iterable[str] = (),
                     regional: Iterable[str] = (), local: Iterable[str] = (),
                     *, device: Device) -> Schedule:
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
    # the phases share the static shared memory: none keeps an input row past it
    device = device.with_(shared_optin_per_block=0)
    for nid in nodes:
        n = g.node(nid)
        if get_op(n.op).kind is Kind.opaque:
            raise FusionRefused(f"{nid} ({n.op}) is a library call and cannot share a "
                                "kernel with other ops, stitched or not")
    made_by = {o: nid for nid in nodes for o in g.node(nid).outputs}
    pooled = next((nid for nid in nodes if g.node(nid).op == "window"
                   and g.node(nid).inputs[0] in made_by), None)
    if pooled and not device.is_gpu:
        # (Keras InceptionV3's ReLUs and concat, then an average pool's window and sum:
        # 2.9 ms stitched against 0.05 + 0.13 as two kernels)
        raise FusionRefused(f"{pooled} (window): on the CPU a pooling of a value made in "
                            "the kernel gathers each tap from the phase before it, 20x "
                            "slower than a kernel of its own reading it a plane at a time "
                            "(codegen/planes.py)")
    phases: list[list[str]] = []
    phase_of: dict[str, int] = {}

    def fits(members) -> bool:
        try:
            analyze(g, tuple(members), regional=regional & _outs(g, members),
                    local=local, device=device)
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
            analyze(g, (nid,), device=device)   # a single op that fits no template says why
            phases.append([nid])
            phase_of[nid] = len(phases) - 1
    # the phases' row caches share one block's shared memory, which keeps room for
    # eight block-reduction slots
    limit = device.shared_limit
    out, since_barrier, cache_left = [], set(), limit - 8 * REDUCE_SLOT_BYTES
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
        sched = analyze(g, tuple(members), regional=mine, local=local, device=device)
        if sched.row_cache_bytes > cache_left:
            # recompute this phase's values instead of keeping them (unless a user asked)
            if mine:
                need = limit - cache_left + sched.row_cache_bytes
                raise FusionRefused(
                    f"shared memory {need // 1024} KB > {limit // 1024} KB "
                    "limit: the phases' row caches do not fit together (regional "
                    f"{', '.join(sorted(mine))})")
            sched = analyze(g, tuple(members), local=local | set(sched.row_cached),
                            device=device)
        cache_left -= sched.row_cache_bytes
        out.append(Phase(tuple(members), sched, tuple(reads), tuple(sorted(after)),
                         barrier))
    stitched = Schedule(ScheduleKind.stitched, phases=tuple(out))
    if shared_bytes(stitched) > limit:
        raise FusionRefused(f"shared memory {shared_bytes(stitched) // 1024} KB > "
                            f"{limit // 1024} KB limit")
    return stitched


def _outs(g: Graph, members) -> set[str]:
    return {o for nid in members for o in g.node(nid).outputs}
