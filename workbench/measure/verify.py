"""Checking each kernel against the NumPy reference on the kernel's own inputs.

Comparing only the graph's final outputs lets float32 rounding compound through a
deep graph and blames the last kernel for it. Here every kernel is fed the inputs it
really received, its ops are evaluated by the reference, and each output is compared
within the dtype's bound -- so a failure names the kernel that is wrong.

A reduction's or a library call's result is compared against the scale of what it
summed (its op's ``error_scale``): the error of a float sum is bounded by
eps * sum|x|, so ``sum(x)`` near zero by cancellation is held to ``sum(|x|)``, not to
its own tiny value; likewise a GEMM's element (a dot product, summed in whatever
order cuBLAS or BLAS chooses) is held to ``|A| @ |B|``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph
from ..ops import evaluate_node, get_op
from .compare import max_rel_error, tolerance


@dataclass(frozen=True)
class KernelCheck:
    kernel: str
    max_rel_error: float
    within_tolerance: bool


def _up(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _reference_env(g: Graph, nodes, env) -> dict:
    """The group's values by the reference, from the kernel's real inputs.

    float16 values are kept in float32 inside the group, as the kernel keeps them: a
    fused kernel rounds to half precision only when it stores, so a reference that
    rounds after every op would blame the kernel for the reference's own rounding.
    """
    local = {}
    for nid in nodes:
        n = g.node(nid)
        args = [local[i] if i in local else _up(np.asarray(env[i])) for i in n.inputs]
        local.update(zip(n.outputs, evaluate_node(n, args, [g.value(o) for o in n.outputs],
                                                  half_as_float=True)))
    return local


def _error_scale(g: Graph, v: str, local, env):
    """The magnitude output v's rounding is bounded by: its op's ``error_scale`` over
    its inputs' magnitudes (a reduction's |x| summed, a GEMM's |A| @ |B|); None for
    ops without one."""
    n = g.producer.get(v)
    scale = get_op(n.op).error_scale if n is not None else None
    if scale is None:
        return None
    xs = [local.get(i, env.get(i)) for i in n.inputs]
    if any(x is None or not np.issubdtype(np.asarray(x).dtype, np.floating) for x in xs):
        return None
    return scale([np.abs(np.asarray(x, dtype=np.float64)) for x in xs], n.attr_map)


def verify_kernels(program, env: dict) -> list[KernelCheck]:
    """One check per kernel; env holds every value the program produced (keep_all)."""
    return [check_kernel(program.graph, ck.kernel, program.plan.group(ck.kernel.group).nodes,
                         env) for ck in program.compiled]


def check_kernel(g: Graph, k, nodes, env: dict) -> KernelCheck:
    """One kernel's outputs in ``env`` against the reference of its ``nodes`` evaluated
    from the inputs it received (also in ``env``)."""
    local = _reference_env(g, nodes, env)
    worst, ok = 0.0, True
    for b in k.outputs:
        ref = local[b.value]
        scale = _error_scale(g, b.value, local, env)
        e = max_rel_error(env[b.value], ref, scale)
        worst = max(worst, e)
        ok &= e <= tolerance(g.value(b.value).dtype)
    return KernelCheck(k.name, worst, bool(ok))
