// A product made transposed (fusion/gemm/transposed.py), pasted into microkernel.h at
// @TRANSPOSED@: B's elements broadcast where B lies against A's panels, each block
// stored transposed. It uses the micro-kernel's vectors, WB_MR, WB_NV and WB_KCT.
/* one WB_MR x (nv vectors) block of a product made transposed (wb_gemm_transposed), or
   with rows < WB_MR its first rows: acc = B's columns i < mr (element (i, r) at
   b[i * is + r * rs], broadcast in place) @ A's panel rows at ap (kc x nv * WB_VW,
   WB_PANEL apart), stored transposed -- acc's row i is c's column i, its lane j c's row
   j < nb -- (first block of k) or added into c. Always inlined, as wb_micro_nv */
WB_FN __attribute__((always_inline)) void wb_micro_t_nv(
    long long kc, const float* b, long long is, long long rs, const float* ap, float* c,
    long long ldc, int first, int mr, int nb, const int nv, const int rows) {
  wb_vf acc[WB_MR][WB_NV];
  const float* bi[WB_MR];
  for (int i = 0; i < rows; i++) {
    bi[i] = b + (i < mr ? i : 0) * is;    /* (a row past mr: computed, never stored) */
    for (int v = 0; v < nv; v++) acc[i][v] = (wb_vf){0};
  }
  for (long long r = 0; r < kc; r++) {
    wb_vf av[WB_NV];
    for (int v = 0; v < nv; v++) memcpy(&av[v], ap + r * WB_PANEL + v * WB_VW, sizeof(wb_vf));
#pragma GCC unroll 8
    for (int i = 0; i < rows; i++) {
      float x = bi[i][r * rs];
      for (int v = 0; v < nv; v++) acc[i][v] += x * av[v];
    }
  }
  for (int j = 0; j < nb; j++) {
    float* cj = c + j * ldc;
    for (int i = 0; i < mr; i++) {
      float x = acc[i][j / WB_VW][j % WB_VW];
      cj[i] = first ? x : cj[i] + x;
    }
  }
}

/* c (m x n, row-major, ldc) = a @ b made transposed (fusion/gemm/transposed.py): A
   transposed in the panels from ap (k x m, each panel kp rows: packed by every run),
   B's element (row r, column i) read in place at b[i * is + r * rs]. Each block of
   WB_MR of B's columns x WB_NB of A's rows is multiplied with B's elements broadcast
   and stored transposed into c, WB_KCT rows of k at a time (added after the first):
   six columns' WB_KCT floats of B stay in L1, A's panels' in L2 */
WB_FN void wb_gemm_transposed(long long m, long long n, long long k, const float* b,
                              long long is, long long rs, const float* ap, long long kp,
                              float* c, long long ldc) {
  if (k == 0)   /* an empty sum: zeros, as sgemm with beta = 0 writes */
    for (long long i = 0; i < m; i++)
      for (long long j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
  for (long long k0 = 0; k0 < k; k0 += WB_KCT) {
    long long kc = k - k0 < WB_KCT ? k - k0 : WB_KCT;
    for (long long i0 = 0; i0 < n; i0 += WB_MR) {
      int mr = n - i0 < WB_MR ? (int)(n - i0) : WB_MR;
      const float* bs = b + i0 * is + k0 * rs;
      for (long long j0 = 0; j0 < m; j0 += WB_NB) {
        int nb = m - j0 < WB_NB ? (int)(m - j0) : WB_NB;
        const float* a = ap + (j0 / WB_PANEL * kp + k0) * WB_PANEL + j0 % WB_PANEL;
        float* cb = c + j0 * ldc + i0;
        if (nb <= WB_VW) wb_micro_t_nv(kc, bs, is, rs, a, cb, ldc, k0 == 0, mr, nb, 1, WB_MR);
        else if (mr <= WB_MR / 2)
          wb_micro_t_nv(kc, bs, is, rs, a, cb, ldc, k0 == 0, mr, nb, WB_NV, WB_MR / 2);
        else wb_micro_t_nv(kc, bs, is, rs, a, cb, ldc, k0 == 0, mr, nb, WB_NV, WB_MR);
      }
    }
  }
}
