"""Constant folding at import: a node whose inputs are all constant is evaluated, by
the workbench's own definitions where it has the op (so folding agrees with what the
graph would compute), else by ``onnx.reference``, and its outputs become constants."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError, WorkbenchError
from ...ir import GraphBuilder, Tensor
from ...dtypes import DType
from ...ops import evaluate_node
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



def fold(node, display, handler, arrays, opset) -> list:
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
                           f"{first_line(e)[:120]}" if known else None) from e
    return [None if o is None else widened(np.asarray(o)) for o in outs]
