/* the emulator's cuda_bf16.h: __nv_bfloat16 and its conversions are in wb_cuda_emu.h */
#include "wb_cuda_emu.h"
