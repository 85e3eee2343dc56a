"""Measure's progress bar: one bar across the job's phases, never going back, each
phase named.

A review saw the bar reach 100% (the last kernel compiled), sit there for ~9 s while
the NumPy reference and the check ran on a BERT, then restart from 10% for the timed
runs. Measure has four phases, each given a fixed share of one bar:

    compiling          the kernels of the step (one event per kernel): 0-20%
    NumPy reference    the graph run in NumPy (once per session; no events inside):
                       20-30%
    checking           the checked run, then each kernel against NumPy } 30-100%,
    timed runs         every timed run                                  } a unit each

The shares are fixed, not timed (how long each takes depends on the graph and the
machine): the bar is monotone, reaches 100% only with the last timed run, and its
description says which phase runs (``4/4 timed runs 3/10``). ``measure_program``'s
events count the check and the timed runs on one scale; the label tells them apart.

Example::

    >>> p = PhasedProgress(MEASURE)
    >>> p.enter("compiling"); p.event(1, 2, "k0")
    Shown(value=100, text='1/4 compiling 1/2', label='k0')
"""
from __future__ import annotations

from dataclasses import dataclass

SCALE = 1000     # the bar's max: its value is the overall share, in thousandths


@dataclass(frozen=True)
class Phase:
    name: str
    start: float      # the share of the bar done when the phase begins
    end: float


@dataclass(frozen=True)
class Shown:
    """What the bar shows: ``value`` of ``SCALE``, its description, its tooltip."""
    value: int
    text: str
    label: str


# compile and reference are quick after the first Measure (cached): most of the bar
# is the check and the timed runs, which every Measure of a new step does
MEASURE = (Phase("compiling", 0.0, 0.2), Phase("NumPy reference", 0.2, 0.3),
           Phase("checking", 0.3, 1.0), Phase("timed runs", 0.3, 1.0))


def measure_phase(label: str) -> str:
    """The phase a ``measure_program`` event belongs to, by its label."""
    return "timed runs" if label == "timed run" else "checking"


class PhasedProgress:
    """Turns (done, total, label) events into one monotone bar; ``enter`` starts a
    phase the events do not name themselves."""

    def __init__(self, phases: tuple[Phase, ...]):
        self.phases = {p.name: p for p in phases}
        self.order = [p.name for p in phases]
        self.current = self.order[0]
        self.value = 0
        self._timed_from: int | None = None   # the check's units before the first timed run

    def enter(self, name: str, label: str = "") -> Shown:
        self.current = name
        return self._show(self.phases[name].start, "", label or name)

    def event(self, done: int, total: int, label: str) -> Shown:
        """One event of the current phase (or, past compiling, of the check and timed
        runs, told apart by ``label``)."""
        if self.order.index(self.current) >= self.order.index("checking"):
            self.current = measure_phase(label)
            # the check and the timed runs count on one scale (a kernel checked, a run
            # timed: one unit each): their shares together, split by that scale
            lo, hi = self.phases["checking"].start, self.phases["timed runs"].end
            share = lo + (hi - lo) * done / max(1, total)
            if self.current == "checking":      # (the tooltip names the kernel)
                return self._show(share, "", label)
            if self._timed_from is None:
                self._timed_from = done - 1
            k = self._timed_from
            return self._show(share, f"{done - k}/{total - k}", label)
        p = self.phases[self.current]
        return self._show(p.start + (p.end - p.start) * done / max(1, total),
                          f"{done}/{total}", label)

    def _show(self, share: float, count: str, label: str) -> Shown:
        # (never back: a phase's first event may land below where the last one ended)
        self.value = max(self.value, round(share * SCALE))
        i = self.order.index(self.current) + 1
        text = f"{i}/{len(self.order)} {self.current}" + (f" {count}" if count else "")
        return Shown(self.value, text, label)
