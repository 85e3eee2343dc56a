"""One thread pool on the CPU: the BLAS library's threads and the kernels' OpenMP threads
never run beside each other.

A compiled program alternates generated C kernels (OpenMP over the cores) with library
calls (NumPy's matmul, i.e. OpenBLAS with its own pthreads over the same cores). Left
alone, both pools hold a thread per core and the one that just finished keeps spinning
while the other works: issue 13 measured whole models 3-5x slower than with one BLAS
thread. So while a program runs, the BLAS libraries loaded in the process are set to
``blas_threads`` threads (default 1: the OpenMP kernels own the cores, a library call
runs on the calling thread), and set back to what they were when the run returns, so a
user's NumPy, SciPy or torch outside the workbench is never left changed.

``threadpoolctl`` finds the BLAS libraries (NumPy's and SciPy's OpenBLAS, MKL,
BLIS...); the count is set and read back through its per-library controllers (a
microsecond each, where ``threadpool_limits`` takes ~40), so it is done around every
run rather than once per process. An OpenBLAS on its own threads (NumPy's and torch's
wheels) is set through its ``openblas_get/set_num_threads`` functions called directly,
the controller's symbol lookups skipped: setting and restoring two libraries took 6 us
of MobileNetV2's 0.3 ms call through the controllers
(``benchmarks/results/call-sources-*.md``). A run restores only the libraries it set.

    >>> from workbench.runtime.threads import blas_threads_now, one_pool
    >>> with one_pool(1):                          # doctest: +SKIP
    ...     blas_threads_now()
    [1]
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from typing import Iterator

from ..errors import WorkbenchError

# what a program run sets the BLAS libraries to; None leaves them as they are (the
# workbench before issue 13; benchmarks/models.py measures both)
ENV = "WB_BLAS_THREADS"


def default_blas_threads() -> int | None:
    """``$WB_BLAS_THREADS``: a count, ``all`` (every core), ``off`` (leave BLAS alone);
    unset means 1, which measured fastest (benchmarks/results/archive/
    models-2026-11-23*.md)."""
    v = os.environ.get(ENV, "").strip().lower()
    if v in ("", "1"):
        return 1
    if v == "off":
        return None
    if v == "all":
        return os.cpu_count() or 1
    if v.isdigit() and int(v) > 0:
        return int(v)
    raise WorkbenchError(f"${ENV}={v!r} is not a thread count: set it to a positive "
                         "integer, 'all' or 'off', or unset it (1 BLAS thread)")


_lock = threading.Lock()
_controllers: list | None = None


def _blas_controllers() -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded (scanned on first use
    and again by :func:`rescan`: a scan takes ~10 ms, too long for every run)."""
    global _controllers
    with _lock:
        if _controllers is None:
            from threadpoolctl import ThreadpoolController
            _controllers = [_Counts(c) for c in ThreadpoolController().select(
                user_api="blas").lib_controllers]
        return _controllers


class _Counts:
    """One BLAS library's thread count, read and set: an OpenBLAS on its own threads
    through its functions, called directly; any other through its threadpoolctl
    controller (an OpenMP-threaded OpenBLAS's count is the OpenMP runtime's)."""

    def __init__(self, ctl):
        self.controller = ctl
        self.get_num_threads, self.set_num_threads = ctl.get_num_threads, ctl.set_num_threads
        if (getattr(ctl, "internal_api", None) == "openblas"
                and getattr(ctl, "threading_layer", None) == "pthreads"):
            get = ctl._get_symbol("openblas_get_num_threads")
            put = ctl._get_symbol("openblas_set_num_threads")
            if get is not None and put is not None:
                # fresh function objects (the library's own are threadpoolctl's)
                address = ctypes.cast(get, ctypes.c_void_p).value
                self.get_num_threads = ctypes.CFUNCTYPE(ctypes.c_int)(address)
                address = ctypes.cast(put, ctypes.c_void_p).value
                self.set_num_threads = ctypes.CFUNCTYPE(None, ctypes.c_int)(address)


def rescan() -> None:
    """Find the BLAS libraries again (the CPU backend calls this when it compiles a
    program, so a library imported since, SciPy's say, is covered too)."""
    global _controllers
    with _lock:
        _controllers = None


def blas_threads_now() -> list[int]:
    """The thread count of each BLAS library loaded in this process (for tests and
    benchmarks)."""
    return [c.get_num_threads() for c in _blas_controllers()]


@contextlib.contextmanager
def one_pool(blas_threads: int | None) -> Iterator[None]:
    """Run the block with every loaded BLAS library at ``blas_threads`` threads (None:
    as they are), then restore each library's own count, also when the block raises.
    Nested uses keep the outer setting (the inner restore puts back what it found)."""
    if blas_threads is None:
        yield
        return
    changed = []        # (library, its count before)
    try:
        for c in _blas_controllers():
            n = c.get_num_threads()
            if n != blas_threads:
                changed.append((c, n))
                c.set_num_threads(blas_threads)
        yield
    finally:
        for c, n in changed:
            c.set_num_threads(n)
