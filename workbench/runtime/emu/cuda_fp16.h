/* the emulator's cuda_fp16.h: __half and its conversions are in wb_cuda_emu.h */
#include "wb_cuda_emu.h"
