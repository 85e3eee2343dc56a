"""The CPU backend: C kernels built by the system compiler with OpenMP (:mod:`.cc`),
run through ctypes on NumPy arrays. Its device is this machine's CPU, measured once by
a compiled probe and cached (:mod:`.calibrate`)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import weakref
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..codegen.kernel import Kernel
from ..errors import WorkbenchError
from ..device import Device
from .backend import Backend, CompiledKernel, Progress, compile_in_parallel
from .blas import blas_function
from .cc import build_library, cpu_model, find_compiler, load_library, unload_library
from .placement import placed
from .threads import default_blas_threads, one_pool
from .threads import rescan as rescan_blas
from . import driver
from ..codegen.render.c import team_symbol
from .calibrate import cpu_device


class CompiledCpuKernel(CompiledKernel):
    def __init__(self, kernel: Kernel, lib_path: Path | None, source: str, origin: str = ""):
        super().__init__(kernel, source)
        self.path = lib_path
        if lib_path is not None:
            try:
                lib = load_library(lib_path)
                self.fn = getattr(lib, kernel.name)
            except (AttributeError, OSError) as e:
                raise WorkbenchError(f"kernel {kernel.name} cannot be loaded ({e}); "
                                     + (origin or "this is a workbench bug; please "
                                        "report it with the graph")) from None
            # the buffers, then the host BLAS routine a GEMM kernel calls (runtime/blas)
            self.fn.argtypes = [ctypes.c_void_p] * (len(kernel.params) + bool(kernel.blas))
            self.fn.restype = None
            # its team form, for the plan driver to call inside a parallel region of
            # its own: the library exports ``<name>_team`` exactly where the renderer
            # decided the kernel has one (CRenderer.kernel), so the decision travels
            # with the compiled code -- a library from the kernel cache, an artifact's
            # shipped source (whose kernel has no body to decide from) -- and is not
            # made again here
            self.team_fn = getattr(lib, team_symbol(kernel.name), None)
            self.extra = (blas_function(kernel.blas),) if kernel.blas else ()
            # this load of the library is closed once nothing can launch the kernel
            # (the last reference to it gone); not at exit, where it would gain nothing
            weakref.finalize(self, unload_library, lib).atexit = False
        # the arrays of the last launch (weakly: a caller's input or output is not
        # kept alive by it) and their addresses: a program's intermediates, constants
        # and workspaces are the same arrays run after run, and reading an address
        # (``.ctypes.data``) costs ~1.7 us per buffer, several per kernel. One tuple,
        # replaced whole, so threads launching the kernel at once never mix two
        # launches' addresses.
        self._last: tuple[tuple, tuple] = ((), ())

    def addresses(self, args: list) -> tuple:
        """The launch arguments for ``args``: each buffer's address, then the BLAS
        routine (reused from the last launch where every array is the same object)."""
        refs, ptrs = self._last
        if len(refs) != len(args) or any(r() is not a for r, a in zip(refs, args)):
            ptrs = (*[a.ctypes.data for a in args], *self.extra)
            self._last = (tuple(weakref.ref(a) for a in args), ptrs)
        return ptrs


def compile_kernel(k: Kernel, src: str, origin: str = "") -> CompiledCpuKernel:
    """Compile one kernel from its C source (library calls need none). A cached
    library that does not load (truncated by a full disk or a killed process, say) is
    removed and built again, once."""
    if k.library is not None:
        return CompiledCpuKernel(k, None, src)
    path = build_library(k.name, src, origin)
    try:
        return CompiledCpuKernel(k, path, src, origin)
    except WorkbenchError:
        path.unlink(missing_ok=True)
        return CompiledCpuKernel(k, build_library(k.name, src, origin), src, origin)


@contextlib.contextmanager
def _both(first, second):
    with first, second:
        yield


class CpuBackend(Backend):
    """``blas_threads``: the BLAS libraries' thread count while a program runs (default
    from ``$WB_BLAS_THREADS``, 1; None leaves them alone), see :mod:`.threads`."""
    name = "cpu"
    target = "c"
    xp = np
    plans_memory = True     # a program's intermediates share an arena (memory_plan.py)

    def __init__(self, blas_threads: int | None | str = "default"):
        self.blas_threads = (default_blas_threads() if blas_threads == "default"
                             else blas_threads)

    def running(self, blas: bool = True, place: bool = True):
        # a program that calls no BLAS (every GEMM the micro-kernel's) leaves it alone:
        # setting and restoring its threads costs 3-6 us a run; the threads each on
        # a CPU of their own while it runs, where that repays its cost (placement.py).
        # An unplaced run enters one context, not three (~1.5 us each, of a 0.3 ms
        # model's call)
        pool = one_pool(self.blas_threads if blas else None)
        return _both(pool, placed()) if place else pool

    def describe_device(self) -> Device:
        return cpu_device()

    def device_name(self) -> str:
        return f"{cpu_model()} ({os.cpu_count()} threads)"

    def compile_source(self, kernel: Kernel, source: str, origin: str = "") -> CompiledKernel:
        return compile_kernel(kernel, source, origin)

    def compile(self, kernels: Sequence[Kernel], progress: Progress | None = None
                ) -> list[CompiledKernel]:
        find_compiler()   # fail early with a clear message
        rescan_blas()     # a BLAS library imported since the last program is covered
        return compile_in_parallel(kernels, lambda k: compile_kernel(k, self.render(k)),
                                   progress)

    def compile_sources(self, kernels: Sequence[Kernel], sources: Mapping[str, str],
                        origin: str = "") -> list[CompiledKernel]:
        find_compiler()
        return compile_in_parallel(kernels, lambda k: compile_kernel(
            k, sources.get(k.name, ""), origin))

    def plan_driver(self, seq):
        # one native call per run where every kernel is a generated C function; the
        # environment variable turns it off (to compare, or to debug a kernel)
        if os.environ.get("WB_PLAN_DRIVER", "1") == "0" or not driver.applies(seq.compiled):
            return None
        return driver.PlanDriver(seq)

    def launch(self, ck: CompiledKernel, args: list) -> None:
        ck.fn(*ck.addresses(args))

    def asarray(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a) if a.ndim else a.copy()

    def to_numpy(self, a, dtype=None) -> np.ndarray:
        return a
