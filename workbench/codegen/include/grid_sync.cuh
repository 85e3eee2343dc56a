// The grid-wide barrier of a kernel launched cooperatively (cuLaunchCooperativeKernel:
// every block resident). The algorithm of cooperative_groups' grid sync, written out so
// no source includes <cooperative_groups.h>, whose libcu++ headers cost NVRTC ~2 s per
// kernel: block 0 adds 0x80000000 - (blocks - 1) and every other block 1 to a counter,
// so the counter's top bit flips exactly when all have arrived; each block waits for
// the flip. The counter is a module global (zero when the module loads) and returns to
// its low bits after every barrier, so it serves any number of barriers and launches.
/* grid-wide barrier (cooperative launch: every block is resident) */
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
