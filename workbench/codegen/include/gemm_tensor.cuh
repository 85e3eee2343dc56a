// One thread block's GEMM tile on tensor cores (BlockTile.tensor), in wb_gemm_tile's
// interface and register layout, so that an epilogue, the online softmax and a second
// product follow it unchanged. The panels are wb_gemm_panels' in the tile's operand
// type T (BlockTile.operands), in a 32-byte aligned array (WMMA's loads need it; rows
// 16 bytes longer, a multiple of its 16): float read as TF32 (m16n16k8, each operand
// rounded to nearest after its load: wmma::__float_to_tf32), or bfloat16 or float16
// (m16n16k16, nothing to round: twice TF32's rate). Each of the 8 warps multiplies a
// BM/2 x BN/4 part of the tile as 16 x 16 float accumulator fragments. The fragments'
// layout is the hardware's own, so they pass to the threads' registers (acc) through
// shared memory, 16 of the tile's rows (a row of fragments, a row of each thread's) at
// a time, and back in first when ACC. (Half the tile at a time kept the accumulator
// array and the fragments alive together: ptxas spilled.)
#include <cuda_bf16.h>
#include <mma.h>
#ifndef WB_SHARED_A32  /* 32-byte aligned (WMMA's loads and stores) */
#define WB_SHARED_A32(type, name, n) __shared__ __align__(32) type name[n]
#endif
template <> WB_FN __half wb_to<__half>(float v) { return __float2half(v); }
template <> WB_FN __nv_bfloat16 wb_to<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

/* the precision WMMA takes panels of T in, and its depth */
template <class T> struct wb_tc_in { using P = T; static constexpr int K = 16; };
template <> struct wb_tc_in<float> { using P = nvcuda::wmma::precision::tf32; static constexpr int K = 8; };

/* a TF32 fragment's floats rounded to nearest (the tensor core would drop their low
   bits); a half type's are what the tensor core reads already */
template <class F> WB_FN void wb_tc_round(F&) {}
template <class U, class L>
WB_FN void wb_tc_round(nvcuda::wmma::fragment<U, 16, 16, 8, nvcuda::wmma::precision::tf32, L>& f) {
#pragma unroll
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = nvcuda::wmma::__float_to_tf32(f.x[e]);
}

/* one thread block's GEMM tile on tensor cores: acc (+)= A[rows x k] @ B[k x cols] */
template <int BM, int BN, int BK, int TM, int TN, bool TA, bool TB, bool ACC, int ST,
          class T, class LA, class LB>
WB_FN void wb_gemm_tile_tc(float (&acc)[TM * TN], LA a_at, LB b_at, long long rows,
                           long long cols, long long k) {
  using namespace nvcuda;
  using P = typename wb_tc_in<T>::P;
  constexpr int FK = wb_tc_in<T>::K, PAD = 16 / sizeof(T);
  constexpr int NT = (BM / TM) * (BN / TN), SA = BM + PAD, SB = BN + PAD, SC = BN + 4;
  constexpr int WM = BM / 2, WN = BN / 4, FM = WM / 16, FN = WN / 16;
  static_assert(BM / TM == 16, "a thread's rows 16 apart: one fragment row a round");
  static_assert(BK % FK == 0, "panels in whole fragment steps");
  WB_SHARED_A32(T, wb_tp, ST * BK * (SA + SB));   /* A's and B's panels */
  WB_SHARED_A32(float, wb_tc, 16 * SC);      /* a row of fragments on its way to acc */
  const int t = threadIdx.x, tx = t % (BN / TN), ty = t / (BN / TN);
  const int wy = t / 32 / 4, wx = t / 32 % 4;
  wmma::fragment<wmma::accumulator, 16, 16, FK, float> c[FM][FN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    if (ACC) {   /* acc's rows 16 i.. into the fragments of row i % FM of warps i / FM */
      __syncthreads();
#pragma unroll
      for (int j = 0; j < TN; ++j) wb_tc[ty * SC + j * (BN / TN) + tx] = acc[i * TN + j];
      __syncthreads();
      if (wy == i / FM) {
#pragma unroll
        for (int j = 0; j < FN; ++j)
          wmma::load_matrix_sync(c[i % FM][j], wb_tc + wx * WN + j * 16, SC,
                                 wmma::mem_row_major);
      }
    } else if (i < FM) {
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::fill_fragment(c[i][j], 0.0f);
    }
  }
  wb_gemm_steps<BM, BN, BK, NT, TA, TB, ST, T>(
      wb_tp + 0, wb_tp + ST * BK * SA, a_at, b_at, rows, cols, k, [&](auto as, auto bs) {
#pragma unroll
        for (int kk = 0; kk < BK; kk += FK) {
          wmma::fragment<wmma::matrix_a, 16, 16, FK, P, wmma::col_major> fa[FM];
          wmma::fragment<wmma::matrix_b, 16, 16, FK, P, wmma::row_major> fb[FN];
#pragma unroll
          for (int i = 0; i < FM; ++i) {
            wmma::load_matrix_sync(fa[i], as + kk * SA + wy * WM + i * 16, SA);
            wb_tc_round(fa[i]);
          }
#pragma unroll
          for (int j = 0; j < FN; ++j) {
            wmma::load_matrix_sync(fb[j], bs + kk * SB + wx * WN + j * 16, SB);
            wb_tc_round(fb[j]);
          }
#pragma unroll
          for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j) wmma::mma_sync(c[i][j], fa[i], fb[j], c[i][j]);
        }
      });
#pragma unroll
  for (int i = 0; i < TM; ++i) {   /* fragment row i % FM of warps i / FM into acc's rows 16 i.. */
    __syncthreads();
    if (wy == i / FM) {
#pragma unroll
      for (int j = 0; j < FN; ++j)
        wmma::store_matrix_sync(wb_tc + wx * WN + j * 16, c[i % FM][j], SC,
                                wmma::mem_row_major);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i * TN + j] = wb_tc[ty * SC + j * (BN / TN) + tx];
  }
  __syncthreads();   /* (the next tile's first handover overwrites this one) */
}
