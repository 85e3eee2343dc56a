"""The ground truth: run a graph op by op with each op's NumPy reference."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from ..ir import Graph
from ..ops import evaluate_node


def check_inputs(g: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs as contiguous arrays of the declared shape and dtype, or a GraphError.
    Device arrays (CuPy) are checked where they are, never copied to the host."""
    if type(inputs) is not dict and not isinstance(inputs, Mapping):    # (~1 us a run)
        raise GraphError(f"inputs must be a dict of input name -> array, got "
                         f"{type(inputs).__name__}; the graph takes "
                         + ", ".join(g.inputs)[:200])
    missing = [i for i in g.inputs if i not in inputs]
    if missing:
        raise GraphError(f"missing inputs {missing}; the graph takes "
                         + ", ".join(f"{i}: {g.value(i).dtype.value}{list(g.value(i).shape)}"
                                     for i in g.inputs))
    out = {}
    for name in g.inputs:
        a = inputs[name]
        if not hasattr(a, "__cuda_array_interface__"):
            a = np.asarray(a)
        v = g.value(name)
        if tuple(a.shape) != v.shape:
            raise GraphError(f"input {name!r} has shape {list(a.shape)}, the graph expects "
                             f"{list(v.shape)}")
        # (a device array holds bfloat16 as its bits: Backend.bf16_as_bits)
        bits = v.dtype is DType.bfloat16 and hasattr(a, "__cuda_array_interface__")
        if a.dtype != (np.uint16 if bits else v.dtype.np):
            raise GraphError(f"input {name!r} has dtype {a.dtype}, the graph expects "
                             f"{v.dtype.value}; convert it with .astype")
        out[name] = a if a.flags.c_contiguous else a.copy(order="C")
    return out


def run_reference(g: Graph, inputs: Mapping[str, np.ndarray],
                  keep_all: bool = False) -> dict[str, np.ndarray]:
    """Evaluate g on NumPy; returns the outputs (every value with keep_all)."""
    env: dict[str, np.ndarray] = dict(g.constants)
    env.update(check_inputs(g, inputs))
    for n in g.nodes:
        outs = evaluate_node(n, [env[i] for i in n.inputs], [g.value(o) for o in n.outputs])
        env.update(zip(n.outputs, outs))
    keys = env.keys() if keep_all else g.outputs
    return {k: env[k] for k in keys}


def random_inputs(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Fresh random inputs (never zeros): floats in the input's declared range (default
    [-1, 1)), ints in a small range, integer inputs that feed a gather as valid indices."""
    rng = np.random.default_rng(seed)
    out = {}
    gather_limit = {}
    for n in g.nodes:
        if n.op == "gather":
            data = g.value(n.inputs[0])
            gather_limit[n.inputs[1]] = data.shape[int(n.attr("axis", 0)) % len(data.shape)]
    for name in g.inputs:
        v = g.value(name)
        lo, hi = g.input_ranges.get(name, (-1.0, 1.0))
        if v.dtype.is_float:
            out[name] = rng.uniform(lo, hi, v.shape).astype(v.dtype.np)
        elif v.dtype.kind == "b":
            out[name] = rng.random(v.shape) < 0.5
        else:
            hi = min(gather_limit.get(name, 100), int(np.iinfo(v.dtype.np).max))
            lo = 0 if name in gather_limit or not v.dtype.signed else -hi
            out[name] = rng.integers(lo, hi, v.shape).astype(v.dtype.np)
    return out
