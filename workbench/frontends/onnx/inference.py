"""ONNX's own shape inference as a cross-check of the import: every node's output shape
and dtype, where inference makes them static, must be what the import made, so an
importer mistake fails loudly instead of computing something else."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx

from ...errors import GraphError
from ...ir import Tensor
from ...dtypes import DType
from .common import _DTYPES
from .skeleton import skeleton


def expected_types(proto: onnx.ModelProto, env: Mapping[str, Tensor | np.ndarray]
                   ) -> dict[str, tuple[tuple[int, ...], DType]]:
    """ONNX's own inferred static types, to check each imported node against: value
    name -> (shape, dtype), where inference gives a static one (the graph inputs as
    ``env`` holds them)."""
    expected: dict[str, tuple[tuple[int, ...], DType]] = {}
    model = skeleton(proto)     # (inference reads no weight's bytes: see .skeleton)
    for v in model.graph.input:  # give inference the shapes we use
        t = env.get(v.name)
        if isinstance(t, Tensor):
            v.type.tensor_type.ClearField("shape")
            v.type.tensor_type.shape.SetInParent()
            for d in t.shape:
                v.type.tensor_type.shape.dim.add().dim_value = d
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False,
                                                     data_prop=True)
    except Exception:  # inference is a cross-check only; its absence is no error
        return expected
    for v in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape") or tt.elem_type not in _DTYPES:
            continue
        if all(d.HasField("dim_value") for d in tt.shape.dim):
            expected[v.name] = (tuple(d.dim_value for d in tt.shape.dim),
                                _DTYPES[tt.elem_type])
    return expected


def check_expected(expected: Mapping[str, tuple[tuple[int, ...], DType]], name: str, r,
                   node: onnx.NodeProto, display: str) -> None:
    """Fail loudly where ONNX's shape inference disagrees with the import."""
    exp = expected.get(name)
    if exp is None:
        return
    if isinstance(r, Tensor):
        got = (tuple(r.shape), r.dtype)
    else:
        try:
            got = (tuple(r.shape), DType.of(r.dtype))
        except ValueError:
            return  # an unsupported dtype is reported if the value is ever used
    if got != exp and _ceil_pool(node) and got[1] is exp[1] \
            and len(got[0]) == len(exp[0]):
        # ONNX's shape inference keeps a ceil_mode window that starts in the end
        # padding, which onnxruntime and torch drop (and so does the importer)
        return
    if got != exp:
        raise GraphError(
            f"ONNX node {display!r} ({node.op_type}) output {name!r} imports as "
            f"{got[1].value}{list(got[0])} but ONNX infers {exp[1].value}{list(exp[0])}; "
            "this is an importer bug -- please report it with the model")


def _ceil_pool(node: onnx.NodeProto) -> bool:
    return node.op_type in ("MaxPool", "AveragePool", "LpPool") and any(
        a.name == "ceil_mode" and a.i for a in node.attribute)
