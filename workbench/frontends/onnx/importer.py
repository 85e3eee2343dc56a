"""The ONNX import itself: :func:`load_onnx` reads and checks the model, and
``_Importer`` walks its nodes in order, folding those with constant inputs
(``_fold``) and handing the others to the registered op handlers."""
from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx

from ...errors import GraphError, UnsupportedOpError, WorkbenchError, existing_file, shown
from ...ir import Graph, GraphBuilder, Tensor
from ..rewrites.constant_folding import fold_constants
from ..rewrites.pad_folding import fold_pads_into_convs
from ...dtypes import DType
from ...shapes import check_shape
from ..importing import located, workaround
from . import handlers  # noqa: F401  (importing it registers the op handlers)
from .common import (
    _DTYPES,
    _HANDLERS,
    _NONDETERMINISTIC,
    MAX_OPSET,
    MIN_OPSET,
    _Builder,
    _check_array_dtype,
    _Ctx,
    _dtype_of_elem,
    to_array,
    widened,
    _Scope,
    _Unsupported,
)
from ...ops import evaluate_node


# ---------------------------------------------------------------------------------
# entry point

def load_onnx(model: "str | Path | onnx.ModelProto",
              input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import an ONNX model as a verified workbench :class:`Graph`.

    ``input_shapes`` maps input names to static shapes and overrides the model's
    (needed when the model has dynamic dimensions such as a batch size).

        >>> g = load_onnx("model.onnx", input_shapes={"x": [8, 128]})  # doctest: +SKIP
    """
    shapes = _input_shapes(input_shapes)
    proto, label = _read_model(model)
    opset = _default_opset(proto, label)
    try:
        if proto.functions:  # model-local functions: inline them so their nodes import
            proto = onnx.inliner.inline_local_functions(proto)
        return _Importer(proto, label, opset, shapes).run()
    except WorkbenchError:
        raise
    except MemoryError:
        raise GraphError(f"{label}: out of memory importing the model (a constant or a "
                         "folded shape computation is too large for this machine)") from None
    except Exception as e:  # noqa: BLE001 -- a corrupt model makes onnx or NumPy raise anything
        raise GraphError(f"{label}: cannot import the model ({type(e).__name__}: "
                         f"{_first_line(e)}); it may be malformed -- check it with "
                         "onnx.checker.check_model(model, full_check=True) or re-export "
                         "it") from None


def _input_shapes(input_shapes) -> dict[str, tuple[int, ...]]:
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


def _read_model(model) -> tuple[onnx.ModelProto, str]:
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
            raise GraphError(f"{label} is not a readable ONNX model ({_first_line(e)}); "
                             "check the file is complete or re-export it") from None
        if not proto.graph.node and not proto.graph.output:
            raise GraphError(f"{label} holds no ONNX graph (empty or not an ONNX file); "
                             "re-export the model")
    try:
        onnx.checker.check_model(proto)
    except ValueError as e:
        if "2GB" not in str(e):  # models over 2 GB cannot be checked in memory
            raise GraphError(f"{label} fails the ONNX checker ({_first_line(e)}); "
                             "re-export the model") from None
    except onnx.checker.ValidationError as e:
        # an op ONNX later deprecated (opset 18's GroupNormalization, per-group scale)
        # is no fault of the model: exporters wrote it, onnxruntime runs it
        if "is deprecated in domain_version" not in str(e):
            raise GraphError(f"{label} fails the ONNX checker ({_first_line(e)}); "
                             "re-export the model") from None
    except Exception as e:  # noqa: BLE001 -- the checker on a corrupt proto: anything
        raise GraphError(f"{label} fails the ONNX checker ({type(e).__name__}: "
                         f"{_first_line(e)}); re-export the model") from None
    return proto, label


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return shown(text.splitlines()[0][:200])


def _default_opset(proto: onnx.ModelProto, label: str) -> int:
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


# ---------------------------------------------------------------------------------
# the import itself

class _Importer(_Scope):
    """Walks the ONNX graph once, node by node, in its (topological) order."""

    def __init__(self, proto: onnx.ModelProto, label: str, opset: int,
                 input_shapes: dict[str, Sequence[int]]):
        self.proto, self.label, self.opset = proto, label, opset
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
        self._producers: dict[str, onnx.NodeProto] | None = None
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
        self._expectations()
        for i, node in enumerate(self.g.node):
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
            self.env[name] = to_array(t)
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

    def _expectations(self) -> None:
        """ONNX's own inferred static types, to check each imported node against."""
        model = onnx.ModelProto()
        model.CopyFrom(self.proto)
        for v in model.graph.input:  # give inference the shapes we use
            t = self.env.get(v.name)
            if isinstance(t, Tensor):
                v.type.tensor_type.ClearField("shape")
                v.type.tensor_type.shape.SetInParent()
                for d in t.shape:
                    v.type.tensor_type.shape.dim.add().dim_value = d
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False,
                                                         data_prop=True)
        except Exception:  # inference is a cross-check only; its absence is no error
            return
        for v in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
            if tt is None or not tt.HasField("shape") or tt.elem_type not in _DTYPES:
                continue
            if all(d.HasField("dim_value") for d in tt.shape.dim):
                self.expected[v.name] = (tuple(d.dim_value for d in tt.shape.dim),
                                         _DTYPES[tt.elem_type])

    def _node(self, node: onnx.NodeProto, display: str) -> None:
        outs = [o for o in node.output if o]
        if any(i in self.poisoned for i in node.input if i):
            if node.op_type not in _HANDLERS:
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
        self.locations.setdefault(key, []).append(self._located(node, display))
        hint = workaround(node.op_type, node.domain)
        if hint:
            self.hints[key] = hint

    def _unsupported_error(self) -> UnsupportedOpError:
        return UnsupportedOpError(self.unsupported, self.locations, self.hints)

    def _located(self, node: onnx.NodeProto, display: str) -> str:
        """Where a node sits: the module path torch.onnx.export recorded (the same
        words from_torch uses), a scoped name (``/encoder/layer.0/...``) as it is, or
        else the node with its nearest named producer (an initializer, an input or a
        scoped node) -- or consumer, when nothing named feeds it."""
        meta = {p.key: p.value for p in node.metadata_props}
        scopes = meta.get("pkg.torch.onnx.name_scopes")
        if scopes:
            try:
                path = [str(x) for x in ast.literal_eval(scopes)][1:-1]
            except (ValueError, SyntaxError):
                path = []
            return located(display, path[-1] if path else "",
                           meta.get("pkg.torch.onnx.stack_trace"))
        if "/" in display.strip("/"):
            return display
        near = self._named_near(node)
        return f"{display} ({near})" if near else display

    def _named_near(self, node: onnx.NodeProto) -> str:
        if self._producers is None:
            self._producers = {o: n for n in self.g.node for o in n.output}
        named = lambda n: bool(n.name) and "/" in n.name.strip("/")  # noqa: E731
        leaves = {v.name for v in self.g.input} | {t.name for t in self.g.initializer}
        seen, frontier = set(), [i for i in node.input if i]
        for _ in range(32):      # breadth first, a bounded walk
            nxt = []
            for v in frontier:
                if v in seen:
                    continue
                seen.add(v)
                if v in leaves:
                    return f"after {v}"
                p = self._producers.get(v)
                if p is None:
                    continue
                if named(p):
                    return f"after {p.name}"
                nxt += [i for i in p.input if i]
            if not nxt:
                break
            frontier = nxt
        for n in self.g.node:     # nothing named feeds it: its first named consumer
            if named(n) and set(node.output) & set(n.input):
                return f"before {n.name}"
        return ""

    def _results(self, node: onnx.NodeProto, display: str) -> list:
        """The node's outputs: folded to constants when its inputs are all constant."""
        self._start = len(self.b._nodes)
        if node.domain not in ("", "ai.onnx"):
            raise _Unsupported(None)
        handler = _HANDLERS.get(node.op_type)
        ins = [i for i in node.input if i]
        foldable = node.op_type not in _NONDETERMINISTIC and not _has_subgraph(node)
        if foldable and all(self.const(i) is not None for i in ins):
            return _fold(node, display, handler, {i: self.env[i] for i in ins}, self.opset)
        if handler is None:
            raise _Unsupported(None)
        with self.b.composite(node.op_type, display):
            return handler(_Ctx(node, display, self))

    def _bind(self, name: str, r, node: onnx.NodeProto, display: str) -> None:
        """Record an ONNX value; a value this node made takes the ONNX name."""
        if isinstance(r, Tensor) and r.name not in self.onnx_names \
                and self.b.made_since(r.name, self._start):
            r = self.b.rename_recent(r.name, name, self._start)
        self._check_expected(name, r, node, display)
        self.env[name] = r

    def _check_expected(self, name: str, r, node: onnx.NodeProto, display: str) -> None:
        """Fail loudly where ONNX's shape inference disagrees with the import."""
        exp = self.expected.get(name)
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


# ---------------------------------------------------------------------------------
# constant folding

class _Scratch(_Scope):
    """A throwaway graph holding one node whose inputs are all known, for folding."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.b = GraphBuilder("fold")
        self.feeds: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            arr = self.arrays[name]
            dt = _check_array_dtype(arr, f"constant {name!r}")
            self.tensors[name] = self.b.input(name, arr.shape, dt)
            self.feeds[name] = arr
        return self.tensors[name]

    def const(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name].shape)

    def dtype(self, name: str) -> DType:
        return _check_array_dtype(self.arrays[name], repr(name))


def _ceil_pool(node: onnx.NodeProto) -> bool:
    return node.op_type in ("MaxPool", "AveragePool", "LpPool") and any(
        a.name == "ceil_mode" and a.i for a in node.attribute)


def _fold(node, display, handler, arrays, opset) -> list:
    """Evaluate a node on constant inputs: by the workbench's own definitions where it
    has them (so folding agrees with what the graph would compute), else by ONNX's.

    A folding failure is never reported as an unsupported op: where the workbench has
    the op, its own error (a malformed node) is the one raised, and ONNX's evaluator is
    only asked about what the workbench cannot fold (a float64 shape computation); an op
    only ONNX's evaluator knows is reported with the evaluator's reason."""
    if handler is not None:
        try:
            return _fold_with_workbench(node, display, handler, arrays)
        except _Unsupported:
            pass  # e.g. a float64 step in a shape computation: ONNX's evaluator takes it
        except WorkbenchError as e:
            try:
                return _fold_with_onnx(node, arrays, opset)
            except _Unsupported:
                raise GraphError(f"constant folding failed: {e}") from None
    return _fold_with_onnx(node, arrays, opset)


def _fold_with_workbench(node, display, handler, arrays) -> list:
    scope = _Scratch(arrays)
    results = handler(_Ctx(node, display, scope))
    g = scope.b
    # constants the handler itself made (a scalar 1 or eps) are inputs to its nodes too
    env = {**g._constants, **scope.feeds}
    for n in g._nodes:  # the nodes just made, evaluated with each op's reference
        env.update(zip(n.outputs, evaluate_node(n, [env[i] for i in n.inputs],
                                                [g._values[o] for o in n.outputs])))
    return [env[r.name] if isinstance(r, Tensor) else r for r in results]


def _fold_with_onnx(node, arrays, opset) -> list:
    from onnx.reference import ReferenceEvaluator
    try:
        ev = ReferenceEvaluator(node, opsets={"": opset})
        outs = ev.run(None, arrays)
    except Exception as e:  # the evaluator lacks the op, or the op needs something else
        # (NotImplementedError, or a "no implementation" lookup: the op is unknown; any
        # other failure is the evaluator's, named so it is not taken for a missing op)
        known = not isinstance(e, NotImplementedError) and "implement" not in str(e)
        raise _Unsupported(f"constant inputs; onnx.reference could not fold it: "
                           f"{_first_line(e)[:120]}" if known else None) from e
    return [None if o is None else widened(np.asarray(o)) for o in outs]
