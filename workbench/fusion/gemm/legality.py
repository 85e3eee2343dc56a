"""What a GEMM kernel may take besides its operands, or why not: the dtypes it
multiplies, the epilogue that finishes each tile, and the output the product is
written into.

An epilogue reads the product directly or through other epilogue ops, and is either

- elementwise ops at the product's rows (its shape, or a view of it keeping the rows:
  :func:`same_rows`), their other operands broadcast onto that shape by NumPy's rule
  (a bias ``[N]``, a residual ``[.., M, N]``, scalars): each computable at one output
  element from that element of the product (:func:`check_epilogue`);
- or a row_reduce group over the product reducing its last axis (a LayerNorm, a
  softmax: :func:`row_epilogue`), reading the product only in its reductions or
  elementwise where it is; the tiles are then whole rows.

The kernel writes the product of each tile into one output of the group
(:func:`product_dest`) and finishes it there while the tile is in cache, each element
read before the same element is written, by the same thread.

    >>> same_rows((2, 64, 768), (128, 768)), same_rows((128, 768), (768, 128))
    (True, False)
"""
from __future__ import annotations

import math
from typing import Callable

from ...device import Device
from ...dtypes import DType
from ...errors import FusionRefused
from ...ir import Graph
from ...ops import Kind, get_op
from ..mapping import ScheduleKind
from ..schedule import GroupIO, Schedule

# what a GEMM kernel reads and writes. A bfloat16 matmul is multiplied by the
# micro-kernel two rows of k at a time (A's sliver and B packed in pairs,
# codegen/microkernel.py), accumulated in float32 and rounded once where the epilogue
# stores: its B is always packed (by every run where it is an activation), since sgemm
# takes float32 only. A bfloat16 convolution is multiplied in pairs too: its patches
# gathered into panels two rows to a word (a 1 x 1 one's input packed so, in place);
# for sgemm (blas=1, narrow vectors) its filters are widened into a float32 copy on
# its first run (kir.WidenOnce), and its patches as they are gathered.
GEMM_DTYPES = (DType.float32, DType.bfloat16)


def takes_dtype(dtype: DType, device: Device, tf32: bool = False) -> bool:
    """Whether a GEMM kernel multiplies ``dtype`` on ``device``: GEMM_DTYPES, or a type
    the device's tensor cores take (float16 on a GPU; Device.on_tensor_cores)."""
    return dtype in GEMM_DTYPES or device.on_tensor_cores(dtype, tf32)


# analyses the epilogue's nodes as a row_reduce group (analysis.analyze, passed in so
# that this package needs nothing from it)
RowAnalysis = Callable[[tuple], Schedule]

# layout ops that keep every element where it is in row-major memory: in an epilogue
# they only regroup the leading axes (the last one stays the product's columns)
VIEWS = ("reshape", "squeeze", "unsqueeze")


def same_rows(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes hold the same elements in the same rows: equal size and the
    same last axis (so element ``row * N + col`` is the same in both)."""
    return math.prod(a) == math.prod(b) and len(a) >= 1 and len(b) >= 1 and a[-1] == b[-1]


def check_epilogue(g: Graph, ns, mm, shape, same=None) -> None:
    """Every op but the matmul is elementwise, or a view regrouping the leading axes,
    at the matmul's output rows (see ``same_rows``), and reads its result (directly
    or through another epilogue op)."""
    fed = {mm.outputs[0]}
    for n in ns:
        if n is mm:
            continue
        op = get_op(n.op)
        if op.kind is not Kind.elementwise and n.op not in VIEWS:
            raise FusionRefused(f"{n.id} ({n.op}) is not elementwise; a GEMM epilogue holds "
                                "elementwise ops at the matmul's output shape (and "
                                "reshapes that keep its rows)")
        for o in n.outputs:
            if not (same or same_rows)(g.value(o).shape, shape):
                raise FusionRefused(f"{n.id} ({n.op}) output {list(g.value(o).shape)} is not "
                                    f"the matmul's output shape {list(shape)} or a reshape "
                                    "of it keeping its rows; a GEMM epilogue computes one "
                                    "value per product element")
        if n.op in VIEWS and n.inputs[0] not in fed:
            raise FusionRefused(f"{n.id} ({n.op}) reshapes a value other than the product "
                                "or an epilogue result")
        if not any(i in fed for i in n.inputs) and not _side(g, ns, mm, n):
            raise FusionRefused(f"{n.id} ({n.op}) does not read the matmul's result; a GEMM "
                                "epilogue holds only ops that consume it")
        fed.update(n.outputs)


def _side(g: Graph, ns, mm, n) -> bool:
    """An elementwise op at the product's shape that reads no product but only feeds
    epilogue ops (an optimizer's ``exp_avg * beta1`` beside ``grad * (1 - beta1)``):
    computed per element in the epilogue like them, never an operand of the matmul."""
    ids = {x.id for x in ns}
    return n.op not in VIEWS and all(
        c.id in ids and c.id != mm.id for o in n.outputs for c in g.consumers[o])


def product_dest(g: Graph, result: str, io: GroupIO, half: bool, fits) -> str | None:
    """The output the product is written into (``GemmShape.dest``): the result itself
    when it is read outside the kernel, else an output whose shape ``fits`` the
    product's -- a float32 one, finished in place, first; for a bfloat16 product any
    such output, which the kernel writes from a float32 tile of each thread's
    (codegen/lower/gemm.py) -- or None."""
    if result in io.outputs:
        return result
    outs = [o for o in io.outputs if fits(g.value(o).shape)]
    return next((o for o in outs if g.value(o).dtype is DType.float32),
                next(iter(outs), None) if half else None)


def row_epilogue(g: Graph, ns, mm, shape, rows: RowAnalysis | None) -> Schedule:
    """The row_reduce schedule of an epilogue that reduces the product's rows: it must
    reduce over the last axis of the product's shape (a tile of whole rows holds every
    column it needs), and read the product only in its reductions or elementwise at
    that shape (each element of the product is read before the same element of the
    output is written, by the same thread, so the output may overwrite it in place)."""
    if rows is None:
        raise FusionRefused(f"{mm.id} (matmul): an epilogue reducing rows needs the row "
                            "analysis")
    for n in ns:
        if n is mm or mm.outputs[0] not in n.inputs:
            continue
        kind = get_op(n.op).kind
        if kind is not Kind.reduce and (kind is not Kind.elementwise or any(
                g.value(o).shape != shape for o in n.outputs)):
            raise FusionRefused(f"{n.id} ({n.op}) reads the matmul's result other than "
                                "elementwise at its shape or in a reduction; a GEMM "
                                "epilogue reads each product element where it is")
    rest = tuple(n.id for n in ns if n is not mm)
    sched = rows(rest)
    last = (len(shape) - 1,)
    if (sched.kind is not ScheduleKind.row_reduce or sched.domain != tuple(shape)
            or sched.reduce_axes != last):
        raise FusionRefused(f"the epilogue of {mm.id} (matmul) reduces "
                            f"{list(sched.domain)} over {list(sched.reduce_axes)}; a GEMM "
                            f"epilogue reduces the product {list(shape)} over its last axis")
    return sched
