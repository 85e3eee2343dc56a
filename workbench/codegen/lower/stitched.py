"""The stitched template: a group's phases, each lowered by its own template
(elementwise or row reduction), in one kernel, a grid barrier where a phase reads what
an earlier one wrote (FusionStitching's *global* scheme)."""
from __future__ import annotations

from dataclasses import replace

from ...device import Device
from ...fusion.geometry import geometry
from ...fusion.mapping import ScheduleKind
from ...fusion.plan import Group
from ...fusion.schedule import group_io
from ...fusion.spills import stitched_globals
from ...ir import Graph
from ..kernel import Kernel
from ..kir import Buffer, Comment, GridSync
from .base import group_buffers, identifier, inlined, launch_of, make_kernel, widen
from .elementwise import ElementwiseLowerer
from .rows import RowLowerer

# the template each kind of phase is lowered by
PHASE_LOWERERS = {ScheduleKind.elementwise: ElementwiseLowerer,
                  ScheduleKind.row_reduce: RowLowerer}


def lower_stitched(g: Graph, group: Group, device: Device, name: str) -> Kernel:
    """A stitched group: each phase lowered by its own template into one kernel, a
    grid barrier where a phase reads what a phase since the last barrier wrote.

    Values passed between phases live in workspace buffers (global memory, kept in
    the compute type) unless they are group outputs anyway. One block size serves all
    phases (the largest any wants; every loop strides, so more threads only idle)."""
    s = group.schedule
    io = group_io(g, group.nodes)
    buffers = group_buffers(g, io, lambda v: inlined(g, s, v), group)
    spilled, reread = stitched_globals(s, io.outputs)    # (as the cost model counts)
    for v in spilled:
        if v not in buffers:
            val = g.value(v)
            buffers[v] = Buffer(f"ws{len([b for b in buffers.values() if b.workspace])}", v,
                                val.dtype.compute, val.numel, True, True)
    body, scratch, counter, flops, wide = [], [], 0, 0, False
    for k, p in enumerate(s.phases):
        lower = PHASE_LOWERERS[p.schedule.kind]
        lw = lower(g, Group(f"{group.id}p{k}", p.nodes, p.schedule), device, buffers,
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
    kernel = make_kernel(name, group.id, s.describe(), buffers, widen(body, wide),
                         launch_of(geo, s), flops,
                         tuple(scratch), len(s.phases), s.grid_barriers, geo.reduce_slots)
    return replace(kernel, reread=sum(g.value(v).nbytes for v in reread))
