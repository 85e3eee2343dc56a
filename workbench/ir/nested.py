"""Attribute values that are whole workbench documents -- op ``repeat``'s attr is a
``Repeat``, written as the repeat's own JSON inside the graph's -- registered here by
the module that owns each one (``ir/repeat.py``), so the graph reader
(``ir/serialize.py``) reads and writes them without importing those modules (which
read and write their own bodies as graphs: a circle otherwise).

    >>> register("workbench.repeat", Repeat, repeat_to_json, repeat_from_json)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

# the document's "format" -> (its Python type, to JSON, from JSON)
_FORMATS: dict[str, tuple[type, Callable[[Any], dict], Callable[[dict], Any]]] = {}


def register(fmt: str, kind: type, to_json: Callable[[Any], dict],
             from_json: Callable[[dict], Any]) -> None:
    _FORMATS[fmt] = (kind, to_json, from_json)


def to_json(v: Any) -> dict | None:
    """``v``'s JSON if it is a registered document, else None."""
    for kind, write, _ in _FORMATS.values():
        if isinstance(v, kind):
            return write(v)
    return None


def from_json(v: Any) -> tuple[bool, Any]:
    """(True, the document) when ``v`` is a registered document's JSON, else (False, v)."""
    if isinstance(v, dict) and v.get("format") in _FORMATS:
        return True, _FORMATS[v["format"]][2](v)
    return False, v
