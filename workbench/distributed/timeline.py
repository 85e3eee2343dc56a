"""One step's timeline per rank: compute, communication and overlap as bars.

Three sources, each labelled on its rows:

- **measured** (:func:`measured_bars`): from a run on gloo ranks, each rank's
  ``RankTimes.spans`` (``runner.py``), seconds from the step's start::

      Span(kind="compute", name="tp_mlp.seg0", start_s=0.0, end_s=0.0021)
      Span(kind="call", name="n8.c0", start_s=0.0021, end_s=0.0023)   # in the start
      Span(kind="comm", name="n8.c0", start_s=0.0021, end_s=0.0052)   # in flight
      Span(kind="wait", name="n8.c0", start_s=0.0049, end_s=0.0052)   # blocked

- **model** (:func:`modelled_bars`): the same steps priced as ``DistSession.predict``
  prices them -- a compute segment's counted bytes at the CPU's DRAM bandwidth, a
  collective by the alpha-beta link -- on the program's own rank count;
- **simulated** (:func:`simulated_bars`): the model on 8-1024 ranks (the program
  with that many ranks), never a measurement. Every rank of a modelled program runs the
  same steps on equal shards, so one row stands for all its ranks.

Kinds: ``communication`` is time a rank spends inside a collective's start or its wait
(not hidden); ``overlap`` is compute while a collective started earlier is still in
flight (its start returned, its wait not yet reached: communication hidden behind
it); ``compute`` is the rest of the compute.

Example::

    >>> run = session.run()                                        # doctest: +SKIP
    >>> bars = measured_bars(session.program, run) + modelled_bars(session.program,
    ...                                                            session.link)  # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import GraphError
from ..ops.collective import COLLECTIVES
from .local import Comm, local_steps
from .program import DistProgram

@dataclass(frozen=True)
class Span:
    """One interval of a rank's step: ``kind`` "compute" (a segment's kernels), "comm"
    (a collective in flight) or "wait" (the rank blocked waiting for one)."""
    kind: str
    name: str
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


def overlap(spans) -> float:
    """Seconds of compute during which at least one collective was in flight: the
    communication hidden behind compute."""
    comm = sorted((s.start_s, s.end_s) for s in spans if s.kind == "comm")
    merged: list[list[float]] = []
    for a, b in comm:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return sum(max(0.0, min(b, s.end_s) - max(a, s.start_s))
               for s in spans if s.kind == "compute" for a, b in merged)


KINDS = ("compute", "communication", "overlap")
SIMULATED_RANKS = (8, 64, 1024)


@dataclass(frozen=True)
class Bar:
    """One piece of one row's step: ``row`` ("rank 0", "model: 2 ranks",
    "simulated: 64 ranks"), its kind, what ran, start and end in seconds from the
    step's start, and where the numbers come from (measured, model, simulated)."""
    row: str
    kind: str
    label: str
    start_s: float
    end_s: float
    source: str


def _label(d: DistProgram, step) -> str:
    if isinstance(step, Comm):
        n = step.node
        if n.op == "wait_tensor":
            start = d.graph.producer[n.inputs[0]]
            return f"wait {start.id} ({start.op} {start.name})"
        return f"{n.op} {n.name} ({n.id})"
    return f"compute {step.graph.name.rsplit('.', 1)[-1]} ({len(step.nodes)} nodes)"


def _split(row, label, start, end, flights, source) -> list[Bar]:
    """A compute span cut where collectives in flight ([start, end) windows) begin and
    end: the parts inside a window are overlap, the rest compute."""
    cuts = sorted({start, end, *(x for a, b in flights for x in (a, b) if start < x < end)})
    bars = []
    for a, b in zip(cuts, cuts[1:]):
        hidden = any(fa <= a and b <= fb for fa, fb in flights)
        bars.append(Bar(row, "overlap" if hidden else "compute", label, a, b, source))
    return _merge(bars)


def _merge(bars: list[Bar]) -> list[Bar]:
    out: list[Bar] = []
    for b in bars:
        if out and out[-1].kind == b.kind and out[-1].end_s == b.start_s:
            out[-1] = Bar(b.row, b.kind, b.label, out[-1].start_s, b.end_s, b.source)
        else:
            out.append(b)
    return out


def measured_bars(d: DistProgram, run) -> list[Bar]:
    """The bars of a measured run (``RankRun`` of ``d``): one row per rank. Time inside
    a collective's start or wait (spans ``call``, ``wait``) is communication; compute
    while a collective is in flight (``comm``) is overlap."""
    bars = []
    for t in run.times:
        row = f"rank {t.rank}"
        flights = [(s.start_s, s.end_s) for s in t.spans if s.kind == "comm"]
        for s in sorted(t.spans, key=lambda s: s.start_s):
            if s.kind == "compute":
                label = f"compute {s.name.rsplit('.', 1)[-1]}"
                bars += _split(row, label, s.start_s, s.end_s, flights, "measured")
            elif s.kind in ("call", "wait"):
                bars.append(Bar(row, "communication", f"{s.kind} {s.name}", s.start_s,
                                s.end_s, "measured"))
    return bars


def _nbytes(d: DistProgram, v: str) -> int:
    return math.prod(d.local_shape(v)) * d.graph.value(v).dtype.itemsize


def modelled_bars(d: DistProgram, link, source: str = "model",
                  bandwidth: float | None = None) -> list[Bar]:
    """One row for ``d`` priced by the model: each compute segment its counted bytes
    at ``bandwidth`` (default: this CPU's measured DRAM bandwidth), each collective
    ``link.time`` from its start; a wait blocks until its collective is done."""
    if bandwidth is None:
        from ..runtime.calibrate import cpu_device
        bandwidth = cpu_device().dram_bandwidth
    row = f"{'simulated' if source == 'simulated' else 'model'}: {d.ranks} ranks"
    now, done, bars = 0.0, {}, []
    flights: list[tuple[float, float]] = []
    for s in local_steps(d):
        if isinstance(s, Comm):
            n = s.node
            if n.op in COLLECTIVES:
                x = n.inputs[0]
                nbytes = _nbytes(d, x) * (d.ranks if n.op == "all_gather" else 1)
                done[n.outputs[0]] = now + link.time(n.op, nbytes, d.ranks)
                flights.append((now, done[n.outputs[0]]))
            elif n.op == "wait_tensor" and done.get(n.inputs[0], 0.0) > now:
                bars.append(Bar(row, "communication", _label(d, s), now, done[n.inputs[0]],
                                source))
                now = done[n.inputs[0]]
            continue
        g = s.graph
        t = sum(g.value(v).nbytes for v in (*g.inputs, *g.outputs)) / bandwidth
        bars += _split(row, _label(d, s), now, now + t, flights, source)
        now += t
    return bars


def simulated_bars(d: DistProgram, link, ranks=SIMULATED_RANKS,
                   bandwidth: float | None = None) -> tuple[list[Bar], list[str]]:
    """The model's rows for ``d`` on each of ``ranks`` (labelled simulated), and for a
    rank count it cannot take, why (a sharded dim that does not divide)."""
    bars, skipped = [], []
    for p in ranks:
        try:
            dp = d.with_ranks(p).verify()
        except GraphError as e:
            skipped.append(f"{p} ranks: {e}")
            continue
        bars += modelled_bars(dp, link, "simulated", bandwidth)
    return bars, skipped
