"""Lowering: a plan group and its schedule become one kernel in the kernel IR.

Each kind of schedule has its template, a family of kernels in a module of its own,
over the shared machinery of :mod:`.base` (the group's buffers, every value computed at
an index, the kernel value):

- :mod:`.elementwise`: flat loops over the outputs;
- :mod:`.rows`: reductions over rows under each thread mapping (a CPU's 2-D pooling a
  plane at a time);
- :mod:`.gemm`: a matmul or convolution by tiles with its epilogue (:mod:`.tiles` what
  its kernels share, :mod:`.convolution` a convolution's operand forms, :mod:`.attention`
  fused attention);
- :mod:`.stitched`: phases of the elementwise and row templates joined by grid barriers;
- :mod:`.library`: one opaque library call.

    >>> k = lower_group(plan.graph, plan.groups[0], plan.device)   # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...device import Device
from ...dtypes import c_literal
from ...fusion.mapping import ScheduleKind
from ...fusion.plan import Group
from ...ir import Graph
from ...tolerance import HALF_PRODUCT_ERROR, TF32_PRODUCT_ERROR
from ..kernel import Kernel
from .base import identifier, recursion_room
from .elementwise import lower_elementwise
from .gemm import lower_gemm
from .library import lower_library_call
from .rows import lower_rows
from .stitched import lower_stitched

# the template each kind of schedule is lowered by: (graph, group, device, kernel name)
# -> the kernel
LOWERERS: dict[ScheduleKind, Callable[[Graph, Group, Device, str], Kernel]] = {
    ScheduleKind.opaque: lower_library_call,
    ScheduleKind.elementwise: lower_elementwise,
    ScheduleKind.row_reduce: lower_rows,
    ScheduleKind.gemm: lower_gemm,
    ScheduleKind.stitched: lower_stitched,
}

__all__ = ["LOWERERS", "c_literal", "identifier", "lower_group"]


def lower_group(g: Graph, group: Group, device: Device) -> Kernel:
    """Lower one group to a kernel named after its id and its ops (sanitized); its
    launch is sized for ``device`` (the plan's)."""
    ops = []
    for n in group.nodes:
        op = g.node(n).op
        if op not in ops:
            ops.append(op)
    name = identifier(f"{group.id}_{'_'.join(ops[:3])}" + ("_etc" if len(ops) > 3 else ""))
    with recursion_room(len(group.nodes)):
        k = LOWERERS[group.schedule.kind](g, group, device, name)
    err = _product_error(group, device)
    return replace(k, nodes=tuple(group.nodes), tf32=err > 0, product_error=err)


def _product_error(group: Group, device: Device) -> float:
    """How far the rounding of its operands may take a product of the group's matmuls
    (relative to |A| @ |B|): none on the CUDA cores; on tensor cores (the schedule's
    ``tensor_cores``, where the device has them) a half type's in a GPU tile of that
    type (its computed operands rounded into it), else TF32's (cuBLAS in TF32, a TF32
    tile; half operands are exact in TF32, but a fused attention's probabilities are
    not)."""
    s = group.schedule
    block = s.gemm.block if s.kind is ScheduleKind.gemm else None
    half = block is not None and block.tensor and block.operands.is_half
    each = HALF_PRODUCT_ERROR[block.operands] if half else TF32_PRODUCT_ERROR
    return each if s.tensor_cores and device.has_tf32 else 0.0
