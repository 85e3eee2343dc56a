// The CPU GEMM micro-kernel in C, pasted into every C source (the C renderer's prelude):
// codegen/microkernel.py says what it does and why. @PANEL@ and @KC@ are its sizes,
// filled in there (fusion/gemm.py's PANEL, microkernel.py's KC); @TRANSPOSED@ is
// transposed.h's text, the product made transposed against A's panels; @CONV_LANES@ is
// conv_lanes.h's text, the convolutions that use its vectors and panels (the line
// after each is theirs: the placeholder's newline is the blank line between).
/* GEMM micro-kernel against a packed constant B (codegen/microkernel.py) */
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
#define WB_KCT @KCT@
#define WB_PACKING 1
#define WB_PACKED 2
typedef float wb_vf __attribute__((vector_size(WB_VW * 4)));
typedef unsigned int wb_vu __attribute__((vector_size(WB_VW * 4)));
#if defined(__AVX512BF16__) && WB_VW == 16 && WB_MR == 6 && WB_NV == 4
/* acc += the bfloat16 pairs of a times those of b, lane by lane: AVX512-BF16's
   vdpbf16ps, by inline assembly rather than <immintrin.h>, whose parsing cost every
   kernel's compile 0.1 s (and whose bfloat16 vector type changed in GCC 13) */
#define WB_DPBF16(acc, a, b) __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#endif
/* how B is packed: float32 panels of float32 (WB_B_F32) or of bfloat16 widened
   (WB_B_BF16), or bfloat16 rows two to a 32-bit word (WB_B_PAIRS) */
#define WB_B_F32 0
#define WB_B_BF16 1
#define WB_B_PAIRS 2

/* element i of an operand: float32, or bfloat16 (bf16 != 0) widened */
WB_FN float wb_elem(const void* x, long long i, int bf16) {
  return bf16 ? wb_bf16_load(((const unsigned short*)x)[i]) : ((const float*)x)[i];
}

/* rows of 32-bit words in a panel of B's k rows */
WB_FN long long wb_panel_rows(long long k, int kind) {
  return kind == WB_B_PAIRS ? (k + 1) / 2 : k;
}

/* a pair of bfloat16 (bits): element at, and the one next after it where both */
WB_FN unsigned int wb_pair(const unsigned short* x, long long at, long long next, int both) {
  return (unsigned int)x[at] | (both ? (unsigned int)x[at + next] << 16 : 0u);
}

/* 8 x 8 floats transposed in registers: the 8 rows at x (xs apart) as the 8 columns
   at y (ys apart), three rounds of two-vector shuffles (unpack, shuffle, 128-bit
   permute on AVX) */
typedef float wb_v8 __attribute__((vector_size(32)));
#if defined(__clang__)
#define WB_SHUF8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int wb_i8 __attribute__((vector_size(32)));
#define WB_SHUF8(a, b, ...) __builtin_shuffle(a, b, (wb_i8){__VA_ARGS__})
#endif
WB_FN void wb_transpose8(const float* x, long long xs, float* y, long long ys) {
  wb_v8 r[8], s[8];
  for (int i = 0; i < 8; i++) memcpy(&r[i], x + i * xs, sizeof r[i]);
  for (int i = 0; i < 8; i += 2) {
    s[i] = WB_SHUF8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    s[i + 1] = WB_SHUF8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)      /* r[i + t]: elements t and t + 4 of 4 rows */
    for (int h = 0; h < 2; h++) {
      r[i + 2 * h] = WB_SHUF8(s[i + h], s[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      r[i + 2 * h + 1] = WB_SHUF8(s[i + h], s[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int i = 0; i < 4; i++) {       /* s[t]: element t of the 8 rows */
    s[i] = WB_SHUF8(r[i], r[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    s[i + 4] = WB_SHUF8(r[i], r[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
  for (int i = 0; i < 8; i++) memcpy(y + i * ys, &s[i], sizeof s[i]);
}

/* rows r0 to r1 - 1 of panels p0 to p1 - 1 of B (k x n, element (r, c) at b[r * rs +
   c * cs], float32 or bfloat16 widened: not pairs) into bp's panels (panel p at bp + p *
   k * WB_PANEL, rows of WB_PANEL floats, zero past n). r0 a multiple of 8 */
WB_FN void wb_pack_block(const void* b, int kind, long long k, long long n, long long rs,
                         long long cs, float* bp, long long p0, long long p1, long long r0,
                         long long r1) {
  const float* f = (const float*)b;
  if (kind == WB_B_F32 && rs == 1 && cs != 1) {
    /* B's columns contiguous (a weight W read as W^T: x @ W^T): whole 8 x 8 blocks
       transposed in registers, 8 columns of 8 rows at a time, where an element at a
       time was a gather of 64 columns' cache lines per row of the panel */
    long long r8 = r0 + (r1 - r0) / 8 * 8;
    for (long long p = p0; p < p1; p++) {
      float* d = bp + p * k * WB_PANEL;
      long long c0 = p * WB_PANEL, whole = n - c0 < WB_PANEL ? (n - c0) / 8 * 8 : WB_PANEL;
      /* 16 rows of k at a time (a cache line of each of 8 columns of B, both its
         halves transposed one after the other): B's columns 12 KB apart (W^T of a
         3072-deep W) fall in one set of L1, and 64 of them read 8 rows at a time
         evicted each line before its second half was read */
      for (long long r = r0; r < r8; r += 16)
        for (long long j = 0; j < whole; j += 8) {
          wb_transpose8(f + (c0 + j) * cs + r, cs, d + r * WB_PANEL + j, WB_PANEL);
          if (r + 8 < r8)
            wb_transpose8(f + (c0 + j) * cs + r + 8, cs, d + (r + 8) * WB_PANEL + j, WB_PANEL);
        }
      for (long long r = r0; r < r1; r++)   /* the rows past r8, the columns past whole */
        for (long long j = r < r8 ? whole : 0; j < WB_PANEL; j++)
          d[r * WB_PANEL + j] = c0 + j < n ? f[(c0 + j) * cs + r] : 0.0f;
    }
    return;
  }
  if (kind == WB_B_F32 && cs == 1) {
    /* B's rows contiguous (a weight read as it is, dy @ W): row by row across the
       panels, one contiguous run of B per row, where a panel at a time read 256 bytes
       of each of k rows */
    for (long long r = r0; r < r1; r++)
      for (long long p = p0; p < p1; p++) {
        float* d = bp + (p * k + r) * WB_PANEL;
        long long c = p * WB_PANEL, w = n - c < WB_PANEL ? n - c : WB_PANEL;
        memcpy(d, f + r * rs + c, (size_t)w * sizeof(float));
        for (long long j = w; j < WB_PANEL; j++) d[j] = 0.0f;
      }
    return;
  }
  for (long long p = p0; p < p1; p++)
    for (long long r = r0; r < r1; r++) {
      float* d = bp + (p * k + r) * WB_PANEL;
      for (long long j = 0; j < WB_PANEL; j++) {
        long long c = p * WB_PANEL + j;
        d[j] = c < n ? wb_elem(b, r * rs + c * cs, kind == WB_B_BF16) : 0.0f;
      }
    }
}

/* panel p of B (k x n, element (r, c) at b[r * rs + c * cs], packed as kind) into bp's
   panel p: its rows of WB_PANEL words, zero past n */
WB_FN void wb_pack_panel(const void* b, int kind, long long k, long long n, long long rs,
                         long long cs, float* bp, long long p) {
  if (kind == WB_B_PAIRS) {
    long long k2 = wb_panel_rows(k, kind);
    for (long long r2 = 0; r2 < k2; r2++) {
      unsigned int* d = (unsigned int*)bp + (p * k2 + r2) * WB_PANEL;
      for (long long j = 0; j < WB_PANEL; j++) {
        long long c = p * WB_PANEL + j;
        d[j] = c < n ? wb_pair((const unsigned short*)b, 2 * r2 * rs + c * cs, rs,
                               2 * r2 + 1 < k) : 0u;
      }
    }
    return;
  }
  wb_pack_block(b, kind, k, n, rs, cs, bp, p, p + 1, 0, k);
}

/* whether this caller makes a buffer's one-time copy: its state int goes from whatever
   it held (the workspace's poison) to PACKING (this caller: 1; it stores PACKED when
   done) -- or, where another run is making it, once that run is done, 0 */
WB_FN int wb_claim_once(int* state) {
  int seen = __atomic_load_n(state, __ATOMIC_ACQUIRE);
  if (seen == WB_PACKED) return 0;
  if (seen != WB_PACKING &&
      __atomic_compare_exchange_n(state, &seen, WB_PACKING, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    return 1;
  while (__atomic_load_n(state, __ATOMIC_ACQUIRE) != WB_PACKED) {}  /* another run packs */
  return 0;
}

/* every panel of a constant B, once per buffer (the state int after the panels) */
WB_FN void wb_pack_b_once(const void* b, int kind, long long k, long long n, long long rs,
                          long long cs, float* bp) {
  long long panels = (n + WB_PANEL - 1) / WB_PANEL;
  int* state = (int*)(bp + panels * WB_PANEL * wb_panel_rows(k, kind));
  if (!wb_claim_once(state)) return;
  for (long long p = 0; p < panels; p++) wb_pack_panel(b, kind, k, n, rs, cs, bp, p);
  __atomic_store_n(state, WB_PACKED, __ATOMIC_RELEASE);
}

/* a bfloat16 constant of n elements widened into w (float32, in place of it: a
   convolution's filters, multiplied in float32), once per buffer (the state int
   after them) */
WB_FN void wb_widen_once(const unsigned short* x, long long n, float* w) {
  int* state = (int*)(w + n);
  if (!wb_claim_once(state)) return;
  for (long long i = 0; i < n; i++) w[i] = wb_bf16_load(x[i]);
  __atomic_store_n(state, WB_PACKED, __ATOMIC_RELEASE);
}

/* a block's accumulators stored (first block of k) or added into c, mr rows and nb
   columns: whole vectors as vectors, the columns past the last whole one (at the
   tile's edge) one by one */
WB_FN void wb_micro_store(wb_vf acc[WB_MR][WB_NV], float* c, long long ldc, int first,
                          int mr, int nb) {
  int whole = nb / WB_VW;
  for (int i = 0; i < mr; i++) {
    for (int v = 0; v < whole; v++) {
      float* ci = c + i * ldc + v * WB_VW;
      wb_vf x = acc[i][v];
      if (!first) { wb_vf old; memcpy(&old, ci, sizeof old); x += old; }
      memcpy(ci, &x, sizeof x);
    }
    for (int j = whole * WB_VW; j < nb; j++) {
      float x = acc[i][j / WB_VW][j % WB_VW];
      c[i * ldc + j] = first ? x : c[i * ldc + j] + x;
    }
  }
}

/* one WB_MR x (nv vectors) block -- or, with rows < WB_MR, its first rows only: acc =
   A sliver (kc x WB_MR, packed) @ B rows (kc x nv * WB_VW, WB_PANEL apart); stored
   (first block of k) or added into c, mr (<= rows) rows and nb columns. Always inlined,
   so that each call's constant nv and rows unroll its loops and keep its accumulators
   in registers */
WB_FN __attribute__((always_inline)) void wb_micro_nv(
    long long kc, const float* ap, const float* bp, float* c, long long ldc, int first,
    int mr, int nb, const int nv, const int rows) {
  wb_vf acc[WB_MR][WB_NV];
  for (int i = 0; i < rows; i++)
    for (int v = 0; v < nv; v++) acc[i][v] = (wb_vf){0};
  for (long long r = 0; r < kc; r++) {
    wb_vf bv[WB_NV];
    for (int v = 0; v < nv; v++) memcpy(&bv[v], bp + r * WB_PANEL + v * WB_VW, sizeof(wb_vf));
#pragma GCC unroll 8
    for (int i = 0; i < rows; i++) {
      float a = ap[r * WB_MR + i];
      for (int v = 0; v < nv; v++) acc[i][v] += a * bv[v];
    }
  }
  wb_micro_store(acc, c, ldc, first, mr, nb);
}

/* the block of nb columns: the full register block, or at the tile's edge, where one
   vector holds them, that one (a tail of 4 columns after 192 cost what 64 do: 196
   positions of a convolution, 65 keys of ViT's attention). Tails of two and three
   vectors take the full block: each variant inlined cost ~0.05 s of every GEMM
   kernel's compile. A sliver of half the rows or fewer (a tile's last: 128 rows are 21
   slivers of 6 and one of 2) multiplies half the rows: an LM head 128 x 32000 x 256
   took 2.6% less time (one core), its compile ~0.01 s more */
WB_FN void wb_micro(long long kc, const float* ap, const float* bp, float* c,
                    long long ldc, int first, int mr, int nb) {
  if (nb <= WB_VW) wb_micro_nv(kc, ap, bp, c, ldc, first, mr, nb, 1, WB_MR);
  else if (mr <= WB_MR / 2) wb_micro_nv(kc, ap, bp, c, ldc, first, mr, nb, WB_NV, WB_MR / 2);
  else wb_micro_nv(kc, ap, bp, c, ldc, first, mr, nb, WB_NV, WB_MR);
}

/* as wb_micro, over kc2 pairs of k rows of bfloat16: A's sliver and B's panel rows
   hold rows 2 r2 and 2 r2 + 1 in one word (low half first) */
#ifdef WB_DPBF16
/* (AVX-512's 6 x 4 block: its accumulators named one by one, so that they stay in
   registers around the inline assembly, which an array's elements did not) */
#define WB_PAIR_ROW(i) { wb_vu x = (wb_vu){0} + a[i]; WB_DPBF16(c##i##0, x, b0); \
  WB_DPBF16(c##i##1, x, b1); WB_DPBF16(c##i##2, x, b2); WB_DPBF16(c##i##3, x, b3); }
WB_FN void wb_micro_pairs(long long kc2, const unsigned int* ap, const unsigned int* bp,
                          float* c, long long ldc, int first, int mr, int nb) {
  wb_vf z = {0}, c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z,
        c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z,
        c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
  for (long long r2 = 0; r2 < kc2; r2++) {
    const unsigned int* a = ap + r2 * WB_MR;
    wb_vu b0, b1, b2, b3;
    memcpy(&b0, bp + r2 * WB_PANEL, sizeof b0);
    memcpy(&b1, bp + r2 * WB_PANEL + WB_VW, sizeof b1);
    memcpy(&b2, bp + r2 * WB_PANEL + 2 * WB_VW, sizeof b2);
    memcpy(&b3, bp + r2 * WB_PANEL + 3 * WB_VW, sizeof b3);
    WB_PAIR_ROW(0) WB_PAIR_ROW(1) WB_PAIR_ROW(2) WB_PAIR_ROW(3) WB_PAIR_ROW(4) WB_PAIR_ROW(5)
  }
  wb_vf acc[WB_MR][WB_NV] = {{c00, c01, c02, c03}, {c10, c11, c12, c13},
                             {c20, c21, c22, c23}, {c30, c31, c32, c33},
                             {c40, c41, c42, c43}, {c50, c51, c52, c53}};
  wb_micro_store(acc, c, ldc, first, mr, nb);
}
/* as wb_micro_pairs, for a block at the tile's edge that one vector holds */
#define WB_PAIR_ROW1(i) { wb_vu x = (wb_vu){0} + a[i]; WB_DPBF16(c##i, x, b0); }
WB_FN void wb_micro_pairs1(long long kc2, const unsigned int* ap, const unsigned int* bp,
                           float* c, long long ldc, int first, int mr, int nb) {
  wb_vf z = {0}, c0 = z, c1 = z, c2 = z, c3 = z, c4 = z, c5 = z;
  for (long long r2 = 0; r2 < kc2; r2++) {
    const unsigned int* a = ap + r2 * WB_MR;
    wb_vu b0;
    memcpy(&b0, bp + r2 * WB_PANEL, sizeof b0);
    WB_PAIR_ROW1(0) WB_PAIR_ROW1(1) WB_PAIR_ROW1(2) WB_PAIR_ROW1(3) WB_PAIR_ROW1(4)
    WB_PAIR_ROW1(5)
  }
  wb_vf acc[WB_MR][WB_NV] = {{c0}, {c1}, {c2}, {c3}, {c4}, {c5}};
  wb_micro_store(acc, c, ldc, first, mr, nb);
}
#undef WB_PAIR_ROW
#undef WB_PAIR_ROW1
#else
WB_FN void wb_micro_pairs(long long kc2, const unsigned int* ap, const unsigned int* bp,
                          float* c, long long ldc, int first, int mr, int nb) {
  wb_vf acc[WB_MR][WB_NV];
  for (int i = 0; i < WB_MR; i++)
    for (int v = 0; v < WB_NV; v++) acc[i][v] = (wb_vf){0};
  for (long long r2 = 0; r2 < kc2; r2++) {
    wb_vu bv[WB_NV];
    for (int v = 0; v < WB_NV; v++) memcpy(&bv[v], bp + r2 * WB_PANEL + v * WB_VW, sizeof(wb_vu));
    wb_vf lo[WB_NV], hi[WB_NV];         /* each word's two rows, widened exactly */
    for (int v = 0; v < WB_NV; v++) {
      wb_vu l = bv[v] << 16, h = bv[v] & 0xffff0000u;
      memcpy(&lo[v], &l, sizeof l);
      memcpy(&hi[v], &h, sizeof h);
    }
#pragma GCC unroll 8
    for (int i = 0; i < WB_MR; i++) {
      unsigned int w = ap[r2 * WB_MR + i];
      float a0 = wb_bf16_load((unsigned short)w), a1 = wb_bf16_load((unsigned short)(w >> 16));
      for (int v = 0; v < WB_NV; v++) acc[i][v] += a0 * lo[v] + a1 * hi[v];
    }
  }
  wb_micro_store(acc, c, ldc, first, mr, nb);
}
/* (the widening block has no narrower form: its edge blocks take the whole block) */
WB_FN void wb_micro_pairs1(long long kc2, const unsigned int* ap, const unsigned int* bp,
                           float* c, long long ldc, int first, int mr, int nb) {
  wb_micro_pairs(kc2, ap, bp, c, ldc, first, mr, nb);
}
#endif

/* the sliver the micro-kernel reads of rows (i, r) of a (element (i, r) at a[i * ars +
   r * acs]), i < WB_MR, r < kc: sl[r * WB_MR + i], zero from row mr on (past the
   matrix or its tile) */
WB_FN void wb_sliver(const float* a, long long ars, long long acs, long long mr,
                     long long kc, float* sl) {
  for (long long r = 0; r < kc; r++)
    for (int i = 0; i < WB_MR; i++) sl[r * WB_MR + i] = i < mr ? a[i * ars + r * acs] : 0.0f;
}

/* a constant A (m x k, element (i, r) at a[i * ars + r * acs]) packed once, on the
   first run, into the slivers the micro-kernel reads: per tile of tile_m rows (tile t
   from ap + t * tstride), its slivers of WB_MR rows one after another (sliver s from
   s * WB_MR * k), each k rows of WB_MR floats, zero past the tile and past m; the state
   int after the tiles (as wb_pack_b_once) */
WB_FN void wb_pack_a_once(const float* a, long long m, long long k, long long ars,
                          long long acs, long long tile_m, long long tstride, float* ap) {
  long long tiles = (m + tile_m - 1) / tile_m;
  int* state = (int*)(ap + tiles * tstride);
  if (!wb_claim_once(state)) return;
  for (long long t = 0; t < tiles; t++)
    for (long long i0 = 0; i0 < tile_m; i0 += WB_MR) {
      long long row = t * tile_m + i0, rows = tile_m - i0 < m - row ? tile_m - i0 : m - row;
      /* (a sliver past m all zeros: rows <= 0, a itself passed, never read) */
      wb_sliver(rows > 0 ? a + row * ars : a, ars, acs, rows, k, ap + t * tstride + i0 * k);
    }
  __atomic_store_n(state, WB_PACKED, __ATOMIC_RELEASE);
}

/* sliver s (rows s * WB_MR on) of tile t of an activation A, by every run, where
   wb_pack_a_once puts a constant's: one item of a parallel loop before the tiles (fusion/
   gemm/left_pack.py), so that a row of A is copied once, not once per column tile.
   A slot past the tile's slivers or past m packs nothing (its sliver is never read) */
WB_FN void wb_pack_a_sliver(const float* a, long long m, long long k, long long ars,
                            long long acs, long long tile_m, long long tstride, float* ap,
                            long long t, long long s) {
  long long i0 = s * WB_MR, row = t * tile_m + i0;
  if (i0 >= tile_m || row >= m) return;
  long long rows = tile_m - i0 < m - row ? tile_m - i0 : m - row;
  wb_sliver(a + row * ars, ars, acs, rows, k, ap + t * tstride + i0 * k);
}

/* one block of k (rows k0 to k0 + kc - 1) of c (m x n, row-major, ldc) = a (m x k,
   element (i, r) at a[i * ars + r * acs]) @ the packed panels from bp (the tile's first
   column, a panel boundary; each panel kp rows long, bp's row 0 the block's first):
   stored (first) or added into c. A's slivers are copied into ap for the block, or,
   where apk is given, read from A packed once (wb_pack_a_once: apk the tile's slivers) */
WB_FN void wb_gemm_kblock(long long m, long long n, long long k, long long k0, long long kc,
                          const float* a, long long ars, long long acs, const float* apk,
                          const float* bp, long long kp, float* c, long long ldc, int first,
                          float* ap) {
  for (long long i0 = 0; i0 < m; i0 += WB_MR) {
    int mr = m - i0 < WB_MR ? (int)(m - i0) : WB_MR;
    const float* sl = ap;
    if (apk) sl = apk + i0 * k + k0 * WB_MR;
    else wb_sliver(a + i0 * ars + k0 * acs, ars, acs, mr, kc, ap);
    for (long long j0 = 0; j0 < n; j0 += WB_NB) {
      int nb = n - j0 < WB_NB ? (int)(n - j0) : WB_NB;
      const float* b = bp + j0 / WB_PANEL * kp * WB_PANEL + j0 % WB_PANEL;
      wb_micro(kc, sl, b, c + i0 * ldc + j0, ldc, first, mr, nb);
    }
  }
}

/* c (m x n, row-major, ldc) = a (m x k, element (i, r) at a[i * ars + r * acs]) @ the
   packed panels starting at bp (the tile's first column, a panel boundary; each panel
   kp rows long, the tile's k rows from its first), or with add, c += that product. A's
   slivers are copied for each block of k, or, where apk is given, read from A packed
   once (wb_pack_a_once: apk the tile's slivers) */
WB_FN void wb_gemm_core(long long m, long long n, long long k, const float* a, long long ars,
                        long long acs, const float* apk, const float* bp, long long kp,
                        float* c, long long ldc, int add) {
  float ap[WB_MR * WB_KC] __attribute__((aligned(64)));
  if (k == 0 && !add)   /* an empty sum: zeros, as sgemm with beta = 0 writes */
    for (long long i = 0; i < m; i++)
      for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
  for (long long k0 = 0; k0 < k; k0 += WB_KC) {
    long long kc = k - k0 < WB_KC ? k - k0 : WB_KC;
    wb_gemm_kblock(m, n, k, k0, kc, a, ars, acs, apk, bp + k0 * WB_PANEL, kp, c, ldc,
                   k0 == 0 && !add, ap);
  }
}

WB_FN void wb_gemm_packed_into(long long m, long long n, long long k, const float* a,
                               long long ars, long long acs, const float* bp, long long kp,
                               float* c, long long ldc, int add) {
  wb_gemm_core(m, n, k, a, ars, acs, 0, bp, kp, c, ldc, add);
}

/* c (m x n) = the tile's A packed once (apk, wb_pack_a_once) @ the packed panels bp */
WB_FN void wb_gemm_packed_a(long long m, long long n, long long k, const float* apk,
                            const float* bp, float* c, long long ldc) {
  wb_gemm_core(m, n, k, 0, 0, 0, apk, bp, k, c, ldc, 0);
}

/* c (m x n) = a (element (i, r) at a[i * ars + r * acs]), or where apk is given the
   tile's A packed once (wb_gemm_packed_a), @ columns p0 * WB_PANEL on of B (k x bn,
   element (r, c) at b[r * rs + c * cs], packed as kind: not pairs), whose panels the
   tile alone reads: one block of WB_KC rows of them at a time, packed just before the
   tile multiplies it into the same WB_KC x n floats at bp (the tile's part of the
   pack) each time, so that the block is in the core's L2 when it is read and the pack
   is not written back to memory (fusion/gemm/right_pack.py, packs_b_in_tile) */
WB_FN void wb_gemm_packing_b(long long m, long long n, long long k, const float* a,
                             long long ars, long long acs, const float* apk, const void* b,
                             int kind, long long bn, long long rs, long long cs, float* bp,
                             long long p0, float* c, long long ldc) {
  float ap[WB_MR * WB_KC] __attribute__((aligned(64)));
  long long p1 = p0 + (n + WB_PANEL - 1) / WB_PANEL;
  long long es = kind == WB_B_BF16 ? 2 : 4;   /* bytes per element of B */
  if (k == 0)   /* an empty sum: zeros, as sgemm with beta = 0 writes */
    for (long long i = 0; i < m; i++)
      for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
  for (long long k0 = 0; k0 < k; k0 += WB_KC) {
    long long kc = k - k0 < WB_KC ? k - k0 : WB_KC;
    /* rows k0 on of B, packed as a B of kc rows: its panels kc rows apart */
    wb_pack_block((const char*)b + k0 * rs * es, kind, kc, bn, rs, cs,
                  bp - p0 * kc * WB_PANEL, p0, p1, 0, kc);
    wb_gemm_kblock(m, n, k, k0, kc, a, ars, acs, apk, bp, kc, c, ldc, k0 == 0, ap);
  }
}

/* c (m x n, row-major, ldc) = a (m x k bfloat16, element (i, r) at a[i * ars + r * acs])
   @ the panels of a bfloat16 B packed in pairs of rows, starting at bp (the tile's
   first column, a panel boundary) */
WB_FN void wb_gemm_packed_pairs(long long m, long long n, long long k,
                                const unsigned short* a, long long ars, long long acs,
                                const float* bp, float* c, long long ldc) {
  unsigned int ap[WB_MR * WB_KC / 2] __attribute__((aligned(64)));
  long long kp2 = wb_panel_rows(k, WB_B_PAIRS);
  if (k == 0)   /* an empty sum: zeros, as sgemm with beta = 0 writes */
    for (long long i = 0; i < m; i++)
      for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
  for (long long k0 = 0; k0 < k; k0 += WB_KC) {      /* (WB_KC even: k0 / 2 whole) */
    long long kc = k - k0 < WB_KC ? k - k0 : WB_KC, kc2 = (kc + 1) / 2;
    for (long long i0 = 0; i0 < m; i0 += WB_MR) {
      int mr = m - i0 < WB_MR ? (int)(m - i0) : WB_MR;
      for (long long r2 = 0; r2 < kc2; r2++)     /* the sliver in pairs, zero past m */
        for (int i = 0; i < WB_MR; i++)
          ap[r2 * WB_MR + i] = i < mr ? wb_pair(a, (i0 + i) * ars + (k0 + 2 * r2) * acs, acs,
                                                k0 + 2 * r2 + 1 < k) : 0u;
      for (long long j0 = 0; j0 < n; j0 += WB_NB) {
        int nb = n - j0 < WB_NB ? (int)(n - j0) : WB_NB;
        const unsigned int* b = (const unsigned int*)bp
                                + (j0 / WB_PANEL * kp2 + k0 / 2) * WB_PANEL + j0 % WB_PANEL;
        (nb <= WB_VW ? wb_micro_pairs1 : wb_micro_pairs)(kc2, ap, b, c + i0 * ldc + j0, ldc,
                                                         k0 == 0, mr, nb);
      }
    }
  }
}

/* c (m x n, row-major, ldc) = the transpose of x^T @ the packed panels from bp: B is
   k x m (a 1 x 1 convolution's filters transposed, packed once: filter j its column
   j), x^T's element (i, r) -- position i, channel r -- at x[i * xrs + r * xcs]. For
   products of few columns (a convolution over 4 or 16 positions), where positions in
   a vector's lanes would fill a quarter of it, the filters fill whole vectors: each
   WB_MR positions x WB_NB filters block is multiplied into ct and stored transposed */
WB_FN void wb_gemm_packed_t(long long m, long long n, long long k, const float* x,
                            long long xrs, long long xcs, const float* bp, float* c,
                            long long ldc) {
  float ap[WB_MR * WB_KC] __attribute__((aligned(64)));
  float ct[WB_MR * WB_NB] __attribute__((aligned(64)));
  for (long long i0 = 0; i0 < n; i0 += WB_MR) {
    int mr = n - i0 < WB_MR ? (int)(n - i0) : WB_MR;
    for (long long j0 = 0; j0 < m; j0 += WB_NB) {
      int nb = m - j0 < WB_NB ? (int)(m - j0) : WB_NB;
      if (k == 0)   /* an empty sum: zeros */
        for (int i = 0; i < mr; i++)
          for (int j = 0; j < nb; j++) ct[i * WB_NB + j] = 0.0f;
      for (long long k0 = 0; k0 < k; k0 += WB_KC) {
        long long kc = k - k0 < WB_KC ? k - k0 : WB_KC;
        wb_sliver(x + i0 * xrs + k0 * xcs, xrs, xcs, mr, kc, ap);  /* positions' sliver */
        const float* b = bp + (j0 / WB_PANEL * k + k0) * WB_PANEL + j0 % WB_PANEL;
        wb_micro(kc, ap, b, ct, WB_NB, k0 == 0, mr, nb);
      }
      for (int j = 0; j < nb; j++)   /* stored transposed: filter j's row of positions */
        for (int i = 0; i < mr; i++) c[(j0 + j) * ldc + i0 + i] = ct[i * WB_NB + j];
    }
  }
}

@TRANSPOSED@
@CONV_LANES@
/* c = a @ the packed panels (each k rows long) */
WB_FN void wb_gemm_packed(long long m, long long n, long long k, const float* a,
                          long long ars, long long acs, const float* bp, float* c,
                          long long ldc) {
  wb_gemm_packed_into(m, n, k, a, ars, acs, bp, k, c, ldc, 0);
}
