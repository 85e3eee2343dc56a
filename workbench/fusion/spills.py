"""What a kernel writes to global memory and reads back within one run, besides its
graph inputs and outputs -- the one count the cost model's features
(``KernelFeatures.scratch_bytes``) and the kernel IR (``Kernel.scratch_bytes``, whose
workspace buffers the lowerers size by these functions) share:

- a **stitched** kernel's values passed between phases (global scheme): a workspace
  in the compute type, written once and read once -- or, where the value is a graph
  output anyway, the output read back once (no buffer of its own);
- a **split row**'s partials: per reduction, one accumulator per (row, block);
- a CPU **GEMM**'s right operands packed into the micro-kernel's panels by every run
  (an activation B, fused attention's K and V), and an activation A packed into its
  slivers where many column tiles read it, written once and read by the tiles.

Persistent workspaces (a constant packed or widened on the first run) are left out:
after the first run they are read in place of the constant, whose bytes the inputs
count. The CUDA emulator's distinct-byte counts hold both sides to these numbers
(``tests/runtime/test_read_footprint.py``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DType
from ..ir import Graph
from ..ops import Kind, get_op
from .gemm.left_pack import left_pack_words, packs_a_per_run
from .gemm.right_pack import in_tile_rows, packs_b_in_tile
from .gemm.transposed import a_transposed
from .gemm_shape import PACK_PER_RUN, TRANSPOSED_PER_RUN
from .mapping import Mapping, ScheduleKind
from .schedule import Schedule


@dataclass(frozen=True)
class Spills:
    """Bytes a kernel spills in one run: ``workspace`` of its own buffers (each
    written once and read once) and ``reread`` of graph outputs read back."""
    workspace: int = 0
    reread: int = 0

    @property
    def traffic(self) -> int:
        """The global-memory bytes the spills move besides the graph inputs and outputs."""
        return 2 * self.workspace + self.reread


def accumulator(dt: DType) -> DType:
    """The type a reduction of ``dt`` accumulates in: integers in 64 bits (a mean of
    int32 must not wrap at 2^31; NumPy sums them in int64), unsigned ones unsigned (a
    uint64 past 2^63 is no long long)."""
    src = dt.compute
    return src if src.kind != "i" else (DType.int64 if src.signed else DType.uint64)


def split_partials(g: Graph, nodes, s: Schedule) -> tuple[tuple[DType, int], ...]:
    """A split row kernel's partials, (type, elements) per reduction in node order:
    one per (row, block of the row). Empty for any other kernel."""
    if s.kind is not ScheduleKind.row_reduce or s.mapping is not Mapping.split:
        return ()
    return tuple((accumulator(g.value(n.inputs[0]).dtype), s.rows * s.splits)
                 for n in (g.node(x) for x in nodes) if get_op(n.op).kind is Kind.reduce)


def pack_words(view, k: int, n: int, pairs: bool = False) -> int:
    """32-bit words of a right operand (``k x n`` per batch item, ``view`` its
    MatrixView) packed into column panels by every run: one pack per distinct matrix."""
    from ..codegen.microkernel import packed_numel   # (codegen imports fusion)
    items = 1 if view.one_matrix else view.distinct.batch_size
    return items * packed_numel(k, n, once=False, pairs=pairs)


def right_pack_words(t, pairs: bool = False) -> int:
    """32-bit words of the workspace an activation B of GEMM ``t`` is packed into by
    every run: all its panels, or where each tile packs its own (``packs_b_in_tile``)
    the ``in_tile_rows`` of them it holds at once (gemm/right_pack.py)."""
    own = not pairs and packs_b_in_tile(t)
    return pack_words(t.b.view, in_tile_rows(t) if own else t.k, t.n, pairs)


def packs_per_run(g: Graph, s: Schedule) -> tuple[int, ...]:
    """A CPU GEMM kernel's operands packed by every run, in 32-bit words: B where it
    is an activation packed for the micro-kernel (``PACK_PER_RUN``), A where the product
    is made transposed against it (``TRANSPOSED_PER_RUN``), and fused
    attention's K and V (the online form packs both; the two-product form V where
    ``then.packed``). A GPU GEMM (thread-block tiles) packs nothing."""
    if s.kind is not ScheduleKind.gemm or s.gemm.block is not None:
        return ()
    t, then, online = s.gemm, s.then, s.online is not None
    # (bfloat16 rows packed two to a word, where A is bfloat16: codegen/lower/tiles.py)
    pairs = bool(t.packed_b) and g.value(t.a.value).dtype is DType.bfloat16
    out = []
    if online:
        out.append(pack_words(t.b.view, t.k, t.n, pairs))
    elif t.packed_b == PACK_PER_RUN:
        out.append(right_pack_words(t, pairs))
    elif t.packed_b == TRANSPOSED_PER_RUN:      # A's panels (fusion/gemm/transposed.py)
        out.append(pack_words(a_transposed(t).view, t.k, t.m))
    if then is not None and (online or then.packed):
        out.append(pack_words(then.b.view, then.k, then.n))
    if packs_a_per_run(g, t, then, s.online):     # A's slivers (fusion/gemm/left_pack.py)
        out.append(left_pack_words(t))
    return tuple(out)


def stitched_globals(s: Schedule, outputs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A stitched kernel's values passed between phases: (those in workspaces, the
    graph outputs read back)."""
    vs = s.through_global if s.kind is ScheduleKind.stitched else ()
    return tuple(v for v in vs if v not in outputs), tuple(v for v in vs if v in outputs)


def spills(g: Graph, nodes, s: Schedule, outputs) -> Spills:
    """What the kernel of ``nodes`` under ``s`` (graph outputs ``outputs``) spills."""
    if s.kind is ScheduleKind.stitched:
        ws, back = stitched_globals(s, outputs)
        return Spills(sum(g.value(v).numel * g.value(v).dtype.compute.itemsize for v in ws),
                      sum(g.value(v).nbytes for v in back))
    parts = sum(dt.itemsize * n for dt, n in split_partials(g, nodes, s))
    return Spills(parts + 4 * sum(packs_per_run(g, s)))
