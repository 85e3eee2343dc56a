"""The module scope of an ONNX node, so an imported model keeps the nested boxes and
search words ``from_torch`` gives it.

torch's two ONNX exporters record a node's module in different places:

- the legacy (TorchScript) exporter in the node's name: ``/encoder/layer.0/attention/
  MatMul`` -- already the name-scope form :func:`workbench.ui.namespaces.scope_path`
  reads (every segment but the last is a module);
- the dynamo exporter (torch >= 2.5, the default from 2.9) names nodes ``node_MatMul_12``
  and keeps the module path in ``metadata_props``: ``pkg.torch.onnx.name_scopes`` (the
  path at each depth, ``['', 'encoder', 'encoder.layer.0', ..., 'linear']``: the root,
  the modules, then the FX node) or, from older exporters, ``namespace``
  (``': M/encoder: Enc/encoder.layer.0: Layer/linear: aten.linear.default'``).

:func:`node_source` writes the second kind in the first kind's form, so one reader
(``scope_path``) nests both the same way and a node stays its own composite (one ONNX
node, one box) under its modules.
"""
from __future__ import annotations

import ast

import onnx

NAME_SCOPES = "pkg.torch.onnx.name_scopes"
NAMESPACE = "namespace"


def module_path(node: onnx.NodeProto) -> str:
    """The dotted path of the innermost module that made ``node`` (``encoder.layer.0.
    attention``), from the exporter's metadata; "" at the model's top level or when the
    node carries none."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = meta.get(NAME_SCOPES)
    if scopes:
        try:
            levels = [str(x) for x in ast.literal_eval(scopes)]
        except (ValueError, SyntaxError):
            levels = []
        # (the first level is the root module, "", the last the FX node itself)
        return levels[-2] if len(levels) >= 3 else ""
    space = meta.get(NAMESPACE)
    if space:
        # "name: Class" per level, "/"-joined; a class or op name may hold no "/", but
        # only the names before ": " are read
        levels = [lvl.split(":", 1)[0].strip() for lvl in space.split("/")]
        return levels[-2] if len(levels) >= 3 else ""
    return ""


def node_source(node: onnx.NodeProto, display: str) -> str:
    """The ``Origin.source`` of the node's composite: its name when that is already
    scoped (``/encoder/layer.0/...``) or carries no module, else ``/`` + the module path
    with ``/`` for ``.`` + ``/`` + the name (``/encoder/layer.0/attention/node_MatMul_1``:
    a ModuleList index stays with its list, ``layer.0``, as the legacy exporter writes)."""
    if "/" in display.strip("/"):
        return display
    path = module_path(node)
    if not path:
        return display
    segments: list[str] = []
    for p in (p for p in path.split(".") if p):
        if p.isdigit() and segments:
            segments[-1] = f"{segments[-1]}.{p}"
        else:
            segments.append(p)
    return "/" + "/".join(segments) + "/" + display
