"""Training graphs as onnxruntime-training's exporter writes them
(``onnxruntime.training.artifacts.generate_artifacts`` -> ``training_model.onnx``):
the forward, the loss and the backward in one ONNX graph, the backward's
``com.microsoft`` gradient ops imported by :mod:`.handlers_gradients`.

Such a graph ends every parameter gradient ``<p>_grad`` in an ``InPlaceAccumulatorV2``
that adds it into a buffer onnxruntime keeps (``<p>_grad.accumulation.buffer``, or
overwrites it where the ``lazy_reset_grad`` input is true) and outputs only a flag saying
it did: the gradient itself leaves the graph as a side effect. :func:`unwrap` rewrites
the graph before the import so that it is a function, as the workbench's graphs are
(and as ``from_torch(..., training=True)`` makes them):

- the outputs are the loss (and whatever else the file outputs besides the flags) and
  each gradient under the file's name for it (``fc1.weight_grad``); the accumulators,
  their buffers and ``lazy_reset_grad`` are gone -- accumulating over micro-batches is
  the caller's sum of the outputs;
- an output of a ``com.microsoft`` node that nothing reads is blanked (ONNX's "absent"),
  so the import does not compute it (``LayerNormalizationGrad``'s gradient of a data
  input);
- the nodes the outputs other than gradients do not depend on are the backward
  (:class:`TrainingGraph`); the importer puts them under the namespace ``backward``
  (``backward/fc1/Gemm_Grad/Gemm_0``), which :mod:`workbench.training.phases` reads.

``optimizer_model.onnx`` (one ``AdamWOptimizer`` over tensor sequences) is refused
naming the op: the workbench's optimizer steps are graph ops
(:mod:`workbench.training.optim`), appended to this graph by :mod:`.training_step`.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

from ...errors import GraphError
from ...training.phases import BACKWARD

MS = "com.microsoft"
ACCUMULATOR = "InPlaceAccumulatorV2"
OPTIMIZERS = ("AdamWOptimizer", "SGDOptimizerV2", "AdamOptimizer", "LambOptimizer")
HINT = ("the workbench imports the onnxruntime-training gradient ops docs/training.md "
        "lists; for a model using others, import it from torch instead: "
        "wb.from_torch(module, args, training=True)")


@dataclass(frozen=True)
class TrainingGraph:
    """What :func:`unwrap` found: the loss, the gradients (parameter name -> the
    file's name for its gradient, an output now) and the backward's node indices in
    the unwrapped graph."""
    loss: str
    gradients: dict[str, str]
    backward: frozenset[int]

    def source(self, index: int, source: str) -> str:
        """A node's namespace: under ``backward/`` for a backward node."""
        if index not in self.backward:
            return source
        return f"{BACKWARD}/{source.lstrip('/')}"


def is_training_graph(proto: onnx.ModelProto) -> bool:
    return any(n.domain == MS and n.op_type == ACCUMULATOR for n in proto.graph.node)


def unwrap(proto: onnx.ModelProto, label: str
           ) -> tuple[onnx.ModelProto, TrainingGraph | None]:
    """The graph as a function (see the module doc) and what it holds; ``(proto,
    None)`` for a model that is no onnxruntime training graph."""
    _refuse_optimizer(proto, label)
    if not is_training_graph(proto):
        return proto, None
    g = proto.graph
    outputs = {v.name: v for v in g.output}
    inputs = {v.name: v for v in g.input}
    accumulators = [n for n in g.node if n.domain == MS and n.op_type == ACCUMULATOR]
    flags: dict[str, str] = {}        # flag output -> the gradient it stands for
    dropped: set[str] = set()         # buffers and lazy_reset_grad
    gradients: dict[str, str] = {}
    for n in accumulators:
        if len(n.input) < 2 or len(n.output) != 1 or n.output[0] not in outputs:
            raise GraphError(f"{label}: {ACCUMULATOR} node {n.name!r} is not the form "
                             "onnxruntime-training's generate_artifacts writes (a buffer, "
                             "a gradient, a reset flag; its one output a graph output); "
                             "re-export it with generate_artifacts")
        buffer, grad = n.input[0], n.input[1]
        flags[n.output[0]] = grad
        dropped.update(i for i in n.input if i != grad)
        gradients[_parameter(grad, buffer)] = grad
    others = [o for o in g.output if o.name not in flags]
    if not others:
        raise GraphError(f"{label}: a training graph without a loss output (every output "
                         f"is a gradient accumulator's flag); re-export it with "
                         "generate_artifacts")
    kept = [n for n in g.node if not (n.domain == MS and n.op_type == ACCUMULATOR)]
    still_read = {i for n in kept for i in n.input}
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    del out.graph.input[:]
    out.graph.input.extend(v for v in g.input
                           if v.name not in dropped or v.name in still_read)
    del out.graph.output[:]
    out.graph.output.extend(others)
    for flag, grad in flags.items():
        buf = inputs.get(next(n.input[0] for n in accumulators if n.output[0] == flag))
        out.graph.output.append(_like(grad, buf, label))
    _blank_unread(out.graph)
    return out, TrainingGraph(others[0].name, gradients, _backward(out.graph, others))


def _parameter(grad: str, buffer: str) -> str:
    """``fc1.weight`` from ``fc1.weight_grad`` (or from the buffer's name)."""
    for name, suffix in ((grad, "_grad"), (buffer, "_grad.accumulation.buffer")):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return grad


def _like(grad: str, buffer: onnx.ValueInfoProto | None, label: str) -> onnx.ValueInfoProto:
    """The gradient's output: the type and shape of the buffer it was added into."""
    if buffer is None or not buffer.type.HasField("tensor_type"):
        raise GraphError(f"{label}: the accumulation buffer of {grad!r} is no graph input "
                         "with a tensor type; re-export it with generate_artifacts")
    tt = buffer.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tt.shape.dim]
    return helper.make_tensor_value_info(grad, tt.elem_type, dims)


def _blank_unread(g: onnx.GraphProto) -> None:
    """Outputs of com.microsoft nodes that no node and no graph output reads become ""
    (absent), so their handlers do not compute them."""
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for n in g.node:
        if n.domain == MS:
            for k, name in enumerate(n.output):
                if name and name not in read:
                    n.output[k] = ""


def _backward(g: onnx.GraphProto, forward_outputs) -> frozenset[int]:
    """Indices of the nodes none of ``forward_outputs`` depends on."""
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    forward: set[int] = set()
    stack = [producer[v.name] for v in forward_outputs if v.name in producer]
    while stack:
        i = stack.pop()
        if i in forward:
            continue
        forward.add(i)
        stack.extend(producer[x] for x in g.node[i].input if x in producer)
    return frozenset(range(len(g.node))) - forward


def _refuse_optimizer(proto: onnx.ModelProto, label: str) -> None:
    ops = sorted({n.op_type for n in proto.graph.node
                  if n.domain == MS and n.op_type in OPTIMIZERS})
    if ops:
        raise GraphError(f"{label} is an onnxruntime-training optimizer graph ({ops[0]} "
                         "over tensor sequences), which the workbench does not import; "
                         "its optimizer steps are graph ops appended to the training "
                         "graph: wb.load('training_model.onnx', "
                         "optimizer=workbench.training.AdamW(lr=...))")
