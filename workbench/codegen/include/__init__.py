"""The C and CUDA C++ the renderers paste into every source file, kept as the files a C
or C++ editor reads (the wheel ships them: pyproject.toml's package-data).

``source(name, **sizes)`` is a file's text as it is pasted: its leading ``//`` lines
left out (notes for whoever reads the file: what it is for and why it is written so;
the pasted text's own comments are ``/* */``), and each ``@NAME@`` replaced by
``sizes[NAME]`` (a number Python owns, such as the micro-kernel's panel width).
Everything else is pasted byte for byte. Each file is read once, at import.

    >>> source("microkernel.h", PANEL=64, KC=256).splitlines()[0]
    '/* GEMM micro-kernel against a packed constant B (codegen/microkernel.py) */'
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def source(name: str, **sizes: int) -> str:
    """The text of ``include/<name>`` to paste, its notes dropped and sizes filled in."""
    lines = (HERE / name).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    text = "".join(lines)
    for key, value in sizes.items():
        text = text.replace(f"@{key}@", str(value))
    left = _PLACEHOLDER.search(text)
    if left:
        raise ValueError(f"include/{name}: no value given for {left.group(0)}")
    return text
