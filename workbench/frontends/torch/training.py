"""Training graphs from PyTorch: forward, backward and (optionally) the optimizer step
of a module in one workbench graph.

The module (with a loss function and its targets, where it does not return its loss
itself) is exported with ``torch.export``, decomposed to core ATen, and handed to
``torch.export.experimental._export_forward_backward``: a joint graph whose backward
is decomposed to the same ATen ops the inference importer knows, with its outputs
marked loss and gradient-to-parameter. The walk is the inference importer's
(:class:`_Importer`), with three differences:

- trainable parameters are graph *inputs* named by module path (``l1.weight``), not
  constants: they change every step; frozen parameters and buffers stay constants;
- nodes the loss does not depend on are the backward pass: their namespace is
  ``backward.<module path>`` (the view collapses it like a module);
- outputs are ``loss`` and ``grad.<name>`` per parameter, or, with an optimizer, ``loss``
  and the updated state (``new.<name>``, ``new.exp_avg.<name>``...), the update's ops
  under ``optimizer.<name>``.

Tied weights (one Parameter under several names, e.g. an embedding shared with the LM
head) break torch's joint export; they are untied on a copy of the module, exported,
and tied again here: every use reads the one input named by the first name, and its
gradient is the sum of the uses' gradients, as autograd sums them.
"""
from __future__ import annotations

import copy
import inspect
import operator
from typing import Any, Callable

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.experimental import _export_forward_backward
from torch.export.graph_signature import InputKind, OutputKind

from ...errors import GraphError, WorkbenchError
from ...ir import Graph, Tensor
from ..rewrites.transpose_chains import fold_transpose_chains
from ...training import dropout
from ...training.optim import SGD, AdamW, append_step, fresh_output
from ...training.phases import BACKWARD, OPTIMIZER
from .common import dtype_of, op_name
from .importer import _Importer, _as_args, _decomposed, _first_line, _to_numpy



def from_torch_training(module: torch.nn.Module, example_inputs: Any = (), *,
                        loss: Callable | None = None, targets: Any = (),
                        optimizer: SGD | AdamW | None = None,
                        name: str | None = None) -> Graph:
    """A training graph of ``module``: see the module docstring.

    ``module(*example_inputs)`` returns the loss (a scalar), or, with ``loss``, the
    loss is ``loss(module(*example_inputs), *targets)`` and the targets are graph
    inputs too (named ``target``, or ``target.0``, ``target.1``...). The module is
    exported in its own mode (``train()`` or ``eval()``); a buffer it updates in place
    (BatchNorm's running statistics in training mode) is refused.
    """
    if not isinstance(module, torch.nn.Module):
        raise WorkbenchError(f"from_torch(training=True) needs a torch.nn.Module, got "
                             f"{type(module).__name__}")
    if optimizer is not None and not isinstance(optimizer, (SGD, AdamW)):
        raise WorkbenchError(f"optimizer must be workbench.training.SGD or AdamW, got "
                             f"{type(optimizer).__name__}")
    label = f"module {type(module).__name__}"
    args, targets = _as_args(example_inputs), _as_args(targets)
    if targets and loss is None:
        raise WorkbenchError("targets were given without a loss function; pass loss=, "
                             "e.g. loss=torch.nn.functional.cross_entropy")
    untied, ties = _untied(module)
    names = _input_names(module, len(args), len(targets)) if loss is not None else None
    wrapped = _WithLoss(untied, loss, len(args)) if loss is not None else untied
    try:
        ep = torch.export.export(wrapped, (*args, *targets))
    except Exception as e:  # noqa: BLE001 -- torch's tracer raises anything
        raise GraphError(f"torch.export could not export {label} ({_first_line(e)}); "
                         "check the example inputs match forward()") from e
    ep = _decomposed(ep, label)
    mutated = [o.target for o in ep.graph_signature.output_specs
               if o.kind is OutputKind.BUFFER_MUTATION]
    if mutated:
        raise GraphError(f"{label} updates buffer {mutated[0]!r} in place (BatchNorm's "
                         "running statistics in training mode); put such layers in eval "
                         "mode for the training graph")
    # (the joint graph drops nn_module_stack; its forward nodes keep their names)
    stacks = {n.name: n.meta.get("nn_module_stack") for n in ep.graph.nodes}
    try:
        joint = _export_forward_backward(ep)
    except Exception as e:  # noqa: BLE001
        raise GraphError(f"{label}: torch could not export its backward pass "
                         f"({_first_line(e)}); the module must return a scalar loss, "
                         "or pass loss= and targets=") from e
    # (the backward's t(t(mm)) weight gradients and t(t(W)) operands as one value)
    return fold_transpose_chains(_TrainingImporter(
        joint, name or type(module).__name__, label, ties, names, optimizer,
        "module." if loss is not None else "", stacks).run())


class _WithLoss(torch.nn.Module):
    """The module followed by the loss function, as one module to export."""

    def __init__(self, module: torch.nn.Module, loss: Callable, n_args: int):
        super().__init__()
        self.module, self.loss, self.n_args = module, loss, n_args

    def forward(self, *args):
        return self.loss(self.module(*args[:self.n_args]), *args[self.n_args:])


def _input_names(module: torch.nn.Module, n_args: int, n_targets: int) -> list[str]:
    """The wrapped module's inputs under the names of forward()'s parameters."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = params[:n_args] + [f"input.{i}" for i in range(len(params), n_args)]
    return names + (["target"] if n_targets == 1 else
                    [f"target.{i}" for i in range(n_targets)])


def _untied(module: torch.nn.Module) -> tuple[torch.nn.Module, dict[str, str]]:
    """The module with every tied Parameter replaced by a copy of its own (on a deep
    copy; the module itself is untouched), and {later name: first name}."""
    first: dict[int, str] = {}
    ties: dict[str, str] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        if id(p) in first:
            ties[name] = first[id(p)]
        else:
            first[id(p)] = name
    if not ties:
        return module, {}
    copied = copy.deepcopy(module)
    for name in ties:
        owner_path, _, attr = name.rpartition(".")
        owner = copied.get_submodule(owner_path)
        setattr(owner, attr, torch.nn.Parameter(getattr(owner, attr).detach().clone()))
    return copied, ties


class _TrainingImporter(_Importer):
    def __init__(self, ep: ExportedProgram, name: str, label: str, ties: dict[str, str],
                 input_names: list[str] | None, optimizer, prefix: str,
                 stacks: dict[str, Any]):
        super().__init__(ep, name, label)
        self.ties, self.input_names, self.optimizer = ties, input_names, optimizer
        self.prefix = prefix   # of the module's names inside _WithLoss
        self.stacks = stacks
        sig = ep.graph_signature
        out_node = next(n for n in self.fx.nodes if n.op == "output")
        leaves = list(out_node.args[0])
        self.loss_node = None
        self.grads: dict[str, torch.fx.Node] = {}
        for spec, leaf in zip(sig.output_specs, leaves):
            if spec.kind is OutputKind.LOSS_OUTPUT:
                self.loss_node = leaf
            elif spec.kind is OutputKind.GRADIENT_TO_PARAMETER:
                self.grads[spec.target] = leaf
            else:
                raise GraphError(f"{label}: the joint graph has an output of kind "
                                 f"{spec.kind.name} ({spec.target}); return only the loss")
        if self.loss_node is None or not isinstance(self.loss_node, torch.fx.Node):
            raise GraphError(f"{label}: torch's joint graph has no loss output")
        if tuple(self.loss_node.meta["val"].shape) != ():
            raise GraphError(f"{label}: the loss has shape {list(self.loss_node.meta['val'].shape)}"
                             "; it must be a scalar (reduce it, e.g. .mean())")
        self.forward = _ancestors(self.loss_node)
        self.params: dict[str, Tensor] = {}   # parameter name -> its graph input
        # native_dropout nodes -> (shape, index among the graph's dropouts, p)
        self.dropouts: dict[str, tuple[tuple[int, ...], int, float]] = {}

    def _node(self, node: torch.fx.Node) -> None:
        """native_dropout and the backward's read of its mask: the mask made from the
        seed and the element indices where each is used (``training/dropout.py``)."""
        if node.target is operator.getitem and node.args[0].name in self.dropouts \
                and node.args[1] == 1:
            shape, k, p = self.dropouts[node.args[0].name]
            with self.b.scope(*self._namespace(node)):
                self.env[node.name] = dropout.keep(self.b, shape, self._seed(), k, p)
            return
        if node.op != "call_function" or op_name(node.target) != "native_dropout":
            return super()._node(node)
        x = self.env[node.args[0].name]
        p = float(node.args[1])
        if len(node.args) > 2 and node.args[2] is False:
            p = 0.0                      # (train=False: everything kept)
        if not isinstance(x, Tensor):
            return super()._node(node)   # (a constant's dropout: refused as before)
        shape, k = tuple(x.shape), len(self.dropouts)
        self.dropouts[node.name] = (shape, k, p)
        with self.b.scope(*self._namespace(node)):
            mask = dropout.keep(self.b, shape, self._seed(), k, p)
            self.env[node.name] = [dropout.apply(self.b, x, mask, p), None]

    def _seed(self) -> Tensor:
        if dropout.SEED not in self.b._inputs:
            self.b.input(dropout.SEED, (), "int64", range=(0.0, 1000.0))
        return Tensor(self.b, dropout.SEED)

    def _param(self, target: str) -> str:
        """The module's own name of a parameter (a tied one's first name)."""
        name = target[len(self.prefix):] if target.startswith(self.prefix) else target
        return self.ties.get(name, name)

    def _namespace(self, node: torch.fx.Node) -> tuple[str, str]:
        if node.name not in self.forward:
            return BACKWARD, BACKWARD
        stack = self.stacks.get(node.name) or {}
        if not stack:
            return self.b.name, ""
        path, cls = list(stack.values())[-1]
        cls = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
        path = str(path)
        if self.prefix:   # (the module inside _WithLoss)
            path = path[len(self.prefix):] if path.startswith(self.prefix) else ""
        return cls.rsplit(".", 1)[-1], path

    def _leaves(self) -> None:
        ep = self.ep
        nodes = {n.name: n for n in self.fx.nodes if n.op == "placeholder"}
        users = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
        renamed = dict(zip((s.arg.name for s in users), self.input_names or []))
        trained = set(self.grads)
        for spec in ep.graph_signature.input_specs:
            ph = spec.arg.name
            if spec.kind is InputKind.PARAMETER and spec.target in trained:
                pname = self._param(spec.target)
                if pname not in self.params:
                    t = ep.state_dict[spec.target]
                    self.params[pname] = self.b.input(
                        pname, tuple(t.shape), dtype_of(t.dtype, f"parameter {pname!r}"))
                self.env[ph] = self.params[pname]
            elif spec.kind is InputKind.USER_INPUT:
                val = nodes[ph].meta.get("val")
                if not isinstance(val, torch.Tensor):
                    raise GraphError(f"input {ph!r} of {self.label} is not a tensor; a "
                                     "training graph takes tensors only")
                self.env[ph] = self.b.input(renamed.get(ph, ph),
                                            tuple(int(d) for d in val.shape),
                                            dtype_of(val.dtype, f"input {ph!r}"))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                t = ep.state_dict[spec.target] if spec.target in ep.state_dict \
                    else ep.constants[spec.target]
                self.env[ph] = _to_numpy(t, f"{spec.kind.name.lower()} {spec.target!r}")
                self.const_names[ph] = spec.target
            else:
                raise GraphError(f"{self.label} has an input {ph!r} of kind "
                                 f"{spec.kind.name}, which the workbench cannot import")

    def _outputs(self, out_node: torch.fx.Node | None) -> None:
        grads: dict[str, Tensor] = {}
        for target, leaf in self.grads.items():   # a tied weight's uses' gradients sum
            pname = self._param(target)
            g = self.tensor(leaf.name)
            if pname in grads:
                with self.b.scope("Tie", f"{BACKWARD}.{pname}"):
                    g = grads[pname] + g
            grads[pname] = g
        loss = self.tensor(self.loss_node.name)
        if self.optimizer is None:
            self.b.output(fresh_output(self.b, loss), "loss")
            for pname, g in grads.items():
                self.b.output(fresh_output(self.b, g), f"grad.{pname}")
            return
        append_step(self.b, self.optimizer, loss, self.params, grads)


def _ancestors(node: torch.fx.Node) -> set[str]:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n.name not in seen:
            seen.add(n.name)
            todo.extend(n.all_input_nodes)
    return seen


__all__ = ["from_torch_training", "BACKWARD", "OPTIMIZER"]
