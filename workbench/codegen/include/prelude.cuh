// The start of every CUDA source (the CUDA renderer's prelude, before the helpers):
// the half type, how a helper is declared (WB_FN), INFINITY and NAN where NVRTC has no
// math.h, the macros every shared array is declared through (WB_SHARED, WB_SHARED_DYN:
// the CUDA emulator defines its own, which check each access) and the 32-byte access
// type of the vector loops.
#include <cuda_fp16.h>
#define WB_FN __device__ __forceinline__
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef WB_SHARED  /* (the CUDA emulator defines its own, checked) */
#define WB_SHARED(type, name, n) __shared__ type name[n]
#endif
#ifndef WB_SHARED_DYN  /* n elements at byte `at` of dynamic shared memory */
#define WB_SHARED_DYN(type, name, n, at) extern __shared__ __align__(16) unsigned char wb_dyn_shared[]; type* const name = reinterpret_cast<type*>(wb_dyn_shared + (at))
#endif
/* 32 bytes a thread moves as two 16-byte accesses (4 of an 8-byte type) */
struct __align__(16) wb_bytes32 { uint4 lo, hi; };
