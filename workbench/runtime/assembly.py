"""Compiler Explorer's view of one kernel: the exact command that compiles it, and
its assembly.

CPU: the command is the one :func:`.cc.build_shared` runs (the compiler found, every
flag of :func:`.cc.cflags` -- ``$WB_EXTRA_CFLAGS`` included -- and the link flags); the
assembly is the same compiler's ``-S`` output of the same translation unit with the
same flags, made on demand (nothing is compiled for it until asked) and cached on disk
by source, flags and compiler like the libraries. GPU: the NVRTC options
:meth:`.nvrtc.Toolchain.options` gives the runtime, and the PTX NVRTC makes with them
(:func:`.nvrtc.compile_cuda`, cached; NVRTC runs without a GPU). SASS would need the
toolkit's ``nvdisasm``, which the pip wheels do not ship, so it is not offered.

Example::

    >>> cpu_command("k0_exp")[-3:]                      # doctest: +SKIP
    ('k0_exp.c', '-o', 'k0_exp.so', ...)
    >>> "vaddps" in cpu_assembly("k0_exp", source)     # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import re
import shlex
import tempfile
from pathlib import Path

from ..errors import WorkbenchError
from .cache import cache_subdir, install, read_sealed
from .cc import _run, cflags, find_compiler, link_flags

# the GPU a CPU-only session's PTX is made for: the H100 the cost model describes
DEFAULT_ARCH = "90"

# assembler directives that carry no instruction (debug, unwind, file markers): left
# out of the shown assembly as Compiler Explorer's "filter directives" does
_NOISE = re.compile(r"^\s*\.(cfi_\w+|loc|file|ident|section\s+\.note|addrsig|"
                    r"p2align|align|size|type)\b")


def cpu_command(name: str) -> tuple[str, ...]:
    """The command line that builds kernel ``name`` (as ``build_shared`` runs it, in a
    temporary directory of the kernel cache)."""
    cc, _ = find_compiler()
    return (cc, *cflags(), f"{name}.c", "-o", f"{name}.so", *link_flags())


def cpu_assembly(name: str, source: str, filtered: bool = True) -> str:
    """The C compiler's assembly of ``source`` with the kernels' flags (``-S``)."""
    cc, version = find_compiler()
    # -S stops before the link: the link flags do not matter, the compile flags do
    flags = tuple(f for f in cflags() if f != "-shared")
    key = hashlib.sha256("\0".join([source, " ".join(map(shlex.quote, flags)), version])
                         .encode()).hexdigest()[:24]
    cache = cache_subdir("cpu-asm")
    out = cache / f"{name}-{key}.s"
    text = read_sealed(out)
    if text is None:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            c_file, s_tmp = Path(tmp) / f"{name}.c", Path(tmp) / "k.s"
            c_file.write_text(source)
            r = _run([cc, *flags, "-S", str(c_file), "-o", str(s_tmp)])
            if r.returncode != 0:
                raise WorkbenchError(f"the C compiler rejected kernel {name} when asked "
                                     f"for its assembly:\n{r.stderr[-2000:]}")
            text = s_tmp.read_bytes()
            install(out, s_tmp)
    return filter_directives(text.decode()) if filtered else text.decode()


def filter_directives(asm: str) -> str:
    """The assembly without debug, unwind and layout directives (labels and
    instructions kept)."""
    return "".join(line for line in asm.splitlines(keepends=True) if not _NOISE.match(line))


def cuda_options(arch: str = DEFAULT_ARCH, ptx: bool = False) -> tuple[str, ...]:
    """The NVRTC options the GPU backend compiles a kernel with (cubin for sm_<arch>;
    ``ptx``: the PTX target compute_<arch>)."""
    from .nvrtc import toolchain
    return toolchain().options(arch, ptx)


def cuda_command(name: str, arch: str = DEFAULT_ARCH) -> tuple[str, ...]:
    """NVRTC's compile as a command line would name it: the program name then every
    option (NVRTC is a library call, ``nvrtcCompileProgram``; this is its argv)."""
    return ("nvrtcCompileProgram", f"{name}.cu", *cuda_options(arch))


def cuda_ptx(name: str, source: str, arch: str = DEFAULT_ARCH) -> str:
    """The PTX NVRTC makes of ``source`` for compute_<arch>."""
    from .nvrtc import compile_cuda
    return compile_cuda(source, name, arch, ptx=True).decode().rstrip("\0")


def shell_line(argv: tuple[str, ...]) -> str:
    """The command as one line a shell would run (each argument quoted where needed)."""
    return " ".join(shlex.quote(a) for a in argv)


__all__ = ["DEFAULT_ARCH", "cpu_assembly", "cpu_command", "cuda_command", "cuda_options",
           "cuda_ptx", "filter_directives", "shell_line"]
