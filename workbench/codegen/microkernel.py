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
without knowing the ISA. The register block is chosen by the C compiler's target
macros (``-march=native``): AVX-512 6 x 64 (24 of 32 zmm registers accumulate), AVX
6 x 16 (12 of 16 ymm), otherwise 128-bit vectors, 6 x 16 on AArch64 (32 registers)
and 3 x 16 elsewhere. GCC's vector extensions spell it once for every width.

A and B may be bfloat16 (its bits, ``unsigned short``): A's sliver and B's panels are
widened to float32 as they are copied (``wb_elem``), copies the product makes anyway, so
a bfloat16 GEMM computes in float32 at float32's speed and reads half the bytes of A;
its epilogue rounds once, where it stores. The flag is a constant at each call, and the
branch sits in the copies, never in the register block's loop.

A constant B is packed in the kernel on its first run, into a persistent workspace
buffer (``kir.Buffer.persistent``); an int after the panels says whether it is done
(compare-and-swap, so two runs of one program at once pack once and the other waits).
An activation B (a fused attention's K and V from 256 keys, ``fusion.gemm.
ATTENTION_PACK_MIN_KEYS``, or any one with ``blas=0``) is packed by every run, one
panel per item of a parallel loop before the tiles, one pack per batch item, into a
workspace of the run: sgemm per tile packed the same panels again for every row tile
of a batch item (Wav2Vec2's attention, 639 keys: 7 row tiles per head). Over shorter
rows, one or two row tiles per head, sgemm per tile measured faster.
Measured single-threaded on the development machine (Zen 4, AVX-512), per tile of the
BERT/ViT shapes: 90-108 GFLOP/s against OpenBLAS's 78-101 for the same call with its
own packing (``benchmarks/gemm.py`` compares the two inside whole blocks).
"""
from __future__ import annotations

from ..fusion.gemm import PANEL   # columns per packed panel of B

KC = 256          # inner-dimension block: an A sliver of MR x KC floats stays in L1
STATE_SLOTS = 16  # floats after the panels holding the packing state (one cache line)


def packed_numel(k: int, n: int, once: bool = True) -> int:
    """Floats of B (``k x n``) packed into panels, plus the state slots of a pack made
    ``once`` (by the first run)."""
    return -(-n // PANEL) * PANEL * k + (STATE_SLOTS if once else 0)


# C only: the CUDA renderer never sees a packed Gemm (GPU plans refuse the template).
MICRO_KERNEL_C = r"""/* GEMM micro-kernel against a packed constant B (codegen/microkernel.py) */
#include <string.h>
#if defined(__AVX512F__)
#define WB_VW 16
#define WB_MR 6
#define WB_NV 4
#elif defined(__AVX__)
#define WB_VW 8
#define WB_MR 6
#define WB_NV 2
#elif defined(__aarch64__)
#define WB_VW 4
#define WB_MR 6
#define WB_NV 4
#else
#define WB_VW 4
#define WB_MR 3
#define WB_NV 4
#endif
#define WB_NB (WB_VW * WB_NV)
#define WB_PANEL @PANEL@
#define WB_KC @KC@
#define WB_PACKING 1
#define WB_PACKED 2
typedef float wb_vf __attribute__((vector_size(WB_VW * 4)));

/* element i of an operand: float32, or bfloat16 (bf16 != 0) widened */
WB_FN float wb_elem(const void* x, long long i, int bf16) {
  return bf16 ? wb_bf16_load(((const unsigned short*)x)[i]) : ((const float*)x)[i];
}

/* panel p of B (k x n, element (r, c) at b[r * rs + c * cs]; bfloat16 where b_bf16) into
   bp's panel p: k rows of WB_PANEL floats, zero past n */
WB_FN void wb_pack_panel(const void* b, int b_bf16, long long k, long long n, long long rs,
                         long long cs, float* bp, long long p) {
  for (long long r = 0; r < k; r++) {
    float* d = bp + (p * k + r) * WB_PANEL;
    for (long long j = 0; j < WB_PANEL; j++) {
      long long c = p * WB_PANEL + j;
      d[j] = c < n ? wb_elem(b, r * rs + c * cs, b_bf16) : 0.0f;
    }
  }
}

/* every panel of a constant B, once per buffer: the int after the panels goes from
   whatever it held (the workspace's poison) to PACKING to PACKED */
WB_FN void wb_pack_b_once(const void* b, int b_bf16, long long k, long long n, long long rs,
                          long long cs, float* bp) {
  long long panels = (n + WB_PANEL - 1) / WB_PANEL;
  int* state = (int*)(bp + panels * WB_PANEL * k);
  int seen = __atomic_load_n(state, __ATOMIC_ACQUIRE);
  if (seen == WB_PACKED) return;
  if (seen != WB_PACKING &&
      __atomic_compare_exchange_n(state, &seen, WB_PACKING, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    for (long long p = 0; p < panels; p++) wb_pack_panel(b, b_bf16, k, n, rs, cs, bp, p);
    __atomic_store_n(state, WB_PACKED, __ATOMIC_RELEASE);
    return;
  }
  while (__atomic_load_n(state, __ATOMIC_ACQUIRE) != WB_PACKED) {}  /* another run packs */
}

/* one WB_MR x WB_NB block: acc = A sliver (kc x WB_MR, packed) @ B rows (kc x WB_NB,
   WB_PANEL apart); stored (first block of k) or added into c, mr rows and nb columns */
WB_FN void wb_micro(long long kc, const float* ap, const float* bp, float* c,
                    long long ldc, int first, int mr, int nb) {
  wb_vf acc[WB_MR][WB_NV];
  for (int i = 0; i < WB_MR; i++)
    for (int v = 0; v < WB_NV; v++) acc[i][v] = (wb_vf){0};
  for (long long r = 0; r < kc; r++) {
    wb_vf bv[WB_NV];
    for (int v = 0; v < WB_NV; v++) memcpy(&bv[v], bp + r * WB_PANEL + v * WB_VW, sizeof(wb_vf));
#pragma GCC unroll 8
    for (int i = 0; i < WB_MR; i++) {
      float a = ap[r * WB_MR + i];
      for (int v = 0; v < WB_NV; v++) acc[i][v] += a * bv[v];
    }
  }
  if (mr == WB_MR && nb == WB_NB) {
    for (int i = 0; i < WB_MR; i++)
      for (int v = 0; v < WB_NV; v++) {
        float* ci = c + i * ldc + v * WB_VW;
        wb_vf x = acc[i][v];
        if (!first) { wb_vf old; memcpy(&old, ci, sizeof old); x += old; }
        memcpy(ci, &x, sizeof x);
      }
    return;
  }
  for (int i = 0; i < mr; i++)          /* a partial block at the tile's edge */
    for (int j = 0; j < nb; j++) {
      float x = acc[i][j / WB_VW][j % WB_VW];
      c[i * ldc + j] = first ? x : c[i * ldc + j] + x;
    }
}

/* c (m x n, row-major, ldc) = a (m x k, element (i, r) at a[i * ars + r * acs];
   bfloat16 where a_bf16) @ the packed panels starting at bp (the tile's first column, a
   panel boundary; each panel kp rows long, the tile's k rows from its first), or with
   add, c += that product */
WB_FN void wb_gemm_packed_into(long long m, long long n, long long k, const void* a,
                               int a_bf16, long long ars, long long acs, const float* bp,
                               long long kp, float* c, long long ldc, int add) {
  float ap[WB_MR * WB_KC] __attribute__((aligned(64)));
  if (k == 0 && !add)   /* an empty sum: zeros, as sgemm with beta = 0 writes */
    for (long long i = 0; i < m; i++)
      for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
  for (long long k0 = 0; k0 < k; k0 += WB_KC) {
    long long kc = k - k0 < WB_KC ? k - k0 : WB_KC;
    for (long long i0 = 0; i0 < m; i0 += WB_MR) {
      int mr = m - i0 < WB_MR ? (int)(m - i0) : WB_MR;
      for (long long r = 0; r < kc; r++)       /* the sliver, zero past m */
        for (int i = 0; i < WB_MR; i++)
          ap[r * WB_MR + i] = i < mr ? wb_elem(a, (i0 + i) * ars + (k0 + r) * acs, a_bf16) : 0.0f;
      for (long long j0 = 0; j0 < n; j0 += WB_NB) {
        int nb = n - j0 < WB_NB ? (int)(n - j0) : WB_NB;
        const float* b = bp + (j0 / WB_PANEL * kp + k0) * WB_PANEL + j0 % WB_PANEL;
        wb_micro(kc, ap, b, c + i0 * ldc + j0, ldc, k0 == 0 && !add, mr, nb);
      }
    }
  }
}

/* c = a @ the packed panels (each k rows long) */
WB_FN void wb_gemm_packed(long long m, long long n, long long k, const void* a, int a_bf16,
                          long long ars, long long acs, const float* bp, float* c,
                          long long ldc) {
  wb_gemm_packed_into(m, n, k, a, a_bf16, ars, acs, bp, k, c, ldc, 0);
}
""".replace("@PANEL@", str(PANEL)).replace("@KC@", str(KC))
