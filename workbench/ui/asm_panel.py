"""The code panel's Assembly tab, Compiler Explorer's: the selected kernel's exact
compile command and its assembly, for the CPU (the C compiler's ``-S`` output) or the
GPU (NVRTC's PTX), picked with a toggle.

Compiling for assembly takes 0.1-1 s a kernel, so nothing is made when a kernel is
selected: the tab fills when it is opened or its target changes (then cached on disk
by :mod:`workbench.runtime.assembly`). A library call (a BLAS/cuBLAS matmul) has no
generated code; the tab says so.
"""
from __future__ import annotations

import html

import ipywidgets as w

from ..codegen import render_kernel
from ..codegen.kernel import Kernel
from ..errors import BackendUnavailable, WorkbenchError
from ..runtime import assembly as asm
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import GasLexer, PtxLexer

TARGETS = {"CPU (cc -S)": "c", "GPU (NVRTC PTX)": "cuda"}


class AsmPanel(w.VBox):
    """``show(kernel)`` remembers the kernel; ``load()`` (the tab opened, or the target
    changed) fills ``command`` and ``assembly`` for it."""

    def __init__(self, arch: str | None = None):
        self.arch = arch or asm.DEFAULT_ARCH
        self.target = w.ToggleButtons(options=list(TARGETS), value="CPU (cc -S)",
                                      style={"button_width": "auto"})
        self.target.add_class("wb-asm-target")
        self._command, self._asm = w.HTML(), w.HTML()
        self._command.add_class("wb-asm-command")
        super().__init__([self.target, self._command, self._asm])
        self.add_class("wb-asm")
        self.kernel: Kernel | None = None
        self.command = self.assembly = ""
        self.active = False           # whether the tab is open (then load at once)
        self._shown: tuple[str, str] | None = None     # (kernel, target) filled
        self.target.observe(lambda _: self.load(), names="value")

    def show(self, kernel: Kernel | None) -> None:
        self.kernel, self._shown = kernel, None
        self.command = self.assembly = ""
        self._command.value = ""
        self._asm.value = ('<span class="wb-dim">open this tab to compile the kernel '
                           'for its assembly</span>' if kernel is not None else "")
        if self.active:
            self.load()

    def load(self) -> None:
        """Fill the tab for the kernel and target shown, unless it already is."""
        if self.kernel is not None and self._shown != (self.kernel.name, self.target.value):
            self._fill(self.kernel)

    def _fill(self, k: Kernel) -> None:
        target = TARGETS[self.target.value]
        self._shown = (k.name, self.target.value)
        if k.library is not None:
            self.command = self.assembly = ""
            self._command.value = ""
            self._asm.value = (f'<span class="wb-dim">{html.escape(k.name)} is a library '
                               f'call ({html.escape(k.library.op)}): nothing is generated '
                               'or compiled for it</span>')
            return
        try:
            argv = (asm.cpu_command(k.name) if target == "c"
                    else asm.cuda_command(k.name, self.arch))
            src = render_kernel(k, target)
            text = (asm.cpu_assembly(k.name, src) if target == "c"
                    else asm.cuda_ptx(k.name, src, self.arch))
        except (BackendUnavailable, WorkbenchError) as e:
            self.command = self.assembly = ""
            self._command.value = ""
            self._asm.value = f'<span class="wb-error">{html.escape(str(e)[:600])}</span>'
            return
        self.command, self.assembly = asm.shell_line(argv), text
        self._command.value = (f'<div class="wb-dim">compiled with</div>'
                               f'<pre class="wb-asm-cmd">{html.escape(self.command)}</pre>')
        # (the code panel's token classes: the same theme colours as the C tab)
        self._asm.value = highlight(text, GasLexer() if target == "c" else PtxLexer(),
                                    HtmlFormatter(cssclass="wb-code"))
