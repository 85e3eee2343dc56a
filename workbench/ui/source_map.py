"""Which lines of a kernel's source compute which graph node (Compiler Explorer's
source-to-assembly map, here graph-to-source).

The renderers end every statement that computes a node's value with a comment naming
the node's sanitized id (``float t3 = (t2 - acc0);  /* n1 */``; see
``codegen.render.node_tag``), and the kernel's header lists every node it implements
(``* nodes n0 n1 ...``). The map is read back from those comments, so it is the
source itself that says what it implements -- no side table to drift from it. Only
ids of the form the workbench makes (``n12``) are read; model text never reaches a
comment.

The code panel wraps each highlighted line in ``<span class="wb-line"
data-nodes="n1 n2">``; the graph view's front end uses those attributes to highlight
lines when a node is hovered, and nodes when a line is.

Example::

    >>> line_nodes("float t3 = (t2 - acc0);  /* n1 */\\nout0[i] = t3;  /* n1 */")
    {0: ('n1',), 1: ('n1',)}
"""
from __future__ import annotations

import re

from pygments import highlight
from pygments.formatters import HtmlFormatter

_TAG = re.compile(r"/\*\s*([A-Za-z_][A-Za-z0-9_]*)\s*\*/\s*$")
_HEADER = re.compile(r"^\s*\*\s*nodes((?:\s+[A-Za-z_][A-Za-z0-9_]*)+)\s*$")
_SPAN = re.compile(r'<span id="wbl-(\d+)">')


def line_nodes(source: str) -> dict[int, tuple[str, ...]]:
    """0-based line number -> the node ids that line computes (trailing comments)."""
    out: dict[int, tuple[str, ...]] = {}
    for i, line in enumerate(source.splitlines()):
        m = _TAG.search(line)
        if m:
            out[i] = (m.group(1),)
    return out


def node_lines(source: str) -> dict[str, tuple[int, ...]]:
    """node id -> the 0-based lines computing it (the reverse of :func:`line_nodes`)."""
    out: dict[str, list[int]] = {}
    for i, ids in line_nodes(source).items():
        for n in ids:
            out.setdefault(n, []).append(i)
    return {n: tuple(v) for n, v in out.items()}


def implemented_nodes(source: str) -> tuple[str, ...]:
    """The node ids a kernel's header says it implements, in order."""
    ids: list[str] = []
    for line in source.splitlines():
        m = _HEADER.match(line)
        if m:
            ids += m.group(1).split()
    return tuple(ids)


def annotated_html(source: str, lexer) -> str:
    """``source`` highlighted by pygments (``wb-code`` classes), each line a
    ``<span class="wb-line" data-line=N data-nodes="...">``."""
    fmt = HtmlFormatter(cssclass="wb-code", linespans="wbl")
    nodes = line_nodes(source)

    def span(m: re.Match) -> str:
        i = int(m.group(1)) - 1          # pygments numbers lines from 1
        ids = " ".join(nodes.get(i, ()))  # (ids matched [A-Za-z0-9_]: attribute-safe)
        return (f'<span class="wb-line" data-line="{i}"'
                + (f' data-nodes="{ids}"' if ids else "") + ">")

    return _SPAN.sub(span, highlight(source, lexer, fmt))
