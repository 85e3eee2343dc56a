"""Renderers: print one kernel IR as C with OpenMP (CPU) or as CUDA C (CuPy).

One C-style renderer (``base.py``) prints what both targets print alike; each target
subclasses it and overrides only what it changes: ``c.py`` (C99 + OpenMP: blocks as
parallel loops, threads as SIMD lanes, GEMM tiles by the host BLAS or the generated
micro-kernel), ``cuda.py`` (CUDA's spellings of threads, blocks, warps and barriers as
attributes; half-precision storage; block reductions, row tiles and 16-byte accesses
bound to the hardware). The C and C++ both paste into every source are files of
``codegen/include/``.

    >>> sorted(RENDERERS)
    ['c', 'cuda']
"""
from __future__ import annotations

from .base import CStyleRenderer, node_tag, nodes_comment
from .c import CRenderer
from .cuda import CudaRenderer

RENDERERS = {"c": CRenderer(), "cuda": CudaRenderer()}

__all__ = ["CRenderer", "CStyleRenderer", "CudaRenderer", "RENDERERS", "node_tag",
           "nodes_comment"]
