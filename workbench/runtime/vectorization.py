"""Which of a C kernel's SIMD loops the compiler vectorized, from GCC's own report.

Why: a loop marked ``#pragma omp simd`` is only a request. GCC 12 quietly compiled
``wb_fmin(wb_fmax(x, 0), 6)`` -- a ReLU6 -- as a branch per element, because it could
not if-convert the select the two helpers made together ("control flow in loop"): a
MobileNetV2 convolution's epilogue ran 40x slower than the same loop vectorized, and
nothing but the timings said so. This module asks the compiler (``-fopt-info-vec``,
with exactly the flags the CPU backend builds with) which loops it vectorized, so that
tests pin the helpers' forms and ``scripts/vectorization.py`` lists, for whole models,
the loops that stayed scalar and GCC's reason.

GCC only: other compilers report differently (clang's ``-Rpass``); :func:`supported`
says whether this compiler's report can be read.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cc import cflags, compiler_macros, find_compiler

_REPORT = re.compile(r"^[^:\n]*\.c:(\d+):\d+: (optimized|missed): (.*)$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/", re.S)


@dataclass(frozen=True)
class SimdLoop:
    """One ``#pragma omp simd`` loop of a kernel's source: its ``for`` line (1-based),
    the text of that line, whether the compiler vectorized it, and, where it did not,
    the compiler's reasons (its ``missed`` lines inside the loop but the bare "couldn't
    vectorize loop")."""
    line: int
    text: str
    vectorized: bool
    reasons: tuple[str, ...] = ()


def supported() -> bool:
    """Whether the C compiler is GCC (whose ``-fopt-info`` report this module reads),
    from its predefined macros (``cc --version`` need not say "gcc")."""
    macros = compiler_macros()
    return "__GNUC__" in macros and "__clang__" not in macros


def simd_loops(src: str, function: str | None = None) -> list[SimdLoop]:
    """Every ``#pragma omp simd`` loop of ``src`` (in ``function``'s body, where given),
    with whether GCC vectorized it when compiled with the CPU backend's flags.

    A loop counts as vectorized when the compiler reports "loop vectorized" at a line
    inside it (GCC names the line of a statement of the loop's body, not the ``for``),
    or, for the outer loop of a nest, "outer-loop already vectorized" at its inner
    loop."""
    cc, _ = find_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        c = Path(tmp) / "kernel.c"
        c.write_text(src)
        r = subprocess.run([cc, *cflags(), "-fopt-info-vec-all", "-c", str(c), "-o",
                            str(Path(tmp) / "kernel.o")], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the compiler rejected the source: {r.stderr[-500:]}")
    reports = [(int(m.group(1)), m.group(2), m.group(3)) for m in _REPORT.finditer(r.stderr)]
    lines = src.splitlines()
    # (comments blanked, their newlines kept, so that braces in them count for nothing
    # and lines keep their numbers)
    code = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), src).splitlines()
    start = 0
    if function is not None:
        start = next(i for i, s in enumerate(lines) if re.match(rf"\w.*\b{function}\(", s))
    loops = []
    for i in range(start, len(lines)):
        if "#pragma omp" not in lines[i] or "simd" not in lines[i]:
            continue
        first = i + 2                            # the for line, 1-based
        last = _loop_end(code, i + 1) + 1
        inside = [(kind, text) for ln, kind, text in reports if first <= ln <= last]
        # (a loop vectorized as the outer loop of a nest, as a row's reduction lanes
        # are -- render/c_lanes.py -- is reported at its function's line, and the inner
        # loop inside it as "outer-loop already vectorized")
        done = any(kind == "optimized" and "loop vectorized" in text
                   or "outer-loop already vectorized" in text for kind, text in inside)
        reasons = () if done else tuple(dict.fromkeys(
            text for kind, text in inside
            if kind == "missed" and not text.startswith("couldn't vectorize")))
        loops.append(SimdLoop(first, lines[i + 1].strip(), done, reasons))
    return loops


def _loop_end(code: list[str], at: int) -> int:
    """Index of the line where the loop starting at ``code[at]`` ends (its braces
    balanced; ``code`` has its comments blanked), or of its one statement's line for a
    loop without braces."""
    depth, opened = 0, False
    for k in range(at, len(code)):
        for ch in code[k]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
        if opened and depth <= 0:
            return k
        if not opened and code[k].rstrip().endswith(";"):
            return k
    return len(code) - 1
