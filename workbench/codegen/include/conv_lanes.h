// The CPU's convolutions with the filters (or channels) in the vectors' lanes, pasted
// into the micro-kernel's C where microkernel.h says @CONV_LANES@: they use its vector
// type (wb_vf, WB_VW) and its packed panels (WB_PANEL). fusion/gemm.py chooses them
// (DEPTHWISE_LANES_SPAN, CONV_DIRECT_WEIGHTS); kir.DepthwiseLanes and kir.ConvLanes
// call them.
/* a 2-D depthwise convolution of cn consecutive channels (planes h x w from x, one
   filter of kh x kw taps per channel from f, output planes oh x ow into c), the
   channels in the vectors' lanes: per block of WB_VW channels, the input planes and
   the zeros around them the taps meet copied lane by lane (xt), the filters likewise
   (ft), each output position's vector summed over the taps, then stored back plane by
   plane. Over small planes (4 x 4, 2 x 2) this ran 3.5x faster than a plane per
   channel, whose loops were a few positions long; the copies make it lose from 16 x 16
   (fusion/gemm.py DEPTHWISE_LANES_SPAN) */
#if defined(__clang__)
/* clang has no shuffle by a run-time index vector: lane by lane */
WB_FN wb_vf wb_shuffle2(wb_vf a, wb_vf b, wb_vu i) {
  wb_vf r;
  for (int l = 0; l < WB_VW; l++) r[l] = i[l] < WB_VW ? a[i[l]] : b[i[l] - WB_VW];
  return r;
}
#else
#define wb_shuffle2(a, b, i) __builtin_shuffle(a, b, i)
#endif

/* whether wb_depthwise_vplanes takes a depthwise convolution: each input and output
   plane within one vector, and the g channels' filters within two */
WB_FN int wb_vplanes_fit(long long h, long long w, long long oh, long long ow,
                         long long kh, long long kw) {
  return h * w <= WB_VW && oh * ow <= WB_VW && kh * kw <= 2 * WB_VW;
}

/* a 2-D depthwise convolution (wb_depthwise_lanes' arguments) whose planes each fit in
   one vector (wb_vplanes_fit: MobileNetV2's and EfficientNet's 4 x 4 and 2 x 2 on
   AVX-512): g channels' input planes, consecutive in memory, loaded as one vector;
   each tap's inputs a shuffle of it with a vector of zeros (an output lane whose tap
   falls past an edge picks a zero), its weights a shuffle of the g channels' filters
   (g x kh x kw floats, from two vectors); the taps summed in their order; the g
   output planes stored as one vector. No lane-by-lane copy in or out: where the
   channels went into the lanes and back (wb_depthwise_lanes' loops) that copying was
   most of a 4 x 4 layer's time. The shuffles' indices are made once per call. A
   vector past the tile's last channel is loaded and stored lane by lane; a whole one
   stores junk past its g planes, which the next group overwrites */
WB_FN void wb_depthwise_vplanes(long long cn, const float* x, long long h, long long w,
                                const float* f, long long kh, long long kw, float* c,
                                long long oh, long long ow, long long sy, long long sx,
                                long long dy, long long dx, long long py, long long px) {
  int ip = (int)(h * w), op = (int)(oh * ow), taps = (int)(kh * kw);
  int g = WB_VW / (ip > op ? ip : op);
  if (g * taps > 2 * WB_VW) g = 2 * WB_VW / taps;
  wb_vu xi[taps], wi[taps];
  for (int t = 0; t < taps; t++) {
    long long ky = t / kw, kx = t % kw;
    for (int l = 0; l < WB_VW; l++) {
      int ch = l / op, p = l % op;
      long long iy = p / ow * sy + ky * dy - py, ix = p % ow * sx + kx * dx - px;
      int in = ch < g && iy >= 0 && iy < h && ix >= 0 && ix < w;
      xi[t][l] = in ? (unsigned)(ch * ip + iy * w + ix) : WB_VW;   /* a zero lane */
      wi[t][l] = ch < g ? (unsigned)(ch * taps + t) : 0u;
    }
  }
  const wb_vf zero = (wb_vf){0};
  for (long long c0 = 0; c0 < cn; c0 += g) {
    int gn = cn - c0 < g ? (int)(cn - c0) : g;
    wb_vf xv = zero, fv[2] = {zero, zero}, acc = zero;
    if ((c0 * ip + WB_VW) <= cn * ip) memcpy(&xv, x + c0 * ip, sizeof xv);
    else for (int l = 0; l < gn * ip; l++) xv[l] = x[c0 * ip + l];
    if ((c0 * taps + 2 * WB_VW) <= cn * taps) memcpy(fv, f + c0 * taps, sizeof fv);
    else for (int l = 0; l < gn * taps; l++) fv[l / WB_VW][l % WB_VW] = f[c0 * taps + l];
    for (int t = 0; t < taps; t++)
      acc += wb_shuffle2(fv[0], fv[1], wi[t]) * wb_shuffle2(xv, zero, xi[t]);
    if ((c0 * op + WB_VW) <= cn * op) memcpy(c + c0 * op, &acc, sizeof acc);
    else for (int l = 0; l < gn * op; l++) c[c0 * op + l] = acc[l];
  }
}

WB_FN void wb_depthwise_lanes(long long cn, const float* x, long long h, long long w,
                              const float* f, long long kh, long long kw, float* c,
                              long long oh, long long ow, long long sy, long long sx,
                              long long dy, long long dx, long long py, long long px) {
  if (wb_vplanes_fit(h, w, oh, ow, kh, kw)) {
    wb_depthwise_vplanes(cn, x, h, w, f, kh, kw, c, oh, ow, sy, sx, dy, dx, py, px);
    return;
  }
  long long hp = (oh - 1) * sy + (kh - 1) * dy + 1, wp = (ow - 1) * sx + (kw - 1) * dx + 1;
  wb_vf xt[hp * wp], ft[kh * kw], yt[oh * ow];
  for (long long c0 = 0; c0 < cn; c0 += WB_VW) {
    int lanes = cn - c0 < WB_VW ? (int)(cn - c0) : WB_VW;
    for (long long q = 0; q < hp * wp; q++) {
      long long iy = q / wp - py, ix = q % wp - px;
      int in = iy >= 0 && iy < h && ix >= 0 && ix < w;
      const float* at = x + (c0 * h + (in ? iy : 0)) * w + (in ? ix : 0);
      for (int l = 0; l < WB_VW; l++) xt[q][l] = in && l < lanes ? at[l * h * w] : 0.0f;
    }
    for (long long t = 0; t < kh * kw; t++)
      for (int l = 0; l < WB_VW; l++) ft[t][l] = l < lanes ? f[(c0 + l) * kh * kw + t] : 0.0f;
    for (long long oy = 0; oy < oh; oy++)
      for (long long ox = 0; ox < ow; ox++) {
        wb_vf acc = (wb_vf){0};
        for (long long ky = 0; ky < kh; ky++)
          for (long long kx = 0; kx < kw; kx++)
            acc += ft[ky * kw + kx] * xt[(oy * sy + ky * dy) * wp + ox * sx + kx * dx];
        yt[oy * ow + ox] = acc;
      }
    for (int l = 0; l < lanes; l++)
      for (long long p = 0; p < oh * ow; p++) c[(c0 + l) * oh * ow + p] = yt[p][l];
  }
}

/* positions per block of a direct convolution (wb_conv_lanes): with two vectors of
   filters, 16 accumulators of AVX-512's or AArch64's 32 registers, 12 of AVX's 16.
   With 32 registers a row of positions is cut into blocks of 7 where that leaves fewer
   positions unused in its last block than 8 does (WB_CR7): rows of 7, 14 and 28
   positions, ResNet's last three stages, filled 7 of 8, 14 of 16 and 28 of 32 lanes'
   worth of work, and ran 10-13% faster in blocks of 7 (benchmarks/results/
   conv-direct-2026-11-25.md) */
#if WB_VW == 16 || defined(__aarch64__)
#define WB_CR 8
#define WB_CR7 1
#else
#define WB_CR 6
#define WB_CR7 0
#endif

/* a block of cr (at most WB_CR) output positions (their input sx apart from xt) x nv
   vectors of filters (tap j's at fp + j * WB_PANEL), summed over the k taps (tap j's
   input at xt + off[j]); stored transposed, rn positions of fn filters, filter f's row
   at y + f * ldy (a whole block through a buffer on the stack, a row per filter).
   Always inlined, so that each call's constant sx, nv and cr unroll
   its loops and keep its accumulators in registers (each input a broadcast operand of
   its multiply-adds) */
WB_FN __attribute__((always_inline)) void wb_conv_block(
    const float* xt, const int* off, long long k, const float* fp, float* y,
    long long ldy, int rn, int fn, const int sx, const int nv, const int cr) {
  wb_vf acc[WB_CR][2];
  for (int r = 0; r < cr; r++)
    for (int v = 0; v < nv; v++) acc[r][v] = (wb_vf){0};
  for (long long j = 0; j < k; j++) {
    const float* xj = xt + off[j];
    wb_vf wv[2];
    for (int v = 0; v < nv; v++) memcpy(&wv[v], fp + j * WB_PANEL + v * WB_VW, sizeof(wb_vf));
    for (int r = 0; r < cr; r++) {
      float a = xj[r * sx];
      for (int v = 0; v < nv; v++) acc[r][v] += a * wv[v];
    }
  }
  if (rn == cr && fn == nv * WB_VW) {
    /* a whole block: the accumulators through a buffer, then each filter's cr
       positions copied out as one row (a lane's extract and store per element cost
       MobileNetV2's stem, 16 filters of 27 weights, 15% of its time) */
    float t[WB_CR][2 * WB_VW];
    for (int r = 0; r < cr; r++)
      for (int v = 0; v < nv; v++) memcpy(&t[r][v * WB_VW], &acc[r][v], sizeof(wb_vf));
    for (int f = 0; f < nv * WB_VW; f++) {
      float row[WB_CR];
      for (int r = 0; r < cr; r++) row[r] = t[r][f];
      memcpy(y + f * ldy, row, cr * sizeof(float));
    }
    return;
  }
  for (int f = 0; f < fn; f++)
    for (int r = 0; r < rn; r++) y[f * ldy + r] = acc[r][f / WB_VW][f % WB_VW];
}

/* the block at sx 1, 2 or any other, with one or two filter vectors, of WB_CR
   positions -- and of 7 at sx 1 and 2 with two vectors (a block of one vector's
   filters takes that too, in a panel zero past its last filter): eight functions
   never inlined, so that a call's constants (a kernel passes its shape as literals)
   cannot reshape the loops around them -- propagated into them, GCC 12 compiled
   ResNet's stem 3x slower */
#define WB_CONV_BLOCK(name, SX, NV, CR)                                                \
  static __attribute__((noinline, noclone)) void name(                              \
      const float* xt, const int* off, long long k, const float* fp, float* y,       \
      long long ldy, int rn, int fn, long long sx) {                                 \
    wb_conv_block(xt, off, k, fp, y, ldy, rn, fn, SX ? SX : (int)sx, NV, CR);        \
  }
WB_CONV_BLOCK(wb_conv_block_s1v1, 1, 1, WB_CR)
WB_CONV_BLOCK(wb_conv_block_s2v1, 2, 1, WB_CR)
WB_CONV_BLOCK(wb_conv_block_snv1, 0, 1, WB_CR)
WB_CONV_BLOCK(wb_conv_block_s1v2, 1, 2, WB_CR)
WB_CONV_BLOCK(wb_conv_block_s2v2, 2, 2, WB_CR)
WB_CONV_BLOCK(wb_conv_block_snv2, 0, 2, WB_CR)
#if WB_CR7
WB_CONV_BLOCK(wb_conv_block_s1c7, 1, 2, 7)
WB_CONV_BLOCK(wb_conv_block_s2c7, 2, 2, 7)
#endif
#undef WB_CONV_BLOCK
WB_FN void wb_conv_block_sx(const float* xt, const int* off, long long k, const float* fp,
                            float* y, long long ldy, int rn, int fn, long long sx, int nv,
                            int cr) {
#if WB_CR7
  if (cr == 7) {
    (sx == 1 ? wb_conv_block_s1c7 : wb_conv_block_s2c7)(xt, off, k, fp, y, ldy, rn, fn, sx);
    return;
  }
#endif
  if (nv == 1) (sx == 1 ? wb_conv_block_s1v1 : sx == 2 ? wb_conv_block_s2v1
                : wb_conv_block_snv1)(xt, off, k, fp, y, ldy, rn, fn, sx);
  else (sx == 1 ? wb_conv_block_s1v2 : sx == 2 ? wb_conv_block_s2v2
        : wb_conv_block_snv2)(xt, off, k, fp, y, ldy, rn, fn, sx);
}

/* positions per block of a row of ow (at stride sx): 7 where that leaves fewer unused
   in the row's last block than WB_CR does, else WB_CR */
WB_FN int wb_conv_cr(long long ow, long long sx) {
  long long waste = (ow + WB_CR - 1) / WB_CR * WB_CR - ow;
  return WB_CR7 && (sx == 1 || sx == 2) && (ow + 6) / 7 * 7 - ow < waste ? 7 : WB_CR;
}

/* a 2-D convolution computed directly, the filters in the vectors' lanes (no patches
   gathered): one image's c input planes (h x w from x), filters f0..f1 of the packed
   panels fp (PackB of the filters transposed: k = c x kh x kw rows of WB_PANEL filters;
   f0 a multiple of 2 WB_VW), output rows oy0..oy1 (ow positions each) into y (filter
   f0's first position at y, the filters ldy apart). The input rows those read are
   copied first, with the zeros around them the taps meet, into xp, whose rows are
   wide enough for whole blocks past the row's end (computed, never stored): each
   block of cr positions (wb_conv_cr) then reads its taps at fixed distances, with no test for
   an edge. Where the patches were gathered for the micro-kernel, every input element
   was written once per tap that meets it before it was multiplied (fusion/gemm.py
   CONV_DIRECT_WEIGHTS). A 1-D convolution is one row of a plane one row high. A
   strided 1 x 1 reads only every sy-th row and sx-th column: those alone are copied,
   then read at stride 1 (ResNet50 v1's 1024 -> 2048 of stride 2, as Keras builds it:
   the copy of its skipped rows limited a tile to 3 of its 7 output rows, the filters
   read once per row tile) -- fusion/gemm.py's _direct_scratch sizes the copy the same
   way */
WB_FN void wb_conv_lanes(const float* x, long long c, long long h, long long w,
                         const float* fp, long long f0, long long f1, float* y,
                         long long ldy, long long oy0, long long oy1, long long ow,
                         long long kh, long long kw, long long sy, long long sx,
                         long long dy, long long dx, long long py, long long px) {
  long long top = oy0 * sy - py, ry = 1, rx = 1;  /* input rows, columns a copied one */
  if (kh == 1 && kw == 1 && (sy > 1 || sx > 1)) {
    ry = sy; rx = sx; sy = sx = 1;
  }
  int cr = wb_conv_cr(ow, sx);
  long long k = c * kh * kw, blocks = (ow + cr - 1) / cr;
  long long hp = (oy1 - oy0 - 1) * sy + (kh - 1) * dy + 1;
  long long wp = (blocks * cr - 1) * sx + (kw - 1) * dx + 1;
  float xp[c * hp * wp];
  int off[k];
  for (long long ci = 0; ci < c; ci++)
    for (long long i = 0; i < hp; i++) {
      long long iy = top + i * ry;
      float* d = xp + (ci * hp + i) * wp;
      if (rx > 1 && iy >= 0 && iy < h) {   /* a strided 1 x 1's columns: every rx-th,
                                              zeros past the edges (rows past them below) */
        const float* row = x + (ci * h + iy) * w;
        for (long long j = 0; j < wp; j++) {
          long long ix = j * rx - px;
          d[j] = ix >= 0 && ix < w ? row[ix] : 0.0f;
        }
        continue;
      }
      /* zeros left of the plane, its row (none above or below it), zeros right of it.
         (memset and memcpy: GCC 12 at -O3 vectorized these rows' loops, once the call's
         constants were propagated into them, into code that copied wrong rows) */
      long long a = px < wp ? px : wp, e = px + w < wp ? px + w : wp;
      if (iy < 0 || iy >= h) a = e = wp;
      memset(d, 0, a * sizeof(float));
      if (e > a) memcpy(d + a, x + (ci * h + iy) * w + a - px, (e - a) * sizeof(float));
      memset(d + e, 0, (wp - e) * sizeof(float));
    }
  for (long long ci = 0, j = 0; ci < c; ci++)   /* each tap's input, from a block's */
    for (long long ky = 0; ky < kh; ky++)
      for (long long kx = 0; kx < kw; kx++, j++)
        off[j] = (int)((ci * hp + ky * dy) * wp + kx * dx);
  /* a pair of vectors of filters at a time over every block of the tile: each pair's
     filters (k x 2 WB_VW floats) read from the cache the tile's blocks share */
  for (long long fc = f0; fc < f1; fc += 2 * WB_VW) {
    int fn = f1 - fc < 2 * WB_VW ? (int)(f1 - fc) : 2 * WB_VW;
    const float* fpc = fp + fc / WB_PANEL * k * WB_PANEL + fc % WB_PANEL;
    for (long long oy = oy0; oy < oy1; oy++)
      for (long long b = 0; b < blocks; b++) {
        const float* xt = xp + (oy - oy0) * sy * wp + b * cr * sx;
        int rn = ow - b * cr < cr ? (int)(ow - b * cr) : cr;
        float* yb = y + (fc - f0) * ldy + (oy - oy0) * ow + b * cr;
        wb_conv_block_sx(xt, off, k, fpc, yb, ldy, rn, fn, sx, fn > WB_VW ? 2 : 1, cr);
      }
  }
}
