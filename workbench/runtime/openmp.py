"""The kernels' own OpenMP runtime: a copy of the compiler's libgomp under a name of its
own, so the kernels' thread pool and its wait policy are the workbench's whatever else
the process loaded.

Why: libgomp reads ``OMP_WAIT_POLICY`` and ``GOMP_SPINCOUNT`` once, when it loads, and
the loader maps one ``libgomp.so.1`` per process. torch bundles its own and loads it
at ``import torch`` with its symbols global (``libtorch_global_deps.so``); a kernel
library then bound to it, so the kernels ran on torch's pool with libgomp's default
spin of 300000 PAUSEs: a call left its worker spinning ~7 ms after it returned (4-7 ms
of CPU in a 50 ms idle window, against 0.2 ms with the workbench's own setting), and the
same happened when torch was imported before the first program compiled
(``benchmarks/results/threads-*.md``; ``docs/decisions/openmp-runtime.md``).

So the runtime the kernels link is this copy, whose ``DT_SONAME`` is the original's with
``lib`` spelled ``wb_`` (``libgomp.so.1`` -> ``wb_gomp.so.1``, the same length, so the
string is patched in place and nothing else in the file moves): a kernel library
records ``wb_gomp.so.1`` as needed, which no other library's ``libgomp.so.1`` matches;
``cc.load_library`` loads the copy first (with the workbench's wait settings in the
environment) and each library that needs it with ``RTLD_DEEPBIND``, so its ``GOMP_*``
calls bind to the copy even where torch's libgomp is global. Two libgomps in one
process are two independent pools (their state is all their own: thread-local data,
the pool, the ICVs); a torch op runs on torch's, a kernel on the workbench's.

Only GCC's libgomp in an ELF64 little-endian file is copied; anything else (clang's
libomp, another platform) gives None and the kernels link the compiler's runtime as
before.

    >>> soname(Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1").read_bytes())  # doctest: +SKIP
    'libgomp.so.1'
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from pathlib import Path

from .cache import install, read_sealed

# the tags of the dynamic section read here (elf.h)
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_SONAME = 0, 1, 5, 14
_PT_LOAD, _PT_DYNAMIC = 1, 2


def _dynamic(data: bytes) -> tuple[list[tuple[int, int]], int] | None:
    """(tag, value) of each entry of an ELF64 little-endian shared library's dynamic
    section and the file offset of its string table; None for any other file."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads, dyn = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dyn = (p_offset, p_filesz)
    if dyn is None:
        return None
    entries = []
    for off in range(dyn[0], dyn[0] + dyn[1] - 15, 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == _DT_NULL:
            break
        entries.append((tag, val))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    # the string table's address in memory, as a file offset (the segment holding it)
    for vaddr, offset, size in loads:
        if strtab is not None and vaddr <= strtab < vaddr + size:
            return entries, strtab - vaddr + offset
    return None


def _string(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode("ascii", "replace")


def soname(data: bytes) -> str | None:
    """The ``DT_SONAME`` of a shared library's bytes (None: none, or not ELF64 LE)."""
    d = _dynamic(data)
    if d is None:
        return None
    entries, strtab = d
    return next((_string(data, strtab + v) for t, v in entries if t == _DT_SONAME), None)


def needed(data: bytes) -> list[str]:
    """The ``DT_NEEDED`` names of a shared library's bytes (empty for a file not ELF64
    LE)."""
    d = _dynamic(data)
    if d is None:
        return []
    entries, strtab = d
    return [_string(data, strtab + v) for t, v in entries if t == _DT_NEEDED]


def private_soname(name: str) -> str:
    """The copy's name: ``libgomp.so.1`` -> ``wb_gomp.so.1`` (as long as the original)."""
    return "wb_" + name[3:]


def renamed(data: bytes) -> bytes | None:
    """The library's bytes with its ``DT_SONAME`` string spelled by
    :func:`private_soname`, or None where it has none that starts with ``lib``."""
    d = _dynamic(data)
    if d is None:
        return None
    entries, strtab = d
    at = next((strtab + v for t, v in entries if t == _DT_SONAME), None)
    if at is None:
        return None
    old = _string(data, at)
    if not old.startswith("lib"):
        return None
    new = private_soname(old).encode()
    return data[:at] + new + data[at + len(new):]


def private_runtime(libgomp: Path, cache: Path) -> Path | None:
    """The workbench's copy of ``libgomp`` (the compiler's) in the kernel cache
    ``cache``, made and sealed there once (keyed by the original's bytes), or None where
    ``libgomp`` is not a GCC libgomp this module can rename (see the module
    docstring)."""
    try:
        data = libgomp.read_bytes()
    except OSError:
        return None
    if not (soname(data) or "").startswith("libgomp."):
        return None
    # (".so.1" as the original: not one of the "*.so" libraries the cache builds)
    out = cache / f"libgomp-wb-{hashlib.sha256(data).hexdigest()[:16]}.so.1"
    if read_sealed(out) is not None:
        return out
    copy = renamed(data)
    if copy is None:
        return None
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        built = Path(tmp) / "libgomp.so"
        built.write_bytes(copy)
        os.chmod(built, 0o755)
        install(out, built)
    return out
