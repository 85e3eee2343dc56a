"""Strided views: where each element of a value lies in the buffer of another, when a
chain of layout ops (reshape, transpose, slice, split, expand) only moves elements
(never computes or copies them), so a kernel can read the value in place.

A :class:`Strided` is a layout in CuTe's sense, one level deep: per axis of the
viewed shape, its *modes* (extent, stride), outermost first -- an axis that a reshape
merged from axes that were not contiguous keeps one mode for each -- and the offset of
element 0. Element ``(i0, i1, ..)`` lies at ``offset + sum over axes of the axis
index, split row-major over its modes, times their strides``. A layout op's ``view``
rule (``OpDef.view``, :mod:`.layout`) maps its input's layout to its output's, or
None when the output is not a strided view of the input (a reshape splitting a mode
unevenly, a slice of a merged axis).

The GEMM template reads its operands through such views (:mod:`..fusion.gemm`): a
batched matrix needs its rows and columns to be one mode each, one of them unit
stride (:meth:`Strided.matrix`).

    >>> x = Strided.contiguous((2, 128, 768))            # Q, K, V side by side
    >>> q = x.narrow(2, 0, 1, 256).reshape((2, 128, 4, 64)).permute((0, 2, 1, 3))
    >>> m = q.matrix()
    >>> m.batch, (m.rows, m.cols), (m.row_stride, m.col_stride), m.trans
    (((2, 98304), (4, 64)), (128, 64), (768, 1), False)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

Mode = tuple[int, int]          # (extent, stride)


@dataclass(frozen=True)
class MatrixView:
    """A batched matrix read in place: element ``(b.., r, c)`` at ``offset + sum(b_i x
    stride_i) + r x row_stride + c x col_stride``, one of the two unit (``trans``: the
    rows are, as BLAS's transposed operand; ``ld`` its leading dimension)."""
    offset: int
    batch: tuple[Mode, ...]          # batch modes, outermost first
    rows: int
    cols: int
    row_stride: int
    col_stride: int

    @property
    def trans(self) -> bool:
        return self.col_stride != 1

    @property
    def ld(self) -> int:
        return self.col_stride if self.trans else self.row_stride

    @property
    def batch_size(self) -> int:
        return math.prod(e for e, _ in self.batch)

    @property
    def one_matrix(self) -> bool:
        """Whether one matrix serves every batch item (no batch, or every batch mode
        broadcast -- stride 0 -- or of one item: a convolution's one group)."""
        return all(s == 0 or e == 1 for e, s in self.batch)

    @property
    def distinct(self) -> "MatrixView":
        """The view over its distinct matrices only: the batch modes a broadcast (stride
        0) repeats dropped -- grouped-query attention's K and V, each read by several
        heads, are their own count of matrices.

        >>> MatrixView(0, ((2, 64), (3, 0)), 8, 4, 128, 1).distinct.batch
        ((2, 64),)
        """
        return replace(self, batch=tuple((e, s) for e, s in self.batch if s))

    def distinct_index(self, index: str) -> str:
        """A C expression: which of the distinct matrices (``distinct``, row-major over
        its batch modes) batch item ``index`` reads.

        >>> MatrixView(0, ((2, 64), (3, 0)), 8, 4, 128, 1).distinct_index("bt")
        '(bt / 3)'
        """
        if all(s or e == 1 for e, s in self.batch):
            return index
        # (batch_offset over the batch with each distinct mode's stride its place in
        # the distinct matrices' row-major order, and the broadcast modes' 0)
        modes, step = [], 1
        for e, s in reversed(self.batch):
            modes.append((e, step if s else 0))
            step *= e if s else 1
        return replace(self, offset=0, batch=tuple(reversed(modes))).batch_offset(index)

    def batch_offset(self, index: str) -> str:
        """A C expression: the offset of batch item ``index`` (row-major over the batch
        modes) plus ``offset``."""
        terms, inner = [], 1
        for e, s in reversed(self.batch):
            if s and e > 1:
                q = index if inner == 1 else f"({index} / {inner})"
                q = f"{q} % {e}" if inner * e < self.batch_size else q
                terms.append(q if s == 1 else f"{q} * {s}")
            inner *= e
        if self.offset:
            terms.append(str(self.offset))
        return " + ".join(reversed(terms)) or "0"


@dataclass(frozen=True)
class Strided:
    """A value as a strided view of a buffer (see the module docstring)."""
    axes: tuple[tuple[Mode, ...], ...]
    offset: int = 0

    @staticmethod
    def contiguous(shape) -> "Strided":
        axes, stride = [], 1
        for d in reversed(tuple(shape)):
            axes.append(((d, stride),) if d != 1 else ())
            stride *= d
        return Strided(tuple(reversed(axes)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(math.prod(e for e, _ in a) for a in self.axes)

    def permute(self, perm) -> "Strided":
        return Strided(tuple(self.axes[p] for p in perm), self.offset)

    def reshape(self, shape) -> "Strided | None":
        """The same elements in row-major order under a new shape, or None when a new
        axis would split a mode unevenly."""
        if 0 in shape or 0 in self.shape:
            return None
        modes = list(_coalesce([m for a in self.axes for m in a]))
        axes = []
        for want in shape:
            got = []
            while want > 1:
                if not modes:
                    return None
                e, s = modes[0]
                if want % e == 0:              # the whole mode, and more after it
                    got.append(modes.pop(0))
                    want //= e
                elif e % want == 0:            # the mode's outer part
                    got.append((want, s * (e // want)))
                    modes[0] = (e // want, s)
                    want = 1
                else:
                    return None
            axes.append(tuple(got))
        return None if modes else Strided(tuple(axes), self.offset)

    def narrow(self, axis: int, start: int, step: int, length: int) -> "Strided | None":
        """Elements ``start, start + step, ..`` (``length`` of them) along ``axis``; None
        when the axis is several modes (a slice of a merged axis is not one stride)."""
        modes = _coalesce(self.axes[axis])
        if length == 0 or (len(modes) > 1):
            return None
        e, s = modes[0] if modes else (1, 0)
        axes = list(self.axes)
        axes[axis] = ((length, s * step),) if length != 1 else ()
        return Strided(tuple(axes), self.offset + start * s)

    def broadcast(self, shape) -> "Strided":
        """NumPy's broadcast to ``shape`` (expand): new leading axes and size-1 axes
        repeat the same elements (stride 0)."""
        lead = len(shape) - len(self.axes)
        axes = [((d, 0),) if d != 1 else () for d in shape[:lead]]
        for a, d in zip(self.axes, shape[lead:]):
            axes.append(a if math.prod(e for e, _ in a) == d or d == 1 else ((d, 0),))
        return Strided(tuple(axes), self.offset)

    def matrix(self) -> MatrixView | None:
        """The view as a batched matrix (the last two axes rows and columns, each one
        mode, one of them unit stride, as a BLAS operand), or None."""
        if len(self.axes) < 2:
            return None
        r, c = (_coalesce(a) for a in self.axes[-2:])
        rows, cols = self.shape[-2:]
        if len(r) > 1 or len(c) > 1 or rows == 0 or cols == 0:
            return None
        rs = r[0][1] if r else 0
        cs = c[0][1] if c else 0
        # an axis of extent 1 has no stride of its own: give it the one BLAS needs
        if cols == 1:
            cs = 1
        if rows == 1:
            rs = cs * cols if cs == 1 else 1
        if cs == 1 and rs >= max(1, cols):
            pass                                  # row-major, lda = row stride
        elif rs == 1 and cs >= max(1, rows):
            pass                                  # column-major (transposed)
        else:
            return None
        batch = _coalesce([m for a in self.axes[:-2] for m in a])
        return MatrixView(self.offset, batch, rows, cols, rs, cs)


def _coalesce(modes) -> tuple[Mode, ...]:
    """Adjacent modes that are one run of memory merged (outer stride = inner extent
    x inner stride), extent-1 modes dropped."""
    out: list[Mode] = []
    for e, s in modes:
        if e == 1:
            continue
        if out and out[-1][1] == e * s:
            out[-1] = (out[-1][0] * e, s)
        else:
            out.append((e, s))
    return tuple(out)
