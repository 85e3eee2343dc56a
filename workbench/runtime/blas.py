"""The host BLAS routines generated CPU kernels call: found in the BLAS library NumPy
already loaded, so a GEMM kernel and a library matmul run the same code, and no second
BLAS (nor a second thread pool) enters the process.

A kernel that calls one takes it as a function pointer after its buffers
(``Kernel.blas``; the C renderer spells the parameter). The routine is ILP64 CBLAS --
64-bit integers, as NumPy's bundled OpenBLAS exports it (``scipy_cblas_sgemm64_``) --
and it is called from the kernel's OpenMP threads, one tile each, while the program
runs with one BLAS thread (:mod:`.threads`), so each call runs on its caller's thread.

    >>> blas_function("sgemm") != 0                       # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import threading

from ..errors import BackendUnavailable

# ILP64 CBLAS names, by the prefixes and suffixes OpenBLAS builds use (NumPy's wheels:
# scipy_..64_; a system OpenBLAS built with INTERFACE64 and a symbol suffix: ..64_)
SYMBOLS = {
    "sgemm": ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "cblas_sgemm64"),
}
_found: dict[str, int] = {}
_lock = threading.Lock()


def _libraries() -> list[str]:
    """Paths of the BLAS libraries loaded in this process (NumPy's among them)."""
    import numpy  # noqa: F401  (loads NumPy's BLAS, which threadpoolctl then sees)
    from threadpoolctl import threadpool_info
    return [i["filepath"] for i in threadpool_info() if i.get("user_api") == "blas"]


def blas_function(name: str) -> int:
    """The address of the ILP64 CBLAS routine ``name`` (``sgemm``) in a loaded BLAS
    library, or BackendUnavailable naming what is missing."""
    with _lock:
        if name in _found:
            return _found[name]
        for path in _libraries():
            lib = ctypes.CDLL(path)
            for sym in SYMBOLS[name]:
                fn = getattr(lib, sym, None)
                if fn is not None:
                    _found[name] = ctypes.cast(fn, ctypes.c_void_p).value
                    return _found[name]
    raise BackendUnavailable(
        f"no 64-bit-integer CBLAS {name} ({', '.join(SYMBOLS[name])}) in the BLAS "
        "libraries NumPy loaded; GEMM kernels call it. Install NumPy's wheel (it bundles "
        "OpenBLAS with it), or plan with a planner that keeps matmuls library calls "
        "(none, xla)")
