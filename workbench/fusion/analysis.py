"""Which schedule a group of nodes gets on a device, or why none fits (legality).

:func:`analyze` fits one template (:mod:`.schedule` describes them) to a group: a
library op alone, a GEMM with its epilogue (:mod:`.gemm`), a row reduction with its
neighbours (:mod:`.rows`), or elementwise ops; :func:`.phases.analyze_stitched` cuts a
group no single template fits into phases (AStitch). Analysis is made for a device:
its SM (or core) count sizes the mapping rule's choices (rows per block, split count;
:mod:`.geometry`), and a schedule needing more than the device gives a block (shared
memory, threads) is refused with the numbers. It lives in fusion (not codegen) because
legality needs it; codegen lowers its result.

Example::

    >>> analyze(g, ("n0", "n1", "n2"), device=H100).kind      # doctest: +SKIP
    <ScheduleKind.row_reduce: 'row_reduce'>
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..device import Device
from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op
from ..ops.conv import CONVS
from .gemm.analyze import analyze_gemm
from .geometry import flat_vector, geometry, shared_bytes
from .mapping import Mapping, ScheduleKind
from .rows import analyze_rows, launch_param
from .schedule import Schedule, group_io

INDEX_LIMIT = 2**62      # kernels index in 64 bits where offsets pass 2^31 - 1


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
            sched = analyze_rows(g, ns, reduces, io, forced, auto, set(regional),
                                 set(local), device, launch)
            check_resources(sched, device)
            return sched
        n = max((g.value(o).numel for o in io.outputs), default=1)
        # (the widest element of what the loop over n moves at its own index)
        itemsize = max((g.value(v).dtype.itemsize for v in (*io.inputs, *io.outputs)
                        if g.value(v).numel == n), default=4)
        sched = Schedule(ScheduleKind.elementwise, elements=n,
                         threads=launch_param(launch, "threads", 0, "an elementwise",
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
