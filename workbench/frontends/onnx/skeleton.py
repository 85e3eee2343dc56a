"""A model without its weights' bytes, for the ONNX checker and shape inference.

Both take a ModelProto and serialize it whole for ONNX's C++ side, which parses it
again (shape inference then serializes and parses its answer back, weights and all):
for BERT-base, 440 MB of weights passed through five or six times, most of a 4.5-6 s
import. Neither reads a weight's values. Shape inference needs types and dims, but for
data propagation, which reads small integer tensors (shapes, axes), kept whole here;
the checker needs a tensor's fields, and its bytes only to count them against its dims
(the import's own reading of every initializer, ``to_array``, fails on a wrong count
all the same). So a large floating-point initializer keeps every field but its bytes:
``raw_data`` holds one element's zeros, and for the checker its dims are ``[1]``.

    >>> skeleton(onnx.load("bert.onnx")).ByteSize() < 1_000_000      # doctest: +SKIP
    True
"""
from __future__ import annotations

import math

import onnx
from onnx import TensorProto

# (smaller tensors are copied whole: their bytes cost nothing, and an integer tensor
# may be a shape that data propagation reads)
SKIP_BYTES = 1 << 16
_FLOATS = {TensorProto.FLOAT: 4, TensorProto.DOUBLE: 8, TensorProto.FLOAT16: 2,
           TensorProto.BFLOAT16: 2}           # element type -> bytes per element
_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                "uint64_data", "external_data")


def skeleton(proto: onnx.ModelProto, for_checker: bool = False) -> onnx.ModelProto:
    """A copy of ``proto`` whose large floating-point initializers (of the main graph)
    hold one element's bytes (and, ``for_checker``, dims ``[1]`` to match); everything
    else as it is."""
    out = onnx.ModelProto()
    for field, value in proto.ListFields():
        if field.name != "graph":
            _set(out, field, value)
    for field, value in proto.graph.ListFields():
        if field.name != "initializer":
            _set(out.graph, field, value)
    for t in proto.graph.initializer:
        if not _bulky(t):
            out.graph.initializer.add().CopyFrom(t)
            continue
        s = out.graph.initializer.add()
        for field in TensorProto.DESCRIPTOR.fields:
            # (field by field: ListFields would read raw_data, a copy of its bytes)
            if field.name == "raw_data" or (for_checker and field.name == "dims"):
                continue
            value = getattr(t, field.name)
            if len(value) if _repeated(field) else t.HasField(field.name):
                _set(s, field, value)
        if for_checker:
            s.dims.append(1)
        s.raw_data = bytes(_FLOATS[t.data_type])
    return out


def _bulky(t: TensorProto) -> bool:
    # (sized from its dims: reading raw_data, or ByteSize, copies the bytes)
    return (t.data_type in _FLOATS and t.HasField("raw_data")
            and t.data_location != TensorProto.EXTERNAL
            and all(d > 0 for d in t.dims)
            and math.prod(t.dims) * _FLOATS[t.data_type] >= SKIP_BYTES
            and not any(len(getattr(t, f)) for f in _DATA_FIELDS))


def _repeated(field) -> bool:
    # (protobuf 5.28 added is_repeated; 7 dropped label)
    return field.is_repeated if hasattr(field, "is_repeated") else \
        field.label == field.LABEL_REPEATED


def _set(msg, field, value) -> None:
    if _repeated(field):
        getattr(msg, field.name).extend(value)
    elif field.message_type is not None:
        getattr(msg, field.name).CopyFrom(value)
    else:
        setattr(msg, field.name, value)
