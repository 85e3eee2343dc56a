"""A session over a distributed program: its transformations as undoable steps, the
planner that considers them, counted bytes per rank, and runs on p gloo ranks.

``Session(graph, ranks=p)`` makes one (workbench/session.py delegates here)::

    s = Session("sample_graphs/distributed/dp_adamw.json", ranks=2)
    s.split_all_reduce("n0"); s.shard_after("n2", keep_sharded=["m_out", "v_out"])
    s.counted()            # bytes each rank's compute reads and writes, bytes it sends
    s.run().errors         # 2 processes, gathered, against the NumPy reference
    s.undo(); s.auto("stitch"); s.step.decisions
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FusionRefused, WorkbenchError
from ..history import History
from ..ir.graph import Graph
from ..ops.collective import COLLECTIVES
from .cost import Link, PerOpLink
from .links import DEFAULT_LINK, PRESETS
from .local import Comm, local_steps
from .program import DistProgram, is_distributed_file, load_json
from .runner import RankRun, run_ranks, sent_bytes
from .bucket import bucket_all_reduces
from .chunk import chunk_all_reduce, matmul_of
from .chunk_pair import chunk_sharded
from .overlap import no_overlap, overlaps, pipelined
from .received import FUSABLE, arriving_pieces, fuse_received
from .transforms import shard_after, split_all_reduce

@dataclass(frozen=True)
class DistStep:
    """One entry of the history: the action, the program it made, and the planner's
    decisions (each candidate and what was done with it, with the reason)."""
    action: str
    program: DistProgram
    decisions: tuple[str, ...] = field(default=())


def load_program(graph, ranks: int) -> DistProgram:
    if isinstance(graph, DistProgram):
        d = graph
    elif isinstance(graph, (str, Path)) and is_distributed_file(graph):
        d = load_json(graph)
    else:   # a plain graph: every value replicated (each rank computes all of it)
        from ..frontends import load
        g = graph if isinstance(graph, Graph) else load(graph)
        d = DistProgram(g, ranks)
    return d if d.ranks == ranks else d.with_ranks(ranks)


class DistSession:
    """One distributed program on ``ranks`` ranks and its history; each rank's compute
    planned with ``planner`` (the per-rank segments' planner) when run."""

    def __init__(self, graph, ranks: int = 2, backend: str = "auto", seed: int = 0,
                 planner: str = "stitch", link: Link | PerOpLink | str = DEFAULT_LINK,
                 timeout: float = 120.0, device=None, **unsupported):
        from .nccl import NAMES, refusal
        if backend not in ("auto", "cpu", *NAMES):
            raise WorkbenchError(f"backend {backend!r:.30} with ranks: ranks run the cpu "
                                 "backend's kernels under gloo, or the cupy backend's "
                                 "under NCCL; pass backend='cpu' or 'cupy'")
        if backend in NAMES and (why := refusal(ranks)):    # (at once: before any step)
            raise WorkbenchError(why)
        self.backend = "cupy" if backend in NAMES else "cpu"
        if unsupported:
            raise WorkbenchError(f"{', '.join(sorted(unsupported))} is not supported with "
                                 "ranks (a session over p ranks takes backend, seed, "
                                 "planner, link, timeout, device)")
        self.ranks, self.seed, self.planner, self.timeout = ranks, seed, planner, timeout
        if isinstance(link, str) and link not in PRESETS:
            raise WorkbenchError(f"unknown link {link!r:.30}; choose {', '.join(PRESETS)} "
                                 "or pass a cost.Link")
        self.link = PRESETS[link] if isinstance(link, str) else link
        self._device = device   # (the model's device; None: this CPU, measured)
        self._history = History(DistStep("load", load_program(graph, ranks).verify()))
        self._runs: dict = {}

    # -- state -----------------------------------------------------------------
    @property
    def device(self):
        """The device each rank's compute is priced on by ``predict`` and ``auto``: the
        one given, else this machine's CPU as measured (``cpu_device``)."""
        if self._device is None:
            from ..runtime.calibrate import cpu_device
            return cpu_device()
        return self._device

    @property
    def program(self) -> DistProgram:
        return self._history.current.program

    @property
    def graph(self) -> Graph:
        return self.program.graph

    @property
    def step(self) -> DistStep:
        return self._history.current

    @property
    def history(self) -> list[DistStep]:
        return list(self._history.steps)

    def __str__(self) -> str:
        return str(self.program)

    def _push(self, action: str, d: DistProgram, decisions=()) -> DistProgram:
        self._history.push(DistStep(action, d, tuple(decisions)))
        return d

    def undo(self) -> DistProgram:
        self._history.undo()
        return self.program

    def redo(self) -> DistProgram:
        self._history.redo()
        return self.program

    # -- transformations -------------------------------------------------------
    def split_all_reduce(self, ref: str, dim: int = 0) -> DistProgram:
        """AllReduce -> ReduceScatter(dim) + AllGather, as a step (FusionRefused with
        the reason, the session unchanged, where it cannot be)."""
        return self._push(f"split_all_reduce {ref} dim {dim}",
                          split_all_reduce(self.program, ref, dim))

    def shard_after(self, ref: str, keep_sharded=()) -> DistProgram:
        """Move the work after all_gather ``ref`` onto the shard, as a step; its
        decisions say what moved and what stayed, with the reason."""
        d, mv = shard_after(self.program, ref, keep_sharded)
        notes = [f"moved onto the shard: {', '.join(mv.nodes)}",
                 f"read as shards: {', '.join(mv.leaves) or 'none'}",
                 f"gathered after: {', '.join(mv.gathered) or 'none'}"]
        notes += [f"not moved: {a}: {why}" for a, why in mv.left]
        return self._push(f"shard_after {ref}", d, notes)

    def chunk_all_reduce(self, ref: str, k: int = 2) -> DistProgram:
        """The matmul feeding AllReduce ``ref`` and the AllReduce as ``k`` pipelined
        pieces (overlap), as a step (FusionRefused with the reason where it cannot be)."""
        return self._push(f"chunk_all_reduce {ref} k {k}",
                          chunk_all_reduce(self.program, ref, k))

    def bucket_all_reduces(self, refs=None) -> DistProgram:
        """AllReduces ``refs`` (default: all) as one AllReduce over a flat buffer, as a
        step (FusionRefused with the reason where they cannot share one message)."""
        return self._push(f"bucket_all_reduces {', '.join(refs) if refs else 'all'}",
                          bucket_all_reduces(self.program, refs))

    def fuse_received(self, ref: str, segment: int | None = None) -> DistProgram:
        """The elementwise work after ReduceScatter/AllGather/all_to_all_single ``ref``'s
        wait fused into it, run per ``segment`` elements (default: the ring's message,
        whole rows) as they arrive,
        as a step (:mod:`.received`; FusionRefused with the reason where nothing can)."""
        d, names, left = fuse_received(self.program, ref, segment)
        return self._push(f"fuse_received {ref}", d,
                          [f"fused into {ref}'s arrival: {', '.join(names)}"] +
                          [f"not fused: {a}: {why}" for a, why in left])

    def chunk_sharded(self, ref: str, k: int = 2, dim: int | None = None) -> DistProgram:
        """ReduceScatter ``ref``, the sharded work after it and its AllGathers as ``k``
        pipelined pieces cut along ``dim`` (:mod:`.chunk_pair`), as a step
        (FusionRefused with the reason where it cannot be)."""
        return self._push(f"chunk_sharded {ref} k {k}", chunk_sharded(self.program, ref, k,
                                                                      dim))

    def auto(self, planner: str = "stitch", keep_sharded=()) -> DistProgram:
        """Consider, for every AllReduce, splitting it along each dim and moving the
        work after it onto the shard; apply the first candidate the alpha-beta model and
        the counted bytes say is faster, and list every candidate not applied with the
        reason. Then chunking each AllReduce with its matmul, bucketing, chunking each
        sharded step (:mod:`.chunk_price`) and fusing into received tensors, each where
        the model says faster, else listed. ``planner`` plans each rank's compute
        segments when the program runs."""
        from ..fusion.planners import PLANNERS
        if planner not in PLANNERS:
            raise WorkbenchError(f"unknown planner {planner!r:.40}; choose "
                                 f"{', '.join(PLANNERS)}")
        self.planner = planner
        d, notes = self.program, []
        if d.ranks == 1:
            notes.append("one rank: no collective moves anything, nothing to transform")
        # (by the reduced value: a split renumbers the nodes' ids and names after it,
        # so the next AllReduce is looked up in the program the last decision left)
        for v in [m.outputs[0] for m in d.graph.nodes if m.op == "all_reduce"]:
            n = next((m for m in d.graph.nodes if m.op == "all_reduce"
                      and m.outputs[0] == v), None)
            if n is None:
                notes.append(f"not applied: split the AllReduce of {v}: an earlier split "
                             "moved it (it is no longer an AllReduce of the program)")
                continue
            d, note = self._best_split(d, n, keep_sharded)
            notes += note
        for n in [m for m in d.graph.nodes if m.op == "all_reduce"]:
            d, note = self._best_chunks(d, n)
            notes += note
        d, note = self._bucket(d)
        notes += note
        d, note = self._chunk_sharded(d)
        notes += note
        d, note = self._fuse_received(d)
        return self._push(f"auto {planner}", d, notes + note)

    def _chunk_sharded(self, d: DistProgram) -> tuple[DistProgram, list[str]]:
        """Each ReduceScatter's sharded step in k pipelined pieces where the model
        (:mod:`.chunk_price`) says it pays, else listed with both times."""
        from .chunk_price import best_chunking
        names = [n.name for n in d.graph.nodes if n.op == "reduce_scatter"]
        if not names or d.ranks == 1:
            return d, ["not applied: pipelining a sharded step (chunk_sharded): " + (
                "one rank: no collective moves anything" if names else
                "no ReduceScatter here (split an AllReduce first)")]
        price, notes = self._compute_pricer(), []
        for name in names:
            rs = next(n for n in d.graph.nodes if n.name == name)
            d, note = best_chunking(d, rs, self.link, price)
            notes += note
        return d, notes

    def _compute_pricer(self):
        """A compute segment's seconds, as every decision of ``auto`` prices compute:
        the fusion cost model's prediction of the planner's plan of it on the device
        (:func:`.chunk_price.segment_pricer`)."""
        from .chunk_price import segment_pricer
        return segment_pricer(self.planner, self.device)

    def _fuse_received(self, d: DistProgram) -> tuple[DistProgram, list[str]]:
        """For each ReduceScatter/AllGather/all_to_all_single, its consumer's kernels
        run per arriving piece, where the model (:mod:`.overlap`) says the overlap
        gains: beside the cores the step then pays the collective plus one piece's
        compute, not the collective plus all of it; on a link sharing them, nothing."""
        starts = [n for n in d.graph.nodes if n.op in FUSABLE]
        if not starts:
            return d, ["not applied: fuse compute into a received tensor: no "
                       "ReduceScatter or AllGather here (an AllReduce's result arrives "
                       "whole: split it first)"]
        notes, price = [], self._compute_pricer()
        for n in starts:
            what = f"fuse the compute after {n.name} ({n.op}) into its arrival"
            try:
                f, names, _ = fuse_received(d, n.id)
            except FusionRefused as e:
                notes.append(f"not applied: {what}: {e}")
                continue
            recv = next(m.outputs[0] for m in f.graph.nodes if m.op == "wait_tensor"
                        and m.inputs[0] == n.outputs[0])
            seg = next(s for s in local_steps(f) if getattr(s, "on_arrival", "") == recv)
            size = _nbytes(f, recv) // f.graph.value(recv).dtype.itemsize
            k = arriving_pieces(f, seg)
            if k < 2:
                notes.append(f"not applied: {what}: its result is one segment ({size} "
                             f"elements <= {seg.fuse_segment}): nothing arrives while it "
                             "computes")
                continue
            comp = price(seg.graph)     # (as chunk_price prices it: one rule for compute)
            comm = self.link.time(n.op, _nbytes(d, n.inputs[0]) * (
                d.ranks if n.op == "all_gather" else 1), d.ranks)
            # (k pieces: piece i arrives while piece i-1's kernel runs -- where it can)
            after = pipelined(self.link, comm / k, comp / k, k)
            times = f"{(comm + comp) * 1e3:.3g} ms -> {after * 1e3:.3g} ms, {k} segments"
            if not after < comm + comp:
                notes.append(f"not applied: {what}: the model says no faster ("
                             f"{no_overlap(self.link) if not overlaps(self.link) else 'no gain'}"
                             f"; {times})")
                continue
            d = f
            notes.append(f"applied: {what}: {', '.join(names)} (model: {times})")
        return d, notes

    def _bucket(self, d: DistProgram) -> tuple[DistProgram, list[str]]:
        """The AllReduces left, one bucket per reduction, where the model says one
        message plus the copies in and out beats the separate messages."""
        by: dict[str, list] = {}
        for n in d.graph.nodes:
            if n.op == "all_reduce":
                by.setdefault(n.attr("reduce_op", "sum"), []).append(n)
        notes = []
        for op, ars in by.items():
            if d.ranks == 1 or len(ars) < 2:
                continue
            what = f"bucket {', '.join(n.name for n in ars)} (all_reduce {op})"
            nb = [_nbytes(d, n.inputs[0]) for n in ars]
            apart = sum(self.link.time("all_reduce", b, d.ranks) for b in nb)
            # (each byte copied into the buffer and out again: read and written twice)
            one = self.link.time("all_reduce", sum(nb), d.ranks) + \
                4 * sum(nb) / self.device.dram_bandwidth
            try:
                b = bucket_all_reduces(d, [n.id for n in ars], f"bucket.{op}")
            except FusionRefused as e:
                notes.append(f"not applied: {what}: {e}")
                continue
            if one < apart:
                d = b
                notes.append(f"applied: {what} into one message (model: "
                             f"{apart * 1e3:.3g} ms -> {one * 1e3:.3g} ms)")
            else:
                notes.append(f"not applied: {what}: the model says slower ("
                             f"{apart * 1e3:.3g} ms -> {one * 1e3:.3g} ms: the copies in "
                             "and out cost more than the messages saved)")
        if d.ranks > 1 and all(len(ars) < 2 for ars in by.values()):
            left = sum(len(ars) for ars in by.values())
            notes.append(f"not applied: bucket AllReduces: {left} AllReduce"
                         f"{'' if left == 1 else 's'} left, no two of one reduction: "
                         "nothing to join into one message")
        return d, notes

    def _best_split(self, d: DistProgram, n, keep) -> tuple[DistProgram, list[str]]:
        notes = []
        if d.ranks == 1:
            return d, notes
        before = self.predict(d)
        for dim in range(len(d.graph.value(n.inputs[0]).shape)):
            what = f"split {n.name} (all_reduce) along dim {dim} + shard the work after it"
            try:
                s = split_all_reduce(d, n.id, dim)
                ag = next(m for m in s.graph.nodes if m.name == f"{n.name}.ag")
                t, mv = shard_after(s, ag.id, keep)
            except FusionRefused as e:
                notes.append(f"not applied: {what}: {e}")
                continue
            after = self.predict(t)
            if after["total_s"] < before["total_s"]:
                notes.append(f"applied: {what} (model: {before['total_s'] * 1e3:.3g} ms -> "
                             f"{after['total_s'] * 1e3:.3g} ms per step; moved "
                             f"{len(mv.nodes)} nodes)")
                notes += [f"  not moved: {a}: {why}" for a, why in mv.left]
                return t, notes
            notes.append(f"not applied: {what}: the model says slower "
                         f"({before['total_s'] * 1e3:.3g} ms -> {after['total_s'] * 1e3:.3g}"
                         f" ms: it gathers {len(mv.gathered)} results)")
            notes += [f"  not moved: {a}: {why}" for a, why in mv.left]
        return d, notes

    def _best_chunks(self, d: DistProgram, n, ks=(2, 4, 8)) -> tuple[DistProgram, list[str]]:
        """Chunking AllReduce ``n`` with its matmul into k pieces, for each k: the one the
        overlap model says fastest if faster than unchunked, every other listed."""
        import math

        if d.ranks == 1:
            return d, []
        mm = matmul_of(d, n)
        what = f"chunk {n.name} (all_reduce) with its matmul"
        if mm is None:
            return d, [f"not applied: {what}: it reduces no matmul's result"]
        a, b = (d.local_shape(v) for v in mm.inputs)
        mm_s = 2 * math.prod(d.local_shape(mm.outputs[0])) * a[-1] / self.device.peak_flops
        nbytes = _nbytes(d, n.inputs[0])
        whole = mm_s + self.link.time("all_reduce", nbytes, d.ranks)
        best, notes = None, []
        for k in ks:
            try:
                c = chunk_all_reduce(d, n.id, k)
            except FusionRefused as e:
                notes.append(f"not applied: {what} into {k} pieces: {e}")
                continue
            t = pipelined(self.link, mm_s / k, self.link.time("all_reduce", nbytes / k,
                                                              d.ranks), k)
            if t < whole and (best is None or t < best[0]):
                if best is not None:
                    notes.append(f"not applied: {what} into {best[1]} pieces: {k} pieces "
                                 "are modelled faster")
                best = (t, k, c)
            else:
                why = no_overlap(self.link) + ", and" if not overlaps(self.link) else ""
                notes.append(f"not applied: {what} into {k} pieces: the model says "
                             f"{'slower' if t >= whole else 'slower than fewer pieces'} "
                             f"({whole * 1e3:.3g} ms -> {t * 1e3:.3g} ms: {why} each piece "
                             "pays the link's latency again)")
        if best is None:
            return d, notes
        t, k, c = best
        return c, [f"applied: {what} into {k} pieces (model: {whole * 1e3:.3g} ms -> "
                   f"{t * 1e3:.3g} ms: piece i's AllReduce in flight during piece i+1's "
                   "matmul)"] + notes

    # -- counting and the model ------------------------------------------------
    def counted(self, d: DistProgram | None = None) -> dict:
        """Per rank: the bytes its compute segments read and write (each segment's
        inputs and outputs, local shapes: what one fused kernel per segment moves) and
        the bytes its collectives send (the ring algorithms)."""
        d = d or self.program
        comp = sent = 0
        for s in local_steps(d):
            if isinstance(s, Comm):
                if s.node.op in COLLECTIVES:
                    v = s.node.inputs[0]
                    sent += sent_bytes(s.node, _nbytes(d, v), d.ranks)
            else:
                g = s.graph
                comp += sum(g.value(v).nbytes for v in (*g.inputs, *g.outputs))
        return {"compute_bytes": comp, "sent_bytes": sent}

    def predict(self, d: DistProgram | None = None) -> dict:
        """The modelled step per rank: compute at the CPU's DRAM bandwidth over the
        counted bytes, each collective by the alpha-beta link (ring), not overlapped."""
        d = d or self.program
        comp = self.counted(d)["compute_bytes"] / self.device.dram_bandwidth
        comm = sum(self.link.time(s.node.op, _nbytes(d, s.node.inputs[0]) * d.ranks
                                  if s.node.op == "all_gather" else
                                  _nbytes(d, s.node.inputs[0]), d.ranks)
                   for s in local_steps(d) if isinstance(s, Comm)
                   and s.node.op in COLLECTIVES)
        return {"compute_s": comp, "comm_s": comm, "total_s": comp + comm}

    def calibrate_link(self, ops=None, sizes=None, reps: int = 5, pause: float = 0.2):
        """Measure this machine's gloo on the session's ranks and price every later
        decision with the fit: each collective's form, alpha and beta per message-size
        regime (:func:`.calibrate.calibrate`); returns the link."""
        from .calibrate import OPS, SIZES, calibrate
        self.link = calibrate(self.ranks, ops or OPS, sizes or SIZES, reps, pause)
        return self.link

    # -- running ---------------------------------------------------------------
    def run(self, repeats: int = 1, timeout: float | None = None) -> RankRun:
        """Run the current program on ``ranks`` gloo processes (each rank's segments
        planned with ``planner``), outputs gathered and checked against the reference."""
        return run_ranks(self.program, seed=self.seed, planner=self.planner,
                         repeats=repeats, timeout=timeout or self.timeout,
                         backend=self.backend)


def _nbytes(d: DistProgram, v: str) -> int:
    import math
    return math.prod(d.local_shape(v)) * d.graph.value(v).dtype.itemsize
