"""Which helpers a source's prelude holds: those its text calls, and those they call.

A kernel calls prelude helpers from its ops' scalar expressions (``wb_expf``), and also
from what the lowering and the renderers print around them: bfloat16 storage of any
buffer (``wb_bf16_load``), the min/max loop split (``wb_fmax_num``, the ``wbmaxn``
reduction), clamped gather indices (``wb_clampi``), integer limits as a reduction's
identity (``WB_MIN_int32``), the CPU's GEMM micro-kernel (``wb_gemm_packed``). So the
kernel's text, not its op list, is the whole record of what it calls: a helper is
printed when the text names a function, macro or OpenMP reduction the helper defines,
with the helpers it declares it calls (``Helper.calls``, and theirs), each once, in the
order of the candidates (registration order: every helper after those it calls).
Why not all of them: every helper is parsed in every kernel's compile, used or not, and
the kernel a person reads starts with a page of Philox, Box-Muller and minifloat code
it never calls.

    >>> from workbench.ops import all_helpers
    >>> [h.name for h in needed(all_helpers(), "c", "y[i] = wb_sigmoidf(x[i]);")]
    ['wb_expf', 'wb_sigmoidf']
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from ...ops import Helper

# what a helper's text defines: a WB_FN function (its name before the parameter list,
# past its return type and attributes), a macro, an OpenMP declared reduction
_DEFINES = re.compile(r"WB_FN\s+(?:__attribute__\(\(\w+\)\)\s+|[\w*]+\s+)*?\**(\w+)\s*\("
                      r"|#define\s+(\w+)|declare\s+reduction\s*\(\s*(\w+)")
_WORD = re.compile(r"\b\w+\b")


@lru_cache(maxsize=None)
def defined_names(text: str) -> frozenset[str]:
    """The names a helper's text defines (functions, macros, declared reductions)."""
    return frozenset(a or b or c for a, b, c in _DEFINES.findall(text))


def closure(helpers: Sequence[Helper]) -> set[str]:
    """The names of ``helpers`` and of every helper they call, transitively."""
    out: set[str] = set()
    todo = list(helpers)
    while todo:
        h = todo.pop()
        if h.name not in out:
            out.add(h.name)
            todo.extend(h.calls)
    return out


def needed(candidates: Sequence[Helper], target: str, text: str) -> tuple[Helper, ...]:
    """The candidates ``text`` calls on ``target``, with those they call, in the
    candidates' order."""
    words = set(_WORD.findall(text))
    called = [h for h in candidates if defined_names(h.body(target)) & words]
    keep = closure(called)
    return tuple(h for h in candidates if h.name in keep)


def helper_text(candidates: Sequence[Helper], target: str, text: str | None) -> str:
    """The prelude's helpers for a source whose code is ``text``, as the target spells
    them (``None``: every candidate -- a source whose code is not known yet)."""
    hs = candidates if text is None else needed(candidates, target, text)
    return "".join(h.body(target) for h in hs)
