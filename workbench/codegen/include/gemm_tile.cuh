// One thread block's tile of a GEMM (fusion.schedule.BlockTile; kir.Gemm with a block).
// Each of the NT threads accumulates TM x TN outputs in registers, rows i * BM/TM + ty
// and columns j * BN/TN + tx: a warp reads neighbouring words of B's panel (no bank
// conflicts) and two words of A's (a broadcast). The panels pass through shared memory
// BK deep, each loaded along its operand's unit stride (TA, TB: stored column-major;
// coalesced), A's stored transposed; rows padded by 4 words so that a panel stored
// across its rows hits 32 distinct banks. Past rows, cols or k the panels hold zeros.
// The operands are read through loaders (a_at(i, p), b_at(p, j): global memory, or a
// fused attention's probabilities in shared memory). The rule loads each step's
// panels between two barriers (the second resident block hides the first's loads);
// 2 stages (BlockTile.stages, wb_gemm_steps) prefetch the next panels into registers,
// which the tuner times: at first it took ptxas past the 128 registers two resident
// blocks leave for BERT's FFN (16 bytes spilled), which the shared k loop no longer does.
//
// The online softmax's step over one block of keys (FlashAttention's recurrence, as
// the CPU's fused attention takes it: codegen/lower.py _online_attention): a row's
// logits lie in the registers of the 16 lanes sharing its ty (half a warp), so its
// maximum and sum are butterfly shuffles over those lanes.
/* a panel's element of type T from the value a loader gives: float itself (a half
   type on tensor cores: wb_to's specializations there) */
template <class T> WB_FN T wb_to(float v) { return v; }

/* which element of A's panel (i, p) and of B's (p, j) a thread's e-th is: loaded along
   the operand's unit stride (TA, TB: stored column-major) */
template <int BM, int BK, bool TA> WB_FN void wb_panel_a(int e, int& i, int& p) {
  i = TA ? e % BM : e / BK;
  p = TA ? e / BM : e % BK;
}
template <int BN, int BK, bool TB> WB_FN void wb_panel_b(int e, int& j, int& p) {
  j = TB ? e / BK : e % BN;
  p = TB ? e % BK : e / BN;
}

/* A's and B's panels of T from k = p0, BK deep, into shared memory (as, bs): A's
   stored transposed ([p][i], rows SA apart), B's [p][j] (SB apart), each row 16 bytes
   longer; zeros past rows, cols or k. (Loads 4 at a time in flight: a half type's
   16-deep panels, fully unrolled, spilled.) */
template <int BM, int BN, int BK, int NT, bool TA, bool TB, class T = float, class PA,
          class PB, class LA, class LB>
WB_FN void wb_gemm_panels(PA as, PB bs, LA& a_at, LB& b_at, long long rows, long long cols,
                          long long k, long long p0) {
  constexpr int SA = BM + 16 / sizeof(T), SB = BN + 16 / sizeof(T);
  const int t = threadIdx.x;
#pragma unroll 4
  for (int q = 0; q < (BM * BK + NT - 1) / NT; ++q) {
    int i, p;
    const int e = q * NT + t;
    wb_panel_a<BM, BK, TA>(e, i, p);
    if (e < BM * BK) as[p * SA + i] = wb_to<T>(i < rows && p0 + p < k ? a_at(i, p0 + p) : 0.0f);
  }
#pragma unroll 4
  for (int q = 0; q < (BN * BK + NT - 1) / NT; ++q) {
    int j, p;
    const int e = q * NT + t;
    wb_panel_b<BN, BK, TB>(e, j, p);
    if (e < BN * BK) bs[p * SB + j] = wb_to<T>(j < cols && p0 + p < k ? b_at(p0 + p, j) : 0.0f);
  }
}

/* the k loop of a tile, step(as, bs) multiplying the BK-deep panels at as and bs.
   ST 1: each step's panels loaded between two barriers. ST 2 (software pipelining):
   the next step's elements fetched into registers (ra, rb) while this step's panels
   are multiplied, then stored into the other pair of panels (as and bs hold two each),
   one barrier a step. Either way the first barrier waits for the panels' last readers. */
template <int BM, int BN, int BK, int NT, bool TA, bool TB, int ST, class T, class PA,
          class PB, class LA, class LB, class STEP>
WB_FN void wb_gemm_steps(PA as, PB bs, LA& a_at, LB& b_at, long long rows, long long cols,
                         long long k, STEP&& step) {
  constexpr int SA = BM + 16 / sizeof(T), SB = BN + 16 / sizeof(T);
  if constexpr (ST == 1) {
    for (long long p0 = 0; p0 < k; p0 += BK) {
      __syncthreads();
      wb_gemm_panels<BM, BN, BK, NT, TA, TB, T>(as + 0, bs + 0, a_at, b_at, rows, cols, k, p0);
      __syncthreads();
      step(as + 0, bs + 0);
    }
  } else {
    static_assert(ST == 2, "a tile's panels pass in 1 or 2 stages");
    constexpr int QA = (BM * BK + NT - 1) / NT, QB = (BN * BK + NT - 1) / NT;
    const int t = threadIdx.x;
    float ra[QA], rb[QB];
    auto fetch = [&](long long p0) {
#pragma unroll
      for (int q = 0; q < QA; ++q) {
        int i, p;
        const int e = q * NT + t;
        wb_panel_a<BM, BK, TA>(e, i, p);
        ra[q] = e < BM * BK && i < rows && p0 + p < k ? a_at(i, p0 + p) : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        int j, p;
        const int e = q * NT + t;
        wb_panel_b<BN, BK, TB>(e, j, p);
        rb[q] = e < BN * BK && j < cols && p0 + p < k ? b_at(p0 + p, j) : 0.0f;
      }
    };
    auto put = [&](int stage) {
#pragma unroll
      for (int q = 0; q < QA; ++q) {
        int i, p;
        const int e = q * NT + t;
        wb_panel_a<BM, BK, TA>(e, i, p);
        if (e < BM * BK) as[stage * BK * SA + p * SA + i] = wb_to<T>(ra[q]);
      }
#pragma unroll
      for (int q = 0; q < QB; ++q) {
        int j, p;
        const int e = q * NT + t;
        wb_panel_b<BN, BK, TB>(e, j, p);
        if (e < BN * BK) bs[stage * BK * SB + p * SB + j] = wb_to<T>(rb[q]);
      }
    };
    __syncthreads();
    if (k > 0) {
      fetch(0);
      put(0);
    }
    __syncthreads();
    for (long long p0 = 0, s = 0; p0 < k; p0 += BK, ++s) {
      const int cur = (int)(s & 1);
      const bool more = p0 + BK < k;
      if (more) fetch(p0 + BK);      /* (in flight during the product below) */
      step(as + cur * BK * SA, bs + cur * BK * SB);
      if (more) put(cur ^ 1);        /* (the other panels: last read a step ago) */
      __syncthreads();
    }
  }
}

/* one thread block's GEMM tile: acc (+)= A[rows x k] @ B[k x cols], its panels in ST
   stages */
template <int BM, int BN, int BK, int TM, int TN, bool TA, bool TB, bool ACC, int ST,
          class LA, class LB>
WB_FN void wb_gemm_tile(float (&acc)[TM * TN], LA a_at, LB b_at, long long rows,
                        long long cols, long long k) {
  constexpr int NT = (BM / TM) * (BN / TN), SA = BM + 4, SB = BN + 4;
  WB_SHARED(float, wb_as, ST * BK * SA);   /* A's panels, [p][i] */
  WB_SHARED(float, wb_bs, ST * BK * SB);   /* B's panels, [p][j] */
  const int t = threadIdx.x, tx = t % (BN / TN), ty = t / (BN / TN);
  if (!ACC) {
#pragma unroll
    for (int s = 0; s < TM * TN; ++s) acc[s] = 0.0f;
  }
  wb_gemm_steps<BM, BN, BK, NT, TA, TB, ST, float>(
      wb_as + 0, wb_bs + 0, a_at, b_at, rows, cols, k, [&](auto as, auto bs) {
#pragma unroll
        for (int p = 0; p < BK; ++p) {
          float av[TM], bv[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) av[i] = as[p * SA + i * (BM / TM) + ty];
#pragma unroll
          for (int j = 0; j < TN; ++j) bv[j] = bs[p * SB + j * (BN / TN) + tx];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i * TN + j] = fmaf(av[i], bv[j], acc[i * TN + j]);
        }
      });
  __syncthreads();   /* (the next tile's panels overwrite these) */
}

/* the online softmax over a block of keys: s the block's logits (this thread's, as
   wb_gemm_tile lays them out; key columns from `valid` on ignored), m and l the
   running maximum and sum of the thread's TM rows, o its TM x TO output elements
   (same rows) rescaled; the probabilities written to p (BM rows of BN + 4) */
template <int BM, int BN, int TM, int TN, int TO, class P>
WB_FN void wb_online_step(float (&s)[TM * TN], float (&o)[TM * TO], float (&m)[TM],
                          float (&l)[TM], P& p, long long valid) {
  const int t = threadIdx.x, tx = t % (BN / TN), ty = t / (BN / TN);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float mx = m[i];
#pragma unroll
    for (int j = 0; j < TN; ++j)
      if (j * (BN / TN) + tx < valid) mx = fmaxf(mx, s[i * TN + j]);
#pragma unroll
    for (int off = BN / TN / 2; off > 0; off /= 2)
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    /* (a row with no finite logit yet takes 0 as its base: exp gives 0, not NaN) */
    const float base = mx == -INFINITY ? 0.0f : mx, alpha = expf(m[i] - base);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = j * (BN / TN) + tx;
      const float e = c < valid ? expf(s[i * TN + j] - base) : 0.0f;
      p[(i * (BM / TM) + ty) * (BN + 4) + c] = e;
      sum += e;
    }
#pragma unroll
    for (int off = BN / TN / 2; off > 0; off /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
    l[i] = l[i] * alpha + sum;
    m[i] = mx;
#pragma unroll
    for (int j = 0; j < TO; ++j) o[i * TO + j] *= alpha;
  }
  __syncthreads();   /* (the probabilities, before the product reads them) */
}
