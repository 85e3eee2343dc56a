"""What an ONNX import may compute itself: the budgets of constant folding.

Folding evaluates a node whose inputs are all constant at import (:mod:`.folding`).
That is cheap for what models fold (shape arithmetic, a transposed weight), but a
file of a few hundred bytes can ask for gigabytes (``ConstantOfShape([2^29])``, a
Range, Tile, Pad or OneHot of a huge extent) or for minutes of pure Python
(``onnx.reference``'s GridSample, whose time grows with the cube of the size). So:

* every value made at import is sized from its shape *before* it is allocated; a
  node's outputs may hold at most ``FOLD_GROWTH_BYTES`` more than its inputs, and all
  folded nodes together at most ``IMPORT_GROWTH_BYTES`` more than what they read (a
  transposed or cast weight grows nothing);
* a node past the budget that the workbench can compute is left as ops of the graph
  (its kernel computes it when the model runs, as the model asks); one it cannot
  (ConstantOfShape, Range: no op) is refused with the reason;
* ``onnx.reference`` (pure Python) folds at most ``REFERENCE_MAX_ELEMENTS`` output
  elements, and where it can (the main thread) for at most ``REFERENCE_SECONDS``.
"""
from __future__ import annotations

import contextlib
import math
import signal
import threading

import numpy as np

from ...errors import GraphError

FOLD_GROWTH_BYTES = 64 << 20
IMPORT_GROWTH_BYTES = 128 << 20
REFERENCE_MAX_ELEMENTS = 1 << 16
REFERENCE_SECONDS = 2.0


class OverBudget(GraphError):
    """A value made at import past the folding budget (the reason names the node)."""


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.1f} GiB"


def over(what: str, made: int, read: int, limit: int, total: bool = False) -> OverBudget:
    scope = "all folded nodes together" if total else "one node"
    return OverBudget(f"{what} would make {mib(made)} of constants at import from "
                      f"{mib(read)} of inputs, past the {mib(limit)} {scope} may add; "
                      "the model computes a constant too large to hold at import (check "
                      "its shape inputs)")


def check_made(what: str, shape, dtype) -> None:
    """An array a handler is about to allocate (ConstantOfShape, Range, OneHot's
    classes), sized from its shape first: OverBudget past FOLD_GROWTH_BYTES."""
    numel = math.prod(int(d) for d in shape)
    nbytes = numel * np.dtype(dtype).itemsize
    if nbytes > FOLD_GROWTH_BYTES:
        raise over(f"{what} ({numel} elements)", nbytes, 0, FOLD_GROWTH_BYTES)


class FoldBudget:
    """What the folding of one import has added so far."""

    def __init__(self):
        self.grown = 0

    def admit(self, what: str, made: int, read: int) -> None:
        """Take a node folding ``made`` bytes of outputs from ``read`` bytes of inputs,
        or OverBudget (nothing taken)."""
        growth = max(0, made - read)
        if growth > FOLD_GROWTH_BYTES:
            raise over(what, made, read, FOLD_GROWTH_BYTES)
        if self.grown + growth > IMPORT_GROWTH_BYTES:
            raise over(what, made, read, IMPORT_GROWTH_BYTES, total=True)
        self.grown += growth


class _Overtime(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """OverBudget once ``seconds`` pass (an interval timer: only in the main thread,
    where Python delivers signals; elsewhere the size budget alone holds)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return

    def expire(signum, frame):
        raise _Overtime()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Overtime:
        raise OverBudget(f"{what}: onnx.reference did not fold it within {seconds:g} s "
                         "(pure Python); the workbench folds at import only what is "
                         "cheap, and cannot compute this op itself") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
