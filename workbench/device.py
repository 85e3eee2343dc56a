"""Device descriptions: what the cost model needs to know about a machine.

A :class:`Device` is a frozen value. ``H100`` and ``A100`` come from NVIDIA's public
specifications (numbers cited beside each field); a CPU's is *measured* once on the
machine by ``workbench.runtime.calibrate.cpu_device`` (copy bandwidth, per-call
overhead and arithmetic throughput of a small compiled C probe) and cached.

Example::

    >>> from workbench.device import H100
    >>> round(H100.dram_bandwidth / 1e12, 2), H100.units
    (3.35, 132)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .dtypes import DType


@dataclass(frozen=True)
class Device:
    """A machine a plan's kernels run on.

    GPU fields are per SM (``units`` SMs); on a CPU one *block* of a kernel runs on one
    core (the C renderer's mapping), so ``units`` is the core count, a unit holds one
    block at a time and the register/shared-memory limits do not bind (0 = no limit).
    """
    name: str
    kind: str                       # gpu | cpu
    dram_bandwidth: float           # bytes/s of read+written traffic a copy reaches
    launch_overhead: float          # s per kernel launch (GPU) or kernel call (CPU)
    units: int                      # SMs or cores
    peak_flops: float               # float32 flop/s (no tensor cores)
    shared_per_block: int = 0       # bytes of shared memory a block may use (0: no limit)
    # what a kernel may opt in to past that (dynamic shared memory, cuFuncSetAttribute
    # MAX_DYNAMIC_SHARED_SIZE_BYTES): where a row too long for registers is kept
    shared_optin_per_block: int = 0
    shared_per_unit: int = 0        # bytes per SM (0: no limit)
    registers_per_unit: int = 0     # 32-bit registers per SM (0: no limit)
    max_threads_per_unit: int = 1
    max_threads_per_block: int = 1
    max_blocks_per_unit: int = 1
    warp: int = 1
    grid_barrier: float = 0.0       # s per grid-wide barrier inside a kernel
    cache_bytes: int = 0            # last-level cache (L2 on a GPU)
    source: str = ""                # where the numbers come from
    # bytes one scattered access really moves: a 32-byte sector on NVIDIA GPUs, a
    # 64-byte cache line on x86 (what uncoalesced, strided reads cost per element)
    transaction_bytes: int = 32
    # shared memory the driver reserves per resident block (1 KB since sm_80), and the
    # granularity registers are allocated in per warp: both bound co-residency
    reserved_shared_per_block: int = 0
    register_alloc_unit: int = 1
    max_registers_per_thread: int = 0   # 0: no limit
    # a CPU's SIMD register width in bytes as the kernels' compiler targets it (64
    # AVX-512, 32 AVX, 16 SSE or NEON; 0 unknown): whether the generated GEMM
    # micro-kernel beats a BLAS call per tile (codegen/microkernel.py)
    vector_bytes: int = 0
    # dense TF32 tensor-core flop/s (0: none)
    tensor_flops: float = 0.0
    # elements a second, over every core, of each expensive elementwise op (exp, log,
    # erf, tanh, pow...) as the kernels' compiler builds its C -- a CPU's, measured by
    # its probe (runtime/calibrate.py); empty: priced by OpDef.flops at peak_flops (a
    # GPU's special-function units, a CPU nothing measured). Their flop counts are
    # nominal: vector libm's logf costs ~50 times the 4 flops it is counted as
    op_rates: tuple[tuple[str, float], ...] = ()

    def __post_init__(self):
        if self.kind not in ("gpu", "cpu"):
            raise ValueError(f"device kind must be gpu or cpu, not {self.kind!r}")
        # (read back from JSON as lists: kept as pairs, so a Device stays hashable)
        object.__setattr__(self, "op_rates",
                           tuple((str(n), float(r)) for n, r in self.op_rates))

    @property
    def has_tf32(self) -> bool:
        """Whether float32 matmuls can run on tensor cores in TF32 here (a CPU computes
        float32 whatever a plan allows)."""
        return self.tensor_flops > 0

    def on_tensor_cores(self, dtype: DType, tf32: bool) -> bool:
        """Whether a matmul of ``dtype`` runs on tensor cores here, where a plan allows
        its float32 matmuls TF32 or not (``tf32``: ``Plan.tf32``): float32 where TF32 is
        allowed; bfloat16 and float16 wherever there are tensor cores, as their
        operands are exact in TF32 (8 and 10 mantissa bits against its 10, exponents
        within its range: nothing is rounded, products and float32 sums as on the CUDA
        cores)."""
        if not self.has_tf32:
            return False
        return dtype.is_half or (dtype is DType.float32 and tf32)

    def tensor_rate(self, operands: DType) -> float:
        """Dense tensor-core flop/s on operands of this type: TF32's for float32, twice
        it for bfloat16 and float16 (A100 156 and 312, H100 495 and 989 TFLOP/s)."""
        return self.tensor_flops * (2.0 if operands.is_half else 1.0)

    def matmul_rate(self, dtype: DType, tensor_cores: bool) -> float:
        """The flop/s a ``dtype`` library matmul is priced at: on tensor cores
        (``tensor_cores``: ``on_tensor_cores``, as its kernel's schedule records it)
        float16 at its own rate (cuBLAS takes it as it is), float32 and bfloat16 at
        TF32's (CuPy has no bfloat16: widened to float32 copies, multiplied in TF32);
        else the float32 peak."""
        if not tensor_cores:
            return self.peak_flops
        return self.tensor_rate(dtype if dtype is DType.float16 else DType.float32)

    @property
    def shared_limit(self) -> int:
        """Shared memory one block may use: the device's, or on a CPU (no limit of its
        own) the portable CUDA limit, since every kernel also renders as CUDA and an
        exported artifact may run on any GPU."""
        return self.shared_per_block or PORTABLE_SHARED_PER_BLOCK

    @property
    def shared_optin_limit(self) -> int:
        """Shared memory one block may use once the kernel opts in (dynamic shared
        memory past the static limit); the static limit where there is no opt-in."""
        return max(self.shared_optin_per_block, self.shared_limit)

    def op_rate(self, op: str) -> float:
        """Elements a second of ``op`` measured on this device, 0 if not measured."""
        for name, rate in self.op_rates:
            if name == op:
                return rate
        return 0.0

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def with_(self, **changes) -> "Device":
        """A copy with some fields changed (a Device is immutable)."""
        return replace(self, **changes)

    def describe(self) -> str:
        return (f"{self.name}: {self.dram_bandwidth / 1e9:.0f} GB/s, "
                f"{self.peak_flops / 1e12:.2f} TFLOP/s, {self.units} "
                f"{'SMs' if self.kind == 'gpu' else 'cores'}, launch "
                f"{self.launch_overhead * 1e6:.1f} us")


# What every CUDA GPU gives a block without opting in to more.
PORTABLE_SHARED_PER_BLOCK = 48 * 1024
# What every CUDA GPU has, whatever device a plan is made for: a warp's lanes, the most
# threads a block may have, and 32-bit registers per SM (64K on every GPU since
# Kepler). Every kernel also renders as CUDA -- a CPU's plans too, and an exported
# artifact may run on any GPU -- so the kernels' thread geometry is sized by these,
# where a Device's own fields (warp, max_threads_per_block, registers_per_unit:
# a CPU's 1 and 0) describe the machine the plan is priced and checked on.
CUDA_WARP = 32
CUDA_MAX_BLOCK_THREADS = 1024
CUDA_REGISTERS_PER_UNIT = 64 * 1024
# Back-to-back launches on one stream cost a few us of host+GPU time, and a cooperative
# grid.sync() ~1-3 us on recent GPUs: assumed values that calibration replaces.
ASSUMED_GPU_LAUNCH = 3e-6
ASSUMED_GRID_BARRIER = 2e-6
# CUDA's occupancy rules that are no device property (programming guide: registers are
# allocated per warp in units of 256 since the first GPUs with 64K registers; a thread
# addresses at most 255)
CUDA_REGISTER_ALLOC_UNIT = 256
CUDA_MAX_REGISTERS_PER_THREAD = 255

# NVIDIA H100 SXM5 80 GB: H100 Tensor Core GPU datasheet and the Hopper architecture
# whitepaper (2022).
H100 = Device(
    name="NVIDIA H100 SXM5 80GB", kind="gpu",
    dram_bandwidth=3.35e12,         # HBM3, 3.35 TB/s (datasheet)
    launch_overhead=ASSUMED_GPU_LAUNCH,
    units=132,                      # 132 SMs (SXM5)
    peak_flops=67e12,               # FP32 67 TFLOPS, non-tensor (datasheet)
    tensor_flops=494.7e12,          # TF32 Tensor Core 989.4 TFLOPS with sparsity: half dense
    shared_per_block=48 * 1024,     # without opt-in (227 KB with cudaFuncSetAttribute)
    shared_optin_per_block=227 * 1024,
    shared_per_unit=228 * 1024,     # up to 228 KB shared memory per SM (whitepaper)
    registers_per_unit=65536,       # 64K 32-bit registers per SM
    max_threads_per_unit=2048, max_threads_per_block=1024, max_blocks_per_unit=32,
    warp=32,
    grid_barrier=ASSUMED_GRID_BARRIER,
    cache_bytes=50 * 2**20,         # 50 MB L2
    # CUDA occupancy rules (programming guide, compute capability 9.0)
    reserved_shared_per_block=1024, register_alloc_unit=CUDA_REGISTER_ALLOC_UNIT,
    max_registers_per_thread=CUDA_MAX_REGISTERS_PER_THREAD,
    source="NVIDIA H100 datasheet / Hopper whitepaper; launch and barrier costs assumed")

# NVIDIA A100 SXM4 80 GB: A100 datasheet and the Ampere GA100 whitepaper (2020).
A100 = Device(
    name="NVIDIA A100 SXM4 80GB", kind="gpu",
    dram_bandwidth=2.039e12,        # HBM2e, 2,039 GB/s (80 GB SXM datasheet)
    launch_overhead=ASSUMED_GPU_LAUNCH,
    units=108,                      # 108 SMs
    peak_flops=19.5e12,             # FP32 19.5 TFLOPS, non-tensor
    tensor_flops=156e12,            # TF32 Tensor Core 156 TFLOPS (dense)
    shared_per_block=48 * 1024,     # without opt-in (163 KB with it)
    shared_optin_per_block=163 * 1024,
    shared_per_unit=164 * 1024,     # 164 KB per SM
    registers_per_unit=65536,
    max_threads_per_unit=2048, max_threads_per_block=1024, max_blocks_per_unit=32,
    warp=32,
    grid_barrier=ASSUMED_GRID_BARRIER,
    cache_bytes=40 * 2**20,         # 40 MB L2
    reserved_shared_per_block=1024, register_alloc_unit=CUDA_REGISTER_ALLOC_UNIT,
    max_registers_per_thread=CUDA_MAX_REGISTERS_PER_THREAD,
    source="NVIDIA A100 datasheet / GA100 whitepaper; launch and barrier costs assumed")

GPUS = {"h100": H100, "a100": A100}

# The device plans are made for when none is named: schedules are sized for an H100.
DEFAULT_DEVICE = H100


def assumed_cpu(name: str, cores: int) -> Device:
    """A CPU nothing could measure (no C compiler): round numbers for a small server."""
    return Device(name=name, kind="cpu", dram_bandwidth=10e9, launch_overhead=10e-6,
                  units=cores, peak_flops=cores * 32e9, transaction_bytes=64,
                  source="assumed: no C compiler to measure this CPU with")


def gpu_by_name(name: str) -> Device | None:
    """The description of a known GPU whose marketing name contains H100 or A100."""
    low = name.lower()
    for key, dev in GPUS.items():
        if key in low:
            return dev.with_(name=name) if name else dev
    return None
