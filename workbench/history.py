"""A session's history: its steps (each the action that made it and the plan it made),
the current one, and moving along them -- undo, redo, goto -- without losing any; a
new step after an undo drops the undone future, as in an editor.

    >>> h = History(Step("load", plan)); h.push(Step("auto rules", fused))   # doctest: +SKIP
    >>> h.undo(); h.current.action                                          # doctest: +SKIP
    'load'
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import WorkbenchError
from .fusion import Decision, Plan
from .fusion.constraints import Constraints


@dataclass(frozen=True)
class Step:
    """One entry in the history: the action that made it, the resulting plan and the
    constraints in force (so undo and redo restore locks too)."""
    action: str
    plan: Plan
    decisions: tuple[Decision, ...] = field(default=())
    constraints: Constraints = Constraints()


class History:
    def __init__(self, first: Step):
        self.steps: list[Step] = [first]
        self.position = 0

    @property
    def current(self) -> Step:
        return self.steps[self.position]

    def push(self, step: Step) -> None:
        del self.steps[self.position + 1:]
        self.steps.append(step)
        self.position += 1

    def undo(self) -> None:
        if self.position == 0:
            raise WorkbenchError("nothing to undo: this is the first step")
        self.position -= 1

    def redo(self) -> None:
        if self.position + 1 >= len(self.steps):
            raise WorkbenchError("nothing to redo")
        self.position += 1

    def goto(self, index: int) -> None:
        """Jump to any step (as many undos or redos at once; nothing is dropped)."""
        self.position = self.index(index, from_end=True)

    def index(self, index, from_end: bool = False) -> int:
        """A step by its index (negative from the end, where allowed), or the error
        naming the steps there are."""
        n = len(self.steps)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                or not (-n if from_end else 0) <= index < n:
            raise WorkbenchError(f"no step {index!r:.20}: the history has steps 0..{n - 1}")
        return int(index) % n
