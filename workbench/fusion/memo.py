"""One graph's analyses remembered: :func:`.analysis.analyze`'s schedule (or refusal) for
a node tuple, its forced regional and local values and the device, answered once.

The stitch planner asks the same questions many times over: cutting a group into phases
(:func:`.phases.analyze_stitched`) grows each phase one op at a time and tries it with
:func:`~.analysis.analyze`, and the search cuts hundreds of groups that share their first
phases (a merge of two kernels re-cuts both). On a small BART exported by dynamo, 2,000
groups cut into phases made 50,000 analyses, most of them repeats (6-10 s of planning).

Answers hold for one graph only: asked about another graph, the memo forgets what it
knew (a :class:`~workbench.ir.Graph` is immutable, so the same object means the same
answers).

    >>> memo = AnalysisMemo()
    >>> memo.analyze(g, ("n0", "n1"), device=H100).kind            # doctest: +SKIP
    <ScheduleKind.row_reduce: 'row_reduce'>
"""
from __future__ import annotations

from typing import Iterable

from ..device import Device
from ..errors import FusionRefused
from ..ir import Graph
from .analysis import analyze
from .schedule import Schedule


class AnalysisMemo:
    """``analyze(g, nodes, regional=..., local=..., device=...)``, each answer computed
    once per graph; a refusal is raised again with its reason."""

    def __init__(self) -> None:
        self._graph: Graph | None = None
        self._answers: dict[tuple, Schedule | str] = {}
        self.computed = 0            # analyses actually run (a work count, for tests)

    def analyze(self, g: Graph, nodes: tuple[str, ...], regional: Iterable[str] = (),
                local: Iterable[str] = (), *, device: Device) -> Schedule:
        if g is not self._graph:     # another graph: nothing known holds for it
            self._graph, self._answers = g, {}
        regional, local = frozenset(regional), frozenset(local)
        key = (tuple(nodes), regional, local, device)
        hit = self._answers.get(key)
        if hit is None:
            self.computed += 1
            try:
                hit = analyze(g, tuple(nodes), regional=regional, local=local, device=device)
            except FusionRefused as e:
                hit = str(e)
            self._answers[key] = hit
        if isinstance(hit, str):
            raise FusionRefused(hit)
        return hit
