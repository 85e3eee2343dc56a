"""An optimizer step appended to an imported onnxruntime-training graph, so that
``Session.train_step`` trains it (``wb.load("training_model.onnx", optimizer=AdamW())``).

The unwrapped graph (:mod:`.training`) outputs the loss and each parameter's gradient
``<p>_grad``; its parameters are graph inputs under the module's names (``fc1.weight``),
as ``generate_artifacts`` writes them. :func:`with_optimizer` appends the update of every
parameter with :func:`workbench.training.optim.append_step` -- the same ops, names and
namespaces as ``from_torch(..., training=True, optimizer=...)`` -- so the graph follows
``training/loop.py``'s contract: outputs ``loss`` and ``new.<p>`` / ``new.<s>.<p>``,
inputs ``<s>.<p>`` and AdamW's ``step``. The gradients become intermediate values (the
planner fuses each update with the kernel that computes its gradient); outputs other
than the loss and the gradients stay, after the new state.

Why not ``optimizer_model.onnx``: onnxruntime's ``AdamWOptimizer`` there updates
tensor *sequences* in place, takes the learning rate as an input (its value is in no
file), and generate_artifacts writes ``adam_mode=1`` (HuggingFace's AdamW: the bias
correction applied to the learning rate, so epsilon is added to the uncorrected
``sqrt(v)``; weight decay applied after the update), which is not
``torch.optim.AdamW``'s arithmetic (onnxruntime's ``adam_mode=0``). The workbench's optimizers are torch's
(:mod:`workbench.training.optim`), given by the caller.
"""
from __future__ import annotations

from ...errors import GraphError, WorkbenchError
from ...ir import Graph, GraphBuilder, Tensor
from ...training.optim import SGD, AdamW, append_step
from .training import TrainingGraph


def check_optimizer(optimizer) -> None:
    """Refuse anything but the workbench's optimizers before the model is read."""
    if optimizer is not None and not isinstance(optimizer, (SGD, AdamW)):
        raise WorkbenchError(
            f"optimizer must be workbench.training.SGD or AdamW, got "
            f"{type(optimizer).__name__}; onnxruntime-training's optimizer_model.onnx is "
            "not read (its AdamW is HuggingFace's, its learning rate in no file): pass "
            "its hyper-parameters as workbench.training.AdamW(lr=..., betas=..., eps=...)")


def with_optimizer(g: Graph, info: TrainingGraph | None, optimizer, label: str) -> Graph:
    """``g`` (an unwrapped training graph) with ``optimizer``'s step appended; see the
    module docstring."""
    if info is None:
        raise GraphError(f"{label} is not an onnxruntime-training graph (it has no "
                         "InPlaceAccumulatorV2 gradient outputs), so there is no "
                         "gradient to apply optimizer= to; load the training_model.onnx "
                         "that generate_artifacts writes, or import the module with "
                         "wb.from_torch(module, args, training=True, optimizer=...)")
    inputs = set(g.inputs)
    missing = [p for p in info.gradients if p not in inputs]
    if missing:
        raise GraphError(f"{label}: the gradient {info.gradients[missing[0]]!r} is of "
                         f"{missing[0]!r}, which is no graph input (a constant cannot be "
                         "trained); re-export it with generate_artifacts listing "
                         f"{missing[0]!r} among requires_grad")
    _refuse_clashes(g, info, optimizer, label)
    b = GraphBuilder.extending(g)
    params = {p: Tensor(b, p) for p in info.gradients}
    grads = {p: Tensor(b, grad) for p, grad in info.gradients.items()}
    append_step(b, optimizer, Tensor(b, info.loss), params, grads)
    # (the file's other outputs, if any, after the state: the loop reads names only)
    for name in g.outputs:
        if name != info.loss and name not in info.gradients.values():
            b.output(Tensor(b, name))
    return b.build()


def _refuse_clashes(g: Graph, info: TrainingGraph, optimizer, label: str) -> None:
    """The names the step adds must be new (a value of the file already named
    ``loss`` or ``step`` would be read as the training state's)."""
    added = ["loss"] + (["step"] if optimizer.needs_step else [])
    for p in info.gradients:
        added += [f"new.{p}", *(f"{s}.{p}" for s in optimizer.state),
                  *(f"new.{s}.{p}" for s in optimizer.state)]
    taken = {v.name for v in g.values} - {info.loss}
    clash = [n for n in added if n in taken]
    if clash:
        raise GraphError(f"{label} already has a value named {clash[0]!r}, a name the "
                         "optimizer step gives its own input or output; rename it in the "
                         "model (onnx.compose.add_prefix) before loading with optimizer=")
