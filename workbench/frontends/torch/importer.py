"""The PyTorch importer: ``torch.export`` a module, decompose it to core ATen, and walk
the FX graph node by node into a workbench :class:`Graph`."""
from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from ...errors import GraphError, UnsupportedOpError, WorkbenchError
from ...ir import Graph, GraphBuilder, Tensor
from ..rewrites.batched_matmul import fold_batch_reshapes
from ..rewrites.constant_folding import fold_constants
from ..rewrites.matmul_rows import fold_row_reshapes
from ..rewrites.pad_folding import fold_pads_into_convs
from ...dtypes import DType
from ..importing import located, workaround
from . import handlers  # noqa: F401  (registers the handlers)
from .common import (
    _HANDLERS,
    NONDETERMINISTIC,
    WIDENED,
    _Builder,
    _Ctx,
    _Scope,
    _Unsupported,
    dtype_of,
    numpy_tensor,
    op_name,
    tensor_numpy,
)
from ...ops import evaluate_node


def from_torch(module: Any, example_inputs: Any = (), *, name: str | None = None,
               dynamic: bool = False) -> Graph:
    """Import a ``torch.nn.Module`` (or a ``torch.export.ExportedProgram``) as a Graph.

    The module is exported with ``torch.export.export(module.eval(), example_inputs)``
    and decomposed to core ATen ops (``run_decompositions()``); its training flag is
    restored afterwards. Shapes are static, those of ``example_inputs`` (a tensor or a
    tuple of positional arguments; nested tuples of tensors and None are fine).

    - Parameters, buffers and tensor constants become graph constants named by their
      module path (``attention.self.query.weight``); user inputs become graph inputs
      named as torch.export names them (``hidden_states``, ``position_embeddings_0``).
    - Outputs are flattened: one tensor is ``output``; a tuple gives ``output.0``,
      ``output.1``...; a dict or ModelOutput gives its keys (``logits``).
    - Every node keeps its module path: ``Origin(kind, source)`` with ``source`` the
      innermost module's path (``attention.self.query``) and ``kind`` the module's class
      (``Linear``), or the workbench composite the ATen op decomposed into
      (``LayerNormalization``, ``Softmax``, ``Gelu``, ``Gemm``). ``Node.name`` is the
      FX node's name.
    - Whatever depends only on constants (weight transposes, rotary tables, masks
      built with arange/triu) is evaluated here and becomes a constant.
    - Errors are WorkbenchErrors: one :class:`UnsupportedOpError` listing every
      unsupported ATen op with its FX nodes, or a :class:`GraphError` naming the cause.

    Example::

        >>> g = from_torch(torch.nn.LayerNorm(64), (torch.randn(2, 8, 64),))  # doctest: +SKIP
        >>> g.nodes[0].origin                                                   # doctest: +SKIP
        Origin(composite='LayerNormalization', source='')
    """
    if dynamic:
        raise GraphError("from_torch(dynamic=True): symbolic shapes are not supported -- "
                         "the workbench compiles kernels for static shapes; import once "
                         "per input shape with dynamic=False")
    if isinstance(module, ExportedProgram):
        ep, label = module, "the exported program"
    elif isinstance(module, torch.nn.Module):
        label = f"module {type(module).__name__}"
        ep = _export(module, _as_args(example_inputs), label)
    else:
        raise WorkbenchError(f"from_torch needs a torch.nn.Module or an ExportedProgram, "
                             f"got {type(module).__name__}")
    ep = _decomposed(ep, label)
    graph_name = name or (type(module).__name__ if isinstance(module, torch.nn.Module)
                          else "exported_program")
    return _Importer(ep, graph_name, label).run()


def _decomposed(ep: ExportedProgram, label: str) -> ExportedProgram:
    """``ep.run_decompositions()``; where torch's re-trace refuses a ``view`` of a value
    it now lays out non-contiguously (GPT-2's ``Conv1D`` views the output of a
    transposed merge of heads), once more on a copy with every ``view`` a ``reshape``
    -- the same values in a functional graph, which reshape copies where it must."""
    try:
        return ep.run_decompositions()
    except Exception as e:  # noqa: BLE001 -- torch's tracer raises anything
        first = e
    try:
        import copy
        ep = copy.deepcopy(ep)
        for n in ep.graph.nodes:
            if n.target is torch.ops.aten.view.default:
                n.target = torch.ops.aten.reshape.default
        ep.graph_module.recompile()
        return ep.run_decompositions()
    except Exception:  # noqa: BLE001 -- report the first failure, the user's
        raise GraphError(f"{label}: decomposing to core ATen failed "
                         f"({_first_line(first)}); simplify the module") from first


def _as_args(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise WorkbenchError(f"example_inputs must be a tensor or a tuple of positional "
                         f"arguments, got {type(example_inputs).__name__}")


def _export(module: torch.nn.Module, args: tuple, label: str) -> ExportedProgram:
    training = module.training
    try:
        return torch.export.export(module.eval(), args)
    except Exception as e:
        raise GraphError(f"torch.export could not export {label} ({_first_line(e)}); "
                         "check the example inputs match forward(), and make forward "
                         "traceable (no data-dependent Python control flow)") from e
    finally:
        module.train(training)


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def _to_numpy(t: torch.Tensor, what: str) -> np.ndarray:
    dtype_of(t.dtype, what)
    if t.dtype in WIDENED:   # held in float32 (NumPy has no FP8)
        t = t.float()
    return tensor_numpy(t)


# ---------------------------------------------------------------------------------
# the import itself

class _Importer(_Scope):
    """Walks the FX graph once, node by node, in its (topological) order."""

    def __init__(self, ep: ExportedProgram, name: str, label: str):
        self.ep, self.label = ep, label
        self.fx = ep.graph
        sig = ep.graph_signature
        reserved = {n.name for n in self.fx.nodes}
        reserved |= {s.target for s in sig.input_specs if s.target}
        self.b = _Builder(name, f"imported from {label} with torch.export "
                                f"(torch {torch.__version__})", reserved)
        self.reserved = reserved
        self.env: dict[str, Any] = {}          # FX name -> Tensor | ndarray | Python value
        self.const_names: dict[str, str] = {}  # FX placeholder -> parameter's module path
        self.materialized: dict[str, Tensor] = {}
        self.poisoned: set[str] = set()
        self.unsupported: dict[str, list[str]] = {}
        self.locations: dict[str, list[str]] = {}
        self.hints: dict[str, str] = {}

    # -- scope ----------------------------------------------------------------------
    def value(self, name: str) -> Any:
        return self.env[name]

    def tensor(self, name: str) -> Tensor:
        v = self.env[name]
        if isinstance(v, Tensor):
            return v
        t = self.materialized.get(name)
        if t is None:
            if not isinstance(v, np.ndarray):
                raise _Unsupported(f"non-tensor value {name!r} used as a tensor")
            cname = self.const_names.get(name, name)
            if cname in self.b._values:
                cname = None  # (a fresh name; the model's is taken)
            t = self.materialized[name] = self.b.constant(v, name=cname)
        return t

    # -- steps ----------------------------------------------------------------------
    def run(self) -> Graph:
        self._leaves()
        out_node = None
        for node in self.fx.nodes:
            if node.op == "call_function":
                self._node(node)
            elif node.op == "output":
                out_node = node
            elif node.op != "placeholder":
                self._refuse(node, f"FX {node.op}")
        if self.unsupported:
            raise self._unsupported_error()
        self._outputs(out_node)
        try:
            # (attention's bmm over merged batch x heads axes as one matmul over them,
            # and linear layers over flattened rows as matmuls over the leading axes,
            # as an ONNX export has them, so the planner can join each with its
            # softmax or LayerNorm; composites' parameter arithmetic computed once, and
            # zero pads taken into the convolutions that read them)
            return fold_row_reshapes(fold_batch_reshapes(fold_pads_into_convs(
                fold_constants(self.b.build()))))
        except GraphError as e:
            raise GraphError(f"{self.label}: {e}") from None

    def _leaves(self) -> None:
        """Parameters, buffers and constants become constants; user inputs inputs."""
        ep, consts = self.ep, self.ep.constants
        nodes = {n.name: n for n in self.fx.nodes if n.op == "placeholder"}
        for spec in ep.graph_signature.input_specs:
            ph = spec.arg.name
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                             InputKind.CONSTANT_TENSOR):
                t = ep.state_dict[spec.target] if spec.target in ep.state_dict \
                    else consts[spec.target]
                self.env[ph] = _to_numpy(t, f"{spec.kind.name.lower()} {spec.target!r}")
                self.const_names[ph] = spec.target
            elif spec.kind is InputKind.USER_INPUT:
                val = nodes[ph].meta.get("val")
                if isinstance(val, torch.Tensor):
                    dt = dtype_of(val.dtype, f"input {ph!r}")
                    self.env[ph] = self.b.input(ph, tuple(int(d) for d in val.shape), dt)
                elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    raise GraphError(f"input {ph!r} of {self.label} is a symbolic number; "
                                     "pass plain Python numbers (static shapes only)")
                else:  # None, a bool, an int: fixed at export
                    self.env[ph] = getattr(spec.arg, "value", val)
            else:
                raise GraphError(f"{self.label} has an input {ph!r} of kind "
                                 f"{spec.kind.name}, which the workbench cannot import")

    def _node(self, node: torch.fx.Node) -> None:
        ins = [a.name for a in node.all_input_nodes]
        if node.target is operator.getitem:
            src, idx = node.args
            if src.name in self.poisoned:
                self.poisoned.add(node.name)
            else:
                self.env[node.name] = self.env[src.name][idx]
            return
        name = op_name(node.target)
        if any(i in self.poisoned for i in ins):
            if name not in _HANDLERS:
                self._refuse(node, None)
            self.poisoned.add(node.name)
            return
        try:
            result = self._result(node, name)
        except _Unsupported as e:
            self._refuse(node, e.reason)
            self.poisoned.add(node.name)
            return
        except GraphError as e:
            if self.unsupported:  # the more basic problem: report that first
                raise self._unsupported_error() from e
            raise GraphError(f"{self.label}: FX node {node.name!r} ({node.target}): "
                             f"{e}") from None
        self._bind(node, result)

    def _refuse(self, node: torch.fx.Node, reason: str | None) -> None:
        key = str(node.target) if reason is None else f"{node.target} [{reason}]"
        self.unsupported.setdefault(key, []).append(node.name)
        _, path = _namespace(node, "")
        self.locations.setdefault(key, []).append(
            located(node.name, path, node.meta.get("stack_trace")))
        hint = workaround(op_name(node.target)) if node.op == "call_function" else None
        if hint:
            self.hints[key] = hint

    def _unsupported_error(self) -> UnsupportedOpError:
        return UnsupportedOpError(self.unsupported, self.locations, self.hints)

    def _result(self, node: torch.fx.Node, name: str) -> Any:
        """The node's result: folded to constants when no input is a graph tensor."""
        self._start = len(self.b._nodes)
        if not isinstance(node.target, torch._ops.OpOverload):
            raise _Unsupported(None)
        handler = _HANDLERS.get(name)
        live = any(isinstance(self.env[a.name], Tensor) for a in node.all_input_nodes)
        if not live and name not in NONDETERMINISTIC:
            return _fold(node, handler, self)
        if handler is None:
            raise _Unsupported(None)
        kind, source = self._namespace(node)
        with self.b.scope(kind, source):
            result = handler(_Ctx(node, self))
        self.b.label_since(self._start, node.name)
        return result

    def _namespace(self, node: torch.fx.Node) -> tuple[str, str]:
        # (a method, so the training import can put backward nodes in a namespace)
        return _namespace(node, self.b.name)

    def _bind(self, node: torch.fx.Node, result: Any) -> None:
        """Record the node's result; a value this node made takes the FX name."""
        if isinstance(result, (list, tuple)):
            result = [self._named(r, f"{node.name}.{i}") for i, r in enumerate(result)]
        else:
            result = self._named(result, node.name)
        _check_expected(node, result, self.label)
        self.env[node.name] = result

    def _named(self, r: Any, name: str) -> Any:
        if isinstance(r, Tensor) and r.name not in self.reserved \
                and name not in self.b._values and self.b.made_since(r.name, self._start):
            return self.b.rename_recent(r.name, name, self._start)
        return r

    def _outputs(self, out_node: torch.fx.Node | None) -> None:
        """Mark the user outputs under readable names (copying where a value is an
        input, a constant or another output)."""
        sig = self.ep.graph_signature
        for spec in sig.output_specs:
            if spec.kind is not OutputKind.USER_OUTPUT:
                raise GraphError(f"{self.label} updates {spec.target!r} in place "
                                 f"({spec.kind.name}); the workbench imports pure functions "
                                 "-- remove the in-place update from forward()")
        leaves = list(out_node.args[0]) if out_node is not None else []
        names = _output_names(self.ep, len(leaves))
        done: set[str] = set()
        for leaf, want in zip(leaves, names):
            if not isinstance(leaf, torch.fx.Node):
                raise GraphError(f"{self.label} returns a non-tensor {leaf!r} as output "
                                 f"{want!r}; return tensors only")
            if isinstance(self.env[leaf.name], np.ndarray) or leaf.name in self.materialized:
                t = self.tensor(leaf.name)
            else:
                t = self.env[leaf.name]
            if not isinstance(t, Tensor):
                raise GraphError(f"{self.label} returns a non-tensor as output {want!r}")
            if t.name in done or t.name in self.b._inputs or t.name in self.b._constants:
                want = self._unique(want)  # (an input or constant may hold the name)
                with self.b.composite("Identity", want):
                    t = self.b.reshape(t, shape=list(t.shape), name=want)
                self.b.output(t)
            else:
                t = self.b.output(t, want if want == t.name else self._unique(want))
                self.env[leaf.name] = t
            done.add(t.name)

    def _unique(self, name: str) -> str:
        if name not in self.b._values:
            return name
        i = 1
        while f"{name}_{i}" in self.b._values:
            i += 1
        return f"{name}_{i}"


def _namespace(node: torch.fx.Node, root: str) -> tuple[str, str]:
    """(module class, module path) of the innermost module that made the node."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return root, ""
    path, cls = list(stack.values())[-1]
    cls = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return cls.rsplit(".", 1)[-1], str(path)


def _output_names(ep: ExportedProgram, n: int) -> list[str]:
    """Readable names for the flattened outputs, from the output's pytree paths."""
    spec = ep.call_spec.out_spec
    try:
        tree = pytree.tree_unflatten(list(range(n)), spec)
        paths = [p for p, _ in pytree.tree_flatten_with_path(tree)[0]]
    except Exception:  # a container that cannot hold placeholders: index them
        paths = None
    if spec is None or paths is None or len(paths) != n:
        return ["output"] if n == 1 else [f"output.{i}" for i in range(n)]
    names = []
    for p in paths:
        parts = [str(getattr(k, "idx", getattr(k, "key", getattr(k, "name", k))))
                 for k in p]
        if not parts:
            names.append("output")
        elif isinstance(p[0], pytree.SequenceKey):
            names.append(".".join(["output"] + parts))
        else:
            names.append(".".join(parts))
    return names


def _check_expected(node: torch.fx.Node, result: Any, label: str) -> None:
    """Fail loudly where torch's recorded example value disagrees with the import."""
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (list, tuple)) else [val]
    res = list(result) if isinstance(result, list) else [result]
    for i, (v, r) in enumerate(zip(vals, res)):
        if not isinstance(v, torch.Tensor) or r is None:
            continue
        want = (tuple(int(d) for d in v.shape), dtype_of(v.dtype, f"{node.name!r}"))
        if isinstance(r, Tensor):
            got = (tuple(r.shape), r.dtype)
        elif isinstance(r, np.ndarray):
            got = (tuple(r.shape), _dtype_of_np(r, node))
        else:
            continue
        if got != want:
            raise GraphError(
                f"{label}: FX node {node.name!r} ({node.target}) output {i} imports as "
                f"{got[1].value}{list(got[0])} but torch recorded "
                f"{want[1].value}{list(want[0])}; this is an importer bug -- please "
                "report it with the module")


def _dtype_of_np(a: np.ndarray, node: torch.fx.Node) -> DType:
    try:
        return DType.of(a.dtype)
    except ValueError:
        raise GraphError(f"FX node {node.name!r} folds to dtype {a.dtype}, which the "
                         "workbench does not support") from None


# ---------------------------------------------------------------------------------
# constant folding

class _Scratch(_Scope):
    """A throwaway graph holding one node whose inputs are all known, for folding."""

    def __init__(self, env: dict[str, Any]):
        self.env = env
        self.b = GraphBuilder("fold")
        self.feeds: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}

    def value(self, name: str) -> Any:
        return self.env[name]

    def tensor(self, name: str) -> Tensor:
        if name not in self.tensors:
            arr = self.env[name]
            if not isinstance(arr, np.ndarray):
                raise _Unsupported(f"non-tensor value {name!r} used as a tensor")
            self.tensors[name] = self.b.input(name, arr.shape, DType.of(arr.dtype))
            self.feeds[name] = arr
        return self.tensors[name]


def _fold(node: torch.fx.Node, handler, imp: _Importer) -> Any:
    """Evaluate a node whose inputs are all constant: by the workbench's own
    definitions where it has them (so folding agrees with what the graph would
    compute), else by torch running the ATen op itself."""
    if handler is not None:
        try:
            return _fold_with_workbench(node, handler, imp.env)
        except _Unsupported:
            pass  # e.g. a float64 step in a shape computation: torch takes it
        except WorkbenchError as e:
            try:
                return _fold_with_torch(node, imp.env)
            except _Unsupported:   # torch cannot run it either: the node is at fault
                raise GraphError(f"constant folding failed: {e}") from None
    return _fold_with_torch(node, imp.env)


def _fold_with_workbench(node: torch.fx.Node, handler, env: dict[str, Any]) -> Any:
    scope = _Scratch(env)
    result = handler(_Ctx(node, scope))
    g = scope.b
    vals = {**scope.feeds, **g._constants}
    for n in g._nodes:  # the nodes just made, evaluated with each op's reference
        vals.update(zip(n.outputs, evaluate_node(n, [vals[i] for i in n.inputs],
                                                 [g._values[o] for o in n.outputs])))
    conv = lambda r: vals[r.name] if isinstance(r, Tensor) else r
    return [conv(r) for r in result] if isinstance(result, (list, tuple)) else conv(result)


def _fold_with_torch(node: torch.fx.Node, env: dict[str, Any]) -> Any:
    def arg(a):
        if isinstance(a, torch.fx.Node):
            v = env[a.name]
            return numpy_tensor(v) if isinstance(v, np.ndarray) else v
        return a
    args = torch.fx.node.map_aggregate(node.args, arg)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, arg)
    try:
        out = node.target(*args, **kwargs)
    except Exception as e:  # the op needs something we do not have
        raise _Unsupported(f"folding failed: {_first_line(e)}") from e
    what = f"the folded value of {node.name!r}"
    if isinstance(out, (list, tuple)):
        return [_to_numpy(o, what) if isinstance(o, torch.Tensor) else o for o in out]
    return _to_numpy(out, what) if isinstance(out, torch.Tensor) else out


__all__: Sequence[str] = ["from_torch"]
