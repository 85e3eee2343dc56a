"""The graph drawing as a file: SVG (vector, Graphviz's own output) or PNG.

Both are laid out by Graphviz from the same DOT text the view shows, so a saved file
matches the screen (collapsed boxes, kernel clusters, overlay colours) without a
browser. The PNG is rasterised by Graphviz (cairo) at ``PNG_DPI``; a drawing larger
than Graphviz's bitmap limit is scaled down by Graphviz itself.

Example::

    >>> app.save_graph("layernorm.svg"); app.save_graph("layernorm.png")  # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import WorkbenchError

FORMATS = ("svg", "png")
PNG_DPI = 144      # twice the screen's 72 layout units per inch: sharp when zoomed in


def save_drawing(dot_source: str, path: str | os.PathLike) -> str:
    """Lay out ``dot_source`` and write it to ``path`` (.svg or .png)."""
    p = Path(os.fspath(path))
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise WorkbenchError(f"cannot save the graph as {p.name!r}: the file name must end "
                             f"in .svg or .png")
    if not p.parent.is_dir():
        raise WorkbenchError(f"cannot save the graph to {str(p)!r}: folder {str(p.parent)!r} "
                             "does not exist; create it or choose another path")
    import graphviz
    src = dot_source if fmt == "svg" else dot_source.replace(
        "digraph workbench {", f"digraph workbench {{\n  graph [dpi={PNG_DPI}];", 1)
    try:
        data = graphviz.Source(src).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise WorkbenchError("Graphviz 'dot' is not installed: install it (apt-get install "
                             "graphviz, or conda install graphviz) to save graphs") from None
    except graphviz.CalledProcessError as e:
        raise WorkbenchError(f"Graphviz could not draw the graph as {fmt}: "
                             f"{e.stderr!s:.300}") from None
    try:
        p.write_bytes(data)
    except OSError as e:
        raise WorkbenchError(f"cannot write {str(p)!r}: {e.strerror or e}") from None
    return str(p)
