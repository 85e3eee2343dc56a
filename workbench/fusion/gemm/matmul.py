"""One matmul as a GEMM kernel: its operands read in place through the prologue views,
its epilogue finishing each tile (elementwise, or reducing the product's rows), its
tiles the CPU's (:mod:`.tiles`) or a GPU's thread blocks (:mod:`.gpu_tiles`) -- or why
not, naming the op and the rule it breaks.

    >>> analyze_matmul(g, ns, io, cpu, mm, rows, GemmLaunch())    # doctest: +SKIP
    Schedule(kind=<ScheduleKind.gemm: 'gemm'>, ...)
"""
from __future__ import annotations

from dataclasses import replace

from ...device import Device
from ...dtypes import DType
from ...errors import FusionRefused
from ...ir import Graph
from ...ops import Kind, get_op
from ..gemm_shape import TRANSPOSED_PER_RUN
from ..mapping import ScheduleKind
from ..schedule import GroupIO, Schedule
from .gpu_tiles import gpu_tiling
from .launch import GemmLaunch
from .legality import (RowAnalysis, check_epilogue, product_dest, row_epilogue, same_rows,
                       takes_dtype)
from .operands import not_stored, operand, prologue
from .right_pack import packs_b_per_run, widened
from .tiles import cpu_tiling, packs
from .transposed import makes_transposed


def analyze_matmul(g: Graph, ns, io: GroupIO, device: Device, mm, rows: RowAnalysis | None,
                   lc: GemmLaunch, *, per_run: bool = False, tf32: bool = False) -> Schedule:
    """The gemm schedule of a group holding one matmul ``mm`` and its prologue views and
    epilogue, or FusionRefused. ``rows`` analyses an epilogue that reduces rows;
    without it such an epilogue is refused. ``per_run``: an activation B is packed by
    every run (a long fused attention's K). ``tf32``: the plan lets float32 products
    round their operands to TF32 (``Plan.tf32``), which a GPU multiplies on tensor
    cores."""
    result = mm.outputs[0]
    out = g.value(result)
    if len(out.shape) < 2 or any(len(g.value(i).shape) < 2 for i in mm.inputs):
        raise FusionRefused(f"{mm.id} (matmul) of a vector (rank-1 operand) stays a library "
                            "call; the GEMM kernel takes matrices")
    if not takes_dtype(out.dtype, device, tf32):
        raise FusionRefused(f"{mm.id} (matmul) is {out.dtype.value}: the fused GEMM kernel "
                            "takes float32 and bfloat16 (and float16 on a GPU's tensor "
                            "cores) so far, so it stays a library call")
    half = out.dtype is not DType.float32
    members = {n.id for n in ns}
    views = _prologue_views(g, mm, members, io)
    ns = [n for n in ns if n not in views]
    shape = out.shape
    row = None
    if any(get_op(n.op).kind is Kind.reduce for n in ns):
        row = row_epilogue(g, ns, mm, shape, rows)
    else:
        check_epilogue(g, ns, mm, shape)
    dest = product_dest(g, result, io, half, lambda s: same_rows(s, shape) if row is None
                        else s == shape)
    if dest is None:
        raise FusionRefused(f"{mm.id} (matmul): no float32 output of the product's shape to "
                            "write the product into; its epilogue ends in another dtype "
                            "or shape")
    a, b = (operand(g, mm, i, members, shape) for i in mm.inputs)
    if device.is_gpu:
        tiling = gpu_tiling(g, mm, a, b, result, dest, device, row is not None, lc, tf32)
        return Schedule(ScheduleKind.gemm, elements=out.numel,
                        gemm=replace(tiling, epilogue_ops=len(ns) - 1,
                                     views=tuple(v.id for v in views)))
    can = packs(g, b, device)
    packed = lc.packs(can, f"{mm.id}'s right operand", per_run or half)
    if half and not packed:
        raise FusionRefused(f"{mm.id} (matmul) is {out.dtype.value}: only the micro-kernel "
                            "multiplies it (widening as it packs; sgemm reads float32), and "
                            + ("blas=1 asks for sgemm" if lc.blas == 1 else
                               "it needs 256-bit vectors and B one matrix per batch item")
                            + ", so it stays a library call")
    tiling = cpu_tiling(a, b, result, dest, device.units, row is not None, packed, lc)
    if not packed and lc.blas == -1 and makes_transposed(g, tiling, can, row is not None):
        # few rows of A and an activation B (a training step's x @ W^T, dy @ W): the
        # product made transposed, B read in place, A packed (fusion/gemm/transposed.py)
        tiling = replace(tiling, packed_b=TRANSPOSED_PER_RUN)
    elif not packed and lc.blas == -1 and packs_b_per_run(tiling, can, row is not None):
        # an activation B read by many row tiles (a weight gradient's dy): packed once
        # per run, not by each tile's sgemm (fusion/gemm/right_pack.py)
        packed = can
        tiling = cpu_tiling(a, b, result, dest, device.units, row is not None, packed, lc)
        if not lc.tile_n:    # (fewer, wider column tiles copying A's slivers)
            tiling = widened(tiling, device.units)
    return Schedule(ScheduleKind.gemm, elements=out.numel,
                    gemm=replace(tiling, epilogue_ops=len(ns) - 1,
                                 views=tuple(v.id for v in views)), epilogue=row)


def _prologue_views(g: Graph, mm, members, io: GroupIO) -> list:
    """The matmul's prologue views (:func:`.operands.prologue`), refused where one is
    read outside the kernel or by another member: the kernel reads the operand in
    place and computes nothing else from it."""
    views = prologue(g, mm, members)
    through = {v.id for v in views} | {mm.id}
    not_stored(views, io)
    for v in views:
        c = next((c for o in v.outputs for c in g.consumers[o]
                  if c.id in members and c.id not in through), None)
        if c is not None:
            raise FusionRefused(f"{v.id} ({v.op}) gives the matmul's operand and is read by "
                                f"{c.id} ({c.op}) too; a GEMM kernel reads the operand in "
                                "place and computes nothing else from it")
    return views
