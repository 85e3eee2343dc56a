"""A window over one plane -- a depthwise convolution's taps, a pooling's -- computed by
one flat loop the compiler vectorizes, whatever the stride.

Why: the plane-at-a-time kernels (``lower/convolution.py``'s ``depthwise_planes``,
``pool_planes``) looped over each output row, ``ow`` positions long, with each tap read
at ``x * sx``. Rows of 7 and 14 positions (MobileNetV3's and EfficientNet's late stages)
are shorter than one AVX-512 vector, so GCC ran them scalar, and a stride of 2 made
every read a gather: a 5 x 5 depthwise convolution over 14 x 14 took 0.22 ms where
onnxruntime's whole call took 0.055.

So the padded plane (the input and the border its taps meet) is copied split into its
``sy x sx`` stride phases: phase ``(a, b)`` holds padded positions ``(r * sy + a,
c * sx + b)`` at ``(r, c)``, a plane of ``rows x cols`` of its own. Then tap ``(ky,
kx)`` of output ``(q, x)`` is phase ``(ky * dy % sy, kx * dx % sx)`` at ``(q + ky * dy
// sy, x + kx * dx // sx)``: with ``i = q * cols + x`` one address, ``i`` plus a
constant per tap. One loop over ``i`` computes every output, each from its taps in a
register in their order (the reference's), as contiguous vector loads; the ``cols -
ow`` positions past each row's end are computed and dropped when the rows are stored
(where ``cols == ow``, a 2 x 2 pooling of stride 2, none: it stores in place). A
stride of 1 is one phase, the padded plane as it was.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..fusion.gemm_shape import Im2col
from ..dtypes import DType
from .kir import Buffer, Let, Loop, Load, Scratch, Store


@dataclass(frozen=True)
class Phases:
    """The stride phases of a 2-D window's padded plane (see the module docstring).

    >>> p = Phases(Im2col("x", 1, (14, 14), (5, 5), (7, 7), (2, 2), (1, 1), (2, 2)))
    >>> (p.rows, p.cols, p.numel, p.flat, p.offset(4, 3))
    (9, 9, 324, 61, 100)
    """
    window: Im2col

    @property
    def rows(self) -> int:
        return -(-self.window.span[0] // self.window.strides[0])

    @property
    def cols(self) -> int:
        return -(-self.window.span[1] // self.window.strides[1])

    @property
    def numel(self) -> int:
        """Floats of all the phases."""
        return math.prod(self.window.strides) * self.rows * self.cols

    @property
    def flat(self) -> int:
        """Iterations of the flat loop: every row ``cols`` long, the last one ``ow``."""
        oh, ow = self.window.out
        return (oh - 1) * self.cols + ow

    @property
    def in_place(self) -> bool:
        """Whether the flat loop's positions are the output's (no row to drop)."""
        return self.cols == self.window.out[1]

    def origin(self, a: int, b: int) -> int:
        """Where phase ``(a, b)`` starts."""
        return (a * self.window.strides[1] + b) * self.rows * self.cols

    def offset(self, ky: int, kx: int) -> int:
        """Tap ``(ky, kx)``'s element for output ``i = q * cols + x``: at ``i`` plus
        this."""
        (sy, sx), (dy, dx) = self.window.strides, self.window.dilations
        return (self.origin(ky * dy % sy, kx * dx % sx)
                + ky * dy // sy * self.cols + kx * dx // sx)


def padded_plane(x: Buffer, ph: Phases, plane: str, fill: str
                 ) -> tuple[Scratch, Loop, tuple[Loop, ...]]:
    """A thread's buffer of the phases of one plane of ``x`` (from C offset ``plane``):
    the buffer, the loop writing ``fill`` over all of it, and the loops copying the
    plane into each phase's inside (the border left as it was, so one fill serves
    many planes)."""
    win = ph.window
    (h, w), (py, px), (sy, sx) = win.spatial, win.pads, win.strides
    xp = Scratch("wb_xp", win.value, DType.float32, ph.numel)
    border = Loop("i", ph.numel, "block", (Store(xp, "i", fill),))
    copies = []
    for a in range(sy):
        r0, r1 = _inside(a, py, sy, h, ph.rows)
        for b in range(sx):
            c0, c1 = _inside(b, px, sx, w, ph.cols)
            if r1 <= r0 or c1 <= c0:
                continue
            copies.append(Loop("wy", r1 - r0, "serial", (Loop("wx", c1 - c0, "block", (
                Load("xv", x, f"{plane} + (wy * {sy} + {r0 * sy + a - py}) * {w} + "
                              f"wx * {sx} + {c0 * sx + b - px}"),
                Store(xp, f"{ph.origin(a, b) + r0 * ph.cols + c0} + wy * {ph.cols} + wx",
                      "xv"))),)))
    return xp, border, tuple(copies)


def _inside(phase: int, pad: int, stride: int, extent: int, length: int) -> tuple[int, int]:
    """The range of a phase's positions ``r`` (``r < length``) whose input position
    ``r * stride + phase - pad`` lies in ``[0, extent)``."""
    lo = max(0, -(-(pad - phase) // stride))
    hi = min(length, (extent - 1 + pad - phase) // stride + 1)
    return lo, hi


def tap_reads(xp: Scratch, ph: Phases) -> tuple[Load, ...]:
    """Loads ``xv0``, ``xv1``... of every tap of flat position ``wi``, in the taps'
    order (row-major)."""
    kh, kw = ph.window.kernel
    return tuple(Load(f"xv{ky * kw + kx}", xp, f"wi + {ph.offset(ky, kx)}")
                 for ky in range(kh) for kx in range(kw))


def window_rows(xp: Scratch, ph: Phases, total: str, dest: Buffer, first: str,
                node: str = "", lets: tuple = ()) -> tuple[tuple[Scratch, ...], tuple]:
    """Every output of the plane: ``total`` (over the taps' ``xv0``... and the ``lets``
    computed from them) at each flat position, the rows stored into ``dest`` from C
    offset ``first`` (row-major, ``ow`` apart). Returns the thread's buffers it needs
    (declared by the caller) and the statements."""
    oh, ow = ph.window.out
    reads = (*tap_reads(xp, ph), *lets)
    if ph.in_place:
        return (), (Loop("wi", ph.flat, "block", (
            *reads, Store(dest, f"{first} + wi", total, node=node))),)
    yp = Scratch("wb_yp", ph.window.value, DType.float32, ph.flat)
    return (yp,), (
        Loop("wi", ph.flat, "block", (*reads, Store(yp, "wi", total))),
        Loop("q", oh, "serial", (Loop("x", ow, "block", (
            Load("yv", yp, f"q * {ph.cols} + x"),
            Store(dest, f"{first} + q * {ow} + x", "yv", node=node))),)))


def window_max(taps: list[str]) -> tuple[tuple[Let, ...], str]:
    """The max of the taps (float expressions, in the reference's order; the later of
    equal ones), NaN where any is: statements and the expression over them.
    ``wb_fmax_num`` (maxps, which drops a NaN) chained, and NaN where :func:`any_nan`
    says: 9 taps in 18 vector instructions where the NaN-propagating ``wb_fmax``
    chain took 32, the same bits. As statements of their own: GCC 12 compiled the
    same text as one expression 13% slower than the ``wb_fmax`` chain. GoogLeNet's
    stride-1 pools ran 1.2-2x faster (480 planes of 14 x 14: 0.020 against 0.037 ms),
    its stride-2 ones, bound by the phases' strided copies, as before
    (benchmarks/results/pool-planes-2026-11-25.md)."""
    total = taps[0]
    for v in taps[1:]:
        total = f"wb_fmax_num({total}, {v})"
    return ((Let("wb_max", DType.float32, total), Let("wb_nan", DType.int32, any_nan(taps))),
            "wb_nan ? NAN : wb_max")


def any_nan(taps: list[str]) -> str:
    """C text, nonzero where any of the taps is NaN: one unordered comparison (C99's
    ``isunordered``, one vector compare) a pair."""
    pairs = [(taps[i], taps[min(i + 1, len(taps) - 1)]) for i in range(0, len(taps), 2)]
    return "(" + " | ".join(f"isunordered({a}, {b})" for a, b in pairs) + ")"
