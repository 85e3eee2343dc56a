"""The GPU backend: CUDA C compiled by NVRTC through CuPy's RawModule, timed with
CUDA events. Used when CuPy imports and a GPU is present."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..codegen import render_kernel
from ..codegen.kir import Kernel
from ..errors import BackendUnavailable


@lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:   # no cupy, no driver, no device: all mean "no GPU here"
        return False


class CompiledCudaKernel:
    def __init__(self, kernel: Kernel, source: str, fn):
        self.kernel, self.source, self.fn = kernel, source, fn


class CupyBackend:
    name = "cupy"

    def __init__(self):
        if not gpu_available():
            raise BackendUnavailable("backend cupy needs CuPy and a CUDA GPU; none found here: "
                                     "install fusion-workbench[gpu] on a GPU machine, or use "
                                     "--backend cpu")
        import cupy
        self.cp = cupy
        self.xp = cupy

    def device_name(self) -> str:
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def compile(self, kernels: list[Kernel], progress=None) -> list[CompiledCudaKernel]:
        out = []
        for i, k in enumerate(kernels):
            out.append(self.compile_source(k, render_kernel(k, "cuda")))
            if progress:
                progress(i + 1, len(kernels), k.name)
        return out

    def compile_source(self, k: Kernel, src: str) -> CompiledCudaKernel:
        """Build one kernel from CUDA source (rendered here, or shipped in an artifact)."""
        fn = None
        if k.library is None:
            # grid barriers need cuLaunchCooperativeKernel: CuPy launches a kernel of
            # a module built with enable_cooperative_groups that way
            mod = self.cp.RawModule(code=src, options=("--std=c++14",),
                                    enable_cooperative_groups=k.launch.cooperative)
            fn = mod.get_function(k.name)
        return CompiledCudaKernel(k, src, fn)

    def launch(self, ck: CompiledCudaKernel, args) -> None:
        k = ck.kernel
        grid = k.launch.grid
        if k.launch.cooperative:
            grid = min(grid, self.co_resident_grid(ck))
        ck.fn((grid,), (k.launch.block,), tuple(args))

    def co_resident_grid(self, ck: CompiledCudaKernel) -> int:
        """Blocks of this compiled kernel that fit on this GPU at once (CUDA occupancy:
        threads, blocks, registers -- allocated per warp in units of 256 -- and shared
        memory per SM). Every loop strides over the grid, so fewer blocks stay correct;
        more would make the cooperative launch fail."""
        if getattr(ck, "_grid_cap", None) is None:
            attrs = self.cp.cuda.Device().attributes
            threads = ck.kernel.launch.block
            warps = -(-threads // 32)
            regs = max(1, ck.fn.num_regs)
            regs_per_warp = -(-regs * 32 // 256) * 256
            # (H100 values where a driver does not report an attribute)
            per_sm = min(attrs.get("MaxBlocksPerMultiprocessor", 32),
                         attrs.get("MaxThreadsPerMultiProcessor", 2048) // threads,
                         attrs.get("MaxRegistersPerMultiprocessor", 65536)
                         // (regs_per_warp * warps))
            shared = ck.fn.shared_size_bytes
            if shared:
                per_sm = min(per_sm, attrs.get("MaxSharedMemoryPerMultiprocessor", 233472)
                             // (shared + 1024))
            ck._grid_cap = max(1, per_sm) * attrs["MultiProcessorCount"]
        return ck._grid_cap

    def asarray(self, a: np.ndarray):
        return self.cp.asarray(a)

    def to_numpy(self, a) -> np.ndarray:
        return self.cp.asnumpy(a)

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()
