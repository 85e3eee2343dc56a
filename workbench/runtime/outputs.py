"""Where a run's graph outputs live: poisoned (checked runs), the caller's (``out=``),
or new and unfilled -- new to the caller, though their memory may be an earlier
call's outputs that nothing holds any more (:class:`Recycler`).

Why: a graph output made fresh and NaN-filled on every call cost more than the kernel
that writes it (LayerNorm 2048x4096 on 2 cores: a 7.3 ms call was a 2.6 ms kernel and
4.3 ms of allocation and fill). Poison proves that a kernel writes every element; a
kernel's loops do not depend on the data, so one checked run proves it for every run
after it (the checkers' ``keep_all`` run, ``Program.run(..., checked=True)``). A
production or timed call then pays what an inference runtime pays: its outputs are the
caller's arrays, reused call after call (``run(inputs, out=...)``), or new arrays left
as the allocator gives them.

Example::

    >>> out = prog.new_outputs()                        # doctest: +SKIP
    >>> prog.run(x, out=out)["y"] is out["y"]           # doctest: +SKIP
    True
"""
from __future__ import annotations

import math
import sys
import threading
from typing import Mapping

import numpy as np

from ..dtypes import DType
from ..errors import GraphError
from ..ir import Graph
from .memory_plan import ALIGN


def empty(xp, shape, dtype: DType):
    """A new array for an output, unfilled (a device holds bfloat16 as its bits); on
    the host, starting on a cache line (:func:`aligned_empty`)."""
    if dtype is DType.bfloat16 and xp is not np:   # (Backend.bf16_as_bits)
        return xp.empty(shape, dtype=np.uint16)
    if xp is np:
        return aligned_empty(shape, dtype.np)
    return xp.empty(shape, dtype=dtype.np)


def aligned_empty(shape, dtype) -> np.ndarray:
    """A new NumPy array whose first element starts a 64-byte cache line. NumPy's own
    start 16 bytes past one (glibc's malloc header), so every 64-byte vector load or
    store of a row kernel straddles two lines: softmax 8192x512 on one thread took
    1.78 ms with input and output so placed, 1.57 ms with both aligned (onnxruntime
    aligns its outputs). The array is a view into a slightly larger buffer."""
    dt = np.dtype(dtype)
    raw, at = aligned_bytes(math.prod(shape) * dt.itemsize)
    return np.ndarray(shape, dt, buffer=raw, offset=at)


def aligned_bytes(n: int) -> tuple[np.ndarray, int]:
    """A new byte buffer with ``n`` bytes from a 64-byte cache line on, and that line's
    offset in it: ``(raw, at)``, the array of ``shape`` and ``dtype`` there being
    ``np.ndarray(shape, dtype, buffer=raw, offset=at)``. (NumPy's own buffers start
    16 bytes past a line: see :func:`aligned_empty`.) The one place a host output, a
    kept output's buffer (:class:`Recycler`) and a program's arena of intermediates
    (runtime/program.py) are placed on a line."""
    raw = np.empty(n + ALIGN, dtype=np.uint8)
    return raw, -raw.ctypes.data % ALIGN


class Recycler:
    """New host arrays for a program's graph outputs, made in memory that an earlier
    call's outputs held once nothing holds those any more: a caching allocator, as
    torch's is for CUDA memory, for the buffers a caller drops between calls.

    Why: a buffer past glibc's mmap threshold is mapped afresh on every allocation and
    each of its pages faults on first write (with transparent huge pages, a 2 MB page
    zeroed at a time). BERT-base's layer fwd+bwd returns 28.4 MB of gradients; made new
    every call, the step took 34.5 ms at best and 42.9 ms median (2,761 minor faults)
    against 29.8 and 30.5 ms writing into arrays it reused (2026-12-06, 2 cores).

    A buffer is free when its reference count is the recycler's own: every NumPy view
    of it holds it as its ``base`` (views of views too: NumPy collapses the chain), and
    so does whatever wraps a view (``torch.from_numpy``, a memoryview). An array the
    caller keeps, however reached, keeps its buffer out of reuse. The test runs under
    a lock, so two runs at once never take one buffer. At most ``per_size`` buffers of
    one size and ``limit`` bytes in all are kept (a caller keeping every call's loss
    would otherwise grow a list scanned on every call); past that, buffers are handed
    out and forgotten, as ``np.empty``'s are.
    """

    def __init__(self, limit: int = 1 << 30, per_size: int = 4):
        self.limit, self.per_size = limit, per_size
        self._kept = 0
        # (shape, dtype) -> its buffers, each (raw bytes, offset of the cache line)
        self._by_kind: dict[tuple, list[tuple[np.ndarray, int]]] = {}
        self._lock = threading.Lock()
        # the count a kept buffer shows with nothing else holding it, read as _take
        # reads it (its entry, the loop's name, getrefcount's own argument)
        for raw, _ in [(np.empty(1, np.uint8), 0)]:
            self._idle = sys.getrefcount(raw)

    def empty(self, shape, dtype) -> np.ndarray:
        """A new array of ``shape`` and ``dtype``, unfilled, on a cache line (as
        :func:`aligned_empty`). (A run makes one per graph output after a long call
        has flushed the interpreter from the caches: the few NumPy calls here are
        each several microseconds then.)"""
        shape = tuple(shape)
        dt = np.dtype(dtype)
        raw, at = self._take((shape, dt))
        return np.ndarray(shape, dt, buffer=raw, offset=at)

    def _take(self, kind: tuple) -> tuple[np.ndarray, int]:
        with self._lock:
            kept = self._by_kind.get(kind)
            if kept is None:
                kept = self._by_kind[kind] = []
            for raw, at in kept:
                if sys.getrefcount(raw) == self._idle:
                    return raw, at
            shape, dt = kind
            raw, at = aligned_bytes(math.prod(shape) * dt.itemsize)
            entry, size = (raw, at), raw.nbytes
            if len(kept) < self.per_size and self._kept + size <= self.limit:
                kept.append(entry)
                self._kept += size
            return entry

    @property
    def kept_bytes(self) -> int:
        return self._kept


def storage_dtype(xp, dtype: DType):
    """The array dtype a backend on ``xp`` holds a value of ``dtype`` in."""
    return np.dtype(np.uint16) if dtype is DType.bfloat16 and xp is not np \
        else np.dtype(dtype.np)


def check_out(graph: Graph, out, xp, inputs: Mapping) -> dict:
    """``out`` (graph output name -> array the run writes that output into) checked:
    every name a graph output, every array of the backend's kind, the output's shape
    and dtype, C-contiguous, writeable and sharing no memory with an input (a kernel
    would read what it already overwrote). Outputs ``out`` leaves out are made new."""
    if not isinstance(out, Mapping):
        raise GraphError(f"out must be a dict of graph output name -> array, got "
                         f"{type(out).__name__}; make one with program.new_outputs()")
    names = set(graph.outputs)
    for name, a in out.items():
        if name not in names:
            raise GraphError(f"out names {str(name)[:60]!r}, which is no output of the "
                             f"graph; its outputs are {', '.join(graph.outputs)[:200]}")
        v = graph.value(name)
        want = storage_dtype(xp, v.dtype)
        if not isinstance(a, xp.ndarray):
            raise GraphError(f"out[{name!r}] is a {type(a).__name__}, not a "
                             f"{xp.__name__} array; make it with program.new_outputs()")
        if tuple(a.shape) != tuple(v.shape) or a.dtype != want:
            raise GraphError(f"out[{name!r}] is {a.dtype}{list(a.shape)}, the output is "
                             f"{want}{list(v.shape)}; make it with program.new_outputs()")
        # (CuPy's flags have no writeable: its arrays always are)
        if not a.flags.c_contiguous or not getattr(a.flags, "writeable", True):
            raise GraphError(f"out[{name!r}] is not a writeable C-contiguous array (a "
                             "view, a transpose or read-only); pass one made with "
                             "program.new_outputs() or np.empty")
        for i, x in inputs.items():
            if xp is np and np.may_share_memory(a, x):
                raise GraphError(f"out[{name!r}] shares memory with input {i!r}: the "
                                 "kernels would read what they already overwrote; give "
                                 "the output an array of its own")
    if xp is np:
        seen = list(out.items())
        for j, (n1, a1) in enumerate(seen):
            for n2, a2 in seen[j + 1:]:
                if np.may_share_memory(a1, a2):
                    raise GraphError(f"out[{n1!r}] and out[{n2!r}] share memory; give "
                                     "each output an array of its own")
    return dict(out)


__all__ = ["Recycler", "check_out", "empty", "storage_dtype"]
