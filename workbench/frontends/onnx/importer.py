"""The ONNX import itself: :func:`load_onnx` reads and checks the model (:mod:`.reading`),
and ``_Importer`` walks its nodes in order, folding those with constant inputs
(:mod:`.folding`) and handing the others to the registered op handlers; each node's
result is held against ONNX's shape inference (:mod:`.inference`)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx

from ...errors import GraphError, UnsupportedOpError, WorkbenchError
from ...ir import Graph, Tensor
from ..rewrites.constant_folding import fold_constants
from ..rewrites.pad_folding import fold_pads_into_convs
from ..rewrites.transpose_chains import fold_transpose_chains
from ...dtypes import DType
from ..importing import workaround
from .common import (
    _HANDLERS,
    _NONDETERMINISTIC,
    _Builder,
    _check_array_dtype,
    _Ctx,
    _dtype_of_elem,
    first_line,
    to_array,
    _Scope,
    _Unsupported,
    handler_key,
)
from . import training as ort_training
from .training_step import check_optimizer, with_optimizer
from .budget import FoldBudget, OverBudget
from .folding import fold
from .inference import check_expected, expected_types
from .handlers_sequence import SplitSequence
from .locations import NodeLocator
from .scopes import node_source
from .reading import checked_input_shapes, default_opset, read_model


# ---------------------------------------------------------------------------------
# entry point

def load_onnx(model: "str | Path | onnx.ModelProto",
              input_shapes: Mapping[str, Sequence[int]] | None = None,
              optimizer=None) -> Graph:
    """Import an ONNX model as a verified workbench :class:`Graph`.

    ``input_shapes`` maps input names to static shapes and overrides the model's
    (needed when the model has dynamic dimensions such as a batch size).

        >>> g = load_onnx("model.onnx", input_shapes={"x": [8, 128]})  # doctest: +SKIP

    ``optimizer`` (``workbench.training.SGD`` / ``AdamW``) appends its step to an
    onnxruntime-training graph's gradients, for ``Session.train_step``
    (:mod:`.training_step`).
    """
    check_optimizer(optimizer)
    shapes = checked_input_shapes(input_shapes)
    proto, label = read_model(model)
    opset = default_opset(proto, label)
    try:
        if proto.functions:  # model-local functions: inline them so their nodes import
            proto = onnx.inliner.inline_local_functions(proto)
        # (an onnxruntime-training graph: its gradients as outputs, backward marked)
        proto, training = ort_training.unwrap(proto, label)
        g = _Importer(proto, label, opset, shapes, training).run()
        # (its backward reads W as t(t(W)), as torch's does: one value, as from torch)
        g = fold_transpose_chains(g) if training is not None else g
        return g if optimizer is None else with_optimizer(g, training, optimizer, label)
    except WorkbenchError:
        raise
    except MemoryError:
        raise GraphError(f"{label}: out of memory importing the model (a constant or a "
                         "folded shape computation is too large for this machine)") from None
    except Exception as e:  # noqa: BLE001 -- a corrupt model makes onnx or NumPy raise anything
        raise GraphError(f"{label}: cannot import the model ({type(e).__name__}: "
                         f"{first_line(e)}); it may be malformed -- check it with "
                         "onnx.checker.check_model(model, full_check=True) or re-export "
                         "it") from None


# ---------------------------------------------------------------------------------
# the import itself

class _Importer(_Scope):
    """Walks the ONNX graph once, node by node, in its (topological) order."""

    def __init__(self, proto: onnx.ModelProto, label: str, opset: int,
                 input_shapes: dict[str, Sequence[int]],
                 training: "ort_training.TrainingGraph | None" = None):
        self.proto, self.label, self.opset = proto, label, opset
        self.training = training
        self._index = 0     # the ONNX node being imported (its phase: .training)
        self.budget = FoldBudget()          # what constant folding has added so far
        self.g = proto.graph
        self.input_shapes = input_shapes
        reserved = {v for n in self.g.node for v in list(n.input) + list(n.output)}
        reserved |= {v.name for v in self.g.input} | {t.name for t in self.g.initializer}
        self.onnx_names = reserved
        self.output_names = {v.name for v in self.g.output}
        self.b = _Builder(self.g.name or "onnx_model", self._description(), reserved)
        self.env: dict[str, Tensor | np.ndarray] = {}
        self.materialized: dict[str, Tensor] = {}
        self.poisoned: set[str] = set()
        self.unsupported: dict[str, list[str]] = {}
        self.locations: dict[str, list[str]] = {}
        self.hints: dict[str, str] = {}
        self.locator = NodeLocator(self.g)
        self._elem_types: dict[str, int] | None = None
        self.expected: dict[str, tuple[tuple[int, ...], DType]] = {}
        self._start = 0  # index of the first builder node the current ONNX node made

    def _description(self) -> str:
        return (self.g.doc_string or self.proto.doc_string or
                f"imported from {self.label}").strip().splitlines()[0][:200]

    # -- scope ----------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        v = self.env[name]
        if isinstance(v, Tensor):
            return v
        if isinstance(v, SplitSequence):
            raise _Unsupported(f"the tensor sequence {name!r} is used other than by "
                               "SequenceAt (the workbench holds a sequence only as the "
                               "pieces of a SplitToSequence)")
        t = self.materialized.get(name)
        if t is None:
            _check_array_dtype(v, f"constant {name!r}")
            # a folded graph output keeps its name for the copy _outputs makes of it
            keep = name not in self.output_names
            t = self.materialized[name] = self.b.constant(v, name=name if keep else None)
        return t

    def const(self, name: str) -> np.ndarray | None:
        v = self.env[name]
        return v if isinstance(v, np.ndarray) else None

    def shape(self, name: str) -> tuple[int, ...]:
        v = self.env[name]
        return tuple(v.shape)

    def dtype(self, name: str) -> DType:
        v = self.env[name]
        return v.dtype if isinstance(v, Tensor) else _check_array_dtype(v, repr(name))

    def elem_type(self, name: str) -> int | None:
        if self._elem_types is None:
            g = self.g
            self._elem_types = {t.name: t.data_type for t in g.initializer}
            for v in list(g.input) + list(g.value_info) + list(g.output):
                if v.type.HasField("tensor_type"):
                    self._elem_types.setdefault(v.name, v.type.tensor_type.elem_type)
        return self._elem_types.get(name)

    # -- steps ----------------------------------------------------------------------
    def run(self) -> Graph:
        self._leaves()
        self.expected = expected_types(self.proto, self.env)
        for i, node in enumerate(self.g.node):
            self._index = i
            self._node(node, node.name or f"{node.op_type}_{i}")
        if self.unsupported:
            raise self._unsupported_error()
        self._outputs()
        try:
            # (a composite's arithmetic on initializers alone -- an unfused
            # BatchNormalization's -- computed once, and zero Pads taken into the
            # Convs that read them, as the torch import does)
            return fold_pads_into_convs(fold_constants(self.b.build()))
        except GraphError as e:
            raise GraphError(f"{self.label}: {e}") from None

    def _leaves(self) -> None:
        """Initializers become constants; the other graph inputs need static shapes."""
        inits = {t.name: t for t in self.g.initializer}
        for name, t in inits.items():
            try:
                self.env[name] = to_array(t)
            except ValueError as e:
                # (the checker saw the model without its weights' bytes: .skeleton)
                raise GraphError(f"{self.label}: initializer {name!r} does not hold the "
                                 f"{int(np.prod(t.dims))} values of its shape "
                                 f"{list(t.dims)} ({first_line(e)}); the file is damaged "
                                 "or truncated -- re-export the model") from None
        inputs = [v for v in self.g.input if v.name not in inits]
        unknown = sorted(set(self.input_shapes) - {v.name for v in inputs})
        if unknown:
            raise GraphError(f"input_shapes names {unknown}, which are not inputs of "
                             f"{self.label}; its inputs are {[v.name for v in inputs]}")
        dynamic = []
        shapes = {}
        for v in inputs:
            shapes[v.name], dyn = self._input_shape(v)
            dynamic += dyn
        if dynamic:
            raise GraphError(f"{self.label} has dynamic input dimensions: "
                             f"{'; '.join(dynamic)} -- pass static shapes with "
                             "load_onnx(..., input_shapes={'NAME': [d0, d1, ...]})")
        for v in inputs:
            dt = _dtype_of_elem(v.type.tensor_type.elem_type, f"input {v.name!r}")
            self.env[v.name] = self.b.input(v.name, shapes[v.name], dt)

    def _input_shape(self, v: onnx.ValueInfoProto) -> tuple[list[int], list[str]]:
        """The static shape of one input and, if any, its dynamic dims described."""
        if not v.type.HasField("tensor_type"):
            raise GraphError(f"input {v.name!r} of {self.label} is not a tensor "
                             f"({v.type.WhichOneof('value')}); only tensors are supported")
        tt = v.type.tensor_type
        override = self.input_shapes.get(v.name)
        if not tt.HasField("shape"):
            if override is None:
                return [], [f"input {v.name!r} has unknown rank"]
            return list(override), []
        dims = list(tt.shape.dim)
        if override is not None:
            override = list(override)
            fixed = [(i, d.dim_value) for i, d in enumerate(dims) if d.HasField("dim_value")]
            if len(override) != len(dims) or any(override[i] != d for i, d in fixed):
                raise GraphError(f"input_shapes[{v.name!r}] = {override} does not fit the "
                                 f"model's shape {_dims_text(dims)}")
            return override, []
        dyn = [f"input {v.name!r} dim {i} ({d.dim_param or '?'})"
               for i, d in enumerate(dims) if not d.HasField("dim_value")]
        return [d.dim_value for d in dims], dyn

    def _node(self, node: onnx.NodeProto, display: str) -> None:
        outs = [o for o in node.output if o]
        if any(i in self.poisoned for i in node.input if i):
            if handler_key(node) not in _HANDLERS:
                self._refuse(node, display, None)
            self.poisoned.update(outs)
            return
        try:
            results = self._results(node, display)
        except _Unsupported as e:
            self._refuse(node, display, e.reason)
            self.poisoned.update(outs)
            return
        except GraphError as e:
            if self.unsupported:  # the more basic problem: report that first
                raise self._unsupported_error() from e
            raise GraphError(f"ONNX node {display!r} ({node.op_type}): {e}") from None
        for name, r in zip(node.output, results):
            if name and r is not None:
                self._bind(name, r, node, display)
        for name in node.output[len(results):]:
            if name:  # an optional output the workbench cannot produce
                self._refuse(node, display, f"output {len(results)}+ is not supported")
                self.poisoned.add(name)

    def _refuse(self, node: onnx.NodeProto, display: str, reason: str | None) -> None:
        key = node.op_type if node.domain in ("", "ai.onnx") else \
            f"{node.domain}.{node.op_type}"
        if reason:
            key = f"{key} [{reason}]"
        self.unsupported.setdefault(key, []).append(display)
        self.locations.setdefault(key, []).append(self.locator.locate(node, display))
        hint = workaround(node.op_type, node.domain)
        if self.training is not None and node.domain not in ("", "ai.onnx"):
            hint = ort_training.HINT
        if hint:
            self.hints[key] = hint

    def _unsupported_error(self) -> UnsupportedOpError:
        return UnsupportedOpError(self.unsupported, self.locations, self.hints)

    def _results(self, node: onnx.NodeProto, display: str) -> list:
        """The node's outputs: folded to constants when its inputs are all constant."""
        self._start = len(self.b._nodes)
        handler = _HANDLERS.get(handler_key(node))
        if handler is None and node.domain not in ("", "ai.onnx"):
            raise _Unsupported(None)
        ins = [i for i in node.input if i]
        foldable = node.op_type not in _NONDETERMINISTIC and not _has_subgraph(node)
        if foldable and all(self.const(i) is not None for i in ins):
            try:
                return fold(node, display, handler, {i: self.env[i] for i in ins},
                            self.opset, self.budget)
            except OverBudget as e:
                if handler is None:
                    raise
                # past the folding budget: the node stays ops of the graph, computed
                # when the model runs -- where its handler makes ops at all
                with self.b.composite(node.op_type, self._source(node, display)):
                    results = handler(_Ctx(node, display, self))
                if any(isinstance(r, np.ndarray) for r in results):
                    raise e from None
                return results
        if handler is None:
            raise _Unsupported(None)
        with self.b.composite(node.op_type, self._source(node, display)):
            return handler(_Ctx(node, display, self))

    def _source(self, node: onnx.NodeProto, display: str) -> str:
        source = node_source(node, display)
        return self.training.source(self._index, source) if self.training else source

    def _bind(self, name: str, r, node: onnx.NodeProto, display: str) -> None:
        """Record an ONNX value; a value this node made takes the ONNX name."""
        if isinstance(r, Tensor) and r.name not in self.onnx_names \
                and self.b.made_since(r.name, self._start):
            r = self.b.rename_recent(r.name, name, self._start)
        check_expected(self.expected, name, r, node, display)
        self.env[name] = r

    def _outputs(self) -> None:
        """Mark the graph outputs under their ONNX names (copying where a value is an
        input, another output, or already named otherwise)."""
        done: set[str] = set()
        for v in self.g.output:
            if v.name not in self.env:
                raise GraphError(f"{self.label}: graph output {v.name!r} is never computed")
            if v.name in self.b._inputs:
                raise GraphError(f"{self.label}: graph output {v.name!r} is the graph input "
                                 "of that name; the workbench computes every output -- give "
                                 "the output its own name (an Identity node)")
            t = self.tensor(v.name)
            if t.name != v.name or t.name in done or t.name in self.b._constants:
                with self.b.composite("Identity", v.name):
                    t = self.b.reshape(t, shape=list(t.shape), name=v.name)
            self.b.output(t)
            done.add(v.name)


def _dims_text(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else
                           repr(d.dim_param or "?") for d in dims) + "]"


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)
