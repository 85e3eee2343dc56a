"""The GPU backend: CUDA C compiled by NVRTC (:mod:`.nvrtc`, the same call and options
the offline check uses), loaded and launched through CuPy, timed with CUDA events.
Used when CuPy imports and a GPU is present."""
from __future__ import annotations

import contextlib

from functools import lru_cache

import numpy as np

from ..codegen.kernel import Kernel
from ..device import Device
from ..dtypes import DType
from ..ops.bfloat16 import as_bits, bits_as
from .backend import Backend, CompiledKernel
from .calibrate import gpu_device
from .nvrtc import NvrtcError, compile_cuda, require_arch


@lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:   # no cupy, no driver, no device: all mean "no GPU here"
        return False


class CompiledCudaKernel(CompiledKernel):
    grid_cap: int | None = None     # co-resident blocks of this compiled kernel
    module = None                   # the loaded cubin (kept alive with its function)


class EventTimer:
    """CUDA events around each launch (device time, not host time)."""

    def __init__(self, cp):
        self.cp = cp

    def start(self):
        e = self.cp.cuda.Event()
        e.record()
        return e

    def stop(self, e0) -> float:
        e1 = self.cp.cuda.Event()
        e1.record()
        e1.synchronize()
        return self.cp.cuda.get_elapsed_time(e0, e1) / 1e3


class CupyBackend(Backend):
    name = "cupy"
    target = "cuda"

    @classmethod
    def unavailable(cls) -> str | None:
        if gpu_available():
            return None
        return ("backend cupy needs CuPy and a CUDA GPU; none found here: install "
                "fusion-workbench[gpu] on a GPU machine, or use --backend cpu")

    def __init__(self):
        import cupy
        self.cp = cupy
        self.xp = cupy

    def describe_device(self) -> Device:
        return gpu_device(self.cp)

    def device_name(self) -> str:
        props = self.cp.cuda.runtime.getDeviceProperties(self.cp.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    @property
    def arch(self) -> str:
        """The GPU's compute capability as NVRTC spells it ("90")."""
        return str(self.cp.cuda.Device().compute_capability)

    @property
    def cuda_major(self) -> int:
        return self.cp.cuda.runtime.runtimeGetVersion() // 1000

    def compile_source(self, kernel: Kernel, source: str, origin: str = "") -> CompiledKernel:
        ck = CompiledCudaKernel(kernel, source)
        if kernel.library is None:
            require_arch(kernel, self.arch)
            try:
                cubin = compile_cuda(source, kernel.name, self.arch, major=self.cuda_major)
            except NvrtcError as e:
                raise NvrtcError(f"{e}\n" + (origin or "this is a workbench bug; please "
                                             "report it with the graph")) from None
            ck.module = self.cp.cuda.function.Module()
            ck.module.load(cubin)
            ck.fn = ck.module.get_function(kernel.name)
            if kernel.dynamic_shared_bytes:
                # a row kept in shared memory past the static 48 KB: the kernel opts in
                drv = self.cp.cuda.driver
                drv.funcSetAttribute(ck.fn.ptr,
                                     drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     kernel.dynamic_shared_bytes)
        return ck

    def launch(self, ck: CompiledKernel, args) -> None:
        k = ck.kernel
        grid = k.launch.grid
        if k.launch.cooperative:
            # grid barriers need all blocks resident: cuLaunchCooperativeKernel
            grid = min(grid, self.co_resident_grid(ck))
        ck.fn((grid,), (k.launch.block,), tuple(args), shared_mem=k.dynamic_shared_bytes,
              enable_cooperative_groups=k.launch.cooperative)

    @contextlib.contextmanager
    def library_precision(self, tf32: bool):
        # cuBLAS's float32 GEMMs on tensor cores in TF32 (CuPy's compute type for
        # float32, process-wide: set for the call and put back after)
        if not tf32:
            yield
            return
        core = self.cp._core
        linalg = core._routines_linalg
        saved = core.get_compute_type(np.float32)
        core.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)
        try:
            yield
        finally:
            core.set_compute_type(np.float32, saved)

    def co_resident_grid(self, ck: CompiledKernel) -> int:
        """Blocks of this compiled kernel that fit on this GPU at once: the driver's
        occupancy of the compiled kernel (its real registers and shared memory) times
        the SMs -- what the plan-time estimate (``geometry.co_resident_grid``) stands
        in for. Every loop strides over the grid, so fewer blocks stay correct; more
        would make the cooperative launch fail."""
        if ck.grid_cap is None:
            per_sm = self.cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                ck.fn.ptr, ck.kernel.launch.block, ck.kernel.dynamic_shared_bytes)
            ck.grid_cap = max(1, per_sm) * self.device.units
        return ck.grid_cap

    def kernel_attributes(self, ck: CompiledKernel) -> dict[str, int]:
        """What the compiled kernel uses: registers per thread, static shared memory and
        local (spill) memory per thread, from the driver."""
        get = self.cp.cuda.driver.funcGetAttribute
        # CUfunction_attribute: SHARED_SIZE_BYTES 1, LOCAL_SIZE_BYTES 3, NUM_REGS 4
        return {"registers": get(4, ck.fn.ptr), "shared_bytes": get(1, ck.fn.ptr),
                "local_bytes": get(3, ck.fn.ptr)}

    def timer(self):
        return EventTimer(self.cp)

    def asarray(self, a):
        if isinstance(a, np.ndarray):
            a = as_bits(a)             # CuPy has no bfloat16: its bits (bf16_as_bits)
        x = self.cp.asarray(a)
        if x.data.ptr % 16 or not x.flags.c_contiguous:
            x = x.copy()     # kernels move 16 bytes per access: rows must be aligned
        return x

    def to_numpy(self, a, dtype: DType | None = None) -> np.ndarray:
        return bits_as(self.cp.asnumpy(a), dtype)

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()
