"""Constant folding at import: a node whose inputs are all constant is evaluated, by
the workbench's own definitions where it has the op (so folding agrees with what the
graph would compute), else by ``onnx.reference``, and its outputs become constants --
within the budgets of :mod:`.budget`, checked from the shapes before anything is
allocated."""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError, WorkbenchError
from ...ir import GraphBuilder, Tensor
from ...dtypes import DType
from ...ops import evaluate_node
from .budget import (REFERENCE_MAX_ELEMENTS, REFERENCE_SECONDS, FoldBudget, OverBudget,
                     time_limit)
from .common import _check_array_dtype, _Ctx, _Scope, _Unsupported, first_line, widened


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



def fold(node, display, handler, arrays, opset, budget: FoldBudget) -> list:
    """Evaluate a node on constant inputs: by the workbench's own definitions where it
    has them (so folding agrees with what the graph would compute), else by ONNX's.

    A folding failure is never reported as an unsupported op: where the workbench has
    the op, its own error (a malformed node) is the one raised, and ONNX's evaluator is
    only asked about what the workbench cannot fold (a float64 shape computation); an op
    only ONNX's evaluator knows is reported with the evaluator's reason. OverBudget
    where the outputs pass the budget (the importer then leaves the node as ops)."""
    what = f"{node.op_type} {display!r}"
    if handler is not None:
        try:
            return _fold_with_workbench(node, display, handler, arrays, budget)
        except _Unsupported:
            pass  # e.g. a float64 step in a shape computation: ONNX's evaluator takes it
        except OverBudget:
            raise
        except WorkbenchError as e:
            try:
                return _fold_with_onnx(what, node, arrays, opset, budget)
            except _Unsupported:
                raise GraphError(f"constant folding failed: {e}") from None
    return _fold_with_onnx(what, node, arrays, opset, budget)


def _read_bytes(arrays: dict) -> int:
    return sum(a.nbytes for a in arrays.values() if isinstance(a, np.ndarray))


def _fold_with_workbench(node, display, handler, arrays, budget: FoldBudget) -> list:
    scope = _Scratch(arrays)
    results = handler(_Ctx(node, display, scope))
    g = scope.b
    # every value the evaluation below holds, sized from its shape first
    made = sum(g._values[o].nbytes for n in g._nodes for o in n.outputs) + sum(
        r.nbytes for r in results if isinstance(r, np.ndarray))
    budget.admit(f"{node.op_type} {display!r}", made, _read_bytes(arrays))
    # constants the handler itself made (a scalar 1 or eps) are inputs to its nodes too
    env = {**g._constants, **scope.feeds}
    for n in g._nodes:  # the nodes just made, evaluated with each op's reference
        env.update(zip(n.outputs, evaluate_node(n, [env[i] for i in n.inputs],
                                                [g._values[o] for o in n.outputs])))
    return [env[r.name] if isinstance(r, Tensor) else r for r in results]


def _fold_with_onnx(what: str, node, arrays, opset, budget: FoldBudget) -> list:
    from onnx.reference import ReferenceEvaluator
    numel = _inferred_numel(node, arrays, opset)
    if numel is None:        # (no shape inferred: the inputs bound what it may make)
        numel = sum(a.size for a in arrays.values() if isinstance(a, np.ndarray))
    if numel > REFERENCE_MAX_ELEMENTS:
        raise OverBudget(f"{what}: onnx.reference (pure Python) would fold {numel} "
                         f"elements at import, past the {REFERENCE_MAX_ELEMENTS} it may; "
                         "the workbench cannot compute this op itself")
    try:
        with time_limit(REFERENCE_SECONDS, what):
            ev = ReferenceEvaluator(node, opsets={"": opset})
            outs = ev.run(None, arrays)
    except OverBudget:
        raise
    except Exception as e:  # the evaluator lacks the op, or the op needs something else
        # (NotImplementedError, or a "no implementation" lookup: the op is unknown; any
        # other failure is the evaluator's, named so it is not taken for a missing op)
        known = not isinstance(e, NotImplementedError) and "implement" not in str(e)
        raise _Unsupported(f"constant inputs; onnx.reference could not fold it: "
                           f"{first_line(e)[:120]}" if known else None) from e
    outs = [None if o is None else widened(np.asarray(o)) for o in outs]
    budget.admit(what, sum(o.nbytes for o in outs if o is not None), _read_bytes(arrays))
    return outs


def _inferred_numel(node, arrays, opset) -> int | None:
    """The elements of the node's outputs as ONNX's shape inference sees them (its
    constant inputs given as initializers, so shape inputs propagate), or None."""
    import onnx
    from onnx import helper, numpy_helper
    try:
        inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in arrays.items()
                 if isinstance(a, np.ndarray) and a.dtype.kind in "biuf"]
        outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        model = helper.make_model(helper.make_graph([node], "fold", [], outs, inits),
                                  opset_imports=[helper.make_opsetid("", opset)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False,
                                                     data_prop=True)
        total = 0
        for v in inferred.graph.output:
            dims = v.type.tensor_type.shape.dim
            if not v.type.tensor_type.HasField("shape") or \
                    any(not d.HasField("dim_value") for d in dims):
                return None
            total += math.prod(d.dim_value for d in dims)
        return total
    except Exception:      # noqa: BLE001 -- inference could not say: the inputs bound it
        return None
