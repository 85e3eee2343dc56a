"""The C toolchain: the system compiler, its flags, and the cache of built libraries.

Each source is compiled to its own shared library, cached by the SHA-256 of its
source, flags and compiler in a user cache directory (``$WORKBENCH_CACHE`` or
``~/.cache/fusion-workbench``; :mod:`.cache`: a library is reused and loaded only where
this user's seal of its bytes verifies). A library is written to a temporary name and
moved into place atomically, so processes compiling the same kernel at once never see
a partial file. The CPU backend and the CPU probe (``calibrate``) build with it.

``$WB_EXTRA_CFLAGS`` (split as a shell would) is appended to the flags of every kernel,
for checking builds such as ``-fsanitize=address,undefined`` (``scripts/sanitize.py``).
The extra flags are part of the cache key, so a library built with them is never
served to a build without them, or the other way round. The CPU probe is built
without them: the device a plan is made for is this machine's, whatever the kernels
are checked with.
"""
from __future__ import annotations

import _ctypes
import atexit
import ctypes
import hashlib
import itertools
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from ..errors import BackendUnavailable, WorkbenchError
from .cache import cache_subdir, install, is_cached, open_sealed, read_sealed
from .openmp import needed, private_runtime, soname

# How the kernels' OpenMP threads wait for the next kernel. Spinning forever steals the
# cores from whatever runs next on the host (measured 324 ms -> 128 ms on
# bert_chain.onnx when BLAS threads ran the matmuls beside the kernels), but sleeping at
# once (PASSIVE) makes every kernel wake its threads through a futex: ViT ran 3.5-4.6
# ms under PASSIVE against 2.9-3.6 with this short spin, BERT 6.1-7.5 against 5.7-6.3
# (benchmarks/results/archive/omp_wait_policy-2026-11-23-spin.md; docs/decisions/
# omp-wait-policy.md). So a short spin, then sleep:
# 10000 PAUSEs, about 0.26 ms at 26 ns each (Zen 4), longer than the gap between two
# kernels of a run, short enough that a pool left spinning after a run costs nothing
# that matters. libgomp reads these once, when it is loaded: load_library sets them for
# that moment only, so the user's environment is never left changed.
_OPENMP_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}
# set by the user: then the workbench leaves every one of them alone
_OPENMP_WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
_env_lock = threading.Lock()


def load_library(path, mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """``ctypes.CDLL`` of a built library, with the OpenMP wait settings above in the
    environment while it loads (unless the user set any of them) and the environment
    put back after: the workbench's own libgomp (:func:`openmp_runtime`), loaded
    before the first library, reads them then -- whatever libgomp torch, say, loaded
    first (:func:`_open_with_runtime`). libgomp takes the spin count
    over the policy; PASSIVE is for OpenMP runtimes that know no GOMP_SPINCOUNT. A
    library in the kernel cache is loaded only where its seal verifies, from the very
    bytes checked (:func:`.cache.open_sealed`; CacheEntryChanged otherwise)."""
    rt = openmp_runtime()     # (before the lock: finding it runs the compiler)
    with _env_lock:
        if any(v in os.environ for v in _OPENMP_WAIT_VARIABLES):
            lib = _open_with_runtime(Path(path), mode, rt)
        else:
            os.environ.update(_OPENMP_WAIT)
            try:
                lib = _open_with_runtime(Path(path), mode, rt)
            finally:
                for v in _OPENMP_WAIT:
                    del os.environ[v]
        _pin_openmp_runtime()
    return lib


# the workbench's own OpenMP runtime once loaded (never closed: its pool sleeps in it)
_runtime: list[ctypes.CDLL] = []


def _open_with_runtime(path: Path, mode: int, rt: Path | None) -> ctypes.CDLL:
    """Open ``path`` after the workbench's OpenMP runtime (:mod:`.openmp`), so that a
    library needing it finds it loaded; such a library is opened with RTLD_DEEPBIND,
    its OpenMP calls bound to that runtime even where another libgomp's symbols are
    global (torch's). Not where a sanitizer runtime is in the process: ASan refuses
    RTLD_DEEPBIND (the library then binds as the loader finds its symbols)."""
    if rt is not None and not _runtime:
        try:
            _runtime.append(_open_library(rt, ctypes.RTLD_LOCAL))
        except OSError as e:
            raise WorkbenchError(
                f"the workbench's OpenMP runtime {rt} does not load ({e}): set "
                f"{PRIVATE_OPENMP_ENV}=0 to link the compiler's libgomp instead") from None
    if rt is not None and _needs(path, _soname_of(rt)) and not _sanitizer_runtime():
        mode |= getattr(os, "RTLD_DEEPBIND", 0)
    return _open_library(path, mode)


@lru_cache(maxsize=None)
def _soname_of(path: Path) -> str | None:
    return soname(path.read_bytes())


def _needs(path: Path, name: str | None) -> bool:
    try:
        return name in needed(path.read_bytes())
    except OSError:
        return False


@lru_cache(maxsize=None)
def _sanitizer_runtime() -> bool:
    """Whether a sanitizer's runtime is in the process (LD_PRELOAD, scripts/sanitize.py)."""
    main = ctypes.CDLL(None)
    return any(hasattr(main, f"__{s}_init") for s in ("asan", "tsan", "msan", "hwasan"))


# "0": the kernels link the compiler's libgomp, as before issue 44 -- shared with torch
# where torch loaded it first (to compare, benchmarks/threads.py)
PRIVATE_OPENMP_ENV = "WB_PRIVATE_OPENMP"


def openmp_runtime() -> Path | None:
    """The workbench's copy of the compiler's libgomp in the kernel cache, which every
    kernel library links (:mod:`.openmp`); None where ``$WB_PRIVATE_OPENMP`` is ``0``,
    the compiler names no libgomp, or it cannot be copied (then the compiler's)."""
    if os.environ.get(PRIVATE_OPENMP_ENV, "1").strip() == "0":
        return None
    found = _compiler_libgomp()
    if found is None:
        return None
    # (in the cache of the moment: $WORKBENCH_CACHE may change within a process, and a
    # user may empty it)
    rt = _runtime_in(found, cache_dir())
    if rt is not None and not rt.exists():
        _runtime_in.cache_clear()
        rt = _runtime_in(found, cache_dir())
    return rt


@lru_cache(maxsize=None)
def _compiler_libgomp() -> Path | None:
    try:
        cc, _ = find_compiler()
    except BackendUnavailable:      # (nothing to link; a library built elsewhere loads)
        return None
    r = _run([cc, "-print-file-name=libgomp.so"])
    found = Path(r.stdout.strip()) if r.returncode == 0 else None
    if found is None or not found.is_absolute() or not found.exists():
        return None
    return found.resolve()


@lru_cache(maxsize=None)
def _runtime_in(libgomp: Path, cache: Path) -> Path | None:
    return private_runtime(libgomp, cache)


_links = itertools.count()


@lru_cache(maxsize=None)
def _link_dir() -> str:
    d = tempfile.mkdtemp(prefix="wb-load-")     # (this process's own, mode 0700)
    atexit.register(shutil.rmtree, d, True)
    return d


def _open_library(path: Path, mode: int) -> ctypes.CDLL:
    """dlopen ``path``; one in the kernel cache through a descriptor of its checked
    bytes, so what is mapped is what was checked, whatever replaces the file meanwhile:
    through a link of a name never used before to /proc/self/fd/N (the loader takes a
    name it has loaded as that library again, and fd numbers are reused)."""
    if not is_cached(path):
        return ctypes.CDLL(str(path), mode)
    fd = open_sealed(path)
    try:
        if not os.path.isdir("/proc/self/fd"):       # (not Linux: checked, loaded by name)
            return ctypes.CDLL(str(path), mode)
        link = os.path.join(_link_dir(), f"{path.stem}-{next(_links)}.so")
        os.symlink(f"/proc/self/fd/{fd}", link)
        try:
            return ctypes.CDLL(link, mode)
        finally:
            os.unlink(link)
    finally:
        os.close(fd)


# the OpenMP runtimes' files this process keeps loaded for good (see _pin_openmp_runtime)
_OPENMP_RUNTIME = re.compile(r"/lib(gomp|omp|iomp5)[-.\w]*\.so[.\d]*$")
_pinned_runtimes: list = []


def _pin_openmp_runtime() -> None:
    """Load the OpenMP runtime the kernel libraries linked once more, never to be
    closed: its thread pool sleeps inside it between kernels, so it must stay mapped
    when the last kernel library that needed it is unloaded (``unload_library``).
    Found in ``/proc/self/maps`` (Linux); elsewhere nothing is pinned and nothing is
    unloaded."""
    if _pinned_runtimes:
        return
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if "/" in line}
    except OSError:
        return
    for p in sorted(x for x in paths if _OPENMP_RUNTIME.search(x)):
        _pinned_runtimes.append(ctypes.CDLL(p))


def unload_library(lib: ctypes.CDLL) -> None:
    """Close one load of a kernel library (``dlclose``: the loader unmaps it when its
    last load is closed), so a long session does not keep every kernel it ever built
    mapped -- one process ran out of Linux's 65530 memory maps after ~1800 fuzzed
    graphs. Only where the OpenMP runtime is pinned; the caller guarantees that no
    function of this load runs or will run."""
    if _pinned_runtimes:
        _ctypes.dlclose(lib._handle)


def _run(args: list[str]) -> subprocess.CompletedProcess:
    """Run the compiler with a snapshot of the environment taken under the lock
    ``load_library`` changes it under: a child started while another thread's
    ``OMP_WAIT_POLICY`` was being set or removed would otherwise read the C ``environ``
    array as it is reallocated (``execve`` failed with EFAULT, "Bad address", when
    kernels compiled in parallel while others loaded)."""
    with _env_lock:
        env = dict(os.environ)
    return subprocess.run(args, capture_output=True, text=True, env=env)

# a kernel name becomes a file name in the cache and the symbol looked up: an identifier
_KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

BASE_CFLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-std=gnu11", "-fno-math-errno",
               "-fopenmp"]
# extra compiler flags for every kernel (after the machine's), e.g. sanitizers
EXTRA_CFLAGS_ENV = "WB_EXTRA_CFLAGS"


def cache_dir() -> Path:
    """The C kernels' cache directory (:func:`.cache.cache_subdir`)."""
    return cache_subdir("cpu")


@lru_cache(maxsize=None)
def find_compiler() -> tuple[str, str]:
    """(path, version line) of the C compiler: $CC, else cc, gcc or clang."""
    for cand in [os.environ.get("CC"), "cc", "gcc", "clang"]:
        if cand and shutil.which(cand):
            path = shutil.which(cand)
            out = _run([path, "--version"])
            return path, (out.stdout.splitlines() or ["unknown"])[0]
    raise BackendUnavailable("no C compiler found (looked for $CC, cc, gcc, clang): install "
                             "one (apt-get install gcc) or use --backend reference")


@lru_cache(maxsize=None)
def _check_toolchain() -> None:
    """BackendUnavailable when the compiler cannot build even an empty shared library
    here (no linker, no C library headers): the machine's fault, not the source's."""
    cc, _ = find_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        c = Path(tmp) / "empty.c"
        c.write_text("void wb_empty(void) {}\n")
        r = _run([cc, *BASE_CFLAGS, str(c), "-o", str(Path(tmp) / "e.so")])
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["unknown error"])[-1][:200]
        raise BackendUnavailable(f"the C compiler {cc} cannot build a shared library here "
                                 f"({last}): install the C toolchain (apt-get install gcc "
                                 "binutils libc6-dev) or use --backend reference")


def extra_cflags() -> tuple[str, ...]:
    """The flags in ``$WB_EXTRA_CFLAGS``, split as a shell would (read at every build)."""
    text = os.environ.get(EXTRA_CFLAGS_ENV, "")
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise WorkbenchError(f"${EXTRA_CFLAGS_ENV} is not a valid list of flags ({e}): "
                             f"{text[:200]!r}") from None


def cflags() -> tuple[str, ...]:
    """The flags every kernel is compiled with: :func:`machine_cflags`, then
    ``$WB_EXTRA_CFLAGS``."""
    return (*machine_cflags(), *extra_cflags())


@lru_cache(maxsize=None)
def machine_cflags() -> tuple[str, ...]:
    """The backend's own compiler flags; vector math (glibc libmvec) only when a probe
    builds and loads."""
    cc, _ = find_compiler()
    probe = ("#include <math.h>\n#pragma omp declare simd notinbranch\nfloat expf(float);\n"
             "void p(float* x, int n) {\n#pragma omp simd\n"
             "for (int i = 0; i < n; ++i) x[i] = expf(x[i]); }\n")
    with tempfile.TemporaryDirectory() as tmp:
        c, so = Path(tmp) / "p.c", Path(tmp) / "p.so"
        c.write_text(probe)
        r = _run([cc, *BASE_CFLAGS, str(c), "-o", str(so), "-lmvec", "-lm"])
        if r.returncode == 0:
            try:
                load_library(so)
                return (*BASE_CFLAGS, "-DWB_VECTOR_MATH")
            except OSError:
                pass
    return tuple(BASE_CFLAGS)


@lru_cache(maxsize=None)
def compiler_macros() -> frozenset[str]:
    """The macros the compiler predefines with the backend's flags (``-march=native``),
    empty when it cannot say: what it targets and which compiler it is."""
    cc, _ = find_compiler()
    r = _run([cc, *BASE_CFLAGS, "-dM", "-E", "-x", "c", os.devnull])
    return frozenset(re.findall(r"^#define (\w+)", r.stdout, re.M) if r.returncode == 0
                     else ())


def vector_bytes() -> int:
    """The SIMD register width, in bytes, the compiler targets with the backend's flags,
    from its predefined macros: 64 with AVX-512, 32 with AVX, 16 with SSE2 or NEON, 0
    when it cannot say."""
    macros = compiler_macros()
    for macro, width in (("__AVX512F__", 64), ("__AVX__", 32), ("__SSE2__", 16),
                         ("__ARM_NEON", 16)):
        if macro in macros:
            return width
    return 0


def link_flags() -> list[str]:
    """The libraries a kernel links: the workbench's OpenMP runtime where there is one
    (first, and ``--as-needed`` so the compiler's ``-lgomp``, which ``-fopenmp`` adds
    after it, is left out: every OpenMP symbol is already found), vector math, libm."""
    rt = openmp_runtime()
    return ((["-Wl,--as-needed", str(rt)] if rt is not None else [])
            + (["-lmvec"] if "-DWB_VECTOR_MATH" in machine_cflags() else []) + ["-lm"])


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "CPU"


def build_library(name: str, src: str, origin: str = "", extra: bool = True) -> Path:
    """Compile C source to a shared library in the kernel cache (keyed by source,
    flags and compiler version; installed atomically, so concurrent compilers race
    harmlessly). ``origin`` says where a rejected source came from, for the message.
    ``name`` must be a C identifier (it names files in the cache and the symbol).
    ``extra=False`` leaves out ``$WB_EXTRA_CFLAGS`` (the CPU probe)."""
    cc, version = find_compiler()
    return build_shared(name, src, compiler=(cc, version),
                        flags=cflags() if extra else machine_cflags(), link=link_flags(),
                        origin=origin, check=_check_toolchain)


def build_shared(name: str, src: str, *, compiler: tuple[str, str], flags, link=(),
                 suffix: str = ".c", origin: str = "", check=None, language: str = "C",
                 cache: Path | None = None, compile_only=()) -> Path:
    """Compile ``src`` with ``compiler`` (path, version line) and ``flags`` into a
    shared library in ``cache`` (the kernel cache by default), cached by source,
    flags and compiler version, installed atomically and sealed (a cached library
    whose seal does not verify is built again: :mod:`.cache`). ``check()`` runs when the
    compiler rejects the source, to blame a broken toolchain rather than the source.
    ``compile_only``: flags of the compile step alone, which then runs apart from the
    link (an instrumentation whose runtime the link must not pull in). The C kernels
    build through it (:func:`build_library`), and so does the CUDA emulator
    (``cuda_emu``) with a C++ compiler."""
    if not isinstance(name, str) or not _KERNEL_NAME.fullmatch(name):
        raise WorkbenchError(f"kernel name {str(name)[:80]!r} is not a C identifier of at most "
                             "128 characters; refusing to build it (it would name files "
                             "outside the kernel cache)")
    cc, version = compiler
    cache = cache or cache_dir()
    # every flag, quoted (unchanged for plain flags), so that no two lists of flags --
    # with the extra ones or without -- share a key
    # (the libraries linked too, where there are any: a kernel linked against the
    # compiler's libgomp is not served where the workbench's own runtime is wanted)
    key = hashlib.sha256("\0".join([src, " ".join(map(shlex.quote, (*flags, *compile_only))),
                                    version, *([" ".join(map(shlex.quote, link))] if link
                                               else [])]).encode()).hexdigest()[:24]
    out = cache / f"{name}-{key}.so"
    if read_sealed(out) is None:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            c_file, so_tmp = Path(tmp) / f"{name}{suffix}", Path(tmp) / "k.so"
            c_file.write_text(src)
            if compile_only:
                obj = Path(tmp) / "k.o"
                r = _run([cc, *flags, *compile_only, "-c", str(c_file), "-o", str(obj)])
                if r.returncode == 0:
                    r = _run([cc, *flags, str(obj), "-o", str(so_tmp), *link])
            else:
                r = _run([cc, *flags, str(c_file), "-o", str(so_tmp), *link])
            if r.returncode != 0:
                if check is not None:
                    check()   # a compiler that cannot build anything: say so
                raise WorkbenchError(
                    f"the {language} compiler rejected kernel {name}:\n{r.stderr[-2000:]}\n"
                    + (origin or "this is a workbench bug; please report it with the graph"))
            install(out, so_tmp)
    return out
