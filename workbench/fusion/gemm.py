"""The ``gemm`` template's legality and tiling: a matmul with its elementwise epilogue
as one kernel, or why not.

A group fits when it holds exactly one ``matmul`` of float32 operands read from memory
(``[.., M, K] @ [K, N]``, A's batch folded into the rows; or ``[*b, M, K] @ [*b, K,
N]``, the same batch dims on both) and otherwise only elementwise ops at the matmul's
output shape, each reading the matmul's result directly or through another of them.
Their other operands broadcast onto that shape by NumPy's rule (a bias ``[N]``, a
residual ``[.., M, N]``, scalars). The kernel writes the product of each tile into one
float32 output of the group (``dest``: the matmul's result itself when it is read
outside the kernel, else an epilogue output) and finishes it there, element by
element, while the tile is in cache. So every epilogue op must be computable at one
output element from that element of the product -- which is what "elementwise at the
output shape" guarantees.

Only the CPU backend runs it so far (a single-threaded BLAS sgemm per tile inside the
kernel's OpenMP loop); on a GPU the template is refused and the matmul stays a cuBLAS
call.

    >>> analyze_gemm(g, ("n0", "n1", "n2"), cpu)      # doctest: +SKIP
    Schedule(kind=<ScheduleKind.gemm: 'gemm'>, ...)
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..errors import FusionRefused
from ..ir import DType, Graph
from ..ops import Kind, get_op
from .devices import Device
from .mapping import ScheduleKind
from .schedule import GemmShape, GroupIO, Schedule

# A tile's product should stay in the core's cache while the epilogue reads it: 256 x
# 256 float32 is 256 KB. Tiles also bound what sgemm packs per call (A's tile rows and
# B's tile columns), so they are not much smaller either.
TILE_M = 256
TILE_N = 256
TILE_ALIGN = 16          # tile widths in whole cache lines of float32 (64 B)
GPU_REFUSAL = "GEMM epilogue fusion runs on the CPU backend only so far"


def analyze_gemm(g: Graph, ns, io: GroupIO, device: Device) -> Schedule:
    """The gemm schedule of a group holding a matmul (see the module docstring), or
    FusionRefused naming the op and the rule it breaks."""
    libs = [n for n in ns if get_op(n.op).kind is Kind.opaque]
    mms = [n for n in libs if n.op == "matmul"]
    other = next((n for n in libs if n.op != "matmul"), None)
    if other is not None or len(mms) != 1:
        x = other or mms[1]
        raise FusionRefused(f"{x.id} ({x.op}) is a library call and cannot share a kernel "
                            "with other ops (only one matmul with its elementwise epilogue "
                            "can)")
    mm = mms[0]
    if device.is_gpu:
        raise FusionRefused(f"{mm.id} (matmul) with an epilogue: {GPU_REFUSAL}")
    result = mm.outputs[0]
    out = g.value(result)
    a, b = (g.value(i) for i in mm.inputs)
    if out.dtype is not DType.float32:
        raise FusionRefused(f"{mm.id} (matmul) is {out.dtype.value}: the fused GEMM kernel "
                            "is float32 only so far, so it stays a library call")
    members = {n.id for n in ns}
    for i in mm.inputs:
        p = g.producer.get(i)
        if p is not None and p.id in members:
            raise FusionRefused(f"{p.id} ({p.op}) computes the matmul's operand {i} inside "
                                "the kernel; a GEMM kernel reads its operands from memory "
                                "(no prologue fusion)")
    shape = _check_epilogue(g, ns, mm, out.shape)
    dest = result if result in io.outputs else next(
        (o for o in io.outputs if g.value(o).dtype is DType.float32), None)
    if dest is None:
        raise FusionRefused(f"{mm.id} (matmul): no float32 output of the kernel to write "
                            "the product into; its epilogue ends in another dtype")
    tiling = _tiling(shape, a.shape, b.shape, result, dest, device.units)
    return Schedule(ScheduleKind.gemm, elements=out.numel,
                    gemm=replace(tiling, epilogue_ops=len(ns) - 1))


def _check_epilogue(g: Graph, ns, mm, shape) -> tuple[int, ...]:
    """Every op but the matmul is elementwise at the matmul's output shape and reads
    its result (directly or through another epilogue op)."""
    fed = {mm.outputs[0]}
    for n in ns:
        if n is mm:
            continue
        op = get_op(n.op)
        if op.kind is not Kind.elementwise:
            raise FusionRefused(f"{n.id} ({n.op}) is not elementwise; a GEMM epilogue holds "
                                "elementwise ops at the matmul's output shape")
        for o in n.outputs:
            if g.value(o).shape != shape:
                raise FusionRefused(f"{n.id} ({n.op}) output {list(g.value(o).shape)} is not "
                                    f"the matmul's output shape {list(shape)}; a GEMM "
                                    "epilogue computes one value per product element")
        if not any(i in fed for i in n.inputs):
            raise FusionRefused(f"{n.id} ({n.op}) does not read the matmul's result; a GEMM "
                                "epilogue holds only ops that consume it")
        fed.update(n.outputs)
    return shape


def _tiling(out, a, b, result: str, dest: str, units: int) -> GemmShape:
    """The problem as batched row-major GEMMs, cut into tiles: rows up to TILE_M, and
    columns cut so the tile count is a multiple of the cores (no core idles in the last
    round) where that keeps tiles at least TILE_ALIGN wide."""
    if len(a) < 2 or len(b) < 2:
        raise FusionRefused("a matmul of a vector (rank-1 operand) stays a library call; "
                            "the GEMM kernel takes matrices")
    m, k, n = a[-2], a[-1], b[-1]
    if len(b) == 2:
        batch, m = 1, math.prod(out[:-1])    # one B: A's batch rows are more rows
        a_stride = b_stride = 0
    else:
        if tuple(a[:-2]) != tuple(out[:-2]) or tuple(b[:-2]) != tuple(out[:-2]):
            raise FusionRefused(f"matmul batch dims broadcast ({list(a)} @ {list(b)}); the "
                                "GEMM kernel takes equal batch dims or a 2-D right operand")
        batch, a_stride, b_stride = math.prod(out[:-2]), m * k, k * n
    tile_m = max(1, min(m, TILE_M))
    row_items = batch * -(-m // tile_m)
    col_tiles = max(1, -(-n // TILE_N))
    want = units * -(-(row_items * col_tiles) // units)     # a multiple of the cores
    col_tiles = max(col_tiles, -(-want // row_items))
    tile_n = max(1, min(n, _round_up(-(-n // col_tiles), TILE_ALIGN)))
    return GemmShape(batch, m, n, k, a_stride, b_stride, tile_m, tile_n, result, dest)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to
