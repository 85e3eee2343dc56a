"""The ``modules`` family: random ``torch.nn`` modules, imported as users import them
(``wb.from_torch``: torch.export, then the ATen importer and its rewrites).

A module is a short stack drawn from a seed -- linear layers (with and without bias),
LayerNorm, RMS-style norms written out, softmax and log-softmax, GELU (erf and tanh),
SiLU, ReLU, tanh, residual adds, reshapes into heads and back, transposes, scaled
matmuls between two projections, mean and max reductions, concatenation, dropout in
eval mode -- in float32 over 1-3 batch axes. The import is checked first: the graph's
NumPy reference against torch's own output on the same inputs (``relative_to_largest``
within FRAMEWORK_TOLERANCE), then the fuzzer checks every plan's kernels as for any
family. torch is imported when a case is drawn (the ``torch`` extra).
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ...ir import Graph
from ...tolerance import FRAMEWORK_TOLERANCE, relative_to_largest

WIDTHS = [1, 3, 8, 16, 33, 64]
LAYERS = ["linear", "linear_nobias", "layer_norm", "rms_norm", "softmax", "log_softmax",
          "gelu", "gelu_tanh", "silu", "relu", "tanh", "residual", "heads", "transpose",
          "attention", "mean", "max", "concat", "dropout"]


def _module(seed: int):
    """(module, example input) drawn from ``seed``."""
    import torch
    rng = np.random.default_rng(seed)
    pick = lambda xs: xs[int(rng.integers(len(xs)))]      # noqa: E731
    torch.manual_seed(seed)
    batch = tuple(int(rng.integers(1, 5)) for _ in range(int(rng.integers(1, 4))))
    width = pick(WIDTHS)
    layers = [pick(LAYERS) for _ in range(int(rng.integers(1, 6)))]

    class Drawn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.steps, w = [], width
            self.mods = torch.nn.ModuleList()
            for k, layer in enumerate(layers):
                if layer in ("linear", "linear_nobias"):
                    out = pick(WIDTHS)
                    m = torch.nn.Linear(w, out, bias=layer == "linear")
                    self.steps.append(("mod", len(self.mods)))
                    self.mods.append(m)
                    w = out
                elif layer == "layer_norm":
                    self.steps.append(("mod", len(self.mods)))
                    self.mods.append(torch.nn.LayerNorm(w))
                elif layer == "residual":
                    self.steps.append(("mod_residual", len(self.mods)))
                    self.mods.append(torch.nn.Linear(w, w))
                elif layer == "attention":
                    self.steps.append(("attention", len(self.mods)))
                    self.mods.append(torch.nn.Linear(w, 2 * w))
                elif layer == "heads":
                    if w % 2 == 0 and w > 1:      # (two heads of an even width)
                        self.steps.append(("heads", w))
                else:
                    self.steps.append((layer, w))
            self.width = w

        def forward(self, x):
            for kind, arg in self.steps:
                if kind == "mod":
                    x = self.mods[arg](x)
                elif kind == "mod_residual":
                    x = x + torch.relu(self.mods[arg](x))
                elif kind == "attention":
                    q, k = self.mods[arg](x).chunk(2, dim=-1)
                    scores = q.unsqueeze(-1) * k.unsqueeze(-2) / max(1, q.shape[-1]) ** 0.5
                    # (weights times values: a row of weights alone sums to 1)
                    x = (torch.softmax(scores, dim=-1) * k.unsqueeze(-2)).sum(-1)
                elif kind == "rms_norm":
                    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
                elif kind == "softmax":
                    x = torch.softmax(x, dim=-1)
                elif kind == "log_softmax":
                    x = torch.log_softmax(x, dim=-1)
                elif kind == "gelu":
                    x = torch.nn.functional.gelu(x)
                elif kind == "gelu_tanh":
                    x = torch.nn.functional.gelu(x, approximate="tanh")
                elif kind == "silu":
                    x = torch.nn.functional.silu(x)
                elif kind == "relu":
                    x = torch.relu(x)
                elif kind == "tanh":
                    x = torch.tanh(x)
                elif kind == "heads":
                    x = x.reshape(*x.shape[:-1], 2, arg // 2).transpose(-1, -2) \
                        .reshape(*x.shape[:-1], arg)
                elif kind == "transpose" and x.dim() >= 2:
                    x = x.transpose(-1, -2).contiguous().transpose(-1, -2) * 1.5
                elif kind == "mean":
                    x = x - x.mean(-1, keepdim=True)
                elif kind == "max":
                    x = x - x.amax(-1, keepdim=True)
                elif kind == "concat":
                    x = torch.cat([x, torch.sigmoid(x)], dim=-1)[..., : x.shape[-1]] * 2
                elif kind == "dropout":
                    x = torch.nn.functional.dropout(x, 0.5, training=False)
            return x

    m = Drawn().eval()
    example = torch.from_numpy(rng.standard_normal((*batch, width)).astype(np.float32))
    return m, example


def draw_module_graph(seed: int) -> Graph:
    """Case ``seed``'s module, imported by ``from_torch`` and checked against torch."""
    import torch

    from ...frontends.torch import from_torch
    from ...runtime import run_reference
    m, example = _module(seed)
    g = from_torch(m, (example,), name=f"modules{seed}")
    x = draw_module_inputs(g, seed)
    with torch.no_grad():
        want = m(torch.from_numpy(x[g.inputs[0]])).numpy()
    got = run_reference(g, x)[g.outputs[0]]
    err = relative_to_largest(got, want)
    if not err <= FRAMEWORK_TOLERANCE:
        raise GraphError(f"from_torch imported module {seed} wrongly: its reference is "
                         f"{err:.3g} off torch's output (the import, not a kernel)")
    return g


def draw_module_inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed + 7919)
    return {i: rng.standard_normal(g.value(i).shape).astype(g.value(i).dtype.np)
            for i in g.inputs}
