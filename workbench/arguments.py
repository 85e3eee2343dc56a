"""Checks of what a caller passes to the public Python API, before anything runs.

Every face (``Session``, the notebook app, the artifact loader, the ONNX backend, the
CLI) takes arguments from a user; a wrong one -- a node id that is a number, a plan
that is a string, a path holding a NUL byte, a repeat count of 2**70 -- is refused
here with one :class:`WorkbenchError` line that names the argument, what it got and
what it takes, instead of a TypeError deep inside (or a loop that never ends). Counts
have an upper bound: every loop a user sizes is a bounded loop.

    >>> count(3, "repeats", 1)
    3
    >>> ref(7, "ref")                       # doctest: +SKIP
    WorkbenchError: ref must be a node or kernel id (a string like 'n3' or 'k0'), got 7
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import WorkbenchError

# the most any count a user passes may ask for (repeats, warmup, seeds): a million runs
# of anything is already a day
MAX_COUNT = 10 ** 6
# the longest path the workbench writes or reads (Linux's PATH_MAX)
MAX_PATH = 4096


def _got(x: Any) -> str:
    r = repr(x)
    return f"{type(x).__name__} {r[:40]}{'...' if len(r) > 40 else ''}"


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def count(x: Any, what: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
    """An integer in [lo, hi]."""
    if not is_int(x) or not lo <= int(x) <= hi:
        raise WorkbenchError(f"{what} must be an integer from {lo} to {hi}, got {_got(x)}")
    return int(x)


def flag(x: Any, what: str) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise WorkbenchError(f"{what} must be True or False, got {_got(x)}")
    return bool(x)


def ref(x: Any, what: str = "ref") -> str:
    """A node or kernel id."""
    if not isinstance(x, str):
        raise WorkbenchError(f"{what} must be a node or kernel id (a string like 'n3' or "
                             f"'k0'), got {_got(x)}")
    return x


def refs(x: Any, what: str = "refs") -> list[str]:
    """Node or kernel ids: a list (or tuple, set) of strings; one string is one id."""
    if isinstance(x, str):
        return [x]
    if isinstance(x, (Mapping, bytes)) or not isinstance(x, Iterable):
        raise WorkbenchError(f"{what} must be a list of node or kernel ids (strings like "
                             f"'n3'), got {_got(x)}")
    items = list(x)
    for i in items:
        ref(i, f"each of {what}")
    return items


def name(x: Any, what: str) -> str:
    """A name out of a fixed set (a planner, a mapping, a scheme): a string."""
    if not isinstance(x, str):
        raise WorkbenchError(f"{what} must be a name (a string), got {_got(x)}")
    return x


def path(x: Any, what: str = "path") -> Path:
    """A file system path: a str or os.PathLike, not empty, no NUL byte, at most
    MAX_PATH characters."""
    if not isinstance(x, (str, os.PathLike)):
        raise WorkbenchError(f"{what} must be a path (a str or pathlib.Path), got {_got(x)}")
    try:
        text = os.fspath(x)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text.strip():
        raise WorkbenchError(f"{what} must be a file or directory name, got {_got(x)}")
    if "\0" in text or len(text) > MAX_PATH:
        raise WorkbenchError(f"{what} {text[:60]!r}: a path holds no NUL byte and at most "
                             f"{MAX_PATH} characters")
    return Path(text)


def callback(x: Any, what: str):
    """A function, or None."""
    if x is not None and not callable(x):
        raise WorkbenchError(f"{what} must be a function or None, got {_got(x)}")
    return x


def mapping(x: Any, what: str) -> Mapping:
    if not isinstance(x, Mapping):
        raise WorkbenchError(f"{what} must be a dict of name -> array, got {_got(x)}")
    return x
