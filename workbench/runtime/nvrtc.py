"""NVRTC, called directly: how every CUDA kernel is compiled, on a GPU or without one.

The GPU backend compiles each kernel with :func:`compile_cuda` and loads the cubin into
CuPy; the offline check (tests, CI) calls the same function with the same options for
``sm_90`` on a machine without a GPU -- so what the check compiles is exactly what the
runtime compiles (the options live in :data:`OPTIONS`, once). NVRTC and the CUDA
headers come from the CUDA toolkit or from pip (``nvidia-cuda-nvrtc``,
``nvidia-cuda-runtime``, ``nvidia-cuda-cccl``; their ``-cu12`` names for CUDA 12);
none needs a GPU.

Compiled cubins are cached by source, options and NVRTC version beside the C kernels
(``$WORKBENCH_CACHE`` or ``~/.cache/fusion-workbench``), written atomically.

Example::

    >>> cubin = compile_cuda(src, "k0_exp", arch="90")          # doctest: +SKIP
    >>> ptx = compile_cuda(src, "k0_exp", arch="90", ptx=True)   # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import BackendUnavailable, WorkbenchError
from .cache import cache_subdir, install, read_sealed

# What every kernel is compiled with (besides -arch and the header directories).
# C++17: CUDA 13's cooperative_groups.h needs it (libcu++ refuses C++14).
OPTIONS = ("--std=c++17",)


@dataclass(frozen=True)
class Toolchain:
    """The NVRTC library found here and the header directories it compiles with."""
    library: str
    version: tuple[int, int]
    include_dirs: tuple[str, ...]

    def options(self, arch: str, ptx: bool = False) -> tuple[str, ...]:
        """The whole option list for one compile (cubin for sm_<arch>, or PTX)."""
        target = f"-arch=compute_{arch}" if ptx else f"-arch=sm_{arch}"
        return OPTIONS + (target,) + tuple(f"-I{d}" for d in self.include_dirs)


class NvrtcError(WorkbenchError):
    """NVRTC rejected a source (the message holds its log)."""


# WMMA in TF32 and bfloat16 (a tensor-core GEMM tile, BlockTile.tensor) needs sm_80
# or newer
TENSOR_CORE_ARCH = 80


def require_arch(kernel, arch: str) -> None:
    """Refuse, with the reason and the fix, a kernel this GPU (``arch``: "90") cannot
    run: one whose GEMM tiles are on tensor cores (``Kernel.tensor_cores``) before
    compute capability 8.0 -- from an artifact exported for a newer GPU (a plan made
    here keeps such a GPU's matmuls on the CUDA cores: it has no ``tensor_flops``)."""
    if kernel.tensor_cores and int(arch) < TENSOR_CORE_ARCH:
        raise WorkbenchError(
            f"kernel {kernel.name} multiplies on tensor cores (WMMA in TF32 or a half "
            "type), which needs "
            f"compute capability 8.0 or newer; this GPU is sm_{arch}. Plan it on this GPU "
            "(export the artifact again from a session here): its matmuls then stay on "
            "the CUDA cores")


def _candidates(major: int | None) -> list[str]:
    """Where libnvrtc may be: $WORKBENCH_NVRTC, pip's nvidia wheels, the toolkit."""
    found = []
    if os.environ.get("WORKBENCH_NVRTC"):
        found.append(os.environ["WORKBENCH_NVRTC"])
    for root in sys.path:
        found += sorted(glob.glob(os.path.join(root, "nvidia", "cu*", "lib", "libnvrtc.so.*")))
        found += sorted(glob.glob(os.path.join(root, "nvidia", "cuda_nvrtc", "lib",
                                               "libnvrtc.so.*")))
    for home in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"),
                 "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)):
        if home:
            found += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    name = ctypes.util.find_library("nvrtc")
    if name:
        found.append(name)
    found = [f for f in dict.fromkeys(found) if "builtins" not in f and "alt" not in f]
    if major is not None:   # the CUDA version the GPU runtime uses comes first
        found.sort(key=lambda f: 0 if f".so.{major}" in f else 1)
    return found


def _include_dirs(lib: str) -> tuple[str, ...]:
    """CCCL first (as the toolkit orders it), then the CUDA headers, beside the library
    (a toolkit's include/, or pip's nvidia/cu13/include and the cu12 wheels' dirs)."""
    base = Path(lib).resolve().parent.parent
    roots = [base / "include",
             base.parent / "cuda_runtime" / "include", base.parent / "cuda_cccl" / "include"]
    for home in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            roots.append(Path(home) / "include")
    for root in sys.path:      # the headers' wheels may sit in another site dir
        roots += [Path(p) for p in glob.glob(os.path.join(root, "nvidia", "cu*", "include"))]
    dirs = []
    for r in roots:
        if (r / "cccl" / "cuda" / "std").is_dir():
            dirs.append(r / "cccl")
        elif (r / "cuda" / "std").is_dir():
            dirs.append(r)
    for r in roots:
        if (r / "cuda_fp16.h").is_file():
            dirs.append(r)
    return tuple(dict.fromkeys(str(d) for d in dirs))


@lru_cache(maxsize=None)
def toolchain(major: int | None = None) -> Toolchain:
    """The first NVRTC that loads (one of CUDA ``major`` first), with its headers; or
    BackendUnavailable saying how to install one."""
    for lib in _candidates(major):
        try:
            dll = ctypes.CDLL(lib)
        except OSError:
            continue
        lo, hi = ctypes.c_int(), ctypes.c_int()
        dll.nvrtcVersion(ctypes.byref(lo), ctypes.byref(hi))
        includes = _include_dirs(lib)
        if not any(Path(d, "cuda_fp16.h").is_file() for d in includes):
            continue
        return Toolchain(lib, (lo.value, hi.value), includes)
    raise BackendUnavailable(
        "NVRTC and the CUDA headers were not found: pip install nvidia-cuda-nvrtc "
        "nvidia-cuda-runtime nvidia-cuda-cccl (CUDA 13; the -cu12 packages for CUDA 12), "
        "or set CUDA_PATH to a CUDA toolkit")


@lru_cache(maxsize=None)
def _dll(lib: str):
    dll = ctypes.CDLL(lib)
    dll.nvrtcGetErrorString.restype = ctypes.c_char_p
    return dll


def _check(dll, rc: int, what: str) -> None:
    if rc != 0:
        raise WorkbenchError(f"NVRTC {what} failed: {dll.nvrtcGetErrorString(rc).decode()}")


def _nvrtc(source: str, name: str, options: tuple[str, ...], tc: Toolchain,
           ptx: bool) -> bytes:
    dll = _dll(tc.library)
    prog = ctypes.c_void_p()
    _check(dll, dll.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                       f"{name}.cu".encode(), 0, None, None), "create")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = dll.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        dll.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        dll.nvrtcGetProgramLog(prog, log)
        if rc != 0:
            raise NvrtcError(
                f"NVRTC {tc.version[0]}.{tc.version[1]} rejected kernel {name} "
                f"({' '.join(o for o in options if not o.startswith('-I'))}):\n"
                f"{log.value.decode(errors='replace')[-3000:]}")
        get_size, get = ((dll.nvrtcGetPTXSize, dll.nvrtcGetPTX) if ptx
                         else (dll.nvrtcGetCUBINSize, dll.nvrtcGetCUBIN))
        _check(dll, get_size(prog, ctypes.byref(size)), "output size")
        out = ctypes.create_string_buffer(size.value)
        _check(dll, get(prog, out), "output")
        return out.raw[:size.value]
    finally:
        dll.nvrtcDestroyProgram(ctypes.byref(prog))


@dataclass(frozen=True)
class PtxasReport:
    """What ptxas says of one compiled kernel (``--ptxas-options=-v``)."""
    registers: int
    spill_bytes: int          # spill stores + spill loads
    stack_bytes: int
    shared_bytes: int
    log: str


def ptxas_report(source: str, name: str, arch: str = "90",
                 major: int | None = None) -> PtxasReport:
    """Compile with the runtime's options plus ptxas' verbose report: registers,
    spills, stack frame and static shared memory of the kernel."""
    import re
    tc = toolchain(major)
    dll = _dll(tc.library)
    options = tc.options(arch) + ("--ptxas-options=-v",)
    prog = ctypes.c_void_p()
    _check(dll, dll.nvrtcCreateProgram(ctypes.byref(prog), source.encode(),
                                       f"{name}.cu".encode(), 0, None, None), "create")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = dll.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        dll.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        dll.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            raise NvrtcError(f"NVRTC rejected kernel {name}:\n{log[-3000:]}")
    finally:
        dll.nvrtcDestroyProgram(ctypes.byref(prog))

    def num(pattern: str) -> int:
        m = re.search(pattern, log)
        return int(m.group(1)) if m else 0
    return PtxasReport(num(r"Used (\d+) registers"),
                       num(r"(\d+) bytes spill stores") + num(r"(\d+) bytes spill loads"),
                       num(r"(\d+) bytes stack frame"), num(r"(\d+) bytes smem"), log)


def compile_cuda(source: str, name: str, arch: str, ptx: bool = False,
                 major: int | None = None) -> bytes:
    """A kernel's cubin for ``sm_<arch>`` (or its PTX), compiled by NVRTC with
    :data:`OPTIONS`; cached on disk. Raises NvrtcError with NVRTC's log."""
    tc = toolchain(major)
    options = tc.options(arch, ptx)
    key = hashlib.sha256("\0".join([source, " ".join(options), tc.library,
                                    str(tc.version)]).encode()).hexdigest()[:24]
    out = cache_subdir("cuda") / f"{name}-{key}.{'ptx' if ptx else 'cubin'}"
    cached = read_sealed(out)      # (reused only where this user's seal verifies)
    if cached is not None:
        return cached
    binary = _nvrtc(source, name, options, tc, ptx)
    fd, tmp = tempfile.mkstemp(dir=out.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(binary)
    install(out, Path(tmp))        # atomic: concurrent compiles race harmlessly
    return binary
