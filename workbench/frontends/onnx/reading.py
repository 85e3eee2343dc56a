"""Reading an ONNX model before its import: ``input_shapes`` validated, the file parsed
and passed through the ONNX checker, and its default-domain opset held against the
range the importer reads (an older model only where none of its ops changed since
``MIN_OPSET``). Each refusal is one GraphError naming the file and the fix."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import onnx

from ...errors import GraphError, WorkbenchError, existing_file, shown
from ...shapes import check_shape
from .common import MAX_OPSET, MIN_OPSET, first_line
from .skeleton import skeleton


def checked_input_shapes(input_shapes) -> dict[str, tuple[int, ...]]:
    """input_shapes validated: input name -> a static shape of integers >= 0."""
    if input_shapes is None:
        return {}
    if not isinstance(input_shapes, Mapping):
        raise GraphError(f"input_shapes must map input names to shapes, e.g. "
                         f"{{'x': [8, 128]}}; got {type(input_shapes).__name__}")
    out = {}
    for name, shape in input_shapes.items():
        if not isinstance(name, str):
            raise GraphError(f"input_shapes keys are input names (strings), got {name!r:.40}")
        out[name] = check_shape(shape, f"input_shapes[{shown(name)!r}]")
    return out


def read_model(model) -> tuple[onnx.ModelProto, str]:
    """Parse and check the model; one-line GraphError naming the file if it is bad."""
    if isinstance(model, onnx.ModelProto):
        label, proto = f"model {shown(model.graph.name or '<unnamed>')!r}", model
    else:
        if not isinstance(model, (str, os.PathLike)):
            raise WorkbenchError(f"load_onnx takes an onnx.ModelProto or a path to a .onnx "
                                 f"file, got {type(model).__name__}")
        path = Path(model)
        label = existing_file(path, ".onnx file")
        try:
            proto = onnx.load(str(path))
        except Exception as e:  # protobuf raises DecodeError, RuntimeWarning...
            raise GraphError(f"{label} is not a readable ONNX model ({first_line(e)}); "
                             "check the file is complete or re-export it") from None
        if not proto.graph.node and not proto.graph.output:
            raise GraphError(f"{label} holds no ONNX graph (empty or not an ONNX file); "
                             "re-export the model")
    try:
        # (without its weights' bytes: see .skeleton)
        onnx.checker.check_model(skeleton(proto, for_checker=True))
    except ValueError as e:
        if "2GB" not in str(e):  # models over 2 GB cannot be checked in memory
            raise GraphError(f"{label} fails the ONNX checker ({first_line(e)}); "
                             "re-export the model") from None
    except onnx.checker.ValidationError as e:
        # an op ONNX later deprecated (opset 18's GroupNormalization, per-group scale)
        # is no fault of the model: exporters wrote it, onnxruntime runs it
        if "is deprecated in domain_version" not in str(e):
            raise GraphError(f"{label} fails the ONNX checker ({first_line(e)}); "
                             "re-export the model") from None
    except Exception as e:  # noqa: BLE001 -- the checker on a corrupt proto: anything
        raise GraphError(f"{label} fails the ONNX checker ({type(e).__name__}: "
                         f"{first_line(e)}); re-export the model") from None
    return proto, label


def default_opset(proto: onnx.ModelProto, label: str) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    opset = versions[0] if versions else 1
    if opset < MIN_OPSET:
        changed = _changed_since(proto, opset)
        if changed:
            shown_ops = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more"
                                                 if len(changed) > 5 else "")
            raise GraphError(f"{label} uses opset {opset}, and {shown_ops} changed between "
                             f"opset {opset} and {MIN_OPSET}: the importer reads opsets "
                             f"{MIN_OPSET} to {MAX_OPSET} (older ones only where no op "
                             "changed) -- upgrade it with "
                             f"onnx.version_converter.convert_version(model, {MIN_OPSET})")
    if opset > MAX_OPSET:
        raise GraphError(f"{label} uses opset {opset}, newer than the importer knows; it "
                         f"reads opsets {MIN_OPSET} to {MAX_OPSET} -- convert the model with "
                         f"onnx.version_converter.convert_version(model, {MAX_OPSET}) or "
                         "export it for an older opset")
    return opset


def _changed_since(proto: onnx.ModelProto, opset: int) -> list[str]:
    """The default-domain op types of the model whose definition at ``opset`` is not
    the one in force at ``MIN_OPSET`` (or that did not exist yet). A model older than
    ``MIN_OPSET`` whose every op kept its definition means what it would mean at
    ``MIN_OPSET`` (ONNX bumps an op's version whenever its meaning changes), so the
    handlers, written for ``MIN_OPSET`` on, read it as it is."""
    ops = {n.op_type for n in proto.graph.node if n.domain in ("", "ai.onnx")}
    changed = []
    for op in sorted(ops):
        try:
            old = onnx.defs.get_schema(op, opset).since_version
            new = onnx.defs.get_schema(op, MIN_OPSET).since_version
        except onnx.defs.SchemaError:     # unknown then (or at all): not the same op
            changed.append(op)
            continue
        if old != new:
            changed.append(op)
    return changed
