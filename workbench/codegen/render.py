"""Renderers: print one kernel IR as C with OpenMP (CPU) or as CUDA C (CuPy).

:class:`CRenderer` prints everything C-like; :class:`CudaRenderer` subclasses it and
overrides only what the target changes -- storage types and conversions of half
precision, how loops bind to the grid, the block-wide reduction, and float4 loads.
The scalar expressions inside come from the op registry and are printed as they are.
"""
from __future__ import annotations

import re
from dataclasses import replace

from ..errors import WorkbenchError
from ..fusion.geometry import CPU_ROW_TILE, REDUCE_SLOT_WORDS
from ..dtypes import DType
from ..dtypes import C_STORAGE
from ..ops import all_helpers
from .kir import (Assign, BlockReduce, Buffer, Comment, ConvLanes, DeclareScratch,
                  DepthwiseLanes, Gemm, GridSync, If, Let, Load, Loop, OncePerBlock,
                  OnlineStep, PackA, PackB, Scratch, Store, ThreadTile, WidenOnce)
from .kernel import Kernel
from .microkernel import MICRO_KERNEL_C, a_tile_stride

# name -> arity; powf too, or one powf call would keep a whole fused loop scalar
_VECTOR_MATH = {"expf": 1, "logf": 1, "erff": 1, "tanhf": 1, "sinf": 1, "cosf": 1,
                "powf": 2}


# A node id as it may appear in a comment: the workbench's own sanitized ids (n12).
# Anything else (a model's text) is never printed into generated code.
_NODE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
NODES_PER_LINE = 16


def node_tag(node: str) -> str:
    """The trailing comment naming the node a statement computes (the source map)."""
    return f"  /* {node} */" if node and _NODE_ID.match(node) else ""


def nodes_comment(nodes) -> str:
    """Header lines naming every node a kernel implements, 16 to a line."""
    ids = [n for n in nodes if _NODE_ID.match(n)]
    return "".join(" * nodes " + " ".join(ids[i:i + NODES_PER_LINE]) + "\n"
                   for i in range(0, len(ids), NODES_PER_LINE))


def _helpers(target: str) -> str:
    """Every op's prelude helpers (ops/*.py), as the target spells them."""
    return "".join(h.body(target) for h in all_helpers())


# The grid-wide barrier of a kernel launched cooperatively (cuLaunchCooperativeKernel:
# every block resident). The algorithm of cooperative_groups' grid sync, written out so
# no source includes <cooperative_groups.h>, whose libcu++ headers cost NVRTC ~2 s per
# kernel: block 0 adds 0x80000000 - (blocks - 1) and every other block 1 to a counter,
# so the counter's top bit flips exactly when all have arrived; each block waits for
# the flip. The counter is a module global (zero when the module loads) and returns to
# its low bits after every barrier, so it serves any number of barriers and launches.
_GRID_SYNC = r"""/* grid-wide barrier (cooperative launch: every block is resident) */
__device__ unsigned int wb_grid_bar;
__device__ __forceinline__ void wb_grid_sync() {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    const unsigned int old = atomicAdd(&wb_grid_bar, add);
    while (((old ^ *(volatile unsigned int*)&wb_grid_bar) & 0x80000000u) == 0) {}
    __threadfence();
  }
  __syncthreads();
}
"""

# One thread block's tile of a GEMM (fusion.schedule.BlockTile; kir.Gemm with a block).
# Each of the NT threads accumulates TM x TN outputs in registers, rows i * BM/TM + ty
# and columns j * BN/TN + tx: a warp reads neighbouring words of B's panel (no bank
# conflicts) and two words of A's (a broadcast). The panels pass through shared memory
# BK deep, each loaded along its operand's unit stride (TA, TB: stored column-major;
# coalesced), A's stored transposed; rows padded by 4 words so that a panel stored
# across its rows hits 32 distinct banks. Past rows, cols or k the panels hold zeros.
# The operands are read through loaders (a_at(i, p), b_at(p, j): global memory, or a
# fused attention's probabilities in shared memory). The rule loads each step's
# panels between two barriers (the second resident block hides the first's loads);
# 2 stages (BlockTile.stages, wb_gemm_steps) prefetch the next panels into registers,
# which the tuner times: at first it took ptxas past the 128 registers two resident
# blocks leave for BERT's FFN (16 bytes spilled), which the shared k loop no longer does.
#
# The online softmax's step over one block of keys (FlashAttention's recurrence, as
# the CPU's fused attention takes it: codegen/lower.py _online_attention): a row's
# logits lie in the registers of the 16 lanes sharing its ty (half a warp), so its
# maximum and sum are butterfly shuffles over those lanes.
_GEMM_BLOCK = r"""/* a panel's element of type T from the value a loader gives: float itself (a half
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
"""


# One thread block's GEMM tile on tensor cores (BlockTile.tensor), in wb_gemm_tile's
# interface and register layout, so that an epilogue, the online softmax and a second
# product follow it unchanged. The panels are wb_gemm_panels' in the tile's operand
# type T (BlockTile.operands), in a 32-byte aligned array (WMMA's loads need it; rows
# 16 bytes longer, a multiple of its 16): float read as TF32 (m16n16k8, each operand
# rounded to nearest after its load: wmma::__float_to_tf32), or bfloat16 or float16
# (m16n16k16, nothing to round: twice TF32's rate). Each of the 8 warps multiplies a
# BM/2 x BN/4 part of the tile as 16 x 16 float accumulator fragments. The fragments'
# layout is the hardware's own, so they pass to the threads' registers (acc) through
# shared memory, 16 of the tile's rows (a row of fragments, a row of each thread's) at
# a time, and back in first when ACC. (Half the tile at a time kept the accumulator
# array and the fragments alive together: ptxas spilled.)
_GEMM_TENSOR = r"""#include <cuda_bf16.h>
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
"""


# the C++ type of a tensor tile's panels (BlockTile.operands; float is read as TF32)
TENSOR_OPERANDS = {DType.float32: "float", DType.bfloat16: "__nv_bfloat16",
                   DType.float16: "__half"}


# The host BLAS routines a kernel may call, as the parameter it takes them by: ILP64
# CBLAS (64-bit integers), as NumPy's bundled OpenBLAS exports it (runtime/blas.py).
_BLAS_PARAMS = {
    "sgemm": "void (*wb_sgemm)(int, int, int, long long, long long, long long, float, "
             "const float*, long long, const float*, long long, float, float*, long long)",
}


def _steps(w) -> str:
    """A 2-D window's strides, dilations and begin pads, as the C helpers take them
    (``wb_depthwise_lanes``, ``wb_conv_lanes``)."""
    return ", ".join(str(v) for v in (*w.strides, *w.dilations, *w.pads))


class CRenderer:
    """C99 + OpenMP: grid-level loops run in parallel, block-level loops serially."""

    target = "c"
    storage = dict(C_STORAGE)
    kernel_prefix = "void"
    restrict = "restrict"
    indent_unit = "  "

    # -- pieces a target overrides ---------------------------------------------
    def prelude(self, tensor: bool = False) -> str:
        """What every kernel's source starts with (``tensor``: a kernel with GEMM tiles
        on tensor cores follows; the C rendering computes them in float32)."""
        return ("#include <math.h>\n#include <stdint.h>\n"
                "#ifdef WB_VECTOR_MATH\n"
                "/* glibc's libmvec has SIMD variants of these; math.h declares them only\n"
                "   under -ffast-math, which would also change NaN semantics */\n"
                + "".join(f"#pragma omp declare simd notinbranch\nfloat {f}("
                          f"{', '.join(['float'] * n)});\n" for f, n in _VECTOR_MATH.items())
                + "#endif\n"
                "#define WB_FN static inline\n"
                + _helpers(self.target) + MICRO_KERNEL_C)

    def signature(self, k: Kernel) -> str:
        params = ", ".join(f"{'' if b.is_output else 'const '}{self.storage[b.dtype]}* "
                           f"{self.restrict} {b.name}" for b in k.params)
        if k.blas:
            params += ", " + _BLAS_PARAMS[k.blas]
        return f"{self.kernel_prefix} {k.name}({params})"

    def supports(self, k: Kernel) -> bool:
        """Whether this target can run the kernel (a GPU has no host BLAS to call)."""
        return True

    def gemm(self, s: Gemm, depth: int) -> list[str]:
        if s.block is not None:
            return self._block_gemm(s, depth)
        if s.transposed:  # x^T's element (position i, channel r) at i + r * lda
            call = (f"wb_gemm_packed_t({s.rows}, {s.cols}, {s.k}, {s.a.name} + {s.a_off}, 1, "
                    f"{s.lda}, {s.b.name} + {s.b_off}, {s.c.name} + {s.c_off}, {s.ldc})")
            return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
        if s.packed:      # A's element (i, r) at i * ars + r * acs
            ars, acs = (1, s.lda) if s.trans_a else (s.lda, 1)
            if s.pairs:   # (no accumulate or panel_rows: those multiply float32 tiles)
                # (B's words: a float32 workspace, or a convolution's patches gathered
                # as bfloat16 in pairs)
                call = (f"wb_gemm_packed_pairs({s.rows}, {s.cols}, {s.k}, {s.a.name} + "
                        f"{s.a_off}, {ars}, {acs}, (const float*)({s.b.name} + {s.b_off}), "
                        f"{s.c.name} + {s.c_off}, {s.ldc})")
                return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
            a, b, c = (f"{s.a.name} + {s.a_off}", f"{s.b.name} + {s.b_off}",
                       f"{s.c.name} + {s.c_off}")
            if s.a_packed:    # (no accumulate or panel_rows: a convolution's tile)
                call = (f"wb_gemm_packed_a({s.rows}, {s.cols}, {s.k}, {a}, {b}, {c}, "
                        f"{s.ldc})")
            elif s.accumulate or s.panel_rows:
                call = (f"wb_gemm_packed_into({s.rows}, {s.cols}, {s.k}, {a}, {ars}, {acs}, "
                        f"{b}, {s.panel_rows or s.k}, {c}, {s.ldc}, {int(s.accumulate)})")
            else:
                call = (f"wb_gemm_packed({s.rows}, {s.cols}, {s.k}, {a}, {ars}, {acs}, {b}, "
                        f"{c}, {s.ldc})")
            return [self.indent_unit * depth + f"{call};{node_tag(s.node)}"]
        # CBLAS row-major (101), an operand stored column-major transposed (112, else
        # 111), C = 1 * A B + 0 * C
        ta, tb = (112 if t else 111 for t in (s.trans_a, s.trans_b))
        return [self.indent_unit * depth
                + f"wb_sgemm(101, {ta}, {tb}, {s.rows}, {s.cols}, {s.k}, 1.0f, "
                  f"{s.a.name} + {s.a_off}, {s.lda}, {s.b.name} + {s.b_off}, {s.ldb}, 0.0f, "
                  f"{s.c.name} + {s.c_off}, {s.ldc});{node_tag(s.node)}"]

    def _block_gemm(self, s: Gemm, depth: int) -> list[str]:
        """A GPU GEMM tile on the CPU (an artifact planned for a GPU, run where there is
        none): the whole tile by one thread, row-major ``block.n`` wide, each element
        summed over k in order. Correct, not fast: CPU plans use the micro-kernel."""
        pad, u = self.indent_unit * depth, self.indent_unit
        a = self.to_compute(s.a.dtype, _element(s.a, s.a_off, s.lda, s.trans_a, "wb_i", "wb_p"))
        b = self.to_compute(s.b.dtype, _element(s.b, s.b_off, s.ldb, s.trans_b, "wb_p", "wb_j"))
        return [pad + f"for (long long wb_i = 0; wb_i < {s.rows}; ++wb_i) {{",
                pad + u + f"for (long long wb_j = 0; wb_j < {s.cols}; ++wb_j) {{",
                pad + u * 2 + "float wb_sum = 0.0f;",
                pad + u * 2 + f"for (long long wb_p = 0; wb_p < {s.k}; ++wb_p) "
                              f"wb_sum += {a} * {b};",
                pad + u * 2 + f"{s.c.name}[wb_i * {s.block.n} + wb_j] "
                              f"{'+=' if s.accumulate else '='} wb_sum;{node_tag(s.node)}",
                pad + u + "}",
                pad + "}"]

    def thread_tile(self, s: ThreadTile, depth: int) -> list[str]:
        """Every element of the tile (one CPU thread holds the block's whole tile)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        body = self.stmts(s.body, depth + 2)
        return [pad + f"for (long long r = {s.r0}; r < {s.r1}; ++r) {{",
                pad + u + f"for (long long col = {s.c0}; col < {s.c1}; ++col) {{",
                *_slots(body, pad + u * 2, f"(r - {s.r0}) * {s.block.n} + col - {s.c0}",
                        f"r - {s.r0}", "long long"),
                *body,
                pad + u + "}",
                pad + "}"]

    def online_step(self, s: OnlineStep, depth: int) -> list[str]:
        """The whole tile's rows, one after another (see kir.OnlineStep)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        bn, on, w = s.block.n, s.out_block.n, s.block.n + s.block.PAD
        x, o, m, l, p = (v.name for v in (s.s, s.o, s.m, s.l, s.p))
        return [pad + f"for (long long wb_r = 0; wb_r < {s.block.m}; ++wb_r) {{"
                      f"{node_tag(s.node)}",
                pad + u + f"float wb_mx = {m}[wb_r], wb_sum = 0.0f;",
                pad + u + f"for (long long wb_c = 0; wb_c < {s.valid}; ++wb_c) "
                          f"wb_mx = fmaxf(wb_mx, {x}[wb_r * {bn} + wb_c]);",
                pad + u + "const float wb_base = wb_mx == -INFINITY ? 0.0f : wb_mx;",
                pad + u + f"const float wb_alpha = expf({m}[wb_r] - wb_base);",
                pad + u + f"for (long long wb_c = 0; wb_c < {bn}; ++wb_c) {{",
                pad + u * 2 + f"const float wb_e = wb_c < {s.valid} ? "
                              f"expf({x}[wb_r * {bn} + wb_c] - wb_base) : 0.0f;",
                pad + u * 2 + f"{p}[wb_r * {w} + wb_c] = wb_e;",
                pad + u * 2 + "wb_sum += wb_e;",
                pad + u + "}",
                pad + u + f"{l}[wb_r] = {l}[wb_r] * wb_alpha + wb_sum;",
                pad + u + f"{m}[wb_r] = wb_mx;",
                pad + u + f"for (long long wb_d = 0; wb_d < {on}; ++wb_d) "
                          f"{o}[wb_r * {on} + wb_d] *= wb_alpha;",
                pad + "}"]

    def load(self, s: Load) -> str:
        if isinstance(s.buf, Scratch) and s.buf.source is not None:
            # a register copy of an input: one CPU thread owns the row, and its caches
            # keep it, so the row is simply read again
            return self.load(Load(s.var, s.buf.source, s.src_offset))
        ct = s.buf.dtype.c_compute
        return f"{ct} {s.var} = {self.to_compute(s.buf.dtype, f'{s.buf.name}[{s.offset}]')};"

    def to_compute(self, dtype: DType, src: str) -> str:
        """A stored element converted to its compute type."""
        if dtype is DType.bfloat16:     # (its bits, in an unsigned short)
            return f"wb_bf16_load({src})"
        return f"({dtype.c_compute}){src}"

    def to_storage(self, dtype: DType, expr: str) -> str:
        """A computed value converted to its storage type."""
        if dtype is DType.bfloat16:
            return f"wb_bf16_store({expr})"
        return f"({self.storage[dtype]})({expr})"

    def store(self, s: Store) -> str:
        if isinstance(s.buf, Scratch) and s.buf.source is not None:
            return ""        # (see load: the CPU reads the input again)
        return f"{s.buf.name}[{s.offset}] = {self.to_storage(s.buf.dtype, s.expr)};"

    ROW_TILE = CPU_ROW_TILE   # rows a CPU thread walks together in a thread-per-row kernel

    def loop(self, s: Loop, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        if s.bind == "flat" and depth <= 1 and any(isinstance(x, Loop) for x in s.body):
            return self._row_tiles(s, depth)
        if s.bind == "warp":
            return self._warp_rows(s, depth)
        head = (f"for ({_ix(s)} {s.var} = {s.start or 0}; {s.var} < {s.stop or s.extent}; "
                f"++{s.var}) {{")
        if s.bind in ("flat", "grid") and depth <= 1:
            # the outermost parallel loop; simd lets the compiler vectorize flat loops
            pragma = "#pragma omp parallel for simd" if s.bind == "flat" and s.vector > 1 \
                else "#pragma omp parallel for schedule(static)"
            lines = [pad + pragma, pad + head]
        elif s.bind in ("block", "lane") and s.reduction is None:
            # a block's threads become SIMD lanes: each column is independent
            lines = [pad + "#pragma omp simd", pad + head]
        elif s.bind in ("block", "lane") and s.reduction[1]:
            lines = [pad + f"#pragma omp simd reduction({s.reduction[1]}:{s.reduction[0]})",
                     pad + head]
        else:
            lines = [pad + head]
        lines += self.stmts(s.body, depth + 1)
        return lines + [pad + "}"]

    def _warp_rows(self, s: Loop, depth: int) -> list[str]:
        """One warp per row, ``per_block`` rows per block: on the CPU one thread takes a
        block's rows one after another (the warp's lanes become SIMD lanes)."""
        pad, u = self.indent_unit * depth, self.indent_unit
        v, n, r = s.var, s.extent, s.per_block
        blocks = -(-n // r)
        return ([pad + "#pragma omp parallel for schedule(static)",
                 pad + f"for ({_ix(s)} {v}_blk = 0; {v}_blk < {blocks}; ++{v}_blk) {{",
                 pad + u + f"const {_ix(s)} {v}_end = {v}_blk * {r} + {r} < {n} ? "
                           f"{v}_blk * {r} + {r} : {n};",
                 pad + u + f"for ({_ix(s)} {v} = {v}_blk * {r}; {v} < {v}_end; ++{v}) {{"]
                + self.stmts(s.body, depth + 2) + [pad + u + "}", pad + "}"])

    def grid_sync(self, s: GridSync, depth: int) -> list[str]:
        # each phase is its own parallel loop; its implicit barrier is the grid barrier
        return [self.indent_unit * depth + f"/* grid barrier ({s.reason}): the end of the "
                "parallel loop above */"]

    def _row_tiles(self, s: Loop, depth: int) -> list[str]:
        """A thread-per-row kernel (column reduction) for the CPU.

        On a GPU, neighbouring threads take neighbouring rows, so each step of the
        column loop reads contiguous memory. One CPU thread walking one row at a time
        would stride through memory instead; so a thread takes a tile of rows, and every
        statement runs over the tile's rows innermost (under omp simd) -- the same
        computation with the loops interchanged. Row-level values become per-tile arrays.
        """
        pad, u = self.indent_unit * depth, self.indent_unit
        row, T, n = s.var, self.ROW_TILE, s.extent
        decls = {}
        for x in s.body:
            if isinstance(x, Let):
                decls[x.var] = x.dtype.c_compute
            elif isinstance(x, Load):
                decls[x.var] = x.buf.dtype.c_compute
        names = re.compile(r"\b(" + "|".join(map(re.escape, decls)) + r")\b") if decls else None
        ren = (lambda e: names.sub(r"\1[r_]", e)) if names else (lambda e: e)

        def target(var, ctype):
            # row-level values live in the tile arrays; column-level ones are locals
            return ren(var) if var in decls else f"{ctype} {var}"

        def tiled(stmt):
            if isinstance(stmt, Let):
                return [f"{target(stmt.var, stmt.dtype.c_compute)} = {ren(stmt.expr)};"]
            if isinstance(stmt, Assign):
                return [f"{ren(stmt.var)} = {ren(stmt.expr)};"]
            if isinstance(stmt, Load):
                ct = stmt.buf.dtype.c_compute
                src = self.to_compute(stmt.buf.dtype, f"{stmt.buf.name}[{ren(stmt.offset)}]")
                return [f"{target(stmt.var, ct)} = {src};"]
            if isinstance(stmt, Store):
                return [self.store(Store(stmt.buf, ren(stmt.offset), ren(stmt.expr)))]
            if isinstance(stmt, OncePerBlock):
                return [line for x in stmt.body for line in tiled(x)]
            if isinstance(stmt, Comment):
                return [f"/* {stmt.text} */"]
            return [line.strip() for line in self.stmts([stmt], 0)]

        def over_rows(lines, d):
            p = u * d
            return ([p + "#pragma omp simd", p + "for (int r_ = 0; r_ < n_; ++r_) {",
                     p + u + f"const {_ix(s)} {row} = {row}0 + r_;"]
                    + [p + u + line for line in lines] + [p + "}"])

        out = [pad + "#pragma omp parallel for schedule(static)",
               pad + f"for ({_ix(s)} {row}0 = 0; {row}0 < {n}; {row}0 += {T}) {{",
               pad + u + f"const int n_ = {n} - {row}0 < {T} ? {n} - {row}0 : {T};"]
        out += [pad + u + f"{ct} {v}[{T}];" for v, ct in decls.items()]
        pending: list[str] = []
        for x in s.body:
            if isinstance(x, Loop):
                if pending:
                    out += over_rows(pending, depth + 1)
                    pending = []
                out.append(pad + u + f"for ({_ix(x)} {x.var} = 0; {x.var} < {x.extent}; "
                                     f"++{x.var}) {{")
                out += over_rows([line for y in x.body for line in tiled(y)], depth + 2)
                out.append(pad + u + "}")
            else:
                pending += tiled(x)
        if pending:
            out += over_rows(pending, depth + 1)
        return out + [pad + "}"]

    def block_reduce(self, s: BlockReduce, depth: int) -> list[str]:
        # one thread per block on the CPU: the serial loop already saw every column
        return [self.indent_unit * depth + f"/* block reduce {s.var}: one thread per row */"]

    def once_per_block(self, s: OncePerBlock, depth: int) -> list[str]:
        return self.stmts(s.body, depth)

    def shared_decls(self, k: Kernel) -> list[str]:
        return []

    def declare_scratch(self, s: DeclareScratch, depth: int) -> list[str]:
        # one thread owns the row on the CPU: a private array in the row loop
        x = s.scratch
        if x.source is not None:
            return []        # (see load: the CPU reads the input again)
        # (a half type held as it is stored: a convolution's bfloat16 patches in pairs)
        ct = self.storage[x.dtype] if x.dtype.is_half else x.dtype.c_compute
        pad = self.indent_unit * depth
        return [pad + f"{ct} {x.name}[{x.numel}];"
                f" /* {x.numel * x.dtype.itemsize} B: {s.note or 'the row kept on chip'} */"
                ] + ([pad + f"for (long long wb_q = 0; wb_q < {x.numel}; ++wb_q) "
                            f"{x.name}[wb_q] = {s.init};"] if s.init else [])

    # -- shared by all targets -------------------------------------------------
    def stmts(self, body, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        out: list[str] = []
        for s in body:
            if isinstance(s, Let):
                out.append(f"{pad}{s.dtype.c_compute} {s.var} = {s.expr};{node_tag(s.node)}")
            elif isinstance(s, Assign):
                out.append(f"{pad}{s.var} = {s.expr};{node_tag(s.node)}")
            elif isinstance(s, (Load, Store)):
                line = self.load(s) if isinstance(s, Load) else self.store(s)
                if line:
                    out.append(pad + line + (node_tag(s.node) if isinstance(s, Store) else ""))
            elif isinstance(s, Loop):
                out += self.loop(s, depth)
            elif isinstance(s, BlockReduce):
                out += self.block_reduce(s, depth)
            elif isinstance(s, OncePerBlock):
                out += self.once_per_block(s, depth)
            elif isinstance(s, Comment):
                out.append(f"{pad}/* {s.text} */")
            elif isinstance(s, DeclareScratch):
                out += self.declare_scratch(s, depth)
            elif isinstance(s, If):
                out += [f"{pad}if ({s.cond}) {{"] + self.stmts(s.body, depth + 1) + [f"{pad}}}"]
            elif isinstance(s, GridSync):
                out += self.grid_sync(s, depth)
            elif isinstance(s, Gemm):
                out += self.gemm(s, depth)
            elif isinstance(s, ThreadTile):
                out += self.thread_tile(s, depth)
            elif isinstance(s, OnlineStep):
                out += self.online_step(s, depth)
            elif isinstance(s, DepthwiseLanes):
                w = s.window
                (h, wd), (kh, kw), (oh, ow) = w.spatial, w.kernel, w.out
                out.append(f"{pad}wb_depthwise_lanes({s.channels}, {s.x.name} + {s.x_off}, "
                           f"{h}, {wd}, {s.f.name} + {s.f_off}, {kh}, {kw}, "
                           f"{s.c.name} + {s.c_off}, {oh}, {ow}, {_steps(w)});"
                           f"{node_tag(s.node)}")
            elif isinstance(s, ConvLanes):
                w = s.window
                (h, wd), (kh, kw), ow = w.spatial, w.kernel, w.out[1]
                out.append(f"{pad}wb_conv_lanes({s.x.name} + {s.x_off}, {w.channels}, {h}, "
                           f"{wd}, {s.f.name}, {s.f0}, {s.f1}, {s.c.name} + {s.c_off}, "
                           f"{s.ldc}, {s.oy0}, {s.oy1}, {ow}, {kh}, {kw}, {_steps(w)});"
                           f"{node_tag(s.node)}")
            elif isinstance(s, WidenOnce):
                out.append(f"{pad}wb_widen_once({s.src.name}, {s.n}, {s.dst.name});"
                           f"{node_tag(s.node)}")
            elif isinstance(s, PackA):
                out.append(f"{pad}wb_pack_a_once({s.a.name} + {s.a_off}, {s.m}, {s.k}, "
                           f"{s.row_stride}, {s.col_stride}, {s.tile_m}, "
                           f"{a_tile_stride(s.k, s.tile_m)}, {s.packed.name});"
                           f"{node_tag(s.node)}")
            elif isinstance(s, PackB):
                # how the micro-kernel packs it: WB_B_PAIRS, WB_B_BF16 (widened), WB_B_F32
                kind = 2 if s.pairs else int(s.b.dtype is DType.bfloat16)
                args = (f"{s.b.name} + {s.b_off}, {kind}, {s.k}, {s.n}, {s.row_stride}, "
                        f"{s.col_stride}, {s.packed.name} + {s.packed_off}")
                call = (f"wb_pack_panel({args}, {s.panel})" if s.panel
                        else f"wb_pack_b_once({args})")
                out.append(f"{pad}{call};{node_tag(s.node)}")
            else:
                raise TypeError(f"unknown statement {s!r}")
        return out

    def header_comment(self, k: Kernel) -> str:
        ins = ", ".join(f"{b.name}={b.dtype.value}[{b.numel}]" for b in k.inputs)
        outs = ", ".join(f"{b.name}={b.dtype.value}[{b.numel}]" for b in k.outputs)
        ws = f" ({k.scratch_bytes} B of it workspace)" if k.workspace else ""
        return (f"/* kernel {k.name}: group {k.group}, {k.schedule}\n"
                f"{nodes_comment(k.nodes)}"
                f" * launch {k.launch}; reads {k.bytes_read} B, writes {k.bytes_written} B"
                f"{ws}\n"
                f" * inputs {ins or '-'}; outputs {outs or '-'} */")

    def kernel(self, k: Kernel) -> str:
        """The kernel's function (no prelude); a comment saying why, for a kernel this
        target cannot run."""
        if not self.supports(k):
            return (f"/* kernel {k.name}: {k.schedule}\n{nodes_comment(k.nodes)}"
                    " * runs on the host only (a form of the CPU's: its GEMM kernels, which "
                    "may call the host BLAS, and its poolings a plane at a time), so there "
                    "is no CUDA source */\n")
        if k.library is not None:
            args = ", ".join(b.name for b in k.library.inputs)
            outs = ", ".join(b.name for b in k.library.outputs)
            return (f"/* kernel {k.name}: library call {k.library.op}({args}) -> {outs};\n"
                    f"{nodes_comment(k.nodes)}"
                    " * run by the host library (NumPy/BLAS on the CPU, CuPy/cuBLAS on the "
                    "GPU) */\n")
        lines = [self.header_comment(k), self.signature(k) + " {"]
        lines += self.shared_decls(k)
        lines += self.stmts(k.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def module(self, kernels) -> str:
        """A complete translation unit: prelude plus every kernel."""
        return (self.prelude(any(k.tensor_cores for k in kernels)) + "\n"
                + "\n".join(self.kernel(k) for k in kernels))


class CudaRenderer(CRenderer):
    """CUDA C for NVRTC (CuPy RawModule): the same statements, bound to blocks and threads."""

    target = "cuda"
    storage = {**C_STORAGE, DType.float16: "__half"}
    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"

    def signature(self, k: Kernel) -> str:
        # the block size it is launched with (and at least one block per SM): ptxas
        # keeps registers within what a block of that size may have (a 1024-thread
        # block: 64 each) rather than failing the launch, and does not squeeze them
        # for two blocks per SM into spills
        return super().signature(k).replace(
            "__global__ void",
            f"__global__ void __launch_bounds__({k.launch.block}, {k.launch.resident})", 1)

    def prelude(self, tensor: bool = False) -> str:
        return ("#include <cuda_fp16.h>\n"
                "#define WB_FN __device__ __forceinline__\n"
                "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
                "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n"
                "#ifndef WB_SHARED  /* (the CUDA emulator defines its own, checked) */\n"
                "#define WB_SHARED(type, name, n) __shared__ type name[n]\n#endif\n"
                "#ifndef WB_SHARED_DYN  /* n elements at byte `at` of dynamic shared memory */\n"
                "#define WB_SHARED_DYN(type, name, n, at) extern __shared__ __align__(16) "
                "unsigned char wb_dyn_shared[]; type* const name = "
                "reinterpret_cast<type*>(wb_dyn_shared + (at))\n#endif\n"
                "/* 32 bytes a thread moves as two 16-byte accesses (4 of an 8-byte type) */\n"
                "struct __align__(16) wb_bytes32 { uint4 lo, hi; };\n"
                + _GRID_SYNC + _GEMM_BLOCK + (_GEMM_TENSOR if tensor else "")
                + _helpers(self.target))

    def to_compute(self, dtype: DType, src: str) -> str:
        return f"__half2float({src})" if dtype is DType.float16 else super().to_compute(dtype, src)

    def store(self, s: Store) -> str:
        if isinstance(s.buf, Scratch) and s.buf.space == "register":
            return f"{s.buf.name}[{s.offset}] = {s.expr};"
        if isinstance(s.buf, Scratch) and s.buf.space == "hybrid":
            reg, shared = _hybrid_at(s.buf, s.offset)
            return f"if ({s.offset} < {s.buf.slots}) {reg} = {s.expr}; else {shared} = {s.expr};"
        s = Store(s.buf, self._scratch_offset(s.buf, s.offset), s.expr)
        return f"{s.buf.name}[{s.offset}] = {self.to_storage(s.buf.dtype, s.expr)};"

    def to_storage(self, dtype: DType, expr: str) -> str:
        if dtype is DType.float16:
            return f"__float2half({expr})"
        return super().to_storage(dtype, expr)

    def shared_decls(self, k: Kernel) -> list[str]:
        # scratch per block reduction: one partial per warp, plus the broadcast result;
        # row caches: each thread stores and reloads only its own columns, so they
        # need no barrier of their own (warp mapping: one row slice per warp)
        # (WB_SHARED: the prelude's plain __shared__ array; the CUDA emulator's own
        # checks each access for races and bounds)
        # (WB_SHARED_DYN: a cache in the dynamic shared memory the launch sizes, at its
        # byte offset, when the kernel's shared memory passes the static 48 KB)
        dyn = k.dynamic_shared
        return ([f"  WB_SHARED(double, wb_red{i}, {REDUCE_SLOT_WORDS});"
                 for i in range(k.reductions)]
                + [f"  WB_SHARED_DYN({x.dtype.c_compute}, {x.name}, {x.numel * x.rows}, "
                   f"{dyn[x.name]});" if x.name in dyn else
                   f"  WB_SHARED({x.dtype.c_compute}, {x.name}, {x.numel * x.rows});"
                   for x in k.scratch if x.space != "register"])

    def grid_sync(self, s: GridSync, depth: int) -> list[str]:
        return [self.indent_unit * depth + f"wb_grid_sync();  /* {s.reason} */"]

    def supports(self, k: Kernel) -> bool:
        return not (k.blas or k.host_only)

    def gemm(self, s: Gemm, depth: int) -> list[str]:
        if s.block is None:
            raise WorkbenchError("this GEMM kernel was planned for the CPU (the host BLAS "
                                 "or the C micro-kernel), so it has no CUDA rendering; "
                                 "plan for the GPU instead")
        b, pad = s.block, self.indent_unit * (depth + 2)
        flag = {True: "true", False: "false"}
        a_ij = _element(s.a, s.a_off, s.lda, s.trans_a, "i", "p")
        b_ij = _element(s.b, s.b_off, s.ldb, s.trans_b, "p", "j")
        return [self.indent_unit * depth
                + f"{'wb_gemm_tile_tc' if b.tensor else 'wb_gemm_tile'}<{b.m}, {b.n}, "
                  f"{b.depth}, {b.thread_m}, {b.thread_n}, "
                  f"{flag[s.trans_a]}, {flag[s.trans_b]}, {flag[s.accumulate]}, {b.stages}"
                  f"{', ' + TENSOR_OPERANDS[b.operands] if b.tensor else ''}>({s.c.name},",
                pad + "[&](long long i, long long p) -> float { return "
                    f"{self.to_compute(s.a.dtype, a_ij)}; }},",
                pad + "[&](long long p, long long j) -> float { return "
                    f"{self.to_compute(s.b.dtype, b_ij)}; }},",
                pad + f"{s.rows}, {s.cols}, {s.k});{node_tag(s.node)}"]

    def online_step(self, s: OnlineStep, depth: int) -> list[str]:
        b = s.block
        return [self.indent_unit * depth
                + f"wb_online_step<{b.m}, {b.n}, {b.thread_m}, {b.thread_n}, "
                  f"{s.out_block.thread_n}>({s.s.name}, {s.o.name}, {s.m.name}, {s.l.name}, "
                  f"{s.p.name}, {s.valid});{node_tag(s.node)}"]

    def thread_tile(self, s: ThreadTile, depth: int) -> list[str]:
        """The thread's ``thread_m x thread_n`` elements of the tile, unrolled: row i
        ``i * m / thread_m + ty``, column j ``j * n / thread_n + tx`` of the tile
        (wb_gemm_tile's layout), slot ``i * thread_n + j`` a constant."""
        pad, u = self.indent_unit * depth, self.indent_unit
        b = s.block
        across = b.n // b.thread_n
        body = self.stmts(s.body, depth + 3)
        return [pad + "#pragma unroll",
                pad + f"for (int wb_i = 0; wb_i < {b.thread_m}; ++wb_i) {{",
                pad + u + f"const long long r = {s.r0} + wb_i * {b.m // b.thread_m} + "
                          f"(int)threadIdx.x / {across};",
                pad + u + "#pragma unroll",
                pad + u + f"for (int wb_j = 0; wb_j < {b.thread_n}; ++wb_j) {{",
                pad + u * 2 + f"const long long col = {s.c0} + wb_j * {across} + "
                              f"(int)threadIdx.x % {across};",
                *_slots(body, pad + u * 2, f"wb_i * {b.thread_n} + wb_j", "wb_i", "int"),
                pad + u * 2 + f"if (r < {s.r1} && col < {s.c1}) {{",
                *body,
                pad + u * 2 + "}",
                pad + u + "}",
                pad + "}"]

    def _scratch_offset(self, buf, offset: str) -> str:
        if isinstance(buf, Scratch) and buf.rows > 1:
            return f"(threadIdx.x >> 5) * {buf.numel} + {offset}"
        return offset

    def load(self, s: Load) -> str:
        if isinstance(s.buf, Scratch) and s.buf.space == "register":
            return f"{s.buf.dtype.c_compute} {s.var} = {s.buf.name}[{s.offset}];"
        if isinstance(s.buf, Scratch) and s.buf.space == "hybrid":
            # (the slot is a constant once the tile is unrolled: one side of the
            # choice survives, and the register array keeps constant indices)
            reg, shared = _hybrid_at(s.buf, s.offset)
            return (f"{s.buf.dtype.c_compute} {s.var} = {s.offset} < {s.buf.slots} ? "
                    f"{reg} : {shared};")
        return super().load(Load(s.var, s.buf, self._scratch_offset(s.buf, s.offset)))

    def declare_scratch(self, s: DeclareScratch, depth: int) -> list[str]:
        x = s.scratch
        if x.space == "register":
            what = s.note or "this thread's columns of the row"
            pad = self.indent_unit * depth
            return [pad + f"{x.dtype.c_compute} {x.name}[{x.slots}];  /* {what}, in "
                          "registers */"] + ([
                pad + "#pragma unroll",
                pad + f"for (int wb_q = 0; wb_q < {x.slots}; ++wb_q) {x.name}[wb_q] = {s.init};"]
                if s.init else [])
        if x.space == "hybrid":
            return [self.indent_unit * depth + f"{x.dtype.c_compute} {x.name}_r[{x.slots}];  "
                    "/* this thread's first columns of the row, in registers (the rest "
                    "in shared memory) */"]
        return []   # declared in shared memory at the top of the kernel

    def loop(self, s: Loop, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        v, n = s.var, s.extent
        if s.bind == "flat" and s.vector > 1:
            return self._vector_loop(s, depth)
        if s.tile is not None and s.bind in ("block", "lane"):
            return self._tile_loop(s, depth)
        lo, hi, r = s.start or "0", s.stop or str(n), s.per_block
        ix = _ix(s)
        heads = {
            "flat": f"for ({ix} {v} = ({ix})blockIdx.x * blockDim.x + threadIdx.x; {v} < {n}; "
                    f"{v} += ({ix})gridDim.x * blockDim.x) {{",
            "grid": f"for ({ix} {v} = blockIdx.x; {v} < {n}; {v} += gridDim.x) {{",
            "block": f"for ({ix} {v} = {lo} + threadIdx.x; {v} < {hi}; {v} += blockDim.x) {{"
                     if s.start else
                     f"for ({ix} {v} = threadIdx.x; {v} < {hi}; {v} += blockDim.x) {{",
            # warps past per_block idle (a stitched kernel's block may be larger)
            "warp": f"for ({ix} {v} = ({ix})blockIdx.x * {r} + (threadIdx.x >> 5); "
                    f"(threadIdx.x >> 5) < {r} && {v} < {n}; {v} += ({ix})gridDim.x * {r}) {{",
            "lane": f"for ({ix} {v} = (threadIdx.x & 31); {v} < {n}; {v} += 32) {{",
            "serial": f"for ({ix} {v} = {lo}; {v} < {hi}; ++{v}) {{",
        }
        return [pad + heads[s.bind]] + self.stmts(s.body, depth + 1) + [pad + "}"]

    def _tile_loop(self, s: Loop, depth: int) -> list[str]:
        """A row kept on chip: thread t of the row's ``threads`` owns columns
        (k * threads + t) * vector + v, k < per_thread, v < vector, fully unrolled so the
        register copies (indexed k * vector + v) stay in registers; unit-stride loads
        and stores of a thread's ``vector`` consecutive elements move as one 16-byte
        (or narrower) access. A shifted tile (the vector does not divide the row)
        starts ``shift`` columns before the row, where the row's offset is aligned:
        a thread's vector inside the row moves as one access, one holding an end of
        the row element by element."""
        pad, u = self.indent_unit * depth, self.indent_unit
        T, K, V, shift = s.tile
        v, n = s.var, s.extent
        tid = "threadIdx.x" if s.bind == "block" else "(threadIdx.x & 31)"
        first = f"({v}_k * {T} + {tid}) * {V}" + (f" - {shift}" if shift else "")
        lines = [pad + "#pragma unroll",
                 pad + f"for (int {v}_k = 0; {v}_k < {K}; ++{v}_k) {{",
                 pad + u + f"const {_ix(s)} {v}_b = {first};",
                 pad + u + f"if ({tid} < {T} && {v}_b < {n}) {{"]
        if not shift:
            lines += self._tile_vectors(s, depth + 2)
        else:
            lines += [pad + u + u + f"if ({v}_b >= 0 && {v}_b + {V} <= {n}) {{",
                      *self._tile_vectors(s, depth + 3),
                      pad + u + u + "} else {  /* an end of the row */",
                      *self._tile_elements(s, depth + 3),
                      pad + u + u + "}"]
        return lines + [pad + u + "}", pad + "}"]

    def _tile_vectors(self, s: Loop, depth: int) -> list[str]:
        """A thread's ``vector`` columns of a tile, starting at ``<var>_b``, every one
        inside the row: unit-stride accesses move as one access each."""
        _, _, V, _ = s.tile
        v = s.var
        inner, u = self.indent_unit * depth, self.indent_unit
        body_pad = inner + (u if V > 1 else "")
        body = [_at_slot(x, _tile_slot(s)) for x in s.body]
        vec = {i: self._vector_type(x) for i, x in enumerate(body)
               if isinstance(x, (Load, Store)) and isinstance(x.buf, Buffer) and x.vector > 1
               and self._vector_type(x)}
        word = re.compile(rf"\b{re.escape(v)}\b")

        def at_base(x) -> str:
            return f"{x.buf.name} + {word.sub(f'{v}_b', x.offset)}"

        lines = []
        for i, vt in vec.items():
            x = body[i]
            if isinstance(x, Load):
                lines.append(inner + f"const {vt} {x.var}_v = "
                                     f"*reinterpret_cast<const {vt}*>({at_base(x)});")
            else:
                lines.append(inner + f"{vt} {x.buf.name}_v;")
        if V > 1:
            lines += [inner + "#pragma unroll",
                      inner + f"for (int {v}_v = 0; {v}_v < {V}; ++{v}_v) {{"]
        declared = len(lines)
        for i, x in enumerate(body):
            if i in vec and isinstance(x, Load):
                st = self.storage[x.buf.dtype]
                elem = f"reinterpret_cast<const {st}*>(&{x.var}_v)[{v}_v]"
                lines.append(body_pad + f"{x.buf.dtype.c_compute} {x.var} = "
                                        f"{self.to_compute(x.buf.dtype, elem)};")
            elif i in vec:
                st = self.storage[x.buf.dtype]
                lines.append(body_pad + f"reinterpret_cast<{st}*>(&{x.buf.name}_v)[{v}_v] = "
                                        f"{self.to_storage(x.buf.dtype, x.expr)};")
            else:
                lines += self.stmts([x], depth + (1 if V > 1 else 0))
        if any(word.search(line) for line in lines[declared:]):   # (else: unused)
            lines.insert(declared, body_pad + f"const {_ix(s)} {v} = {v}_b"
                                              + (f" + {v}_v;" if V > 1 else ";"))
        if V > 1:
            lines.append(inner + "}")
        for i, vt in vec.items():
            x = body[i]
            if isinstance(x, Store):
                lines.append(inner + f"*reinterpret_cast<{vt}*>({at_base(x)}) = "
                                     f"{x.buf.name}_v;")
        return lines

    def _tile_elements(self, s: Loop, depth: int) -> list[str]:
        """A thread's ``vector`` columns of a shifted tile that hold an end of the row:
        each column inside the row on its own, element by element."""
        _, _, V, _ = s.tile
        v, n = s.var, s.extent
        pad, u = self.indent_unit * depth, self.indent_unit
        body = [_at_slot(x, _tile_slot(s)) for x in s.body]
        return [pad + "#pragma unroll",
                pad + f"for (int {v}_v = 0; {v}_v < {V}; ++{v}_v) {{",
                pad + u + f"const {_ix(s)} {v} = {v}_b + {v}_v;",
                pad + u + f"if ({v} >= 0 && {v} < {n}) {{",
                *self.stmts(body, depth + 2),
                pad + u + "}",
                pad + "}"]

    def _vector_type(self, x, elems: int | None = None) -> str:
        """The type one access of ``elems`` (default x.vector) elements moves as, when
        it is one of 4, 8, 16 or 32 bytes (two 16-byte accesses); "" otherwise: element
        by element."""
        return {4: "unsigned int", 8: "uint2", 16: "uint4", 32: "wb_bytes32"}.get(
            (elems or x.vector) * x.buf.dtype.itemsize, "")

    def _vector_loop(self, s: Loop, depth: int) -> list[str]:
        """Each thread takes `vector` consecutive elements; buffers read and written at
        exactly the loop index move as one access of them where that is 4, 8 or 16
        bytes (a float4 for float32 by 4, a uint4 for a 2-byte type by 8, a uint2 for
        one by 4). The last ``extent % vector`` elements, if any, follow one per
        thread (the tail)."""
        pad = self.indent_unit * depth
        v, n, w = s.var, s.extent, s.vector

        base = f"{v}_base"
        ix = _ix(s)
        # a broadcast operand: a row vector read at i % C moves as one access too when
        # C is a multiple of the vector (its w elements are then side by side and
        # aligned); a per-row value read at i / C is one element for all w lanes
        periodic = {x: _broadcast_period(x.offset, v, w) for x in s.body
                    if isinstance(x, Load) and isinstance(x.buf, Buffer)}
        at = {x: base if x.offset == v else f"({base} % {periodic[x][1]})"
              for x in s.body if isinstance(x, (Load, Store))
              and (x.offset == v or (periodic.get(x) or ("",))[0] == "%")}

        def vt(x) -> str:
            if x not in at:
                return ""
            return "float4" if x.buf.dtype is DType.float32 and w == 4 \
                else self._vector_type(x, w)
        vec_loads = [x for x in s.body if isinstance(x, Load) and vt(x)]
        vec_stores = [x for x in s.body if isinstance(x, Store) and vt(x)]
        per_row = [x for x, p in periodic.items() if p and p[0] == "/"]
        main = n - n % w
        first = f"(({ix})blockIdx.x * blockDim.x + threadIdx.x)"
        stride = f"({ix})gridDim.x * blockDim.x"
        lines = [pad + f"for ({ix} {base} = {first} * {w}; {base} < {main}; "
                       f"{base} += {stride} * {w}) {{"]
        inner = pad + self.indent_unit
        for ld in vec_loads:
            lines.append(inner + f"const {vt(ld)} {ld.var}_v = reinterpret_cast<const "
                                 f"{vt(ld)}*>({ld.buf.name})[{at[ld]} / {w}];")
        for ld in per_row:
            lines.append(inner + f"{ld.buf.dtype.c_compute} {ld.var} = " + self.to_compute(
                ld.buf.dtype, f"{ld.buf.name}[({base} / {periodic[ld][1]})]") + ";")
        for st in vec_stores:
            lines.append(inner + f"{vt(st)} {st.buf.name}_v;")
        lines.append(inner + "#pragma unroll")
        lines.append(inner + f"for (int {v}_lane = 0; {v}_lane < {w}; ++{v}_lane) {{")
        body_pad = inner + self.indent_unit
        lines.append(body_pad + f"const {ix} {v} = {base} + {v}_lane;")
        for x in s.body:
            st = self.storage[x.buf.dtype] if x in vec_loads or x in vec_stores else ""
            if x in per_row:
                continue          # (loaded once for the thread's w elements, above)
            if x in vec_loads:
                elem = f"reinterpret_cast<const {st}*>(&{x.var}_v)[{v}_lane]"
                lines.append(body_pad + f"{x.buf.dtype.c_compute} {x.var} = "
                                        f"{self.to_compute(x.buf.dtype, elem)};")
            elif x in vec_stores:
                lines.append(body_pad + f"reinterpret_cast<{st}*>(&{x.buf.name}_v)[{v}_lane] = "
                                        f"{self.to_storage(x.buf.dtype, x.expr)};")
            else:
                lines += self.stmts([x], depth + 2)
        lines.append(inner + "}")
        for st in vec_stores:
            lines.append(inner + f"reinterpret_cast<{vt(st)}*>({st.buf.name})[{at[st]} / {w}] = "
                                 f"{st.buf.name}_v;")
        lines.append(pad + "}")
        if main < n:
            lines.append(pad + f"for ({ix} {v} = {main} + {first}; {v} < {n}; {v} += {stride}) "
                               "{  /* the tail */")
            lines += self.stmts(list(s.body), depth + 1)
            lines.append(pad + "}")
        return lines

    def block_reduce(self, s: BlockReduce, depth: int) -> list[str]:
        p = self.indent_unit * depth
        ct = s.dtype.c_compute
        comb = lambda a, b: s.combine.format(a, b)

        def shuffled(fn: str) -> str:
            # the lane's partner into a variable first: a combiner may name its operand
            # twice (an integer max: a > b ? a : b), and a warp function written in one
            # arm of ?: is called by only some lanes -- undefined with a full mask (the
            # CUDA emulator found the lanes waiting for each other)
            return (f"for (int o = 16; o > 0; o >>= 1) {{ const {ct} wb_o = "
                    f"{fn}(0xffffffffu, {s.var}, o); {s.var} = {comb(s.var, 'wb_o')}; }}")
        if s.width == "warp":
            # butterfly: every lane ends with the warp's result, no shared memory
            return [p + "/* warp-wide reduction */", p + shuffled("__shfl_xor_sync")]
        sh = f"wb_red{s.slot}"
        shfl = shuffled("__shfl_down_sync")
        if s.dtype.kind == "f":
            put, get = (lambda x: f"(double){x}"), (lambda x: f"({ct}){x}")
        else:   # integers pass through the double slots bit for bit (a 64-bit sum is exact)
            put = lambda x: f"__longlong_as_double((long long){x})"    # noqa: E731
            get = lambda x: f"({ct})__double_as_longlong({x})"          # noqa: E731
        return [
            p + "{ /* block-wide reduction: warp shuffles, then one warp over the partials */",
            p + "  " + shfl,
            p + f"  if ((threadIdx.x & 31) == 0) {sh}[threadIdx.x >> 5] = {put(s.var)};",
            p + "  __syncthreads();",
            p + "  if (threadIdx.x < 32) {",
            p + f"    {s.var} = threadIdx.x < (blockDim.x >> 5) ? {get(f'{sh}[threadIdx.x]')} "
                f": {s.identity};",
            p + "    " + shfl,
            p + f"    if (threadIdx.x == 0) {sh}[32] = {put(s.var)};",
            p + "  }",
            p + "  __syncthreads();",
            p + f"  {s.var} = {get(f'{sh}[32]')};",
            p + "}",
        ]

    def once_per_block(self, s: OncePerBlock, depth: int) -> list[str]:
        p = self.indent_unit * depth
        who = "(threadIdx.x & 31) == 0" if s.width == "warp" else "threadIdx.x == 0"
        return [p + f"if ({who}) {{"] + self.stmts(s.body, depth + 1) + [p + "}"]


def _broadcast_period(offset: str, var: str, w: int) -> tuple[str, int] | None:
    """("%", C) for an offset ``(var % C)``, ("/", C) for ``(var / C)``, where C is a
    multiple of ``w`` (else None): a row vector, or a per-row value, of a flat loop."""
    m = re.fullmatch(rf"\({re.escape(var)} ([%/]) (\d+)\)", offset)
    if m is None or int(m.group(2)) % w:
        return None
    return m.group(1), int(m.group(2))


def _slots(body: list[str], pad: str, slot: str, row_slot: str, ix: str) -> list[str]:
    """A ThreadTile's bindings of ``wb_s`` (the element's slot) and ``wb_si`` (its
    row's), each where the body uses it."""
    text = "\n".join(body)
    return [pad + f"const {ix} {v} = {e};" for v, e in (("wb_s", slot), ("wb_si", row_slot))
            if re.search(rf"\b{v}\b", text)]


def _element(buf, off: str, ld: int, trans: bool, row: str, col: str) -> str:
    """Element (row, col) of a matrix at ``off`` in ``buf``, row-major with leading
    dimension ``ld`` (``trans``: stored column-major)."""
    return (f"{buf.name}[{off} + {col} * {ld} + {row}]" if trans
            else f"{buf.name}[{off} + {row} * {ld} + {col}]")


def _ix(loop: Loop) -> str:
    """The C type of a loop's index arithmetic (64 bits where offsets can pass 2^31)."""
    return "long long" if loop.wide else "int"


def _tile_slot(loop: Loop) -> str:
    """The register slot of a tile's column: k * vector + v."""
    v, V = loop.var, loop.tile[2]
    return f"{v}_k * {V} + {v}_v" if V > 1 else f"{v}_k"


def _at_slot(x, slot: str):
    """A statement of a tiled loop with its register-copy accesses at the thread's
    slot (the renderer of the tile knows the slot; the IR indexes by column)."""
    if (isinstance(x, (Load, Store)) and isinstance(x.buf, Scratch)
            and x.buf.space in ("register", "hybrid")):
        return replace(x, offset=slot)
    return x


def _hybrid_at(x: Scratch, slot: str) -> tuple[str, str]:
    """A hybrid row copy's element at a thread's tile slot: (in registers, in shared
    memory) -- slots past the register part at (slot - registers) * threads + the
    thread, so a warp's lanes read 32 consecutive words."""
    return (f"{x.name}_r[{slot}]",
            f"{x.name}[({slot} - {x.slots}) * {x.threads} + threadIdx.x]")


RENDERERS = {"c": CRenderer(), "cuda": CudaRenderer()}
