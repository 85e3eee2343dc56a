"""A rank's step as a timeline: when each compute segment ran, when each collective was
in flight (from its start to the return of its wait) and how long the rank blocked in
each wait -- what the app draws per rank, and the overlap it reads off.

``RankTimes.spans`` (``runner.py``) holds them, seconds from the step's start::

    Span(kind="compute", name="tp_mlp.seg0", start_s=0.0, end_s=0.0021)
    Span(kind="comm", name="n8.c0", start_s=0.0021, end_s=0.0052)   # in flight
    Span(kind="wait", name="n8.c0", start_s=0.0049, end_s=0.0052)   # blocked
"""
from __future__ import annotations

from dataclasses import dataclass


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
