"""Checking each kernel against the NumPy reference on the kernel's own inputs.

Comparing only the graph's final outputs lets float32 rounding compound through a
deep graph and blames the last kernel for it. Here every kernel is fed the inputs it
really received, its ops are evaluated by the reference, and each output is compared
within the dtype's bound -- so a failure names the kernel that is wrong.

Each output is held to the magnitude its rounding error is bounded by, followed through
the kernel's ops (``ops.magnitude``): the error of a float sum is bounded by
eps * sum|x|, so ``sum(x)`` near zero by cancellation is held to ``sum(|x|)``, not to its
own tiny value; a GEMM's element (a dot product, summed in whatever order cuBLAS or BLAS
chooses) to ``|A| @ |B|`` -- on tensor cores (cuBLAS in TF32, a tensor-core tile) to
``|A| @ |B|`` grown by the rounding of the operands on the way in
(``Kernel.product_error``: TF32's, or a half type's, over the float32 tolerance);
and what a fused kernel computes
from them afterwards to those bounds carried through its slopes -- ``sum(x) +
max(x*x)`` in one kernel is held to ``sum|x| + max(x*x)``, as it would be checked op
by op.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import DType
from ..ir import Graph
from ..ops import evaluate_node, magnitude
from ..tolerance import TF32_PRODUCT_ERROR, TOLERANCE, max_rel_error, tolerance


@dataclass(frozen=True)
class KernelCheck:
    kernel: str
    max_rel_error: float
    within_tolerance: bool


def _up(a: np.ndarray) -> np.ndarray:
    """A half-precision array (float16, bfloat16) as float32, exactly."""
    return a.astype(np.float32) if a.dtype in HALF_NP else a


HALF_NP = (DType.float16.np, DType.bfloat16.np)


def _reference_env(g: Graph, nodes, env, product_error: float = 0.0) -> tuple[dict, dict]:
    """The group's values by the reference, from the kernel's real inputs, and the
    magnitude each value's rounding error is bounded by (``ops.magnitude``).

    float16 and bfloat16 values are kept in float32 inside the group, as the kernel keeps them: a
    fused kernel rounds to half precision only when it stores, so a reference that
    rounds after every op would blame the kernel for the reference's own rounding.
    ``product_error``: how far the matmuls' operands were rounded on the way in
    (``Kernel.product_error``: TF32's; a half type's, where a value computed in the
    kernel -- a fused attention's probabilities -- is rounded into it).
    """
    local, mags = {}, {}
    # a matmul's operand rounding, in units of the float32 tolerance its magnitude is
    # held to (verify's magnitudes are held to TOLERANCE[float32] of themselves)
    widen = product_error / TOLERANCE[DType.float32]
    for nid in nodes:
        n = g.node(nid)
        args = [local[i] if i in local else _up(np.asarray(env[i])) for i in n.inputs]
        ys = evaluate_node(n, args, [g.value(o) for o in n.outputs], half_as_float=True)
        ms = [mags[i] if i in mags else magnitude.exact(a) for i, a in zip(n.inputs, args)]
        local.update(zip(n.outputs, ys))
        m = magnitude.propagate(n.op, n.attr_map, ms, args, ys)
        if product_error and n.op == "matmul":
            # its own operands' rounding, on |A| @ |B| of the values it got (the errors
            # they carry in are in m already, at float32's scale; operands the kernel
            # received carry none, and then m is that product already)
            own = m if not any(i in mags for i in n.inputs) else magnitude.propagate(
                n.op, n.attr_map, [magnitude.exact(a) for a in args], args, ys)
            m = [x + widen * o for x, o in zip(m, own)]
        mags.update(zip(n.outputs, m))
    return local, mags


def graph_magnitudes(g: Graph, inputs: dict, tf32: bool = False) -> dict:
    """The magnitude each graph output's rounding error is bounded by when the whole
    graph is one computation from ``inputs`` (as another framework runs it: its outputs
    held to ``tolerance * max(|ref|, magnitude)``), each matmul's bound grown by TF32's
    rounding where ``tf32`` (torch with ``allow_tf32``)."""
    env = {**g.constants, **inputs}
    _, mags = _reference_env(g, [n.id for n in g.nodes], env,
                             TF32_PRODUCT_ERROR if tf32 else 0.0)
    return {o: mags[o] for o in g.outputs}


def verify_kernels(program, env: dict, progress=None) -> list[KernelCheck]:
    """One check per kernel; env holds every value the program produced (keep_all).
    ``progress(done, kernel name)`` after each."""
    checks = []
    for i, ck in enumerate(program.compiled):
        checks.append(check_kernel(program.graph, ck.kernel,
                                   program.plan.group(ck.kernel.group).nodes, env))
        if progress:
            progress(i + 1, ck.kernel.name)
    return checks


def check_kernel(g: Graph, k, nodes, env: dict) -> KernelCheck:
    """One kernel's outputs in ``env`` against the reference of its ``nodes`` evaluated
    from the inputs it received (also in ``env``)."""
    local, mags = _reference_env(g, nodes, env, k.product_error)
    worst, ok = 0.0, True
    for b in k.outputs:
        # the kernel rounds a half output once, as it stores; so does the reference here
        ref = local[b.value].astype(g.value(b.value).dtype.np)
        e = max_rel_error(env[b.value], ref, mags[b.value])
        worst = max(worst, e)
        ok &= e <= tolerance(g.value(b.value).dtype)
    return KernelCheck(k.name, worst, bool(ok))
