"""The code panel: the selected kernel's CUDA and C source and its kernel IR,
highlighted, with a diff against the previous step's version, its compile command and
assembly (``asm_panel.py``), its launch configuration, bytes and latency.

Sources are rendered by the same renderers the backends compile (``render_kernel``),
the IR by ``format_kernel`` (target-neutral: what both sources are printed from);
highlighting is pygments HTML whose token classes are coloured by JupyterLab's
``--jp-mirror-editor-*`` variables, so the panel follows the light and dark themes.

Example::

    >>> panel = CodePanel(session); panel.show("n3")   # doctest: +SKIP
    >>> "__global__" in panel.cuda                      # doctest: +SKIP
    True
    >>> "block_reduce" in panel.ir                      # doctest: +SKIP
    True
"""
from __future__ import annotations

import difflib
import html
from typing import Callable

import ipywidgets as w
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer, words
from pygments.lexers import CLexer, CudaLexer, DiffLexer
from pygments.token import Comment, Keyword, Name, Number, Text

from ..codegen import RENDERERS, format_kernel, render_kernel
from ..codegen.kernel import Kernel
from ..fusion import Group, Plan
from .asm_panel import AsmPanel
from .source_map import annotated_html

_TOKEN_COLORS = {
    "comment": ("c", "c1", "cm", "cs", "ch", "cpf"),
    "keyword": ("k", "kc", "kd", "kn", "kp", "kr"),
    "builtin": ("kt", "nb", "bp"),
    "meta": ("cp",),
    "number": ("m", "mf", "mi", "mh", "mo", "il", "mb"),
    "string": ("s", "s1", "s2", "sc", "sd", "se", "sh", "si", "sx", "sr", "ss", "dl", "sa"),
    "operator": ("o", "ow"),
    "def": ("nf", "fm"),
}

CSS = "\n".join(
    [".wb-code pre { margin: 0; padding: 4px 6px; overflow: auto; max-height: 460px;"
     " font-family: var(--jp-code-font-family, monospace); font-size: var(--jp-code-font-size, 12px);"
     " line-height: 1.35; color: var(--jp-content-font-color1, #000);"
     " background: var(--jp-cell-editor-background, #f7f7f7); }",
     ".wb-kernel-info { font-size: var(--jp-ui-font-size1, 13px); color: var(--jp-ui-font-color1, #000); }",
     ".wb-kernel-info td { padding: 0 8px 0 0; }",
     ".wb-kernel-info .wb-dim { color: var(--jp-ui-font-color2, #666); }",
     ".wb-code .gi { color: var(--jp-success-color1, #388e3c); }",
     ".wb-code .gd { color: var(--jp-error-color1, #d32f2f); }",
     ".wb-code .gu, .wb-code .gh { color: var(--jp-brand-color1, #1976d2); }"]
    + [", ".join(f".wb-code .{c}" for c in classes)
       + f" {{ color: var(--jp-mirror-editor-{kind}-color); }}"
       for kind, classes in _TOKEN_COLORS.items()])


class KernelIRLexer(RegexLexer):
    """The printer's text: statement keywords, dtypes, numbers and ``#`` comments, so
    the IR tab takes the same theme colours as the C and CUDA tabs."""
    name = "kernel IR"
    tokens = {"root": [
        (r"#.*$", Comment.Single),     # (the only place model text is printed)
        (words(("kernel", "group", "params", "scratch", "launch", "body", "library",
                "loop", "in", "out", "workspace", "let", "load", "store", "block_reduce",
                "once", "per", "if", "grid_sync", "reduce"), prefix=r"\b", suffix=r"\b"),
         Keyword),
        (words(("f32", "f16", "i32", "i64", "bool"), prefix=r"\b", suffix=r"\b"),
         Keyword.Type),
        (r"\b\d+(\.\d*)?([eE][-+]?\d+)?f?\b", Number),
        (r"[A-Za-z_]\w*", Name),
        (r"\s+|.", Text),
    ]}


_LEXERS = {"cuda": CudaLexer(), "c": CLexer(), "ir": KernelIRLexer(), "diff": DiffLexer()}
_FORMATTER = HtmlFormatter(cssclass="wb-code", nowrap=False)


def highlight_html(source: str, language: str) -> str:
    """Source as HTML with pygments token classes (styled by :data:`CSS`)."""
    return highlight(source, _LEXERS[language], _FORMATTER)


def unified_diff(before: str, after: str, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True),
                                        after.splitlines(keepends=True),
                                        before_name, after_name, n=2))


class CodePanel(w.VBox):
    """Kernel info (header) above tabs CUDA, C, IR and Diff for one group of a plan.

    ``show(ref, plan, previous)`` shows the group holding node/group ``ref`` of
    ``plan``; the diff compares it with the kernels of ``previous`` (the previous step's
    plan) that held the same nodes. ``kernel(plan, group)`` gives a group's kernel IR
    (the session's, so the panel shows what runs); ``info`` supplies measured numbers
    for a group id.
    """

    def __init__(self, kernel: Callable[[Plan, Group], Kernel],
                 info: Callable[[Plan, str], dict] | None = None, arch: str | None = None):
        self.header = w.HTML()
        self.header.add_class("wb-kernel-info")
        self._cuda, self._c, self._ir, self._diff = w.HTML(), w.HTML(), w.HTML(), w.HTML()
        # compile command and assembly (asm_panel.py), made when the tab is opened
        self.asm = AsmPanel(arch)
        self.tabs = w.Tab(children=[self._cuda, self._c, self._ir, self._diff, self.asm],
                          titles=["CUDA", "C", "IR", "Diff", "Assembly"])
        self.tabs.observe(self._on_tab, names="selected_index")
        super().__init__([w.HTML(f"<style>{CSS}</style>"), self.header, self.tabs])
        self.add_class("wb-code-panel")
        self._info = info or (lambda plan, gid: {})
        self.kernel = kernel
        self.group: Group | None = None
        self.cuda = self.c = self.ir = self.diff = ""
        self.clear()

    def clear(self, hint: str = "Select a node to see its kernel.") -> None:
        self.group = None
        self.cuda = self.c = self.ir = self.diff = ""
        self.header.value = f'<span class="wb-dim">{html.escape(hint)}</span>'
        for h in (self._cuda, self._c, self._ir, self._diff):
            h.value = ""
        self.asm.show(None)

    def _on_tab(self, change) -> None:
        self.asm.active = change["new"] == self.tabs.children.index(self.asm)
        if self.asm.active:
            self.asm.load()

    def show(self, ref: str, plan: Plan, previous: Plan | None = None) -> Kernel:
        group = plan.group(ref)
        k = self.kernel(plan, group)
        self.group = group
        self.cuda, self.c = render_kernel(k, "cuda"), render_kernel(k, "c")
        self.ir = format_kernel(k)
        self.diff = self._diff_text(k, group, plan, previous)
        self.header.value = self._header_html(k, group, self._info(plan, group.id))
        self._cuda.value = self._source_html(k, "cuda")
        self._c.value = self._source_html(k, "c")
        self._ir.value = highlight_html(self.ir, "ir")
        self._diff.value = (highlight_html(self.diff, "diff") if self.diff else
                            '<span class="wb-dim">unchanged since the previous step</span>'
                            if previous is not None else
                            '<span class="wb-dim">first step: nothing to compare</span>')
        self.asm.show(k)
        return k

    @staticmethod
    def _source_html(k: Kernel, target: str) -> str:
        """The kernel itself; its prelude (the helpers it calls) is only counted."""
        code = RENDERERS[target].kernel(k)
        prelude = RENDERERS[target].prelude(k.tensor_cores, code).count("\n")
        note = (f'<div class="wb-dim">// + {prelude}-line prelude: the helpers this kernel '
                f'calls (in <code>app.code.{target}</code>)</div>')
        # each line a <span class="wb-line" data-nodes=...>: the source map (source_map.py)
        return note + annotated_html(code, _LEXERS[target])

    def _diff_text(self, k: Kernel, group: Group, plan: Plan, previous: Plan | None) -> str:
        """CUDA and C diffs of this kernel against the previous step's kernels of the same
        nodes (several, when this step fused them; part of one, when it split it)."""
        if previous is None:
            return ""
        before = [gr for gr in previous.groups if set(gr.nodes) & set(group.nodes)]
        out = []
        for target in ("cuda", "c"):
            r = RENDERERS[target]   # (compare the kernels: their preludes follow them)
            old = "\n".join(r.kernel(self.kernel(previous, gr)) for gr in before)
            new = r.kernel(k)
            name = "cu" if target == "cuda" else "c"
            out.append(unified_diff(old, new,
                                    f"previous/{'+'.join(gr.id for gr in before)}.{name}",
                                    f"current/{group.id}.{name}"))
        return "".join(out)

    @staticmethod
    def _header_html(k: Kernel, group: Group, info: dict) -> str:
        launch = ("library call (" + html.escape(k.library.op) + ")" if k.library is not None
                  else f"grid {k.launch.grid} × block {k.launch.block}"
                       + (f", shared {k.shared_bytes} B" if k.shared_bytes else ""))
        rows = [("kernel", f"<code>{html.escape(k.name)}</code> ({len(group.nodes)} ops: "
                           + html.escape(", ".join(group.nodes[:8]))
                           + (", …" if len(group.nodes) > 8 else "") + ")"),
                ("schedule", html.escape(group.schedule.describe())),
                ("launch", launch),
                ("bytes", f"{k.bytes_read / 1e6:.3f} MB read, {k.bytes_written / 1e6:.3f} MB written")]
        lat = info.get("latency_ms")
        pred = info.get("predicted_ms")
        if lat is not None or pred is not None:
            parts = []
            if lat is not None:
                parts.append(f"{lat:.4g} ms measured")
            if pred is not None:
                parts.append(f"{pred:.4g} ms predicted")
            if info.get("bandwidth_GBps") is not None:
                parts.append(f"{info['bandwidth_GBps']:.3g} GB/s achieved")
            rows.append(("latency", ", ".join(parts)))
        else:
            rows.append(("latency", '<span class="wb-dim">not measured yet (Measure)</span>'))
        return "<table>" + "".join(f'<tr><td class="wb-dim">{a}</td><td>{b}</td></tr>'
                                   for a, b in rows) + "</table>"
