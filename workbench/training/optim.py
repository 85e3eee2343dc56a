"""Optimizer steps as graph ops: SGD and AdamW applied to the parameter gradients of a
training graph, so the planner sees (and can fuse) the update with the backward pass.

Each optimizer is a frozen value (its hyperparameters, fixed when the graph is built,
as torch's ``param_groups`` are per step). What changes from step to step is graph
state: every parameter and each of its moment tensors is a graph input and its
updated value a graph output (``new.<name>``, ``new.exp_avg.<name>``...); AdamW also
takes the step count ``step`` (a float32 scalar, 1 on the first step) for its bias
corrections. The arithmetic is torch's own (``torch.optim.sgd`` / ``adamw``'s
single-tensor path), in the same order, so N steps agree with torch's loop within
float32's rounding.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import WorkbenchError
from ..ir import GraphBuilder, Tensor
from .phases import OPTIMIZER


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD(lr, momentum, weight_decay)`` (no dampening, no Nesterov):
    ``d = g + wd*p``; with momentum ``buf = mu*buf + d`` (a zero buffer makes the first
    step's ``buf = d``, as torch's), ``p -= lr*buf``; else ``p -= lr*d``."""
    lr: float = 1e-3
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self):
        _check(self.lr > 0, f"SGD lr must be > 0, got {self.lr}")
        _check(0 <= self.momentum < 1, f"SGD momentum must be in [0, 1), got {self.momentum}")
        _check(self.weight_decay >= 0, f"SGD weight_decay must be >= 0, got {self.weight_decay}")

    @property
    def state(self) -> tuple[str, ...]:
        return ("momentum_buffer",) if self.momentum else ()

    @property
    def needs_step(self) -> bool:
        return False

    def shared(self, b: GraphBuilder, step: Tensor | None) -> dict[str, Tensor]:
        return {}

    def update(self, b: GraphBuilder, p: Tensor, g: Tensor, state: dict[str, Tensor],
               shared: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        d = g + p * self.weight_decay if self.weight_decay else g
        if self.momentum:
            buf = state["momentum_buffer"] * self.momentum + d
            return p - buf * self.lr, {"momentum_buffer": buf}
        return p - d * self.lr, {}


@dataclass(frozen=True)
class AdamW:
    """``torch.optim.AdamW(lr, betas, eps, weight_decay)`` (not amsgrad):
    ``p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
    p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``."""
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2

    def __post_init__(self):
        _check(self.lr > 0, f"AdamW lr must be > 0, got {self.lr}")
        _check(len(self.betas) == 2 and all(0 <= x < 1 for x in self.betas),
               f"AdamW betas must be two numbers in [0, 1), got {self.betas}")
        _check(self.eps > 0, f"AdamW eps must be > 0, got {self.eps}")
        _check(self.weight_decay >= 0,
               f"AdamW weight_decay must be >= 0, got {self.weight_decay}")
        object.__setattr__(self, "betas", tuple(float(x) for x in self.betas))

    @property
    def state(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    @property
    def needs_step(self) -> bool:
        return True

    def shared(self, b: GraphBuilder, step: Tensor | None) -> dict[str, Tensor]:
        # the bias corrections, once for every parameter (scalars)
        b1, b2 = self.betas
        bc1 = 1.0 - b.pow(b.as_tensor(b1, like=step), step)
        bc2 = 1.0 - b.pow(b.as_tensor(b2, like=step), step)
        return {"step_size": self.lr / bc1, "bc2_sqrt": b.sqrt(bc2)}

    def update(self, b: GraphBuilder, p: Tensor, g: Tensor, state: dict[str, Tensor],
               shared: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        b1, b2 = self.betas
        if self.weight_decay:
            p = p * (1.0 - self.lr * self.weight_decay)
        m = state["exp_avg"] * b1 + g * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        denom = b.sqrt(v) / shared["bc2_sqrt"] + self.eps
        return p - shared["step_size"] * m / denom, {"exp_avg": m, "exp_avg_sq": v}


Optimizer = SGD | AdamW
# every optimizer's state names (graph inputs "<state>.<parameter>")
STATE = ("momentum_buffer", "exp_avg", "exp_avg_sq")


def append_step(b: GraphBuilder, opt: Optimizer, loss: Tensor,
                params: dict[str, Tensor], grads: dict[str, Tensor]) -> None:
    """The optimizer step of every parameter appended to ``b``, with the outputs
    ``training/loop.py`` reads: ``loss``, and per parameter ``new.<p>`` and its state's
    ``new.<s>.<p>`` (inputs ``<s>.<p>``, AdamW's ``step``), the update's ops under
    ``optimizer.<p>``. One definition for every importer of training graphs
    (``from_torch(training=True)``, ONNX ``training_model.onnx``)."""
    b.output(fresh_output(b, loss), "loss")
    step = b.input("step", (), "float32", range=(1.0, 100.0)) if opt.needs_step else None
    with b.scope(type(opt).__name__, OPTIMIZER):
        shared = opt.shared(b, step)
    for pname, g in grads.items():
        p = params[pname]
        state = {s: b.input(f"{s}.{pname}", tuple(p.shape), p.dtype,
                            range=(0.0, 1.0) if s == "exp_avg_sq" else None)
                 for s in opt.state}
        with b.scope(type(opt).__name__, f"{OPTIMIZER}.{pname}"):
            new_p, new_state = opt.update(b, p, g, state, shared)
        b.output(fresh_output(b, new_p), f"new.{pname}")
        for s in opt.state:
            b.output(fresh_output(b, new_state[s]), f"new.{s}.{pname}")


def fresh_output(b: GraphBuilder, t: Tensor) -> Tensor:
    """t, or an identity of it where t is an input or already an output (a value
    is one output under one name)."""
    if t.name in b._inputs or t.name in b._constants or t.name in b._outputs:
        with b.composite("Identity", t.name):
            return b.reshape(t, shape=list(t.shape))
    return t


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise WorkbenchError(message)
