"""Frontends: every way a graph gets into the workbench.

``load(source)`` takes a :class:`Graph` (returned as is), an ``onnx.ModelProto``, or a
path ending ``.onnx`` or ``.json``; keyword arguments go to the format's loader
(``input_shapes=`` for ONNX).

    >>> from workbench.frontends import load
    >>> g = load("sample_graphs/layernorm.json")     # doctest: +SKIP
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import WorkbenchError, existing_file, shown
from ..ir import Graph, load_json
from ..ir.repeat import Repeat
from .onnx import load_onnx


def load(source: Any, **kw: Any) -> Graph:
    """A Graph from a Graph, an ONNX ModelProto, or a .onnx / .json file.

    Keyword arguments go to the ONNX importer (``input_shapes=``, and ``optimizer=`` for
    an onnxruntime-training graph, docs/training.md); a JSON graph takes
    none. Every fault is one WorkbenchError naming the cause."""
    if isinstance(source, Graph):
        return source.verify()     # (made by hand, it may never have been verified)
    try:
        import onnx
        if isinstance(source, onnx.ModelProto):
            return load_onnx(source, **_onnx_kw(kw))
    except ImportError:  # onnx is a dependency, but a Graph or JSON needs none of it
        pass
    if not isinstance(source, (str, os.PathLike)):
        hint = ("; a repeat opens in wb.Session(r) or wb.open(r) (docs/repeat.md)"
                if isinstance(source, Repeat) else "")
        raise WorkbenchError(f"cannot load a {type(source).__name__}; pass a Graph, an "
                             "onnx.ModelProto or a path to a .onnx or .json file" + hint)
    path = Path(source)
    existing_file(path, ".onnx or .json file")
    suffix = path.suffix.lower()
    if suffix not in (".onnx", ".json"):
        raise WorkbenchError(f"unknown graph format {shown(path.name)!r}; use .onnx or .json")
    if suffix == ".onnx":
        return load_onnx(path, **_onnx_kw(kw))
    if kw:
        raise WorkbenchError(f"a JSON graph takes no load options (got "
                             f"{', '.join(map(str, kw))}); its shapes are in the file")
    return load_json(path)


def _onnx_kw(kw: dict) -> dict:
    unknown = sorted(set(kw) - {"input_shapes", "optimizer"})
    if unknown:
        raise WorkbenchError(f"unknown load option(s) {', '.join(unknown)}; ONNX models "
                             "take input_shapes= (and optimizer= for a training graph)")
    return kw


def from_torch(module, example_inputs=(), **kw) -> Graph:
    """A Graph from a torch.nn.Module through torch.export (torch is imported here, on
    first use, so the workbench runs without it; see :mod:`.torch`)."""
    from .torch import from_torch as import_module
    return import_module(module, example_inputs, **kw)


__all__ = ["from_torch", "load", "load_onnx"]
