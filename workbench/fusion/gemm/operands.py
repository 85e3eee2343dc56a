"""What a GEMM kernel reads and writes in place: its operands, through the layout ops
in the kernel that compute them (reshape, squeeze, unsqueeze, transpose, expand,
slice, split: *prologue views*), as strided BLAS matrices of values in memory (batch
dims broadcast by NumPy's rule, A's batch folded into the rows where B has none and
A's rows run on through it); and a product written through the layout ops after it
(the heads merged back after attention). Each refusal names the view that breaks it.

    >>> problem(Operand.whole("x", (4, 128, 64)), Operand.whole("w", (64, 32)))[:4]
    (1, 512, 32, 64)
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import FusionRefused
from ...ir import Graph
from ...ops import get_op
from ...ops.layout import transpose_perm
from ...ops.strided import Strided
from ..gemm_shape import Operand
from ..schedule import GroupIO


def prologue(g: Graph, mm, members) -> list:
    """The group's layout ops computing the matmul's operands (prologue views, read
    through in place): every member on the path from an operand back to a value in
    memory. Anything else computing an operand inside the kernel is refused; whether
    the views make a matrix BLAS reads is :func:`operand`'s question."""
    views = []
    for i in mm.inputs:
        for p in operand_chain(g, i, members):
            if p not in views:
                views.append(p)
    return views


def operand(g: Graph, mm, i: str, members, out_shape) -> Operand:
    """Operand ``i`` of the matmul as read in place: the value in memory its prologue
    views start from and the batched matrix they make of it, broadcast to the
    product's batch dims (a B without batch dims serves every batch); FusionRefused
    when the views are no strided matrix BLAS can read (a reshape merging axes a
    transpose separated, rows and columns both strided)."""
    chain = operand_chain(g, i, members)
    src = chain[-1].inputs[0] if chain else i
    layout = Strided.contiguous(g.value(src).shape)
    made = [i] + [p.inputs[0] for p in chain[:-1]]       # what each view gives
    for p, v in reversed(list(zip(chain, made))):
        layout = get_op(p.op).view(layout, p.attr_map, p.outputs.index(v),
                                   g.value(v).shape)
        if layout is None:
            raise FusionRefused(f"{p.id} ({p.op}) makes the matmul's operand {i} a layout "
                                "that is no strided view of its input (a reshape of axes "
                                "a transpose or slice has separated); it needs a copy "
                                "kernel")
    shape = g.value(i).shape
    view = layout.broadcast(tuple(out_shape[:-2]) + tuple(shape[-2:])).matrix()
    if view is None:
        raise FusionRefused(f"the matmul's operand {i} is neither row- nor column-major in "
                            f"{src} (each row and each column at one stride, one of them "
                            "unit), so BLAS cannot read it in place")
    return Operand(src, view)


def view_chain(g: Graph, i: str, within=None) -> list:
    """The layout ops with a view rule computing value ``i`` (those in ``within``, when
    given), nearest first, back to the first value made otherwise."""
    chain = []
    p = g.producer.get(i)
    while p is not None and (within is None or p.id in within) and get_op(p.op).view:
        chain.append(p)
        p = g.producer.get(p.inputs[0])
    return chain


def operand_chain(g: Graph, i: str, members) -> list:
    """The members computing value ``i`` through views, back to a value made outside
    them; FusionRefused when another member computes it."""
    chain = view_chain(g, i, members)
    p = g.producer.get(chain[-1].inputs[0] if chain else i)
    if p is not None and p.id in members:
        raise FusionRefused(f"{p.id} ({p.op}) computes the matmul's operand {i} inside "
                            "the kernel; a GEMM kernel reads its operands from memory "
                            "(through reshapes, transposes, slices and splits only)")
    return chain


def not_stored(views, io: GroupIO) -> None:
    """Refuse views whose values are read outside the kernel: it reads them in place
    and never stores them."""
    for v in views:
        if any(o in io.outputs for o in v.outputs):
            raise FusionRefused(f"{v.id} ({v.op}) is read outside the kernel too; a GEMM "
                                "kernel reads the operand in place and does not store it")


def problem(a: Operand, b: Operand) -> tuple[int, int, int, int, Operand]:
    """The product as ``batch`` GEMMs of ``m x k`` by ``k x n``: (batch, m, n, k, A),
    A's batch folded into its rows where one B serves every batch item and A's rows
    run on through its batch."""
    m, k, n = a.view.rows, a.view.cols, b.view.cols
    batch = a.view.batch_size
    if b.view.one_matrix:
        a = fold_rows(a)                 # one B: A's batch rows are more rows
        if not a.view.batch:
            batch, m = 1, a.view.rows
    return batch, m, n, k, a


def fold_rows(a: Operand) -> Operand:
    """A with its batch folded into its rows where the rows run on through the batch
    (each batch's first row one row stride after the last one's), else A as it is."""
    v = a.view
    if v.trans or not v.batch:
        return a
    modes = list(v.batch) + [(v.rows, v.row_stride)]
    for (e, s), (e2, s2) in zip(modes, modes[1:]):
        if s != e2 * s2:
            return a
    return replace(a, view=replace(v, batch=(), rows=v.rows * v.batch_size))


# layout ops a product can be written through: each output element is one input
# element, and the input's layout follows from the output's
INVERTIBLE = ("reshape", "squeeze", "unsqueeze", "transpose")


def result_views(g: Graph, mm, members, io: GroupIO) -> list:
    """The chain of members after the matmul that only move its result (transposes and
    reshapes, each the one reader of the one before), ending in a value written out:
    the product is written where they would put it (the heads merged back after
    attention). Empty when the product is read otherwise."""
    chain, v = [], mm.outputs[0]
    while v not in io.outputs:
        readers = [c for c in g.consumers[v] if c.id in members]
        if len(readers) != 1 or readers[0].op not in INVERTIBLE or len(g.consumers[v]) != 1:
            return []
        chain.append(readers[0])
        v = readers[0].outputs[0]
    return chain


def written_through(g: Graph, mm, chain) -> Operand:
    """The value at the end of ``chain`` and where each element of the matmul's product
    lies in it (walking the layout ops backwards from its contiguous layout);
    FusionRefused when the product's rows are not one stride apart with unit-stride
    columns there (sgemm writes row-major tiles)."""
    end = chain[-1].outputs[0]
    layout = Strided.contiguous(g.value(end).shape)
    for p in reversed(chain):
        src = g.value(p.inputs[0]).shape
        if p.op == "transpose":
            perm = transpose_perm(p.attr_map, len(src))
            layout = layout.permute(tuple(sorted(range(len(perm)), key=perm.__getitem__)))
        else:
            layout = layout.reshape(src)
        if layout is None:
            break
    view = None if layout is None else layout.matrix()
    if view is None or view.trans:
        raise FusionRefused(f"{chain[0].id} ({chain[0].op}) moves the product of {mm.id} "
                            "so that its rows are not row-major in "
                            f"{end}; the kernel writes it row by row")
    return Operand(end, view)
