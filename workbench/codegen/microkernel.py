"""The CPU GEMM micro-kernel: a register-blocked product of one tile, in C the compiler
vectorizes, against a right operand packed into column panels (a constant once, an
activation by every run); ``wb_gemm_packed_into`` also adds a product into its output
(the online softmax's output rows, one block of keys at a time).

Why: a BLAS sgemm called per tile packs B's panel again on every call, although B is
a weight that never changes; onnxruntime's MLAS packs weights once when the session
loads. Packed once, the product of a tile is the micro-kernel's loop alone (Goto and
van de Geijn's GEMM, as BLIS structures it): a sliver of ``MR`` rows of A copied into
a small contiguous buffer (it stays in L1), then for each ``MR x (VW*NV)`` block of
the tile, ``MR * NV`` vector accumulators updated by broadcast-multiply-adds over
``k`` while B streams from L2.

The packed layout is the same on every machine: panels of ``PANEL`` columns, each
``k`` rows of ``PANEL`` floats (zero past ``n``), so the kernel IR can size the buffer
without knowing the ISA. A float32 B whose columns are contiguous (a weight read
transposed, ``x @ W^T``) is packed by whole 8 x 8 blocks transposed in registers
(``wb_transpose8``), 16 rows of k at a time so that each cache line of B is read whole
(fusion/gemm/right_pack.py); where one tile alone reads its panels (one row tile), it
packs them itself, ``KC`` rows of k at a time into the same floats just before it
multiplies them (``wb_gemm_packing_b``), so they are read back from L2 and never
written back to memory. Where A has few rows and B is an activation (a training step's
128 tokens against a weight), the product is made transposed instead
(``wb_gemm_transposed``, fusion/gemm/transposed.py): A is packed into the panels once
per run, and the micro-kernel broadcasts B's elements straight from where B lies, six
of its columns at a time, storing each block transposed -- no copy of B at all. The register
block is chosen by the C compiler's target macros (``-march=native``): AVX-512 6 x 64
(24 of 32 zmm registers accumulate), AVX 6 x 16 (12 of 16 ymm), otherwise 128-bit
vectors, 6 x 16 on AArch64 (32 registers) and 3 x 16 elsewhere. GCC's vector
extensions spell it once for every width. A block at the tile's edge that one vector
holds takes one vector (``wb_micro_nv``): the last 4 of 196 columns cost one vector's
products, not a whole block's (``benchmarks/microkernel.py``, one thread: 128 x 196 x
1024 at 98 GFLOP/s against 80 before, 184 against 156 in bfloat16 pairs, 65 columns 76
against 50).

bfloat16 (its bits, ``unsigned short``). Where A and B are both bfloat16, B is packed
as **pairs** of its rows (``WB_B_PAIRS``: each 32-bit word of a panel holds rows ``2 r``
and ``2 r + 1`` of one column, low half first), A's sliver the same way, and
``wb_micro_pairs`` takes two rows of k per step: with AVX512-BF16 (``vdpbf16ps``,
Zen 4, Cooper Lake and later) one instruction multiplies 32 bfloat16 pairs and adds
them into 16 float32 accumulators, twice float32's FMA rate, with half the bytes of B
streamed from cache; elsewhere each word is widened by a shift and a mask (exact) and
multiplied in float32. The products of two bfloat16 are exact in float32 and the sums
float32's, so the result is float32's product of the bfloat16 operands to float32's
bound (``vdpbf16ps`` flushes subnormal inputs and results to zero, far below any bound
the check uses). Where only B is bfloat16 (a fused attention's V, multiplied by float32
probabilities), B is widened into float32 panels as it is packed (``WB_B_BF16``,
``wb_elem``). Either way the epilogue rounds once, where it stores.

A constant B is packed in the kernel on its first run, into a persistent workspace
buffer (``kir.Buffer.persistent``); an int after the panels says whether it is done
(compare-and-swap, so two runs of one program at once pack once and the other waits).
An activation B (a fused attention's K and V from 256 keys,
``fusion.gemm.attention.CpuAttention.pack_min_keys``, or any one with ``blas=0``) is
packed by every run, one panel per item of a parallel loop before the tiles, one pack
per batch item, into a workspace of the run: sgemm per tile packed the same panels
again for every row tile of a batch item (Wav2Vec2's attention, 639 keys: 7 row tiles
per head). Over shorter rows, one or two row tiles per head, sgemm per tile measured
faster.
Measured single-threaded on the development machine (Zen 4, AVX-512), per tile of the
BERT/ViT shapes: 90-108 GFLOP/s against OpenBLAS's 78-101 for the same call with its
own packing (``benchmarks/gemm.py`` compares the two inside whole blocks).

The C itself is ``include/microkernel.h`` (with ``include/conv_lanes.h``, the
convolutions that use its vectors and panels), pasted into every C source; this module
owns the packed buffers' sizes, which the lowering allocates them by (``PANEL`` and ``KC``
are fusion/gemm/tiles.py's: the CPU tiling and the right-pack rule read them too).
"""
from __future__ import annotations

from ..fusion.gemm.left_pack import a_tile_stride   # A's slivers (one definition)
from ..fusion.gemm.tiles import KC, PANEL   # rows of k per block, columns per panel
from ..fusion.gemm.transposed import KC_T     # rows of k per block, made transposed
from .include import source

STATE_SLOTS = 16  # floats after the panels holding the packing state (one cache line)


def packed_numel(k: int, n: int, once: bool = True, pairs: bool = False) -> int:
    """32-bit words of B (``k x n``) packed into panels (``pairs``: bfloat16 rows two to
    a word), plus the state slots of a pack made ``once`` (by the first run)."""
    return -(-n // PANEL) * PANEL * panel_rows(k, pairs) + (STATE_SLOTS if once else 0)


def packed_a_numel(m: int, k: int, tile_m: int) -> int:
    """Floats of A (``m x k``) packed once into the slivers of tiles of ``tile_m`` rows,
    with its state slots."""
    return -(-m // tile_m) * a_tile_stride(k, tile_m) + STATE_SLOTS


def panel_rows(k: int, pairs: bool = False) -> int:
    """Rows of 32-bit words in a panel of B's ``k`` rows."""
    return -(-k // 2) if pairs else k


# C only: the CUDA renderer never sees a packed Gemm (GPU plans refuse the template).
MICRO_KERNEL_C = source("microkernel.h", PANEL=PANEL, KC=KC, KCT=KC_T,
                        TRANSPOSED=source("transposed.h"),
                        CONV_LANES=source("conv_lanes.h"))
