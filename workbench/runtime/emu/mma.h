/* The emulator's mma.h: CUDA's warp matrix functions (nvcuda::wmma) on the CPU, in TF32
 * (shape m16n16k8) and in __half and __nv_bfloat16 (m16n16k16), accumulating in float
 * (runtime/cuda_emu.py builds kernels with -I this directory, so a kernel's
 * `#include <mma.h>` lands here).
 *
 * Semantics are the CUDA C++ Programming Guide's ("Warp Matrix Functions"): matrix_a is
 * 16xK (M x K), matrix_b Kx16 (K x N), the accumulator 16x16 float. In memory,
 * matrix_a row_major holds (i,k) at p[i*ldm+k], col_major at p[i+k*ldm]; matrix_b
 * row_major (k,j) at p[k*ldm+j], col_major at p[k+j*ldm]; the accumulator
 * mem_row_major (i,j) at p[i*ldm+j], mem_col_major at p[i+j*ldm]. Every *_sync
 * function is warp-collective; ldm must be a multiple of 16 bytes (4 floats, 8 halves)
 * and the pointer 32-byte aligned; a fragment loads from and stores to memory of its
 * own element type (float for tf32 and the accumulator, __half, __nv_bfloat16).
 *
 * The emulator's choices, where CUDA leaves things unspecified:
 * - An A or B fragment holds the whole matrix in every lane (num_elements 16*K; A's (i,k)
 *   in x[i*K+k], B's (k,j) in x[k*16+j]): code may only apply uniform elementwise ops to
 *   x[0..num_elements) anyway. mma_sync checks that every lane holds the same A and B
 *   (a lane-dependent change of x[] relies on a layout CUDA does not promise).
 * - An accumulator fragment holds 8 elements a lane: lane L's x[t] is matrix element
 *   e = perm(L + 32*t), row e/16, column e%16, perm(q) = (167*q + 89) mod 256 -- a
 *   layout chosen to be no one's guess, so code that assumes one fails the comparison
 *   with NumPy. Loads and stores of an accumulator touch the lane's own 8 elements only
 *   (shared-memory race checks between threads stay exact); loads of A and B read the
 *   whole matrix in every lane.
 * - Each *_sync function exchanges among all 32 lanes (wb_emu_warp_exchange, full
 *   mask): a call that only part of the warp makes deadlocks, and the runtime reports
 *   it as it does for __syncwarp; lanes passing different pointers, ldm or layouts are
 *   an error naming them. fill_fragment is per lane, as on a GPU.
 * - Pointers: a raw pointer (global memory: a kernel parameter's buffer, judged 32-byte
 *   aligned by its byte offset into that buffer, as a cudaMalloc'd buffer starts
 *   256-aligned; a pointer into no parameter by its address), or a WB_SHARED array
 *   plus an offset (`wb_tc + off`, wb_cuda_emu.h's wb_emu_shared_ptr; aligned when
 *   offset*sizeof(element) is a multiple of 32, the array being taken as declared
 *   __align__(32)), each element through the array's checked access (bounds, races).
 * - mma_sync: each lane computes its own 8 elements, d(i,j) = c(i,j) + sum over k =
 *   0..K-1 in order of a(i,k)*b(k,j), in float (fmaf; a product of two halves is exact
 *   in float). The tensor core reads a TF32 input with its low 13 mantissa bits
 *   ignored (masked off) unless the kernel rounded them with __float_to_tf32 first.
 *   d may alias c.
 * - __float_to_tf32 (global, and in nvcuda::wmma as CUDA's samples call it): round to
 *   nearest, ties away from zero (cvt.rna.tf32.f32), to 10 explicit mantissa bits, as a
 *   float whose low 13 bits are zero; NaN and infinity pass through. */
#ifndef WB_EMU_MMA_H
#define WB_EMU_MMA_H

#include "wb_cuda_emu.h"

inline float __float_to_tf32(float f) {
  const unsigned int u = wb_emu_bits<unsigned int>(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;                   /* inf, NaN */
  const unsigned int m = ((u & 0x7fffffffu) + 0x1000u) & 0xffffe000u;  /* (may reach inf) */
  return wb_emu_bits<float>((u & 0x80000000u) | m);
}

namespace nvcuda {
namespace wmma {

using ::__float_to_tf32;

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision { struct tf32; }

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;

namespace wb_detail {
/* what an A or B fragment of precision T holds (E, as its memory stores it), its depth
   K, and the value the tensor core multiplies (read) */
template <class T> struct in;
template <> struct in<precision::tf32> {
  using E = float;
  static constexpr int K = 8;
  /* TF32: the low 13 mantissa bits ignored (unless the kernel rounded them first) */
  static float read(float f) {
    const unsigned int u = wb_emu_bits<unsigned int>(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    return wb_emu_bits<float>(u & 0xffffe000u);
  }
  static float from(float v) { return v; }
};
template <> struct in<__half> {
  using E = __half;
  static constexpr int K = 16;
  static float read(__half h) { return __half2float(h); }
  static __half from(float v) { return __float2half(v); }
};
template <> struct in<__nv_bfloat16> {
  using E = __nv_bfloat16;
  static constexpr int K = 16;
  static float read(__nv_bfloat16 h) { return __bfloat162float(h); }
  static __nv_bfloat16 from(float v) { return __float2bfloat16(v); }
};

/* an A (16 x K) or B (K x 16) fragment: the whole matrix in every lane */
template <class T, int K> struct whole {
  static_assert(K == in<T>::K, "wmma fragments: m16n16k8 in precision::tf32, m16n16k16 in "
                "__half or __nv_bfloat16");
  static constexpr int num_elements = 16 * K;
  using element_type = typename in<T>::E;
  element_type x[num_elements];
};
template <class L> struct layout_ok {
  static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                "an A or B fragment is row_major or col_major");
};
}  // namespace wb_detail

template <int K, class T, class L>
struct fragment<matrix_a, 16, 16, K, T, L> : wb_detail::whole<T, K>, wb_detail::layout_ok<L> {};
template <int K, class T, class L>
struct fragment<matrix_b, 16, 16, K, T, L> : wb_detail::whole<T, K>, wb_detail::layout_ok<L> {};
template <int K> struct fragment<accumulator, 16, 16, K, float, void> {
  static_assert(K == 8 || K == 16, "the emulator's accumulators: m16n16k8 or m16n16k16");
  static constexpr int num_elements = 8;
  using element_type = float;
  float x[num_elements];
};

namespace wb_detail {
enum { OP_LOAD_A = 64, OP_LOAD_B, OP_LOAD_C, OP_STORE, OP_MMA };  /* warp-exchange ops */

/* lane L's t-th accumulator element: the matrix element perm(L + 32 t), row-major */
inline unsigned int acc_element(unsigned int lane, int t) {
  return (167u * (lane + 32u * (unsigned int)t) + 89u) & 255u;
}

/* where lane's t-th accumulator element lies in memory of that ldm and layout */
inline long long acc_index(unsigned int lane, int t, unsigned int ldm, layout_t layout) {
  const long long e = acc_element(lane, t), i = e >> 4, j = e & 15;
  return layout == mem_row_major ? i * ldm + j : i + j * ldm;
}

/* -- the memory a wmma function reads or writes: a raw pointer, or a shared array's
   checked elements; E its element type */
template <class P> struct mem;
template <class T> struct mem<T*> {
  using E = typename std::remove_cv<T>::type;
  static E get(T* p, long long i) { return p[i]; }
  static void put(T* p, long long i, E v) { p[i] = v; }
  static unsigned long long id(T* p) { return (unsigned long long)(std::uintptr_t)p; }
  /* bytes past 32-byte alignment; `what` gets the pointer in words */
  static unsigned int misalign(T* p, char* what, std::size_t n) {
    const std::uintptr_t a = (std::uintptr_t)p;
    int best = -1;
    std::uintptr_t base = 0;
    for (int i = 0; i < wb_emu_params.n; ++i) {
      if (wb_emu_params.kinds[i] == 0) continue;
      const std::uintptr_t b = *(const std::uintptr_t*)wb_emu_params.args[i];
      if (b <= a && (best < 0 || b > base)) { best = i; base = b; }
    }
    if (best < 0) {
      std::snprintf(what, n, "%p", (const void*)p);
      return (unsigned int)(a % 32u);
    }
    std::snprintf(what, n, "parameter %d + %llu bytes", best, (unsigned long long)(a - base));
    return (unsigned int)((a - base) % 32u);
  }
};
template <class T, unsigned long long N> struct mem<wb_emu_shared_ptr<T, N>> {
  using P = wb_emu_shared_ptr<T, N>;
  using E = T;
  static E get(const P& p, long long i) { return p[i]; }
  static void put(const P& p, long long i, E v) { p[i] = v; }
  static unsigned long long id(const P& p) {
    return (unsigned long long)(std::uintptr_t)p.s->v + (unsigned long long)p.off * sizeof(T);
  }
  static unsigned int misalign(const P& p, char* what, std::size_t n) {
    std::snprintf(what, n, "shared %s + %lld", p.s->name, p.off);
    const long long r = (p.off * (long long)sizeof(T)) % 32;
    return (unsigned int)(r < 0 ? r + 32 : r);
  }
};

/* what a kernel passes, as mem<> takes it: `wb_tc` alone is `wb_tc + 0` */
template <class T> T* view(T* p) { return p; }
template <class T, unsigned long long N>
wb_emu_shared_ptr<T, N> view(const wb_emu_shared_ptr<T, N>& p) { return p; }
template <class T, unsigned long long N>
wb_emu_shared_ptr<T, N> view(wb_emu_shared<T, N>& s) { return s + 0; }

/* the memory type P's elements are E (a fragment's loads and stores take its own) */
template <class E, class P> void check_type() {
  static_assert(std::is_same<typename mem<P>::E, E>::value,
                "a wmma load or store takes memory of its fragment's element type (float "
                "for tf32 and the accumulator, __half or __nv_bfloat16 for theirs)");
}

inline unsigned int warp_of_caller() {
  const wb_emu_ids* d = wb_emu_current();
  return (d->tid.x + d->bdim.x * (d->tid.y + d->bdim.y * d->tid.z)) >> 5;
}

/* every lane of the warp arrives with `mine`; lanes that differ are `what` */
inline void agree(int op, const char* fn, unsigned long long mine, const char* what,
                  bool bytes) {
  unsigned long long all[32];
  wb_emu_warp_exchange(0xffffffffu, mine, op, all);
  for (unsigned int l = 1; l < 32; ++l)
    if (all[l] != all[0]) {
      char b[400], d[80] = "";
      if (bytes)
        std::snprintf(d, sizeof d, " (lane %u's is %lld bytes from lane 0's)", l,
                      (long long)(all[l] - all[0]));
      std::snprintf(b, sizeof b, "%s: lanes 0 and %u of warp %u pass different %s%s; a "
                    "wmma function is warp-collective: every lane of the warp must pass the "
                    "same pointer, ldm and layout", fn, l, warp_of_caller(), what, d);
      wb_emu_fail(b);
    }
}

/* the checks every load and store makes, warp-wide (ldm: in elements of E) */
template <class P> void check_access(int op, const char* fn, const P& p, unsigned int ldm,
                                     int layout) {
  agree(op, fn, mem<P>::id(p), "pointers", true);
  agree(op, fn, (unsigned long long)ldm << 8 | (unsigned int)layout, "ldm or layouts", false);
  char b[400], where[160];
  constexpr unsigned int per16 = 16u / sizeof(typename mem<P>::E);
  if (ldm % per16) {
    std::snprintf(b, sizeof b, "%s: ldm %u is not a multiple of %u %s (16 bytes), as "
                  "CUDA requires", fn, ldm, per16, per16 == 4 ? "floats" : "halves");
    wb_emu_fail(b);
  }
  const unsigned int off = mem<P>::misalign(p, where, sizeof where);
  if (off) {
    std::snprintf(b, sizeof b, "%s: the pointer (%s) is not 32-byte aligned (%u bytes "
                  "past), as CUDA requires", fn, where, off);
    wb_emu_fail(b);
  }
}

/* an R x C matrix (A: 16 x K, B: K x 16) whole into x: (r,c) at x[r*C+c], from
   p[r*ldm+c] (row_major) or p[r+c*ldm] (col_major) */
template <int R, int C, class L, class E, class P>
void load_whole(E* x, int op, const char* fn, P&& ptr, unsigned int ldm) {
  const auto p = view(ptr);
  using M = mem<decltype(view(ptr))>;
  check_type<E, decltype(view(ptr))>();
  constexpr bool row = std::is_same<L, row_major>::value;
  check_access(op, fn, p, ldm, row);
  for (long long r = 0; r < R; ++r)
    for (long long c = 0; c < C; ++c) x[r * C + c] = M::get(p, row ? r * ldm + c : r + c * ldm);
}

/* FNV-1a of a fragment's bytes */
template <class F> unsigned long long digest(const F& f, unsigned long long h) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(f.x);
  for (std::size_t i = 0; i < sizeof f.x; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
}  // namespace wb_detail

template <int K, class T, class L, class P>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, K, T, L>& f, P&& ptr, unsigned ldm) {
  wb_detail::load_whole<16, K, L>(f.x, wb_detail::OP_LOAD_A, "wmma::load_matrix_sync(matrix_a)",
                                  ptr, ldm);
}

template <int K, class T, class L, class P>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, K, T, L>& f, P&& ptr, unsigned ldm) {
  wb_detail::load_whole<K, 16, L>(f.x, wb_detail::OP_LOAD_B, "wmma::load_matrix_sync(matrix_b)",
                                  ptr, ldm);
}

template <int K, class P>
inline void load_matrix_sync(fragment<accumulator, 16, 16, K, float>& f, P&& ptr,
                             unsigned ldm, layout_t layout) {
  auto p = wb_detail::view(ptr);
  using M = wb_detail::mem<decltype(p)>;
  wb_detail::check_type<float, decltype(p)>();
  wb_detail::check_access(wb_detail::OP_LOAD_C, "wmma::load_matrix_sync(accumulator)", p,
                          ldm, layout);
  const unsigned int lane = wb_emu_lane();
  for (int t = 0; t < 8; ++t) f.x[t] = M::get(p, wb_detail::acc_index(lane, t, ldm, layout));
}

template <int K, class P>
inline void store_matrix_sync(P&& ptr, const fragment<accumulator, 16, 16, K, float>& f,
                              unsigned ldm, layout_t layout) {
  auto p = wb_detail::view(ptr);
  using M = wb_detail::mem<decltype(p)>;
  wb_detail::check_type<float, decltype(p)>();
  wb_detail::check_access(wb_detail::OP_STORE, "wmma::store_matrix_sync", p, ldm, layout);
  const unsigned int lane = wb_emu_lane();
  for (int t = 0; t < 8; ++t) M::put(p, wb_detail::acc_index(lane, t, ldm, layout), f.x[t]);
}

template <int K> inline void fill_fragment(fragment<accumulator, 16, 16, K, float>& f, float v) {
  for (int i = 0; i < 8; ++i) f.x[i] = v;
}
template <class Use, int K, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, K, T, L>& f, float v) {
  for (int i = 0; i < 16 * K; ++i) f.x[i] = wb_detail::in<T>::from(v);
}

/* d = a @ b + c: each lane its own 8 elements, the products in float (exact for half
   inputs; TF32 inputs read as the tensor core reads them), summed in order by fmaf */
template <int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, K, float>& d,
                     const fragment<matrix_a, 16, 16, K, T, LA>& a,
                     const fragment<matrix_b, 16, 16, K, T, LB>& b,
                     const fragment<accumulator, 16, 16, K, float>& c) {
  const unsigned long long h = wb_detail::digest(b, wb_detail::digest(a, 0xcbf29ce484222325ULL));
  unsigned long long all[32];
  wb_emu_warp_exchange(0xffffffffu, h, wb_detail::OP_MMA, all);
  for (unsigned int l = 1; l < 32; ++l)
    if (all[l] != all[0]) {
      char m[320];
      std::snprintf(m, sizeof m, "wmma::mma_sync: lanes 0 and %u of warp %u hold different "
                    "matrix_a or matrix_b fragments: a lane-dependent change of a fragment's "
                    "x[], whose mapping to the matrix CUDA leaves unspecified", l,
                    wb_detail::warp_of_caller());
      wb_emu_fail(m);
    }
  using I = wb_detail::in<T>;
  const unsigned int lane = wb_emu_lane();
  float r[8];
  for (int t = 0; t < 8; ++t) {
    const unsigned int e = wb_detail::acc_element(lane, t), i = e >> 4, j = e & 15;
    float s = c.x[t];
    for (int k = 0; k < K; ++k) s = std::fma(I::read(a.x[i * K + k]), I::read(b.x[k * 16 + j]), s);
    r[t] = s;
  }
  for (int t = 0; t < 8; ++t) d.x[t] = r[t];
}

}  // namespace wmma
}  // namespace nvcuda

#endif
