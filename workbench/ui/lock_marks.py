"""What the drawing marks as locked (issue 48): the kernels and edges a constraint in
force names, for :func:`~.dot.to_dot`.

- a kernel holding a pinned, fixed-mapping or fixed-launch node set, or a must-fuse
  set, is *locked*: its cluster label starts with a lock glyph and has class
  ``wb-locked``;
- an edge a must-fuse set or a fixed scheme keeps inside a kernel is drawn bold
  (``wb-locked``); a cut edge bold and dashed (``wb-cut``), so a user sees where Auto
  will never fuse.

    >>> m = lock_marks(plan, s.constraints); m.edge("n3", "n4")   # doctest: +SKIP
    'cut'
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..fusion.constraints import Constraints, Cut, FixedScheme, MustFuse
from ..fusion.plan import Plan

LOCK_GLYPH = "\U0001F512"      # the padlock
LOCKED_EDGE = 'class="wb-edge wb-locked" penwidth=2.6'
CUT_EDGE = 'class="wb-edge wb-cut" style="dashed,bold" penwidth=2.6 color="#444444"'


@dataclass(frozen=True)
class LockMarks:
    """Locked kernel ids, and edges (producer, consumer node ids) -> "cut" | "locked"."""
    kernels: frozenset = frozenset()
    edges: dict = field(default_factory=dict)

    def edge(self, a: str, b: str) -> str | None:
        return self.edges.get((a, b))


def lock_marks(plan: Plan, cs: Constraints | None) -> LockMarks:
    """The marks of ``cs`` on ``plan`` (none without constraints)."""
    if not cs:
        return LockMarks()
    g, owner = plan.graph, plan.group_of
    kernels, edges = set(), {}
    for c in cs:
        if isinstance(c, Cut):
            edges[c.edge] = "cut"
        elif isinstance(c, FixedScheme):
            edges[c.edge] = "locked"
            kernels.add(owner[c.edge[0]].id)
        else:
            ns = set(c.nodes)
            kernels.update(owner[n].id for n in ns)
            if isinstance(c, MustFuse) or len(ns) > 1:
                for n in ns:
                    for o in g.node(n).outputs:
                        for r in g.consumers[o]:
                            if r.id in ns:
                                edges.setdefault((n, r.id), "locked")
    return LockMarks(frozenset(kernels), edges)
