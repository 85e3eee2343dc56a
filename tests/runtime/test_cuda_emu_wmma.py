"""CUDA's warp matrix functions (nvcuda::wmma, TF32 m16n16k8) in the CUDA emulator
(runtime/emu/mma.h): hand-written CUDA C, as the tensor-core kernels will write it, must
compute what the CUDA C++ Programming Guide says -- checked against NumPy on TF32 inputs
-- and each misuse CUDA leaves undefined must stop with a message naming it."""
from __future__ import annotations

import os

import numpy as np
import pytest

from workbench.runtime import cuda_emu

# (CI sets WB_REQUIRE_CUDA_EMU: there these fail rather than skip)
EMU_MISSING = (None if os.environ.get("WB_REQUIRE_CUDA_EMU")
               else cuda_emu.CudaEmuBackend.unavailable())
pytestmark = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

F32 = np.float32


def tf32_round(x) -> np.ndarray:
    """``__float_to_tf32``: round to nearest, ties away from zero, to 10 mantissa bits;
    NaN and infinity unchanged."""
    u = np.asarray(x, F32).view(np.uint32)
    r = (u & np.uint32(0x80000000)) | (((u & np.uint32(0x7FFFFFFF)) + np.uint32(0x1000))
                                       & np.uint32(0xFFFFE000))
    return np.where((u & 0x7F800000) == 0x7F800000, u, r).astype(np.uint32).view(F32)


def tf32_truncate(x) -> np.ndarray:
    """What the tensor core reads of a float not converted: its low 13 bits dropped."""
    u = np.asarray(x, F32).view(np.uint32)
    r = u & np.uint32(0xFFFFE000)
    return np.where((u & 0x7F800000) == 0x7F800000, u, r).astype(np.uint32).view(F32)


def sequential(a, b, c):
    """c + a @ b in float32, k in order (products of TF32 values are exact in float)."""
    acc = np.array(c, F32)
    for k in range(a.shape[1]):
        acc = (acc + np.outer(a[:, k], b[k, :]).astype(F32)).astype(F32)
    return acc


def assert_product(d, a, b, c):
    """Exactly the emulator's documented order, and within float32's error of the exact
    product (relative 1e-6 of |A| @ |B| + |C|)."""
    a64, b64, c64 = (np.asarray(m, np.float64) for m in (a, b, c))
    bound = 1e-6 * (np.abs(a64) @ np.abs(b64) + np.abs(c64))
    assert (np.abs(d - (c64 + a64 @ b64)) <= bound).all()
    np.testing.assert_array_equal(d, sequential(a, b, c))


def _rand(rng, *shape):
    # full 23-bit mantissas: rounding, truncation and the float product all differ
    return (rng.standard_normal(shape) * 4).astype(F32)


ONE_WARP = r"""
#include <mma.h>
using namespace nvcuda;

template <class LA, class LB>
__device__ void product(const float* a, const float* b, float* d, unsigned lda,
                        unsigned ldb, int d_col, int convert) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  if (convert) {
    for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  }
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 20, d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

extern "C" __global__ void t_wmma_one(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ d, int a_col, int b_col, int d_col,
                                      int convert) {
  /* A: 16x8 row-major with ldm 12, or column-major with ldm 20; B: 8x16 row-major with
     ldm 20, or column-major with ldm 12; D: ldm 20 either way */
  if (a_col && b_col) product<wmma::col_major, wmma::col_major>(a, b, d, 20, 12, d_col, convert);
  if (a_col && !b_col) product<wmma::col_major, wmma::row_major>(a, b, d, 20, 20, d_col, convert);
  if (!a_col && b_col) product<wmma::row_major, wmma::col_major>(a, b, d, 12, 12, d_col, convert);
  if (!a_col && !b_col) product<wmma::row_major, wmma::row_major>(a, b, d, 12, 20, d_col, convert);
}
"""


def _place(m, col: bool, ldm: int) -> np.ndarray:
    """Matrix ``m`` in a NaN-padded buffer of 320 floats, element (r, c) at r*ldm+c
    (row-major) or r+c*ldm (column-major)."""
    buf = np.full(320, np.nan, F32)
    r, c = np.indices(m.shape)
    buf[r + c * ldm if col else r * ldm + c] = m
    return buf


@pytest.mark.parametrize("a_col, b_col", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("d_col", [0, 1])
def test_one_warp_product_in_every_layout(a_col, b_col, d_col):
    """One warp, one 16x16x8 product from global memory: the kernel that rounds its
    fragments with __float_to_tf32 gets the product of the rounded inputs; the one that
    does not, the product of the truncated inputs (the tensor core ignores the low 13
    bits), which is not the rounded inputs' product."""
    fn = cuda_emu.build("t_wmma_one", ONE_WARP)
    rng = np.random.default_rng(10 * a_col + 2 * b_col + d_col)
    a, b = _rand(rng, 16, 8), _rand(rng, 8, 16)
    ab = [_place(a, a_col, 20 if a_col else 12), _place(b, b_col, 12 if b_col else 20)]
    got = {}
    for convert in (1, 0):
        d = np.full(320, np.nan, F32)
        cuda_emu.run(fn, 1, 32, [*ab, d, *(np.array(v, np.int32) for v in
                                           (a_col, b_col, d_col, convert))], seed=convert)
        r, c = np.indices((16, 16))
        got[convert] = d[r + c * 20 if d_col else r * 20 + c]
        assert np.isnan(np.delete(d, (r + c * 20 if d_col else r * 20 + c).ravel())).all()
    zero = np.zeros((16, 16), F32)
    assert_product(got[1], tf32_round(a), tf32_round(b), zero)
    assert_product(got[0], tf32_truncate(a), tf32_truncate(b), zero)
    assert not np.allclose(got[0], got[1], rtol=1e-5, atol=0)


BLOCK_GEMM = r"""
#include <mma.h>
using namespace nvcuda;

/* D = C + A @ B, A (M x K) and B (K x N) and C, D (M x N) row-major: a 32x32 tile a block
   of 4 warps (2x2, 16x16 each), K in steps of 8 through shared memory; A row-major there
   (ldm 12), B column-major (ldm 12), C loaded from shared, D stored column-major to
   shared (ldm 36) and copied out */
extern "C" __global__ void t_wmma_gemm(const float* __restrict__ a, const float* __restrict__ b,
                                       const float* __restrict__ c, float* __restrict__ d,
                                       int M, int N, int K) {
  WB_SHARED(float, wb_sa, 32 * 12);
  WB_SHARED(float, wb_sb, 32 * 12);
  WB_SHARED(float, wb_sc, 32 * 36);
  WB_SHARED(float, wb_sd, 32 * 36);
  const int t = threadIdx.x, warp = t >> 5, wm = warp >> 1, wn = warp & 1;
  const int tiles_n = N / 32, row0 = (blockIdx.x / tiles_n) * 32, col0 = (blockIdx.x % tiles_n) * 32;
  for (int e = t; e < 32 * 32; e += blockDim.x)
    wb_sc[(e / 32) * 36 + e % 32] = c[(row0 + e / 32) * N + col0 + e % 32];
  __syncthreads();
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::load_matrix_sync(acc, wb_sc + wm * 16 * 36 + wn * 16, 36, wmma::mem_row_major);
  for (int k0 = 0; k0 < K; k0 += 8) {
    for (int e = t; e < 32 * 8; e += blockDim.x) {
      wb_sa[(e / 8) * 12 + e % 8] = a[(row0 + e / 8) * K + k0 + e % 8];
      wb_sb[(e % 32) * 12 + e / 32] = b[(k0 + e / 32) * N + col0 + e % 32];
    }
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, wb_sa + wm * 16 * 12, 12);
    wmma::load_matrix_sync(fb, wb_sb + wn * 16 * 12, 12);
    for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::mma_sync(acc, fa, fb, acc);
    __syncthreads();
  }
  wmma::store_matrix_sync(wb_sd + wm * 16 + wn * 16 * 36, acc, 36, wmma::mem_col_major);
  __syncthreads();
  for (int e = t; e < 32 * 32; e += blockDim.x)
    d[(row0 + e / 32) * N + col0 + e % 32] = wb_sd[(e / 32) + (e % 32) * 36];
}
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_a_block_gemm_through_shared_memory(seed):
    """Four warps a block, four blocks, K = 24 in three steps accumulating into one
    fragment that starts as C (an accumulator load); every shared access checked for
    bounds and races on the way."""
    fn = cuda_emu.build("t_wmma_gemm", BLOCK_GEMM)
    M, N, K = 64, 64, 24
    rng = np.random.default_rng(seed)
    a, b, c = _rand(rng, M, K), _rand(rng, K, N), _rand(rng, M, N)
    d = np.full((M, N), np.nan, F32)
    cuda_emu.run(fn, (M // 32) * (N // 32), 128,
                 [a, b, c, d, *(np.array(v, np.int32) for v in (M, N, K))], seed=seed)
    assert_product(d, tf32_round(a), tf32_round(b), c)


TO_TF32 = r"""
#include <mma.h>
extern "C" __global__ void t_tf32(const float* __restrict__ x, float* __restrict__ y, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = __float_to_tf32(x[i]);
}
"""

TF32_CASES = [  # (input bits, expected bits)
    (0x3F800000, 0x3F800000),     # 1.0
    (0x3F801000, 0x3F802000),     # 1 + 2^-11: a tie, away from zero (even would be 1.0)
    (0x3F800FFF, 0x3F800000),     # just under the tie: down
    (0x3F803000, 0x3F804000),     # a tie with an odd kept bit: up
    (0x3FFFF000, 0x40000000),     # a tie below 2.0: up into the next binade
    (0x3FFFFFFF, 0x40000000),
    (0xBF801000, 0xBF802000),     # negative: away from zero
    (0xBF800FFF, 0xBF800000),
    (0x7F7FFFFF, 0x7F800000),     # the largest float: rounds to infinity
    (0x7F800000, 0x7F800000),     # inf, -inf
    (0xFF800000, 0xFF800000),
    (0x00000001, 0x00000000),     # the smallest subnormal
    (0x00001000, 0x00002000),     # a subnormal tie
    (0x80000FFF, 0x80000000),     # -0 keeps its sign
    (0x007FF000, 0x00800000),     # the largest subnormals round to the smallest normal
]


def test_float_to_tf32_rounds_to_nearest_ties_away():
    fn = cuda_emu.build("t_tf32", TO_TF32)
    rng = np.random.default_rng(3)
    rand = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    rand = rand[(rand & 0x7F800000) != 0x7F800000]            # (NaN apart, below)
    bits = np.array([i for i, _ in TF32_CASES] + [0x7FC00000, 0xFFA00001], np.uint32)
    x = np.concatenate([bits, rand]).view(F32)
    y = np.full_like(x, -1.0)
    cuda_emu.run(fn, 1, 64, [x, y, np.array(x.size, np.int32)])
    yb = y.view(np.uint32)
    want = np.array([o for _, o in TF32_CASES], np.uint32)
    np.testing.assert_array_equal(yb[:len(TF32_CASES)], want)
    assert np.isnan(y[len(TF32_CASES):len(bits)]).all()
    np.testing.assert_array_equal(yb[len(bits):], tf32_round(rand.view(F32)).view(np.uint32))
    np.testing.assert_array_equal(tf32_round(bits[:len(TF32_CASES)].view(F32)).view(np.uint32),
                                  want)                        # (the NumPy helper too)


MISUSE = r"""
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void t_wmma_misuse(const float* __restrict__ a, const float* __restrict__ b,
                                         float* __restrict__ d, int how) {
  WB_SHARED(float, wb_s, 256);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int e = threadIdx.x; e < 256; e += blockDim.x) wb_s[e] = a[e];
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  if (how == 1 && lane >= 16) return;                          /* half the warp only */
  const float* pa = a + (how == 2 && lane == 5 ? 8 : 0);       /* lane 5 elsewhere */
  unsigned lda = how == 3 ? 10 : (how == 4 && lane == 9 ? 16 : 8);
  if (how == 5) pa = a + 4;                                    /* 16 bytes off 32 */
  if (how == 6) wmma::load_matrix_sync(fa, wb_s + 4, 8);       /* shared, 16 bytes off */
  else if (how == 7) wmma::load_matrix_sync(fa, wb_s + 136, 8);   /* past wb_s's end */
  else wmma::load_matrix_sync(fa, pa, lda);
  wmma::load_matrix_sync(fb, b, 16);
  if (how == 8 && lane == 3) fa.x[0] = 1.0f;                   /* a lane-dependent change */
  wmma::mma_sync(fc, fa, fb, fc);
  if (how == 9) {                                              /* every warp the same tile */
    __syncthreads();
    wmma::store_matrix_sync(wb_s + 0, fc, 16, wmma::mem_row_major);
    return;
  }
  if (how == 10) {                        /* assumes lane L holds row L/2, columns 8(L%2)+t */
    for (int t = 0; t < fc.num_elements; ++t) d[warp * 256 + lane * 8 + t] = fc.x[t];
    return;
  }
  for (int t = 0; t < fc.num_elements; ++t) fc.x[t] = 2.0f * fc.x[t] + 1.0f;  /* uniform */
  wmma::store_matrix_sync(d + warp * 256, fc, 16, wmma::mem_row_major);
}
"""


def _misuse(how: int, block: int = 32):
    fn = cuda_emu.build("t_wmma_misuse", MISUSE)
    rng = np.random.default_rng(how)
    a = tf32_round(_rand(rng, 256))
    b = tf32_round(_rand(rng, 8, 16))
    d = np.full(256 * max(1, block // 32), np.nan, F32)
    cuda_emu.run(fn, 1, block, [a, b, d, np.array(how, np.int32)], seed=how)
    want = sequential(a[:128].reshape(16, 8), b, np.zeros((16, 16), F32))
    return d.reshape(-1, 16, 16), want


def test_uniform_elementwise_ops_on_the_accumulator_are_fine():
    """The correct use next to each misuse below: two warps, each the whole product,
    scaled elementwise in the fragment."""
    d, want = _misuse(0, block=64)
    for w in range(2):
        np.testing.assert_array_equal(d[w], 2 * want + 1)


@pytest.mark.parametrize("how, block, message", [
    (1, 32, r"deadlock.*\[0-15\] in a warp function, \[16-31\] have exited.*warp 0 waits "
            r"for lanes 0xffff0000 of mask 0xffffffff"),
    (0, 16, r"mask 0xffffffff names lanes past the block's last thread \(the warp has 16\)"),
    (2, 64, r"wmma::load_matrix_sync\(matrix_a\): lanes 0 and 5 of warp [01] pass different "
            r"pointers \(lane 5's is 32 bytes from lane 0's\).*warp-collective"),
    (4, 32, r"lanes 0 and 9 of warp 0 pass different ldm or layouts"),
    (3, 32, r"wmma::load_matrix_sync\(matrix_a\): ldm 10 is not a multiple of 4 floats"),
    (5, 32, r"the pointer \(parameter 0 \+ 16 bytes\) is not 32-byte aligned \(16 bytes past\)"),
    (6, 32, r"the pointer \(shared wb_s \+ 4\) is not 32-byte aligned"),
    (7, 32, r"shared wb_s\[256\] is out of its bounds \[0, 256\)"),
    (8, 32, r"wmma::mma_sync: lanes 0 and 3 of warp 0 hold different matrix_a or matrix_b "
            r"fragments"),
    (9, 64, r"a race on shared wb_s\[\d+\]: written here and by thread"),
])
def test_misuse_is_named(how, block, message):
    """A wmma call made by part of a warp, lanes disagreeing on the pointer or ldm, CUDA's
    ldm and alignment rules, shared-memory bounds and races through `wb_s + off`, and a
    lane-dependent change to an A fragment: each stops the launch, saying what."""
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=message):
        _misuse(how, block)


def test_a_kernel_assuming_the_accumulators_layout_gets_a_wrong_answer():
    """The accumulator's mapping to lanes is unspecified; the emulator's is no one's guess,
    so reading x[t] as row L/2, column 8(L%2)+t (or any such) does not give the product."""
    d, want = _misuse(10)
    assert sorted(d[0].ravel()) == sorted(want.ravel())    # the same values, misplaced
    assert not np.array_equal(d[0], want)
    assert (d[0] != want).mean() > 0.9


# -- half precision: __half and __nv_bfloat16 fragments, m16n16k16 -----------------------
def bf16_round(x) -> np.ndarray:
    """``__float2bfloat16``: round to nearest even, to float's upper 16 bits (as uint16)."""
    u = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, F32)), ((u >> 16) | 0x40).astype(np.uint16), r)


def bf16_value(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint32) << 16).view(F32)


HALF_WARP = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda;

template <class T, class LA, class LB>
__device__ void product(const T* a, const T* b, const float* c, float* d, unsigned lda,
                        unsigned ldb) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 24, wmma::mem_col_major);
}

template <class T>
__device__ void any_layout(const T* a, const T* b, const float* c, float* d, int a_col,
                           int b_col, unsigned ld) {
  if (a_col && b_col) product<T, wmma::col_major, wmma::col_major>(a, b, c, d, ld, ld);
  if (a_col && !b_col) product<T, wmma::col_major, wmma::row_major>(a, b, c, d, ld, ld);
  if (!a_col && b_col) product<T, wmma::row_major, wmma::col_major>(a, b, c, d, ld, ld);
  if (!a_col && !b_col) product<T, wmma::row_major, wmma::row_major>(a, b, c, d, ld, ld);
}

/* A and B 16 x 16 with ldm `ld` (24, or 12: not a multiple of 8 halves) in either layout,
   as __half (bf16 = 0) or __nv_bfloat16 bits; C row-major; D column-major, ldm 24 */
extern "C" __global__ void t_wmma_half(const unsigned short* __restrict__ a,
                                       const unsigned short* __restrict__ b,
                                       const float* __restrict__ c, float* __restrict__ d,
                                       int bf16, int a_col, int b_col, int ld) {
  if (bf16)
    any_layout(reinterpret_cast<const __nv_bfloat16*>(a),
               reinterpret_cast<const __nv_bfloat16*>(b), c, d, a_col, b_col, ld);
  else
    any_layout(reinterpret_cast<const __half*>(a), reinterpret_cast<const __half*>(b), c, d,
               a_col, b_col, ld);
}
"""


def _half_bits(rng, bf16: bool, shape):
    """Random values exact in the half type: (their bits, their float32 values)."""
    x = _rand(rng, *shape)
    if bf16:
        bits = bf16_round(x)
        return bits, bf16_value(bits)
    h = x.astype(np.float16)
    return h.view(np.uint16), h.astype(F32)


def _place_half(bits, col: bool, ldm: int) -> np.ndarray:
    buf = np.full(16 * 24, 0x7E00, np.uint16)                 # (NaN in either type)
    r, c = np.indices(bits.shape)
    buf[r + c * ldm if col else r * ldm + c] = bits
    return buf


@pytest.mark.parametrize("bf16", [0, 1])
@pytest.mark.parametrize("a_col, b_col", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_half_fragments_multiply_exactly_in_every_layout(bf16, a_col, b_col):
    """One warp, D = C + A @ B at 16x16x16 from __half or __nv_bfloat16 memory: the
    products of half values are exact in float, summed in order -- NumPy's sequential
    float32 sum to the bit."""
    fn = cuda_emu.build("t_wmma_half", HALF_WARP)
    rng = np.random.default_rng(8 * bf16 + 2 * a_col + b_col)
    (ab, a), (bb, b) = _half_bits(rng, bf16, (16, 16)), _half_bits(rng, bf16, (16, 16))
    c = _rand(rng, 16, 16)
    d = np.full(24 * 16, np.nan, F32)
    cuda_emu.run(fn, 1, 32, [_place_half(ab, a_col, 24), _place_half(bb, b_col, 24), c, d,
                             *(np.array(v, np.int32) for v in (bf16, a_col, b_col, 24))])
    r, col = np.indices((16, 16))
    assert_product(d[r + col * 24], a, b, c)


@pytest.mark.parametrize("bf16", [0, 1])
def test_a_half_fragments_ldm_counts_in_halves(bf16):
    """ldm 12 is 24 bytes of halves: not a multiple of 16 bytes (while 12 floats is)."""
    fn = cuda_emu.build("t_wmma_half", HALF_WARP)
    rng = np.random.default_rng(4)
    (ab, _), (bb, _) = _half_bits(rng, bf16, (16, 16)), _half_bits(rng, bf16, (16, 16))
    with pytest.raises(cuda_emu.EmulatedLaunchError,
                       match=r"load_matrix_sync\(matrix_a\): ldm 12 is not a multiple of 8 "
                             r"halves \(16 bytes\)"):
        cuda_emu.run(fn, 1, 32, [_place_half(ab, 0, 12), _place_half(bb, 0, 12),
                                 np.zeros((16, 16), F32), np.zeros(24 * 16, F32),
                                 *(np.array(v, np.int32) for v in (bf16, 0, 0, 12))])


TO_BF16 = r"""
#include <cuda_bf16.h>
extern "C" __global__ void t_bf16(const float* __restrict__ x, unsigned short* __restrict__ y,
                                  float* __restrict__ z, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const __nv_bfloat16 h = __float2bfloat16(x[i]);
    y[i] = h.x;
    z[i] = __bfloat162float(h);
  }
}
"""

BF16_CASES = [  # (float bits, bfloat16 bits)
    (0x3F800000, 0x3F80),     # 1.0
    (0x3F808000, 0x3F80),     # a tie, to even (down)
    (0x3F818000, 0x3F82),     # a tie with an odd kept bit: up
    (0x3F807FFF, 0x3F80),
    (0x3F808001, 0x3F81),
    (0xBF808001, 0xBF81),     # negative: the same, by magnitude
    (0x7F7FFFFF, 0x7F80),     # the largest float: to infinity
    (0xFF800000, 0xFF80),
    (0x00008000, 0x0000),     # a subnormal tie: to even
    (0x80000001, 0x8000),
]


def test_float_to_bfloat16_rounds_to_nearest_even():
    fn = cuda_emu.build("t_bf16", TO_BF16)
    rng = np.random.default_rng(5)
    rand = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    rand = rand[(rand & 0x7F800000) != 0x7F800000]
    bits = np.array([i for i, _ in BF16_CASES] + [0x7FC00000, 0xFFA00001], np.uint32)
    x = np.concatenate([bits, rand]).view(F32)
    y, z = np.zeros(x.size, np.uint16), np.zeros(x.size, F32)
    cuda_emu.run(fn, 1, 64, [x, y, z, np.array(x.size, np.int32)])
    np.testing.assert_array_equal(y[:len(BF16_CASES)], [o for _, o in BF16_CASES])
    assert np.isnan(z[len(BF16_CASES):len(bits)]).all()         # NaN stays NaN (quiet)
    np.testing.assert_array_equal(y[len(bits):], bf16_round(rand.view(F32)))
    np.testing.assert_array_equal(z, bf16_value(y))
