"""Strict JSON from an artifact: UTF-8, no NaN or infinities, no duplicate keys, and
bounded nesting, so that what a manifest, graph or signature file parses to is plain
JSON (it is untrusted input)."""
from __future__ import annotations

from typing import Any

from ..json_keys import strict_loads
from .limits import MAX_JSON_DEPTH
from .messages import artifact_error, one_line


def json_depth(x: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(x, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(data: bytes, what: str, where: str) -> Any:
    """Strict JSON from an artifact: UTF-8, no NaN or infinities, no duplicate keys,
    nesting at most MAX_JSON_DEPTH. Raises ArtifactError (one line) otherwise."""
    try:
        obj = strict_loads(data.decode("utf-8"))
    except RecursionError:
        raise artifact_error(where, f"{what} is nested too deeply; re-export the "
                                    "artifact") from None
    except (ValueError, UnicodeDecodeError) as e:   # JSONDecodeError is a ValueError
        raise artifact_error(where, f"{what} is not valid JSON ({one_line(str(e), 160)}); "
                                    "re-export the artifact") from None
    if json_depth(obj) > MAX_JSON_DEPTH:
        raise artifact_error(where, f"{what} nests lists and objects more than "
                                    f"{MAX_JSON_DEPTH} deep; re-export the artifact")
    return obj
