"""The CUDA emulator backend (``cuda-emu``): the generated CUDA C run on the CPU.

Without a GPU, the CUDA renderer's output is otherwise only compiled (NVRTC, offline)
and the same kernel IR run as C. Here the CUDA source itself -- its vector loads,
shared memory, warp shuffles, ``__syncthreads`` and grid barriers, its launch
geometry -- runs with CUDA's semantics, built by the system C++ compiler against
``emu/wb_cuda_emu.h`` (CUDA's built-ins) and the emulator's runtime (``emu/runtime.cpp``:
a fiber per GPU thread, blocks on OS threads, each launch in a child process on
guarded copies of its buffers). Plans are the H100's (``device.H100``), the
same plans and sources the ``cupy`` backend runs and the NVRTC check compiles.

What it catches that the C rendering cannot: a renderer bug of the CUDA text alone,
a warp function whose lanes do not all arrive (a deadlock, reported with the waiting
threads), a read of a lane outside a shuffle's mask, a kernel that relies on the
number of blocks of a cooperative launch (at most :data:`COOPERATIVE_BLOCKS` here, as
the real backend launches fewer when fewer fit), an access past a buffer, a write
into a ``const`` parameter, signed overflow and misaligned vector accesses (UBSan).
What it cannot say: anything about speed (its latencies are the emulation's), the
GPU's memory model beyond sequential consistency, or what ptxas does with registers.

    >>> s = Session("sample_graphs/layernorm.json", backend="cuda-emu")  # doctest: +SKIP
    >>> s.auto("stitch"); s.measure(repeats=1).within_tolerance        # doctest: +SKIP
    True
"""
from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..codegen.kernel import Kernel
from ..errors import BackendUnavailable, WorkbenchError
from ..device import H100, Device
from .backend import Backend, CompiledKernel, Progress, compile_in_parallel
from .cache import cache_subdir
from .cc import _run, build_shared, cpu_model, load_library

EMU_DIR = Path(__file__).with_name("emu")
HEADER = EMU_DIR / "wb_cuda_emu.h"
MMA_HEADER = EMU_DIR / "mma.h"          # what `#include <mma.h>` finds (nvcuda::wmma)
RUNTIME = EMU_DIR / "runtime.cpp"
# -O1: fast enough to run, quick to build; UBSan stops at the first undefined behaviour
CXX_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-pthread", "-w")
SANITIZE = ("-fsanitize=undefined", "-fno-sanitize-recover=undefined")
# every memory access through a hook (GCC's ThreadSanitizer instrumentation; the hooks
# are the emulator runtime's, which counts global-memory traffic -- the compile step
# alone, so that the link does not pull in TSan's own runtime)
COUNT_ACCESSES = ("-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0")
# the blocks a cooperative launch runs at once here: each on an OS thread of its own,
# spinning in the kernel's grid barrier. Fewer than a GPU holds, which every kernel
# must take (its loops stride over the grid; the cupy backend caps the grid too).
COOPERATIVE_BLOCKS = 8
TIMEOUT_ENV = "WB_CUDA_EMU_TIMEOUT"     # seconds one launch may run (default 120)


class _Launch(ctypes.Structure):
    """``wb_emu_launch_args`` of wb_cuda_emu.h, field for field."""
    _fields_ = [("grid", ctypes.c_uint), ("block", ctypes.c_uint),
                ("cooperative", ctypes.c_int), ("nargs", ctypes.c_int),
                ("args", ctypes.POINTER(ctypes.c_void_p)),
                ("sizes", ctypes.POINTER(ctypes.c_ulonglong)),
                ("timeout_s", ctypes.c_double), ("seed", ctypes.c_ulonglong),
                ("error", ctypes.c_void_p), ("error_len", ctypes.c_ulonglong),
                ("accesses", ctypes.POINTER(ctypes.c_ulonglong))]


WIDTHS = (1, 2, 4, 8, 16)
STAT_WORDS = 16        # what the runtime reports per parameter (wb_emu_launch_args)


@dataclass(frozen=True)
class Accesses:
    """The global-memory accesses of one launch to one buffer, counted by the emulator:
    bytes read and written by access width (``WIDTHS``: 1 to 16 bytes), and how many
    distinct bytes were read and written."""
    read_by_width: tuple[int, ...]
    written_by_width: tuple[int, ...]
    read_distinct: int
    written_distinct: int
    # warp-wide requests and the 32-byte sectors they touched (the lanes' k-th execution
    # of one load or store instruction is one request), loads and stores
    load_requests: int = 0
    load_sectors: int = 0
    store_requests: int = 0
    store_sectors: int = 0

    @property
    def read(self) -> int:
        return sum(self.read_by_width)

    @property
    def written(self) -> int:
        return sum(self.written_by_width)

    @property
    def reads_per_byte(self) -> float:
        """How often each byte read was read (1.0: each once)."""
        return self.read / self.read_distinct if self.read_distinct else 0.0

    def efficiency(self, write: bool = False) -> float:
        """The share of the bytes its sectors move that the loads (or stores) asked for:
        1.0 when every request is coalesced (a warp's lanes side by side), 0.125 when
        each lane's 4 bytes take a 32-byte sector of their own."""
        sectors = self.store_sectors if write else self.load_sectors
        asked = self.written if write else self.read
        return asked / (32 * sectors) if sectors else 1.0

    def vector_fraction(self, width: int = 16) -> float:
        """The share of the bytes read and written in accesses of ``width`` bytes."""
        k = WIDTHS.index(width)
        total = self.read + self.written
        return (self.read_by_width[k] + self.written_by_width[k]) / total if total else 0.0


@lru_cache(maxsize=None)
def find_cxx() -> tuple[str, str] | None:
    """(path, version line) of the C++ compiler: $CXX, else c++, g++ or clang++."""
    for cand in [os.environ.get("CXX"), "c++", "g++", "clang++"]:
        if cand and shutil.which(cand):
            path = shutil.which(cand)
            out = _run([path, "--version"])
            return path, (out.stdout.splitlines() or ["unknown"])[0]
    return None


def _emu_cache() -> Path:
    return cache_subdir("cuda-emu")


def _compiler_takes(extra: tuple[str, ...], link: bool) -> tuple[str, ...]:
    """``extra`` where the C++ compiler builds a one-line source with it -- linked into
    a shared library when ``link``, compiled only otherwise -- else none."""
    cxx = find_cxx()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("extern \"C\" void wb_probe(int* p) { *p += 1; }\n")
        how = (*CXX_FLAGS, *extra) if link else ("-std=c++17", *extra, "-c")
        r = _run([cxx[0], *how, str(src), "-o", str(Path(tmp) / "probe.o")])
    return extra if r.returncode == 0 else ()


@lru_cache(maxsize=None)
def _sanitize_flags() -> tuple[str, ...]:
    """UBSan's flags where the compiler can link with them (libubsan present), else none."""
    return _compiler_takes(SANITIZE, link=True)


@lru_cache(maxsize=None)
def count_flags() -> tuple[str, ...]:
    """COUNT_ACCESSES where the compiler takes them (GCC), else none: the kernels still
    run and are checked, and every launch's accesses read zero (``counting()``)."""
    return _compiler_takes(COUNT_ACCESSES, link=False)


def counting() -> bool:
    """Whether launches count their global-memory accesses here."""
    return bool(count_flags())


@lru_cache(maxsize=None)
def flags() -> tuple[str, ...]:
    """What every kernel library of the emulator is built with (the headers' hash among
    them -- wb_cuda_emu.h's and mma.h's -- so a changed header rebuilds every kernel)."""
    digest = hashlib.sha256(HEADER.read_bytes() + MMA_HEADER.read_bytes()).hexdigest()[:16]
    return (*CXX_FLAGS, *_sanitize_flags(), f"-DWB_EMU_HEADER={digest}", f"-I{EMU_DIR}",
            "-include", "wb_cuda_emu.h")


_runtime_lock = threading.Lock()


@lru_cache(maxsize=None)
def runtime_library() -> ctypes.CDLL:
    """The emulator's runtime, built once per source and compiler and loaded with its
    symbols global, so kernel libraries loaded after it resolve ``wb_emu_*`` to it."""
    cxx = find_cxx()
    if cxx is None:
        raise BackendUnavailable(_NO_CXX)
    with _runtime_lock:
        path = build_shared("wb_cuda_emu_runtime", RUNTIME.read_text() + HEADER.read_text(),
                            compiler=cxx, flags=(*CXX_FLAGS, "-O2", f"-I{EMU_DIR}"),
                            suffix=".cpp", language="C++", cache=_emu_cache())
        return load_library(path, mode=ctypes.RTLD_GLOBAL)


_NO_CXX = ("backend cuda-emu needs a C++ compiler (looked for $CXX, c++, g++, clang++): "
           "install one (apt-get install g++), or use --backend cpu")


def build(name: str, source: str, origin: str = ""):
    """Build CUDA C ``source`` whose kernel is ``name`` for the emulator: its
    ``wb_emu_entry`` (called by :func:`run`)."""
    runtime_library()
    path = build_shared(name, f"{source}\nWB_EMU_ENTRY({name})\n", compiler=find_cxx(),
                        flags=flags(), suffix=".cpp", origin=origin, language="C++",
                        cache=_emu_cache(), compile_only=count_flags())
    lib = load_library(path)
    # closed with the last reference to its entry: only child processes run kernel
    # code, so the parent may unmap it at any time (a long fuzz run loads thousands)
    weakref.finalize(lib, _ctypes.dlclose, lib._handle).atexit = False
    fn = lib.wb_emu_entry
    fn.argtypes = [ctypes.POINTER(_Launch)]
    fn.restype = ctypes.c_int
    fn.library = lib          # kept alive with the function
    fn.kernel_name = name
    # a GPU refuses a launch of more threads than the kernel's __launch_bounds__
    bound = re.search(rf"__launch_bounds__\((\d+)[^)]*\)\s+{name}\s*\(", source)
    fn.max_threads = int(bound.group(1)) if bound else None
    return fn


class EmulatedLaunchError(WorkbenchError):
    """A launch the emulator stopped: out of bounds, a deadlock, undefined behaviour..."""


def run(entry, grid: int, block: int, args, cooperative: bool = False, seed: int = 0,
        timeout_s: float | None = None) -> tuple[Accesses, ...]:
    """Launch a built kernel (:func:`build`) on NumPy arrays (``args``, in the kernel's
    parameter order: a buffer's contents are copied to the emulated device and back only
    when the launch ran cleanly; a scalar parameter takes a 0-d array of its type).
    Returns each parameter's global-memory accesses (nothing for a scalar). Raises
    :class:`EmulatedLaunchError` saying what went wrong."""
    if entry.max_threads is not None and block > entry.max_threads:
        raise EmulatedLaunchError(
            f"kernel {entry.kernel_name} launched with {block} threads a block, past its "
            f"__launch_bounds__({entry.max_threads}): a GPU refuses the launch "
            "(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)")
    n = len(args)
    values = (ctypes.c_void_p * max(n, 1))(*[a.ctypes.data for a in args])
    base = ctypes.addressof(values)
    argv = (ctypes.c_void_p * max(n, 1))(*[base + i * ctypes.sizeof(ctypes.c_void_p)
                                           for i in range(n)])
    sizes = (ctypes.c_ulonglong * max(n, 1))(*[a.nbytes for a in args])
    error = ctypes.create_string_buffer(4096)
    if timeout_s is None:
        timeout_s = float(os.environ.get(TIMEOUT_ENV, "120"))
    counts = (ctypes.c_ulonglong * (STAT_WORDS * max(n, 1)))()
    la = _Launch(grid, block, int(cooperative), n, argv, sizes, timeout_s, seed,
                 ctypes.cast(error, ctypes.c_void_p), len(error), counts)
    if entry(ctypes.byref(la)) != 0:
        raise EmulatedLaunchError(
            f"kernel {entry.kernel_name} failed in the CUDA emulator (grid {grid}, block {block}"
            f"{', cooperative' if cooperative else ''}, seed {seed}): "
            f"{error.value.decode(errors='replace')}")
    c = [list(counts[STAT_WORDS * i:STAT_WORDS * (i + 1)]) for i in range(n)]
    return tuple(Accesses(tuple(w[0:5]), tuple(w[5:10]), *w[10:16]) for w in c)


class CudaEmuBackend(Backend):
    """``seed``: the order blocks and threads run in (each launch takes the next)."""
    name = "cuda-emu"
    target = "cuda"
    xp = np
    emulated = True       # its latencies are the emulation's, on the CPU

    @classmethod
    def unavailable(cls) -> str | None:
        if not sys.platform.startswith("linux"):
            # (fork, anonymous shared mappings, ELF symbols in its stack switch)
            return f"backend cuda-emu runs on Linux only, not {sys.platform}; use --backend cpu"
        return None if find_cxx() is not None else _NO_CXX

    def __init__(self, seed: int = 0):
        runtime_library()
        self.seed = seed
        self._launches = 0
        self._count_lock = threading.Lock()

    def describe_device(self) -> Device:
        # the plans of the GPU the CUDA sources are sized for: the same kernels the
        # cupy backend would run on an H100 and the NVRTC check compiles
        return H100

    def device_name(self) -> str:
        return f"{H100.name}, emulated on the CPU ({cpu_model()})"

    def compile(self, kernels: Sequence[Kernel], progress: Progress | None = None
                ) -> list[CompiledKernel]:
        return compile_in_parallel(kernels, lambda k: self.compile_source(k, self.render(k)),
                                   progress)

    def compile_sources(self, kernels: Sequence[Kernel], sources: Mapping[str, str],
                        origin: str = "") -> list[CompiledKernel]:
        return compile_in_parallel(kernels, lambda k: self.compile_source(
            k, sources.get(k.name, ""), origin))

    def compile_source(self, kernel: Kernel, source: str, origin: str = "") -> CompiledKernel:
        ck = CompiledKernel(kernel, source)
        if kernel.library is None:
            ck.fn = build(kernel.name, source, origin)
        return ck

    def launch(self, ck: CompiledKernel, args: list) -> None:
        k = ck.kernel
        grid = k.launch.grid
        if k.launch.cooperative:
            grid = min(grid, COOPERATIVE_BLOCKS)
        with self._count_lock:
            seed = self.seed + self._launches
            self._launches += 1
        # the launch's global-memory accesses, per parameter (the last launch's)
        ck.accesses = run(ck.fn, grid, k.launch.block, args, k.launch.cooperative, seed)

    def asarray(self, a):
        return np.ascontiguousarray(a) if np.ndim(a) else np.array(a)

    def to_numpy(self, a, dtype=None) -> np.ndarray:
        return a
