/* CUDA C's built-ins on the CPU: what the workbench's generated CUDA source needs to
 * compile as C++17 and run in the emulator (runtime/cuda_emu.py, runtime/emu/runtime.cpp).
 *
 * Kept light (no STL containers, no threads here): every kernel translation unit
 * includes it. The machinery -- one fiber per GPU thread, blocks on OS threads, the
 * barriers and warp exchanges, the child process a launch runs in -- lives in the
 * runtime library, which each kernel library calls through the wb_emu_* functions
 * declared below. Semantics follow the CUDA C++ Programming Guide: __syncthreads waits
 * for every thread of the block that has not exited; a *_sync warp function waits for
 * every lane its mask names and reading a lane outside the mask is an error (undefined
 * on a GPU); atomics are sequentially consistent; shared memory is per block. */
#ifndef WB_CUDA_EMU_H
#define WB_CUDA_EMU_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#define WB_CUDA_EMU 1

/* -- the launch interface (runtime.cpp) ------------------------------------------ */
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

struct wb_emu_ids {
  uint3 tid; uint3 bid; dim3 bdim; dim3 gdim;
  const unsigned long long* epoch;     /* the block's barrier interval, counted up */
  unsigned long long block_start;      /* the epoch the block began in */
};

/* what Python passes for one launch (cuda_emu.py's _Launch mirrors it) */
struct wb_emu_launch_args {
  unsigned int grid, block;
  int cooperative;
  int nargs;
  void** args;                         /* each points at the address of an argument's host
                                          data: a buffer's contents, or a scalar's value */
  const unsigned long long* sizes;     /* bytes behind each pointer argument (0: a scalar) */
  double timeout_s;
  unsigned long long seed;             /* the order blocks and threads are run in */
  char* error;                         /* what went wrong, for the exception */
  unsigned long long error_len;
  /* where a clean launch leaves its global-memory accesses, 16 words a parameter: bytes
     read by access width (1, 2, 4, 8, 16 bytes), bytes written so, distinct bytes read,
     distinct bytes written, load requests, their 32-byte sectors, store requests,
     their sectors (null: not wanted) */
  unsigned long long* accesses;
};

extern "C" {
const wb_emu_ids* wb_emu_current(void);
void wb_emu_syncthreads(void);
/* every lane of `mask` deposits `mine`; returns when all have; `out` gets each lane's */
void wb_emu_warp_exchange(unsigned int mask, unsigned long long mine, int op,
                          unsigned long long* out);
void wb_emu_check_lane(unsigned int mask, unsigned int src, const char* what);
__attribute__((noreturn)) void wb_emu_fail(const char* what);
/* runs one launch in a child process; 0, or non-zero with launch->error said */
int wb_emu_run(void* kernel, void (*trampoline)(void*, void**), const int* kinds, int nparams,
               const wb_emu_launch_args* launch);
}

/* -- qualifiers ------------------------------------------------------------------ */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* shared memory: one copy per block; a block runs on one OS thread at a time */
#define __shared__ static thread_local
#define __constant__ static

#define threadIdx (wb_emu_current()->tid)
#define blockIdx (wb_emu_current()->bid)
#define blockDim (wb_emu_current()->bdim)
#define gridDim (wb_emu_current()->gdim)
#define warpSize 32

__forceinline__ void __syncthreads(void) { wb_emu_syncthreads(); }
__forceinline__ void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
__forceinline__ void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* -- vector types: CUDA's sizes and alignments ------------------------------------ */
#define WB_EMU_VEC(name, T, align) \
  struct __attribute__((aligned(align))) name##4 { T x, y, z, w; }; \
  struct __attribute__((aligned(align / 2))) name##2 { T x, y; };
WB_EMU_VEC(float, float, 16)
WB_EMU_VEC(int, int, 16)
WB_EMU_VEC(uint, unsigned int, 16)
#undef WB_EMU_VEC
struct __attribute__((aligned(8))) ushort4 { unsigned short x, y, z, w; };
struct __attribute__((aligned(4))) ushort2 { unsigned short x, y; };
struct __attribute__((aligned(16))) double2 { double x, y; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

/* -- bit casts and intrinsics ----------------------------------------------------- */
template <class To, class From> inline To wb_emu_bits(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast of unequal sizes");
  To r; std::memcpy(&r, &v, sizeof r); return r;
}
inline float __int_as_float(int x) { return wb_emu_bits<float>(x); }
inline int __float_as_int(float x) { return wb_emu_bits<int>(x); }
inline float __uint_as_float(unsigned int x) { return wb_emu_bits<float>(x); }
inline unsigned int __float_as_uint(float x) { return wb_emu_bits<unsigned int>(x); }
inline double __longlong_as_double(long long x) { return wb_emu_bits<double>(x); }
inline long long __double_as_longlong(double x) { return wb_emu_bits<long long>(x); }
/* the fast-math intrinsics, computed exactly (within their documented error) */
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }

/* -- half precision (cuda_fp16.h): IEEE binary16, round to nearest even ----------- */
struct __half { unsigned short x; };
inline float __half2float(__half h) {
  const unsigned int s = (unsigned int)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu,
                     m = h.x & 0x3ffu;
  if (e == 0x1fu) return wb_emu_bits<float>(s | 0x7f800000u | (m << 13));   /* inf, NaN */
  if (e == 0) {                                                             /* subnormal */
    const float f = std::ldexp((float)m, -24);
    return s ? -f : f;
  }
  return wb_emu_bits<float>(s | ((e + 112u) << 23) | (m << 13));
}
inline __half __float2half(float f) {
  const unsigned int u = wb_emu_bits<unsigned int>(f), s = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a != a) return {(unsigned short)(s | 0x7e00u | ((u >> 13) & 0x3ffu))};
  if (a >= 65520.0f) return {(unsigned short)(s | 0x7c00u)};               /* overflow */
  if (a < 6.103515625e-05f) {                                              /* subnormal */
    return {(unsigned short)(s | (unsigned int)std::nearbyint(a * 16777216.0f))};
  }
  const unsigned int au = u & 0x7fffffffu;
  unsigned int r = ((au - (112u << 23)) + 0xfffu + ((au >> 13) & 1u)) >> 13;
  return {(unsigned short)(s | r)};
}

/* -- bfloat16 (cuda_bf16.h): float's upper 16 bits, round to nearest even ---------- */
struct __nv_bfloat16 { unsigned short x; };
inline float __bfloat162float(__nv_bfloat16 h) {
  return wb_emu_bits<float>((unsigned int)h.x << 16);
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  const unsigned int u = wb_emu_bits<unsigned int>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(unsigned short)((u >> 16) | 0x40u)};  /* NaN */
  return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

/* -- atomics (sequentially consistent) -------------------------------------------- */
template <class T> inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline float atomicAdd(float* p, float v) {
  float old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  float sum = old + v;
  while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST)) sum = old + v;
  return old;
}
template <class T> inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicCAS(T* p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
/* the max or min: replaced while v is still the better one */
template <class T, class Better> inline T wb_emu_atomic_keep(T* p, T v, Better better) {
  T old;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  while (better(v, old) && !__atomic_compare_exchange(p, &old, &v, false, __ATOMIC_SEQ_CST,
                                                      __ATOMIC_SEQ_CST)) {}
  return old;
}
template <class T> inline T atomicMax(T* p, T v) {
  return wb_emu_atomic_keep(p, v, [](T a, T b) { return b < a; });
}
template <class T> inline T atomicMin(T* p, T v) {
  return wb_emu_atomic_keep(p, v, [](T a, T b) { return a < b; });
}

/* -- warp functions ---------------------------------------------------------------- */
enum { WB_EMU_SHFL = 1, WB_EMU_SHFL_UP, WB_EMU_SHFL_DOWN, WB_EMU_SHFL_XOR, WB_EMU_SYNCWARP,
       WB_EMU_BALLOT };

inline unsigned int wb_emu_lane(void) {
  const wb_emu_ids* d = wb_emu_current();
  return (d->tid.x + d->bdim.x * (d->tid.y + d->bdim.y * d->tid.z)) & 31u;
}

template <class T> inline T wb_emu_shfl(unsigned int mask, T v, int op, int arg, int width,
                                        const char* what) {
  static_assert(sizeof(T) <= 8, "a warp shuffle moves at most 8 bytes");
  if (width <= 0 || width > 32 || (width & (width - 1)))
    wb_emu_fail("a warp shuffle's width is not a power of 2 up to 32");
  unsigned long long mine = 0, all[32];
  std::memcpy(&mine, &v, sizeof(T));
  const unsigned int lane = wb_emu_lane(), w = (unsigned int)width;
  const unsigned int base = lane & ~(w - 1u);
  unsigned int src = lane;
  switch (op) {
    case WB_EMU_SHFL: src = base + ((unsigned int)arg & (w - 1u)); break;
    case WB_EMU_SHFL_UP: src = (lane - base) >= (unsigned int)arg ? lane - arg : lane; break;
    case WB_EMU_SHFL_DOWN: src = (lane - base) + (unsigned int)arg < w ? lane + arg : lane; break;
    case WB_EMU_SHFL_XOR: src = lane ^ (unsigned int)arg; if (src >= base + w) src = lane; break;
  }
  wb_emu_warp_exchange(mask, mine, op, all);
  wb_emu_check_lane(mask, src, what);
  T r; std::memcpy(&r, &all[src], sizeof(T));
  return r;
}
template <class T> inline T __shfl_sync(unsigned int m, T v, int src, int width = 32) {
  return wb_emu_shfl(m, v, WB_EMU_SHFL, src, width, "__shfl_sync");
}
template <class T> inline T __shfl_up_sync(unsigned int m, T v, unsigned int d, int width = 32) {
  return wb_emu_shfl(m, v, WB_EMU_SHFL_UP, (int)d, width, "__shfl_up_sync");
}
template <class T> inline T __shfl_down_sync(unsigned int m, T v, unsigned int d, int width = 32) {
  return wb_emu_shfl(m, v, WB_EMU_SHFL_DOWN, (int)d, width, "__shfl_down_sync");
}
template <class T> inline T __shfl_xor_sync(unsigned int m, T v, int lm, int width = 32) {
  return wb_emu_shfl(m, v, WB_EMU_SHFL_XOR, lm, width, "__shfl_xor_sync");
}
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
  unsigned long long all[32];
  wb_emu_warp_exchange(mask, 0, WB_EMU_SYNCWARP, all);
}
inline unsigned int __ballot_sync(unsigned int mask, int pred) {
  unsigned long long all[32];
  wb_emu_warp_exchange(mask, pred != 0, WB_EMU_BALLOT, all);
  unsigned int r = 0;
  for (unsigned int l = 0; l < 32; ++l) if ((mask >> l & 1u) && all[l]) r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) == mask; }

/* -- shared memory, checked (WB_SHARED: the CUDA prelude's is a plain __shared__ array) --
   Every access is checked against the array's bounds, and against the other threads'
   accesses since the block's last __syncthreads: a write and another thread's read or
   write of the same element in one barrier interval is a race (the GPU orders neither);
   a read of an element no thread of this block has written yet reads another block's
   leftovers (undefined), or comes before a write it was meant to follow.
   `name + off` (a pointer into a __shared__ array on a GPU) is a wb_emu_shared_ptr: the
   array and an element offset, whose [] is the array's checked element. */
template <class T, unsigned long long N> struct wb_emu_shared;
template <class T, unsigned long long N> struct wb_emu_shared_ptr {
  wb_emu_shared<T, N>* s;
  long long off;                       /* in elements */
  template <class I> typename wb_emu_shared<T, N>::Ref operator[](I i) const {
    return (*s)[off + (long long)i];
  }
  template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
  wb_emu_shared_ptr operator+(I i) const { return {s, off + (long long)i}; }
};
template <class T, unsigned long long N> struct wb_emu_shared {
  struct Meta { unsigned long long w_epoch, r_epoch; unsigned int w_tid, r_tid; bool r_many; };
  const char* name;
  T v[N];
  Meta m[N];
  explicit wb_emu_shared(const char* n) : name(n), v(), m() {}

  [[noreturn]] void fail(const char* what, unsigned long long i, unsigned int other) const {
    char b[256];
    std::snprintf(b, sizeof b, what, name, i, other);
    wb_emu_fail(b);
  }
  void read(unsigned long long i) {
    const wb_emu_ids* d = wb_emu_current();
    const unsigned long long e = *d->epoch;
    Meta& x = m[i];
    if (x.w_epoch < d->block_start)
      fail("reads shared %s[%llu] before any thread of this block wrote it (a missing "
           "__syncthreads, or another block's leftovers)%.0u", i, 0);
    if (x.w_epoch == e && x.w_tid != d->tid.x)
      fail("a race on shared %s[%llu]: read here, written by thread %u since the last "
           "__syncthreads", i, x.w_tid);
    if (x.r_epoch == e && x.r_tid != d->tid.x) x.r_many = true;
    else if (x.r_epoch != e) { x.r_epoch = e; x.r_tid = d->tid.x; x.r_many = false; }
  }
  void write(unsigned long long i) {
    const wb_emu_ids* d = wb_emu_current();
    const unsigned long long e = *d->epoch;
    Meta& x = m[i];
    if (x.w_epoch == e && x.w_tid != d->tid.x)
      fail("a race on shared %s[%llu]: written here and by thread %u since the last "
           "__syncthreads", i, x.w_tid);
    if (x.r_epoch == e && (x.r_many || x.r_tid != d->tid.x))
      fail("a race on shared %s[%llu]: written here, read by thread %u since the last "
           "__syncthreads", i, x.r_tid);
    x.w_epoch = e;
    x.w_tid = d->tid.x;
  }
  struct Ref {
    wb_emu_shared* s;
    unsigned long long i;
    operator T() const { s->read(i); return s->v[i]; }
    Ref& operator=(T x) { s->write(i); s->v[i] = x; return *this; }
    Ref& operator=(const Ref& o) { return *this = (T)o; }
    Ref& operator+=(T x) { return *this = (T)*this + x; }
  };
  template <class I> Ref operator[](I i) {
    if ((std::is_signed<I>::value && i < 0) || (unsigned long long)i >= N) {
      char b[160];
      std::snprintf(b, sizeof b, "shared %s[%lld] is out of its bounds [0, %llu)", name,
                    (long long)i, N);
      wb_emu_fail(b);
    }
    return Ref{this, (unsigned long long)i};
  }
  template <class I, class = typename std::enable_if<std::is_integral<I>::value>::type>
  wb_emu_shared_ptr<T, N> operator+(I i) { return {this, (long long)i}; }
};
#define WB_SHARED(type, name, n) static thread_local wb_emu_shared<type, n> name(#name)
/* (a cache in dynamic shared memory: checked the same way, an array of its own) */
#define WB_SHARED_DYN(type, name, n, at) WB_SHARED(type, name, n)
/* (32-byte aligned for WMMA on a GPU: here alignment is judged by the offset, mma.h) */
#define WB_SHARED_A32(type, name, n) WB_SHARED(type, name, n)

/* -- the entry point of one kernel library ---------------------------------------- */
template <class T> struct wb_emu_kind { static constexpr int value = 0; };     /* scalar */
template <class T> struct wb_emu_kind<T*> {                /* 1: a buffer, 2: read-only */
  static constexpr int value = std::is_const<T>::value ? 2 : 1;
};
/* the running launch's arguments as its kernel received them (on this OS thread): what
   judges a global pointer by its offset into its parameter's buffer (mma.h's alignment
   check: the emulator's buffers start 16-byte aligned, a cudaMalloc'd one 256) */
struct wb_emu_params_t { void** args; const int* kinds; int n; };
static thread_local wb_emu_params_t wb_emu_params;

template <class... A> struct wb_emu_kernel {
  using fn = void (*)(A...);
  template <std::size_t... I> static void call(fn k, void** a, std::index_sequence<I...>) {
    k(*static_cast<typename std::remove_reference<A>::type*>(a[I])...);
  }
  static void trampoline(void* k, void** a) {
    static const int kinds[] = {wb_emu_kind<A>::value..., -1};
    wb_emu_params = {a, kinds, (int)sizeof...(A)};
    call(reinterpret_cast<fn>(k), a, std::index_sequence_for<A...>{});
  }
  static int launch(fn k, const wb_emu_launch_args* la) {
    static const int kinds[] = {wb_emu_kind<A>::value..., -1};
    return wb_emu_run(reinterpret_cast<void*>(k), &trampoline, kinds, (int)sizeof...(A), la);
  }
};
template <class... A> inline int wb_emu_launch(void (*k)(A...), const wb_emu_launch_args* la) {
  return wb_emu_kernel<A...>::launch(k, la);
}
/* appended to a kernel's source by cuda_emu.py: the one symbol Python calls */
#define WB_EMU_ENTRY(kernel) \
  extern "C" int wb_emu_entry(const wb_emu_launch_args* la) { return wb_emu_launch(kernel, la); }

#endif
