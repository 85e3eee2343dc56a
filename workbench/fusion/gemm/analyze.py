"""Which GEMM kernel a group holding a library op makes, or why none: a convolution
(:mod:`.conv`), a fused attention (two matmuls with a row epilogue between them:
:mod:`.attention`), or one matmul with its prologue views and epilogue
(:mod:`.matmul`). Each refusal names the op and the rule it breaks.

    >>> analyze_gemm(g, ("n0", "n1", "n2"), io, cpu)      # doctest: +SKIP
    Schedule(kind=<ScheduleKind.gemm: 'gemm'>, ...)
"""
from __future__ import annotations

from ...device import Device
from ...errors import FusionRefused
from ...ir import Graph
from ...ops import Kind, get_op
from ...ops.conv import CONVS
from ..schedule import GroupIO, Schedule
from .attention import analyze_attention
from .conv import analyze_conv
from .launch import GemmLaunch
from .legality import RowAnalysis
from .matmul import analyze_matmul


def analyze_gemm(g: Graph, ns, io: GroupIO, device: Device,
                 rows: RowAnalysis | None = None, launch=(), *,
                 per_run: bool = False, tf32: bool = False) -> Schedule:
    """The gemm schedule of a group holding a matmul or a convolution (see the package
    docstring), or FusionRefused naming the op and the rule it breaks. ``rows``
    analyses an epilogue that reduces rows; without it such an epilogue is refused.
    ``launch``: the parameters set in place of the rule's (see :class:`GemmLaunch`).
    ``per_run``: an activation B is packed by every run. ``tf32``: the plan lets
    float32 products round their operands to TF32 (``Plan.tf32``), which a GPU
    multiplies on tensor cores."""
    lc = launch if isinstance(launch, GemmLaunch) else GemmLaunch.parse(launch)
    if lc.stages and not device.is_gpu:
        raise FusionRefused("stages applies to a GPU's GEMM tile (its panels through shared "
                            "memory); the CPU's GEMM kernel multiplies each tile from cache")
    libs = [n for n in ns if get_op(n.op).kind is Kind.opaque]
    empty = next((n for n in libs for v in (*n.inputs, *n.outputs)
                  if g.value(v).numel == 0), None)
    if empty is not None:   # (found by the fuzzer: tiles of an empty batch divided by 0)
        raise FusionRefused(f"{empty.id} ({empty.op}) has an empty operand or result: "
                            "there are no tiles to run, so it stays a library call")
    if len(libs) == 1 and libs[0].op in CONVS:
        return analyze_conv(g, ns, io, device, libs[0], lc)
    mms = [n for n in libs if n.op == "matmul"]
    other = next((n for n in libs if n.op != "matmul"), None)
    if other is None and len(mms) == 2:
        return analyze_attention(g, ns, io, device, rows, mms, lc, tf32)
    if lc.online != -1 or lc.skip != -1:
        raise FusionRefused(f"{'online' if lc.online != -1 else 'skip'} applies to a fused "
                            "attention (two matmuls with a softmax between them); this GEMM "
                            "kernel has one product")
    if other is not None or len(mms) != 1:
        x = other or mms[1]
        raise FusionRefused(f"{x.id} ({x.op}) is a library call and cannot share a kernel "
                            "with other ops (only one matmul with its elementwise epilogue "
                            "can)")
    return analyze_matmul(g, ns, io, device, mms[0], rows, lc, per_run=per_run, tf32=tf32)
