"""Codegen: plan groups -> kernel IR -> CUDA C and C source (and the IR as text).

    >>> kernels = lower_plan(plan)                         # doctest: +SKIP
    >>> print(render_kernel(kernels[0], "cuda"))           # doctest: +SKIP
    >>> print(format_kernel(kernels[0]))                   # doctest: +SKIP
"""
from __future__ import annotations


from ..fusion import Plan
from .kernel import Kernel
from .lower import c_literal, identifier, lower_group
from .printer import format_kernel
from .render import RENDERERS, CRenderer, CudaRenderer


def lower_plan(plan: Plan) -> list[Kernel]:
    """One kernel per group, in the plan's execution order, sized for its device."""
    return [lower_group(plan.graph, gr, plan.device) for gr in plan.groups]


def render_kernel(k: Kernel, target: str) -> str:
    """A self-contained source file (the prelude it needs + kernel) for target 'c' or
    'cuda'."""
    return RENDERERS[target].source(k)


__all__ = ["CRenderer", "CudaRenderer", "Kernel", "RENDERERS", "c_literal", "format_kernel",
           "identifier", "lower_group", "lower_plan", "render_kernel"]
