"""A session's kernels as Compiler Explorer shows them: the exact compile command and
the assembly of the kernel holding a node or group (:mod:`workbench.runtime.assembly`).

    >>> s.compile_command("n3")                 # the cc line, flags and all  # doctest: +SKIP
    >>> s.assembly("n3", target="cuda")[:40]    # NVRTC's PTX                 # doctest: +SKIP
"""
from __future__ import annotations

from .codegen import render_kernel
from .errors import WorkbenchError
from .runtime import assembly as asm

TARGETS = ("c", "cuda")


class KernelCode:
    """Mixed into :class:`workbench.session.Session` (uses ``kernel`` and ``backend``)."""

    def _code_kernel(self, ref: str, target: str):
        if not isinstance(target, str) or target not in TARGETS:
            raise WorkbenchError(f"unknown target {target!r:.40}; choose 'c' (the CPU "
                                 "compiler) or 'cuda' (NVRTC)")
        k = self.kernel(ref)
        if k.library is not None:
            raise WorkbenchError(
                f"kernel {k.name} is a library call ({k.library.op}: BLAS on the CPU, "
                "cuBLAS on a GPU): nothing is generated or compiled for it; select a "
                "generated kernel")
        return k

    def _arch(self) -> str:
        # the GPU's own compute capability on a GPU backend; else the H100's
        return getattr(self.backend, "arch", None) or asm.DEFAULT_ARCH

    def compile_command(self, ref: str, target: str = "c") -> str:
        """The command line that compiles the kernel holding ``ref``: the C compiler's
        with every flag ('c'), or NVRTC's options for this GPU ('cuda')."""
        k = self._code_kernel(ref, target)
        argv = asm.cpu_command(k.name) if target == "c" else asm.cuda_command(k.name,
                                                                             self._arch())
        return asm.shell_line(argv)

    def assembly(self, ref: str, target: str = "c", filtered: bool = True) -> str:
        """The assembly of the kernel holding ``ref``: the C compiler's ``-S`` output of
        its translation unit ('c'; ``filtered``: without debug and layout directives),
        or the PTX NVRTC makes ('cuda'). Made on first request, then cached."""
        k = self._code_kernel(ref, target)
        src = render_kernel(k, target)
        if target == "c":
            return asm.cpu_assembly(k.name, src, filtered)
        return asm.cuda_ptx(k.name, src, self._arch())
