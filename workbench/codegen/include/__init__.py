"""The C and CUDA C++ the renderers paste into every source file, kept as the files a C
or C++ editor reads (the wheel ships them: pyproject.toml's package-data).

``source(name, **values)`` is a file's text as it is pasted: its leading ``//`` lines
left out (notes for whoever reads the file: what it is for and why it is written so;
the pasted text's own comments are ``/* */``), and each ``@NAME@`` replaced by
``values[NAME]``: a number Python owns (the micro-kernel's panel width), or another
file's text pasted inside this one. Everything else is pasted byte for byte. The
renderers read each file once, at import.

    >>> source("grid_sync.cuh").splitlines()[0]
    '/* grid-wide barrier (cooperative launch: every block is resident) */'
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def source(name: str, **values: int | str) -> str:
    """The text of ``include/<name>`` to paste, its notes dropped and values filled in."""
    lines = (HERE / name).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    text = "".join(lines)
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    left = _PLACEHOLDER.search(text)
    if left:
        raise ValueError(f"include/{name}: no value given for {left.group(0)}")
    return text
