"""The backend interface: what every place kernels compile and run provides.

A backend compiles kernel-IR kernels (rendered in its ``target`` language, or
shipped sources from an artifact), launches them on arrays of its array module
``xp``, runs library calls with each op's ``library`` implementation on that module,
times kernels, and describes the :class:`~workbench.device.Device` it runs
on (the device the session plans for and the cost model prices). The session, the
CLI, the app, the artifact loader and calibration know backends only through this
class and the registry (:mod:`.backends`); adding one (Triton, say) is one subclass
and one registry entry.

Example::

    >>> from workbench.runtime import get_backend
    >>> be = get_backend("cpu"); be.target, be.device.kind      # doctest: +SKIP
    ('c', 'cpu')
"""
from __future__ import annotations

import abc
import contextlib
import os
import time
from functools import cached_property
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..codegen.kernel import Kernel
from ..device import Device
from ..dtypes import DType
from ..ops import get_op
from ..ops.bfloat16 import from_bits, to_bits
from ..codegen import render_kernel

Progress = Callable[[int, int, str], None]


class CompiledKernel:
    """A kernel ready to run on one backend: its IR, the source it was built from, and
    the backend's handle (a ctypes function, a CUDA function; None for library calls
    and for the reference backend)."""

    def __init__(self, kernel: Kernel, source: str, fn: Any = None):
        self.kernel, self.source, self.fn = kernel, source, fn


class WallTimer:
    """Host wall-clock timing (what a CPU kernel call costs, call overhead included)."""

    def start(self):
        return time.perf_counter()

    def stop(self, t0) -> float:
        return time.perf_counter() - t0


def compile_in_parallel(kernels: Sequence[Kernel], build, progress: Progress | None = None
                        ) -> list[CompiledKernel]:
    """``build(kernel)`` for each kernel, a thread per core: the compiler is a separate
    process, so threads overlap its runs (``progress`` after each, in order)."""
    from concurrent.futures import ThreadPoolExecutor
    done = []
    workers = max(1, min(len(kernels), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        for i, ck in enumerate(pool.map(build, kernels)):
            done.append(ck)
            if progress:
                progress(i + 1, len(kernels), ck.kernel.name)
    return done


class Backend(abc.ABC):
    """One place kernels run. Subclasses set ``name``, ``target`` and ``xp`` and
    implement what is abstract; the rest has a default every compiled backend shares."""

    name: ClassVar[str]          # the registry key ("cpu", "cupy", ...)
    target: ClassVar[str]        # the source language it compiles: "c", "cuda" ("": none)
    xp: Any                      # the array module its buffers live in
    # whether it runs its target's code somewhere else than the device the plans are
    # for (the CUDA emulator, on the CPU): then its timings are not the device's (the
    # cost model does not learn from them, tuning refuses) and it has no hardware
    # counters
    emulated: ClassVar[bool] = False

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run on this machine (None when it can), as a message
        naming the fix."""
        return None

    # -- the device ---------------------------------------------------------------
    @cached_property
    def device(self) -> Device:
        """The device plans are made for and the cost model prices (measured or read
        from its properties once, then cached)."""
        return self.describe_device()

    @abc.abstractmethod
    def describe_device(self) -> Device:
        """Measure or look up this backend's Device (``device`` caches it)."""

    def device_name(self) -> str:
        """What ran a measurement, for tables and manifests."""
        return self.device.name

    # -- compiling ----------------------------------------------------------------
    @abc.abstractmethod
    def compile_source(self, kernel: Kernel, source: str, origin: str = "") -> CompiledKernel:
        """Build one kernel from source in this backend's target language (rendered
        here, or shipped in an artifact; ``origin`` says where a rejected source came
        from)."""

    def render(self, kernel: Kernel) -> str:
        return render_kernel(kernel, self.target) if self.target else ""

    def compile(self, kernels: Sequence[Kernel], progress: Progress | None = None
                ) -> list[CompiledKernel]:
        """Render and build kernels (in order; ``progress(done, total, name)`` after each)."""
        out = []
        for i, k in enumerate(kernels):
            out.append(self.compile_source(k, self.render(k)))
            if progress:
                progress(i + 1, len(kernels), k.name)
        return out

    def compile_sources(self, kernels: Sequence[Kernel], sources: Mapping[str, str],
                        origin: str = "") -> list[CompiledKernel]:
        """Build kernels from shipped sources (kernel name -> source)."""
        return [self.compile_source(k, sources.get(k.name, ""), origin) for k in kernels]

    # -- running ------------------------------------------------------------------
    @abc.abstractmethod
    def launch(self, ck: CompiledKernel, args: list) -> None:
        """Launch a generated kernel on its parameter arrays (in ``kernel.params`` order)."""

    def run_kernel(self, seq, ck: CompiledKernel, env: dict) -> None:
        """Run one kernel of ``seq`` (a ``KernelSequence``: its graph, its groups' nodes,
        each kernel's workspace): a library call through its op's ``library`` on ``xp``,
        or a launch on the values in ``env``. (The reference backend evaluates the
        group's ops instead.)"""
        k, graph = ck.kernel, seq.graph
        if k.library is not None:
            call = k.library
            # a library computes bfloat16 in float32 (NumPy and CuPy have no bfloat16
            # arithmetic) and the result is rounded once, as a kernel rounds its stores
            args = [self.widen(env[b.value], graph.value(b.value).dtype)
                    for b in call.inputs]
            with self.library_precision(k.tf32):
                outs = get_op(call.op).library(self.xp, args, dict(call.attrs))
            for b, arr in zip(call.outputs, outs):
                v = graph.value(b.value)
                a = self.hold(arr, v.dtype).reshape(v.shape)
                # (ascontiguousarray would turn a 0-d result into 1-d)
                env[b.value] = a if a.flags.c_contiguous else a.copy(order="C")
            return
        ws = seq.workspace(ck) if k.workspace else {}
        self.launch(ck, [ws[b.name] if b.workspace else env[b.value] for b in k.params])

    def library_precision(self, tf32: bool):
        """A context a library call runs in: float32 matmuls allowed TF32 (``tf32``,
        ``Kernel.tf32``) where this backend's library has it (cuBLAS), else exact."""
        return contextlib.nullcontext()

    def plan_driver(self, seq):
        """What runs every kernel of ``seq`` (a ``KernelSequence``) in one call, or None
        (here: none; each kernel is launched by ``run_kernel``)."""
        return None

    def running(self, blas: bool = True, place: bool = True):
        """A context every run of a program happens in (the CPU backend sets the BLAS
        libraries' threads for it and restores them after: one thread pool; and holds
        the threads each on a CPU of their own). ``blas``: whether the run may call
        BLAS at all (a library call, a kernel's sgemm); ``place``: whether the program's
        runs are long enough to repay placing its threads (``placement.PlaceRule``)."""
        return contextlib.nullcontext()

    def timer(self):
        """How kernels are timed here (``start()`` / ``stop(t0) -> seconds``)."""
        return WallTimer()

    @abc.abstractmethod
    def asarray(self, a):
        """A host array as this backend's array."""

    @abc.abstractmethod
    def to_numpy(self, a, dtype: DType | None = None):
        """This backend's array (of the IR's ``dtype``, when known) as a NumPy array."""

    # -- bfloat16: NumPy holds ml_dtypes' bfloat16; an array module without one (CuPy)
    # holds the same 16 bits in uint16 (``bf16_as_bits``) ---------------------------
    @property
    def bf16_as_bits(self) -> bool:
        return self.xp is not np

    def widen(self, a, dtype: DType):
        """An array of the IR's ``dtype`` as the library computes it: bfloat16 as
        float32 (exactly), anything else as it is."""
        if dtype is not DType.bfloat16:
            return a
        return from_bits(self.xp, a) if self.bf16_as_bits else a.astype(np.float32)

    def hold(self, arr, dtype: DType):
        """A library's result as this backend holds values of ``dtype`` (bfloat16
        rounded to nearest even)."""
        if dtype is DType.bfloat16 and self.bf16_as_bits:
            return to_bits(self.xp, arr)
        return self.xp.asarray(arr, dtype=dtype.np)

    def synchronize(self) -> None:
        """Wait until every launched kernel has finished."""
