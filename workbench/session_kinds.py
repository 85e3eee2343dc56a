"""The sessions ``wb.Session(...)`` opens besides a graph's own.

``Session(graph, ranks=p)`` is p gloo ranks' :class:`~workbench.distributed.session.
DistSession` (docs/distributed.md); ``Session(repeat)`` -- a :class:`~workbench.ir.
repeat.Repeat`, or a ``.json`` file holding one (``"format": "workbench.repeat"``) --
is the repeat's :class:`~workbench.RepeatSession` (docs/repeat.md), so a user opens a
simulator's rollout the way they open any graph. Kept out of ``session.py`` (at its
size limit), which calls :func:`other_session` from ``Session.__new__``.

    >>> s = wb.Session("sample_graphs/repeats/cartpole.json")   # doctest: +SKIP
    >>> s.auto("stitch"); s.decisions                           # doctest: +SKIP
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .errors import WorkbenchError
from .ir.repeat import FORMAT, Repeat, load_repeat

# a repeat file says what it is in its first lines (save_repeat writes "format" first)
_HEAD_BYTES = 256


def is_repeat(source: Any) -> bool:
    """A Repeat, or a path to a .json file whose format is a repeat's."""
    if isinstance(source, Repeat):
        return True
    if not isinstance(source, (str, os.PathLike)) or \
            not str(source).lower().endswith(".json"):
        return False
    try:
        with Path(source).open("rb") as f:
            head = f.read(_HEAD_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):      # (ValueError: a NUL in the path)
        return False          # (the graph loader says what is wrong with the path)
    return re.search(r'"format"\s*:\s*"' + re.escape(FORMAT) + '"', head) is not None


def repeat_session(source, backend: str = "auto", seed: int = 0, **kw):
    """The RepeatSession of a Repeat or a repeat file; the options a graph session takes
    that a repeat has no use for are refused with the reason."""
    from .repeat_session import RepeatSession
    if backend not in ("auto", "cpu"):
        raise WorkbenchError(f"a repeat runs on the cpu backend (its fused C kernels; the "
                             f"CUDA form is printed by source('cuda')), not {backend!r:.30}: "
                             "pass backend='cpu' or leave it out")
    if kw:
        raise WorkbenchError(f"a repeat opens in its own session (wb.Session(r) or "
                             f"wb.open(r) in Python; docs/repeat.md), which takes backend "
                             f"and seed, not {', '.join(sorted(kw))}; the command line and "
                             "the graph session's options are for graphs")
    r = source if isinstance(source, Repeat) else load_repeat(source)
    return RepeatSession(r, seed=seed)


def other_session(graph, ranks, a: tuple, kw: dict):
    """The session ``Session(graph, *a, ranks=ranks, **kw)`` is when it is not a graph's
    own, else None."""
    if ranks is not None:        # p gloo ranks (docs/distributed.md)
        from .distributed.session import DistSession
        return DistSession(graph, ranks, *a, **kw)
    if is_repeat(graph):
        return repeat_session(graph, *a, **kw)
    return None
