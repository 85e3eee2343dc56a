"""Whether chunking a sharded step's ReduceScatter / AllGather pair pays
(:func:`.chunk_pair.chunk_sharded`), as ``DistSession.auto`` decides it.

Each candidate program -- the unchunked pair, and the pair in k = 2, 4, 8 pieces -- is
priced by :func:`step_seconds`, one rank's step in program order:

* a compute segment costs what the fusion cost model predicts for the plan the rank's
  planner makes of it on the device (bytes, arithmetic at the device's rates, launches;
  a slice fused into its consumer reads only its piece). So the pieces' cuts and joins
  are priced as the copies they are: cutting the ReduceScatter's input and joining the
  moments and the gathered parameter move about as many bytes as the sharded update
  itself reads and writes;
* a collective starts when the program posts it, but the link carries one collective
  at a time, in the order they were posted (k pieces' ReduceScatters posted together
  arrive one after another), each for ``link.time`` (the alpha-beta model: every piece
  pays the latency again);
* a wait blocks until its collective is done; compute between a start and its wait is
  overlap -- unless the link shares the rank's cores (:func:`.overlap.overlaps`, the
  rule every overlap decision of ``auto`` takes: loopback, whose bytes the CPU copies),
  where nothing overlaps and the step is the sum of its parts.

So chunking pays where the link is slow against the compute and runs beside it (a
network between machines): the cuts run while earlier pieces' ReduceScatters move,
each piece's kernel while the next arrives, the moments' joins while the AllGathers
move; it costs k-1 more latencies per collective and the copies that are left
unhidden. Where the link shares the cores it never pays (the copies and latencies are
added, nothing is hidden), and where the step is compute-bound the copies cost more
than the communication hidden. A candidate not applied is listed with both times. A
compute segment fused into a collective's arrival (:mod:`.received`) runs on each
piece as it lands, priced by the same rule (:func:`.overlap.pipelined`) as ``auto``'s
decision to fuse it (chunking is considered before that fusion, and refuses a fused
wait).
"""
from __future__ import annotations

import math
from typing import Callable

from ..errors import FusionRefused
from ..ir.graph import Graph
from ..ops.collective import COLLECTIVES, WAIT
from .chunk_pair import chunk_sharded
from .local import Comm, local_steps
from .received import arriving_pieces
from .overlap import no_overlap, overlaps, pipelined
from .program import DistProgram

PIECES = (2, 4, 8)


def wire_bytes(d: DistProgram, node) -> int:
    """The bytes per rank ``link.time`` prices collective ``node`` at (an AllGather's:
    the gathered tensor, as :meth:`DistSession.predict` counts it)."""
    v = node.inputs[0]
    n = math.prod(d.local_shape(v)) * d.graph.value(v).dtype.itemsize
    return n * d.ranks if node.op == "all_gather" else n


def step_seconds(d: DistProgram, link, seconds_of: Callable[[Graph], float]) -> float:
    """One rank's modelled step (see the module doc); ``seconds_of(graph)``: a compute
    segment's predicted seconds."""
    if not overlaps(link):      # (one resource: every part in turn)
        return sum(seconds_of(s.graph) if not isinstance(s, Comm) else
                   link.time(s.node.op, wire_bytes(d, s.node), d.ranks)
                   if s.node.op in COLLECTIVES else 0.0 for s in local_steps(d))
    steps = local_steps(d)
    fused = {s.on_arrival: s for s in steps if getattr(s, "on_arrival", "")}
    now = link_free = 0.0
    done: dict[str, tuple[float, float]] = {}
    for s in steps:
        if isinstance(s, Comm):
            n = s.node
            if n.op in COLLECTIVES:
                t = link.time(n.op, wire_bytes(d, n), d.ranks)
                link_free = max(now, link_free) + t
                done[n.outputs[0]] = (link_free, t)
            elif n.op == WAIT:
                end, t = done.pop(n.inputs[0], (now, 0.0))
                seg = fused.get(n.outputs[0])
                if seg is None:
                    now = max(now, end)
                else:   # (its kernels on each piece as it lands: the one overlap rule)
                    k, c = arriving_pieces(d, seg), seconds_of(seg.graph)
                    now = max(now + c, end - t + pipelined(link, t / k, c / k, k))
        elif not getattr(s, "on_arrival", ""):
            now += seconds_of(s.graph)
    return now


def segment_pricer(planner: str, device) -> Callable[[Graph], float]:
    """``seconds_of`` for :func:`step_seconds`: the cost model's prediction of
    ``planner``'s plan of a segment on ``device``, kept per segment structure (a
    chunked program's pieces are one segment k times, under other value names)."""
    from ..fusion import run_planner
    from ..fusion.cost import CostModel
    model = CostModel.for_device(device)
    seen: dict = {}

    def seconds_of(g: Graph) -> float:
        key = (tuple((n.op, repr(n.attrs), tuple(g.value(i).shape for i in n.inputs))
                     for n in g.nodes),
               tuple(g.value(v).shape for v in (*g.inputs, *g.outputs)))
        if key not in seen:
            plan, _ = run_planner(planner, g, model=model)
            seen[key] = model.plan_seconds(plan)
        return seen[key]
    return seconds_of


def best_chunking(d: DistProgram, rs, link, seconds_of, ks=PIECES
                  ) -> tuple[DistProgram, list[str]]:
    """ReduceScatter ``rs`` (a node of ``d``) and its sharded work in the k pieces
    modelled fastest, where faster than unchunked; every other k listed with its
    reason (refused, or both modelled times)."""
    what = f"chunk {rs.name} (reduce_scatter) with the sharded work and its AllGathers"
    whole = step_seconds(d, link, seconds_of)
    tried, notes = [], []
    for k in ks:
        try:
            c = chunk_sharded(d, rs.id, k)
        except FusionRefused as e:
            notes.append(f"not applied: {what} into {k} pieces: {e}")
            continue
        tried.append((step_seconds(c, link, seconds_of), k, c))
    faster = sorted((x for x in tried if x[0] < whole), key=lambda x: (x[0], x[1]))
    for t, k, _ in tried:
        if faster and k == faster[0][1]:
            continue
        why = (f"{faster[0][1]} pieces are modelled faster ({faster[0][0] * 1e3:.3g} ms)"
               if t < whole else "the model says slower (" + (
                   no_overlap(link) + ", and the cuts, joins and k-1 more latencies "
                   "per collective are added" if not overlaps(link) else
                   "the cuts and joins copy more than the overlap hides, and each piece "
                   "pays the link's latency again") + ")")
        notes.append(f"not applied: {what} into {k} pieces: {why} ({whole * 1e3:.3g} ms "
                     f"-> {t * 1e3:.3g} ms per step)")
    if not faster:
        return d, notes
    t, k, c = faster[0]
    return c, [f"applied: {what} into {k} pieces (model: {whole * 1e3:.3g} ms -> "
               f"{t * 1e3:.3g} ms per step: piece i's kernel while piece i+1's "
               "ReduceScatter and piece i-1's AllGather are on the link)"] + notes
