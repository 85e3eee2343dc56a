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
            src = render_kernel(k, "cuda")
            fn = None
            if k.library is None:
                mod = self.cp.RawModule(code=src, options=("--std=c++14",))
                fn = mod.get_function(k.name)
            out.append(CompiledCudaKernel(k, src, fn))
            if progress:
                progress(i + 1, len(kernels), k.name)
        return out

    def launch(self, ck: CompiledCudaKernel, args) -> None:
        k = ck.kernel
        ck.fn((k.launch.grid,), (k.launch.block,), tuple(args))

    def asarray(self, a: np.ndarray):
        return self.cp.asarray(a)

    def to_numpy(self, a) -> np.ndarray:
        return self.cp.asnumpy(a)

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()
