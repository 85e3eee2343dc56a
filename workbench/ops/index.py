"""Index expressions for row-major tensors, built symbolically as C text.

An :class:`Index` into a tensor of ``shape`` is a sequence of *segments*; each
segment ``(expr, lo, hi)`` says that dims ``lo..hi-1`` together take the flat value
``expr`` (row-major within those dims). Keeping runs of dims together is what makes
common accesses cheap: an elementwise chain reads ``x[i]``, a row kernel reads
``x[row * 1024 + col]`` and a bias ``b[col]`` -- no division unless an op (a transpose,
a partial broadcast) really needs per-dim digits.

Example::

    >>> Index.flat("i", (4, 8)).broadcast_to((8,)).offset()
    '(i % 8)'
    >>> Index.flat("i", (4, 8)).transpose((1, 0)).offset()
    '((i % 8) * 4 + (i / 8))'
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


def _prod(xs) -> int:
    return int(np.prod(xs, dtype=np.int64)) if len(xs) else 1


def _is_int(e: str) -> bool:
    return e.lstrip("-").isdigit()


def add(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    if _is_int(a) and _is_int(b):
        return str(int(a) + int(b))
    return f"({a} + {b})"


def mul(a: str, k: int) -> str:
    if k == 0 or a == "0":
        return "0"
    if k == 1:
        return a
    if _is_int(a):
        return str(int(a) * k)
    return f"{a} * {k}"


def div(a: str, k: int) -> str:
    if k == 1 or a == "0":
        return a
    return str(int(a) // k) if _is_int(a) else f"({a} / {k})"


def mod(a: str, k: int) -> str:
    if k == 1:
        return "0"
    if a == "0":
        return "0"
    return str(int(a) % k) if _is_int(a) else f"({a} % {k})"


Segment = tuple[str, int, int]


@dataclass(frozen=True)
class Index:
    shape: tuple[int, ...]
    segs: tuple[Segment, ...]

    # -- construction ----------------------------------------------------------
    @staticmethod
    def flat(expr: str, shape) -> "Index":
        shape = tuple(shape)
        return Index(shape, ((expr, 0, len(shape)),) if shape else ())

    @staticmethod
    def from_digits(digits, shape) -> "Index":
        return Index(tuple(shape), tuple((d, k, k + 1) for k, d in enumerate(digits)))

    @staticmethod
    def from_runs(shape, runs: list[tuple[str, list[int]]]) -> "Index":
        """Segments from flat loop variables, each over a set of dims (in order).

        ``runs`` pairs a variable with the dims it enumerates (row-major among them);
        dims of one variable that are adjacent in ``shape`` share one segment.
        """
        owner = {}
        for var, dims in runs:
            for d in dims:
                owner[d] = (var, dims)
        segs = []
        d = 0
        while d < len(shape):
            var, dims = owner[d]
            hi = d
            while hi + 1 < len(shape) and owner.get(hi + 1, (None,))[0] == var:
                hi += 1
            inner = _prod([shape[x] for x in dims if x > hi])
            ext = _prod(shape[d:hi + 1])
            e = div(var, inner)
            if any(x < d for x in dims):  # not the outermost run of this var
                e = mod(e, ext)
            segs.append((e, d, hi + 1))
            d = hi + 1
        return Index(tuple(shape), tuple(segs))

    # -- reading ---------------------------------------------------------------
    @property
    def key(self) -> tuple:
        return (self.shape, self.segs)

    def digits(self) -> list[str]:
        out = []
        for e, lo, hi in self.segs:
            for d in range(lo, hi):
                inner = _prod(self.shape[d + 1:hi])
                x = div(e, inner)
                out.append(mod(x, self.shape[d]) if d > lo else
                           (x if self.shape[d] != 1 else "0"))
        return out

    def unit_stride(self, var: str) -> int:
        """The run of elements over which this index steps by one as ``var`` does:
        the extent of the innermost segment when it is exactly ``var`` and no other
        segment depends on ``var`` (else 0). Offsets then read ``base + var`` with
        ``base`` a multiple of that extent, so ``var``-aligned vectors of a width
        dividing it stay inside the run and aligned.

        >>> Index.from_runs((8, 64), [("row", [0]), ("col", [1])]).unit_stride("col")
        64
        """
        if not self.segs or self.segs[-1][0] != var or self.segs[-1][2] != len(self.shape):
            return 0
        word = re.compile(rf"\b{re.escape(var)}\b")
        if any(word.search(e) for e, _, _ in self.segs[:-1]):
            return 0
        _, lo, hi = self.segs[-1]
        return _prod(self.shape[lo:hi])

    def offset(self) -> str:
        """Linear offset into a contiguous row-major buffer of this shape."""
        terms = [mul(e, _prod(self.shape[hi:])) for e, lo, hi in self.segs]
        terms = [t for t in terms if t != "0"]
        if not terms:
            return "0"
        return terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")"

    # -- transforms: given the index into an op's output, the index into its input --
    def broadcast_to(self, in_shape) -> "Index":
        """Index into an input that NumPy-broadcasts to this shape."""
        in_shape = tuple(in_shape)
        if in_shape == self.shape:
            return self
        off = len(self.shape) - len(in_shape)
        segs = []
        for e, lo, hi in self.segs:
            dims = [d for d in range(lo, hi) if d >= off]
            if not dims:
                continue
            ins = [in_shape[d - off] for d in dims]
            outs = [self.shape[d] for d in dims]
            if ins == outs:
                ext = _prod(outs)
                segs.append((mod(e, ext) if dims[0] > lo else e, dims[0] - off, hi - off))
            elif all(x == 1 for x in ins):
                segs.append(("0", dims[0] - off, hi - off))
            else:
                sub = Index(self.shape[lo:hi], ((e, 0, hi - lo),)).digits()
                for d in dims:
                    keep = in_shape[d - off] != 1
                    segs.append((sub[d - lo] if keep else "0", d - off, d - off + 1))
        return Index(in_shape, tuple(segs))

    def reshape_to(self, in_shape) -> "Index":
        """Index into the input of a reshape (same row-major data, other shape)."""
        in_shape = tuple(in_shape)
        if len(self.segs) <= 1:
            e = self.segs[0][0] if self.segs else "0"
            return Index.flat(e, in_shape)
        suffix_in = [_prod(in_shape[p:]) for p in range(len(in_shape) + 1)]
        segs = []
        for e, lo, hi in self.segs:
            s_lo, s_hi = _prod(self.shape[lo:]), _prod(self.shape[hi:])
            try:
                p_lo = suffix_in.index(s_lo) if lo else 0
                p_hi = suffix_in.index(s_hi) if hi < len(self.shape) else len(in_shape)
            except ValueError:
                return Index.flat(self.offset(), in_shape)
            # the first match keeps boundaries monotone, so segments stay contiguous;
            # an empty range means the segment spans only size-1 dims (expr is 0)
            if p_hi > p_lo:
                segs.append((e, p_lo, p_hi))
        return Index(in_shape, tuple(segs))

    def transpose(self, perm) -> "Index":
        """Index into the input of ``transpose(x, perm)``."""
        out_digits = self.digits()
        in_digits = [None] * len(perm)
        in_shape = [0] * len(perm)
        for i, p in enumerate(perm):
            in_digits[p] = out_digits[i]
            in_shape[p] = self.shape[i]
        return Index.from_digits(in_digits, in_shape)

    def offset_axis(self, axis: int, start: int, in_shape) -> "Index":
        """Index into a tensor of ``in_shape`` (this shape but along ``axis``) at this
        index's digit on ``axis`` less ``start`` -- a concat's part -- keeping the other
        axes' runs whole (no division per axis where the segments need none)."""
        in_shape = tuple(in_shape)
        segs = []
        for e, lo, hi in self.segs:
            if not lo <= axis < hi:
                segs.append((e, lo, hi))
                continue
            inner = _prod(self.shape[axis + 1:hi])
            if axis > lo:
                segs.append((div(e, _prod(self.shape[axis:hi])), lo, axis))
            digit = div(e, inner)
            if axis > lo:
                digit = mod(digit, self.shape[axis])
            segs.append((add(digit, str(-start)), axis, axis + 1))
            if hi > axis + 1:
                segs.append((mod(e, inner), axis + 1, hi))
        return Index(in_shape, tuple(segs))

    def slice_of(self, in_shape, params) -> "Index":
        """Index into the input of a slice; params are per-axis (start, step, length)."""
        digits = [add(str(s), mul(d, st)) if (s, st) != (0, 1) else d
                  for d, (s, st, _) in zip(self.digits(), params)]
        return Index.from_digits(digits, in_shape)
