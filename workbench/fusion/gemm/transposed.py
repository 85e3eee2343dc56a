"""Whether a CPU GEMM kernel whose right operand B is an activation makes its product
transposed (:func:`makes_transposed`): ``C^T = B^T A^T``, B's elements broadcast by the
micro-kernel straight from where B lies, and A -- few rows -- packed into column panels
by every run (``GemmShape.packed_b`` = ``TRANSPOSED_PER_RUN``; codegen
``wb_gemm_transposed``).

Why: a training step multiplies 128 tokens by weights that are activations of the step
(inputs, updated by the optimizer), so B -- the weight, 768 x 768 to 3072 x 768 -- is
packed again by every run, and A -- the 128 tokens -- is the small operand. Packing B
cost 10% of those products: on 2 cores (Zen 4, each product alone) 128 x 768 x 3072
took 3.38 ms with B packed by the run against 3.02 with a constant B packed once.
Made transposed, the micro-kernel's broadcast side is B itself: ``x @ W^T`` reads six
rows of W, each contiguous along k, and ``dy @ W`` six neighbouring elements of a row
of W, in place; the vector side is A's 128 rows, packed once per run (0.4-1.5 MB) and
read by every tile. Measured on 2 cores (standalone C, best of 40, load 0.3), against B
packed per tile as the rule did: ``x @ W^T`` 128x768x768 222 against 207 GFLOP/s,
128x768x3072 219 against 173, 128x3072x768 215 against 181 (B packed once: 218, 214,
221); ``dy @ W`` 214, 188 and 209 against 196, 186 and 196.

Each block of ``WB_MR`` of B's columns by ``WB_NB`` of A's rows is stored transposed
into the tile (added where k takes more than one block), so blocks of k are long
(``KC_T`` = 1024 rows: six of B's columns' 1024 floats stay in L1, A's two panels'
in L2): with 256-row blocks the transposed adds cost 128 x 768 x 3072 193 against 219
GFLOP/s.

Only where one tile's rows are all of A (one row tile, ``max_rows``), one matrix each
(no batch: attention's products keep their forms -- made transposed, BERT's five
per-head products of k = 64 or 128 took 0.92 against 0.94 ms, the transposed stores
costing what B's pack saved), float32 operands, no epilogue
reducing rows (its tiles span every column), no convolution, and where the micro-kernel
runs at all (``tiles.packs`` says PACK_PER_RUN: a constant B is packed once instead).

    >>> TRANSPOSED.max_rows
    128
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...dtypes import DType
from ...ir import Graph
from ..gemm_shape import PACK_PER_RUN, GemmShape, Operand

# rows of k per block of a product made transposed (microkernel.h wb_gemm_transposed):
# six of B's columns' KC_T floats (24 KB) stay in a core's L1
KC_T = 1024


@dataclass(frozen=True)
class TransposedProduct:
    """When a GEMM with an activation B is made transposed (``TRANSPOSED``; a test or a
    benchmark replaces it there). ``max_rows``: A's rows, all in one tile (``CpuTiles.m``);
    its panels are then read by every tile. ``min_cols``: B's columns at least, so
    that the tiles keep the cores busy with whole blocks of ``WB_MR``."""
    max_rows: int = 128
    min_cols: int = 64
    enabled: bool = True


TRANSPOSED = TransposedProduct()


def makes_transposed(g: Graph, t: GemmShape, can: str, whole_rows: bool = False) -> bool:
    """Whether the CPU GEMM kernel of ``t`` (tiled for sgemm: ``t.packed_b`` empty;
    ``whole_rows``: an epilogue reducing rows) makes its product transposed, given how
    B can be packed here (``can``, ``tiles.packs``)."""
    rule = TRANSPOSED
    return (rule.enabled and can == PACK_PER_RUN and not whole_rows and t.im2col is None
            and t.batch == 1 and t.row_tiles == 1 and t.m <= rule.max_rows
            and t.n >= rule.min_cols and t.k > 0
            and t.a.view.one_matrix and t.b.view.one_matrix
            and all(g.value(v).dtype is DType.float32 for v in (t.a.value, t.b.value)))


def a_transposed(t: GemmShape) -> Operand:
    """A as the right operand the run packs into column panels: ``A^T`` (``k x m``),
    the same elements read with rows and columns swapped."""
    v = t.a.view
    return replace(t.a, view=replace(v, rows=v.cols, cols=v.rows, row_stride=v.col_stride,
                                     col_stride=v.row_stride))
