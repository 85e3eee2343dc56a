"""A stitched kernel's phases (AStitch): a group no single template fits, cut into
phases in topological order, each one template, a grid barrier before each phase that
reads what a phase since the last barrier made; the phases' row caches share one
block's shared memory.

    >>> analyze_stitched(g, ("n0", "n1"), device=H100).phases[1].barrier   # doctest: +SKIP
    True
"""
from __future__ import annotations

from typing import Iterable

from ..device import Device
from ..errors import FusionRefused
from ..ir import Graph
from ..ops import Kind, get_op
from .geometry import REDUCE_SLOT_BYTES, shared_bytes
from .mapping import ScheduleKind
from .memo import AnalysisMemo
from .schedule import Phase, Schedule


def analyze_stitched(g: Graph, nodes: tuple[str, ...], through_global: Iterable[str] = (),
                     regional: Iterable[str] = (), local: Iterable[str] = (),
                     *, device: Device, memo: AnalysisMemo | None = None) -> Schedule:
    """A stitched schedule: the nodes (topological order) split into phases, each one
    template, or FusionRefused.

    Greedy in topological order: a node joins the first phase, at or after the latest
    phase it reads from, whose template still fits with it (a later unrelated phase is
    *independent* packing); else it opens a new phase. A value in ``through_global``
    (a user's ``global`` scheme) forces its readers into a later phase than its maker.
    A barrier precedes a phase that reads from a phase since the previous barrier.

    ``memo`` remembers the analyses of phases across calls on one graph (the stitch
    planner's search cuts many groups sharing their first phases); without one, the
    analyses are remembered for this call only.

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
    memo = memo if memo is not None else AnalysisMemo()
    phases: list[list[str]] = []
    phase_of: dict[str, int] = {}

    def fits(members) -> bool:
        try:
            # (regional is a user's choice, mostly none: its outputs then go unasked)
            memo.analyze(g, tuple(members),
                         regional=regional & _outs(g, members) if regional else (),
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
            memo.analyze(g, (nid,), device=device)  # a single op fitting no template says why
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
        sched = memo.analyze(g, tuple(members), regional=mine, local=local, device=device)
        if sched.row_cache_bytes > cache_left:
            # recompute this phase's values instead of keeping them (unless a user asked)
            if mine:
                need = limit - cache_left + sched.row_cache_bytes
                raise FusionRefused(
                    f"shared memory {need // 1024} KB > {limit // 1024} KB "
                    "limit: the phases' row caches do not fit together (regional "
                    f"{', '.join(sorted(mine))})")
            sched = memo.analyze(g, tuple(members), local=local | set(sched.row_cached),
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
