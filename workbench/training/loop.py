"""The training loop over a compiled training graph (forward + backward + optimizer
step, from ``from_torch(..., training=True, optimizer=...)`` or
``load("training_model.onnx", optimizer=...)``): each step runs the
session's current plan on a batch and the parameters' and moments' new values replace
the old ones in place, so the arrays a user holds (or a torch module's parameters, via
:meth:`TrainState.copy_to`) see every step.

The graph's naming is the contract: a parameter ``p`` is the input ``p`` and the output
``new.p``; each optimizer state tensor ``s`` of it is the input ``s.p`` and the output
``new.s.p``; AdamW's step count is the float32 scalar input ``step`` (1 on the first
step, as torch counts); the loss is the output ``loss``; every other input is data.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import WorkbenchError
from ..ir import Graph
from .dropout import SEED
from .optim import STATE


@dataclass
class TrainState:
    """Parameters and optimizer state of a training graph, updated in place by each
    step (mutable on purpose: it *is* the training run's state; plans stay values)."""
    params: dict[str, np.ndarray]
    state: dict[str, np.ndarray] = field(default_factory=dict)   # "exp_avg.fc.weight"...
    step: int = 0

    @staticmethod
    def from_module(graph: Graph, module) -> "TrainState":
        """The module's current parameters (copied) and zero optimizer state, for the
        graph's inputs (a torch module's ``named_parameters()``, tied ones once)."""
        params = {k: p.detach().cpu().numpy().astype(np.float32, copy=True)
                  for k, p in module.named_parameters()}
        return TrainState.from_arrays(graph, params)

    @staticmethod
    def from_arrays(graph: Graph, params: Mapping[str, np.ndarray]) -> "TrainState":
        names = parameter_names(graph)
        missing = [n for n in names if n not in params]
        if missing:
            raise WorkbenchError(f"no values for the parameters {missing[:5]} of graph "
                                 f"{graph.name!r}; pass every parameter the graph takes")
        vals = graph.value_map
        own = {n: np.array(params[n], dtype=vals[n].dtype.np, copy=True) for n in names}
        for n in names:
            if own[n].shape != vals[n].shape:
                raise WorkbenchError(f"parameter {n!r} has shape {list(own[n].shape)}; "
                                     f"the graph takes {list(vals[n].shape)}")
        state = {s: np.zeros(vals[s].shape, vals[s].dtype.np) for s in state_names(graph)}
        return TrainState(own, state)

    def copy_to(self, module) -> None:
        """Write the parameters into a torch module's own (e.g. to evaluate it)."""
        import torch
        with torch.no_grad():
            for k, p in module.named_parameters():
                if k in self.params:
                    p.copy_(torch.from_numpy(self.params[k]))


def parameter_names(graph: Graph) -> list[str]:
    """The inputs ``p`` with an output ``new.p`` and no dot-prefixed state of their own."""
    outs = set(graph.outputs)
    states = set(state_names(graph))
    return [i for i in graph.inputs if f"new.{i}" in outs and i not in states]


def state_names(graph: Graph) -> list[str]:
    """The optimizer state inputs ``s.p`` (s one of the optimizers' state names,
    ``new.s.p`` an output, ``p`` an input)."""
    outs, ins = set(graph.outputs), set(graph.inputs)
    return [i for i in graph.inputs if f"new.{i}" in outs and "." in i
            and i.split(".", 1)[0] in STATE and i.split(".", 1)[1] in ins]


def train_step(session, batch: Mapping[str, np.ndarray],
               state: TrainState | None) -> float:
    """One step: run the session's current plan on the batch with the state's
    parameters and moments, write their new values into the state's arrays, and
    return the loss (of the parameters before the update, as torch's loop reports)."""
    g = session.graph
    if "loss" not in g.outputs or not parameter_names(g):
        raise WorkbenchError(f"graph {g.name!r} is not a training graph with an optimizer "
                             "step; import it with from_torch(module, args, training=True, "
                             "optimizer=workbench.training.AdamW()), or an onnxruntime-"
                             "training file with wb.load('training_model.onnx', "
                             "optimizer=workbench.training.AdamW())")
    if state is None:
        raise WorkbenchError("train_step needs the parameters: pass state="
                             "workbench.training.TrainState.from_module(session.graph, "
                             "module) on the first step (the session keeps it)")
    feeds = dict(batch)
    clash = sorted(set(feeds) & (set(state.params) | set(state.state) | {"step"}))
    if clash:
        raise WorkbenchError(f"the batch holds {clash[:3]}, which are the training "
                             "state's; pass only the data inputs")
    feeds.update(state.params)
    feeds.update(state.state)
    if "step" in g.inputs:
        feeds["step"] = np.float32(state.step + 1)
    if SEED in g.inputs and SEED not in feeds:
        # (each step's dropout masks differ, and rerunning a step draws its own again)
        feeds[SEED] = np.int64(state.step)
    out = session.run(feeds, out=_outputs(session))
    for name, arr in (*state.params.items(), *state.state.items()):
        np.copyto(arr, out[f"new.{name}"])
    state.step += 1
    return float(out["loss"])


def _outputs(session) -> dict:
    """The arrays the current plan's program writes a step's outputs into, kept by
    that program and reused every step (the step's values are copied into the state
    at once; a new plan's program has its own)."""
    return session.program().kept_outputs()
