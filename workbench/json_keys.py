"""What every reader of an untrusted JSON file (a graph file, an artifact's manifest, a
session file) asks of it beyond the grammar: no object with one key twice (JSON readers
disagree on which value wins), no integer of more digits than any dimension or index
has, and (:func:`strict_loads`) no NaN or infinity.

    >>> json.loads(text, object_pairs_hook=unique_keys, parse_int=bounded_int)  # doctest: +SKIP
    >>> strict_loads(text)                                                  # doctest: +SKIP
"""
from __future__ import annotations

import json
import math

from .errors import shown

# an integer in a graph or manifest: a dimension, an axis, an index, a size (a
# dimension past 2^35 is refused anyway); far longer digit strings only cost time
MAX_INT_DIGITS = 40


class JsonFault(ValueError):
    """What a strict JSON reader refuses (the message says what)."""


def bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonFault(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def unique_keys(pairs) -> dict:
    d = {}
    for k, v in pairs:
        if k in d:
            raise JsonFault(f"the key {shown(k)[:60]!r} appears twice in one object")
        d[k] = v
    return d


def _no_constant(text: str):
    raise JsonFault(f"{text} is not a JSON number")


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise JsonFault(f"the number {text[:24]} is out of range")
    return x


def strict_loads(text: str):
    """``json.loads`` refusing (JsonFault, a ValueError) NaN, Infinity, a number out of
    float range, a key twice in one object and an over-long integer."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite,
                      object_pairs_hook=unique_keys, parse_int=bounded_int)
