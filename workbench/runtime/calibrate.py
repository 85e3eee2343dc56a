"""The Device a backend runs on: a GPU's from its specification, the local CPU's
measured once by a small compiled C probe and cached.

The CPU probe is built by the CPU backend's own compiler and flags (OpenMP, -O3,
-march=native) and called through ctypes the way the backend calls kernels, so it
sees what generated kernels see:

- **copy bandwidth**: a parallel ``dst[i] = src[i]`` over 64 MB arrays (larger than
  the last-level cache), counted as bytes read + bytes written per second -- the same
  compulsory-traffic count the kernels' byte totals use;
- **per-call overhead**: a ctypes call of a kernel with one OpenMP parallel loop over
  64 elements (thread fork/join included);
- **arithmetic throughput**: vectorized multiply-adds on cache-resident data, 64
  independent chains per thread (the float32 peak the kernels' flops are priced at).

The result is cached as JSON under the kernel cache directory (``$WORKBENCH_CACHE``
or ``~/.cache/fusion-workbench``) in ``devices/``, keyed by CPU model, core count and
compiler; ``cpu_device(refresh=True)`` measures again.

Example::

    >>> dev = cpu_device()                       # doctest: +SKIP
    >>> dev.kind, dev.units                      # doctest: +SKIP
    ('cpu', 2)
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..device import (ASSUMED_GPU_LAUNCH, ASSUMED_GRID_BARRIER, CUDA_MAX_REGISTERS_PER_THREAD,
                      CUDA_REGISTER_ALLOC_UNIT, Device, gpu_by_name)
from .cache import cache_subdir
from .cc import (build_library, cpu_model, find_compiler, load_library, machine_cflags,
                 vector_bytes)
from ..codegen import RENDERERS
from ..dtypes import DType
from ..errors import GraphError
from ..ops import all_ops
from .nvrtc import compile_cuda

# part of the cache key of a CPU's measurement: raised when Device gains a field the
# CPU fills in (2: vector_bytes; 3: op_rates, and the best repeat taken instead of the
# median; 4: a probe taken on a busy machine kept apart, below), so a description
# cached before is measured again
CPU_PROBE_VERSION = 4

_PROBE = r"""
#include <stddef.h>
void wb_probe_copy(float* restrict dst, const float* restrict src, long n) {
  #pragma omp parallel for simd schedule(static)
  for (long i = 0; i < n; ++i) dst[i] = src[i];
}
void wb_probe_call(float* restrict dst, const float* restrict src) {
  #pragma omp parallel for simd schedule(static)
  for (long i = 0; i < 64; ++i) dst[i] = src[i] + 1.0f;
}
void wb_probe_fma(float* restrict x, long n, long reps) {
  /* 64 independent chains per thread (8 vector registers): throughput, not latency */
  #pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 64) {
    float a[64];
    for (int j = 0; j < 64; ++j) a[j] = x[i + j];
    for (long r = 0; r < reps; ++r) {
      #pragma omp simd
      for (int j = 0; j < 64; ++j) a[j] = a[j] * 0.999f + 0.001f;
    }
    for (int j = 0; j < 64; ++j) x[i + j] = a[j];
  }
}
"""
COPY_ELEMS = 16 * 2**20          # 64 MB per array: beyond the last-level cache
FMA_ELEMS, FMA_REPS = 64 * 1024, 256
OP_ELEMS = 64 * 1024             # 256 KB an array: three of them in L2


def devices_dir() -> Path:
    return cache_subdir("devices")


def _llc_bytes() -> int:
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            txt = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 2**20, "G": 2**30}.get(txt[-1], 1)
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except (OSError, ValueError):
            continue
    return best


def _machine_key() -> str:
    cc, version = find_compiler()
    text = "\0".join([cpu_model(), str(os.cpu_count()), version, " ".join(machine_cflags()),
                      str(CPU_PROBE_VERSION)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _build_probe() -> ctypes.CDLL:
    # built and cached like a kernel: the same compiler, flags and cache -- but not
    # $WB_EXTRA_CFLAGS (sanitizers): plans are made for this machine as it runs kernels
    return load_library(str(build_library(
        "wb_probe", _PROBE, "check the compiler ($CC) or use --backend reference",
        extra=False)))


def _best_time(fn, repeats: int, warmup: int = 2) -> float:
    """The machine's own speed: the fastest repeat. The probe runs once per machine
    and is cached, often while a test suite or a build shares the cores: a median
    there baked that load into every later plan (a 64-element kernel call measured
    0.51 ms on 2 busy cores, 4 us on quiet ones, and planners weigh fusions against
    it). The session's refit learns what runs beside it from its own measurements."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@lru_cache(maxsize=1)
def _op_probe_source() -> tuple[str, tuple[str, ...]]:
    """C timing each expensive elementwise op (OpDef.expensive) in a loop over float32
    inputs in (0.5, 1.5] -- every such op's domain -- written as a kernel writes it: the
    backend's prelude (its helpers, glibc's vector math where the toolchain has it)
    and the op's own expression; and the ops, in the order of their functions. Made
    once a process (the probe's path is keyed by it and the probe compiles it), as the
    probe itself is taken once (``_cached_cpu_device``)."""
    names, fns = [], []
    for name, op in sorted(all_ops().items()):
        if not op.expensive or op.arity[0] > 2:
            continue
        n = max(1, op.arity[0])
        try:
            expr = op.scalar(["a[i]", "b[i]"][:n], [DType.float32] * n, DType.float32, {})
        except GraphError:      # (an op that needs attributes)
            continue
        fns.append(f"void wb_probe_op{len(names)}(float* restrict y, const float* "
                   f"restrict a, const float* restrict b, long n) {{\n"
                   f"  #pragma omp simd\n"
                   f"  for (long i = 0; i < n; ++i) y[i] = {expr};\n}}\n")
        names.append(name)
    return RENDERERS["c"].prelude() + "".join(fns), tuple(names)


def _op_rates() -> tuple[tuple[str, float], ...]:
    """Elements a second of each expensive op on every core, its inputs in cache (what
    a fused kernel's arithmetic costs beside its memory traffic): timed on one core and
    multiplied by the cores -- the ops' loops scale with them, and one thread's best
    repeat does not wait for a second thread the scheduler has not run yet."""
    src, names = _op_probe_source()
    lib = load_library(str(build_library("wb_probe_ops", src, "the CPU probe's op timings",
                                         extra=False)))
    rng = np.random.default_rng(0)
    a = (0.5 + rng.random(OP_ELEMS, dtype=np.float32)).astype(np.float32)
    b = (0.5 + rng.random(OP_ELEMS, dtype=np.float32)).astype(np.float32)
    y = np.empty_like(a)
    rates = []
    for k, name in enumerate(names):
        fn = getattr(lib, f"wb_probe_op{k}")
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long]
        t = _best_time(lambda: fn(y.ctypes.data, a.ctypes.data, b.ctypes.data, OP_ELEMS), 7)
        rates.append((name, OP_ELEMS / t * (os.cpu_count() or 1)))
    return tuple(rates)


def measure_cpu() -> Device:
    """Run the probe now and describe this CPU (takes about a second)."""
    lib = _build_probe()
    copy, call, fma = lib.wb_probe_copy, lib.wb_probe_call, lib.wb_probe_fma
    for f in (copy, call, fma):
        f.restype = None
    copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
    call.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fma.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
    rng = np.random.default_rng(0)
    src = rng.random(COPY_ELEMS, dtype=np.float32)
    dst = np.empty_like(src)
    t_copy = _best_time(lambda: copy(dst.ctypes.data, src.ctypes.data, COPY_ELEMS), 7)
    small_in, small_out = src[:64].copy(), np.empty(64, np.float32)
    # the backend passes each buffer's .ctypes.data per call; so does this
    t_call = _best_time(lambda: call(small_out.ctypes.data, small_in.ctypes.data), 2000,
                          warmup=50)
    x = rng.random(FMA_ELEMS, dtype=np.float32)
    # (0.15 ms a call: 2 warm-ups and 7 repeats read 43 GFLOP/s on a quiet machine,
    # where 20 and 200 -- 30 ms -- read the 228 that 1,000 calls read, every time)
    t_fma = _best_time(lambda: fma(x.ctypes.data, FMA_ELEMS, FMA_REPS), 200, warmup=20)
    cores = os.cpu_count() or 1
    return Device(
        name=f"{cpu_model()} ({cores} threads)", kind="cpu",
        dram_bandwidth=2 * COPY_ELEMS * 4 / t_copy, launch_overhead=t_call, units=cores,
        peak_flops=2.0 * FMA_ELEMS * FMA_REPS / t_fma, cache_bytes=_llc_bytes(),
        transaction_bytes=64, vector_bytes=vector_bytes(), op_rates=_op_rates(),
        source=(f"measured {time.strftime('%Y-%m-%d %H:%M')}: copy of 2 x 64 MB, "
                f"ctypes call of a 64-element OpenMP kernel, {FMA_REPS} FMAs per element "
                f"over {FMA_ELEMS} elements, 64 chains per thread; load average "
                f"{_load():.1f} on {cores} cores"))


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:             # (no load average on this platform)
        return 0.0


def _others_running(samples: int = 5, gap: float = 0.01) -> int:
    """Tasks other than this one running or waiting for a core right now (the median of
    a few readings of /proc/loadavg's "running/total"; 0 where there is none)."""
    counts = []
    for _ in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0
        counts.append(running - 1)          # (this thread is one of them)
        time.sleep(gap)
    return sorted(counts)[len(counts) // 2]


def busy() -> bool:
    """Other work on the cores: more runnable tasks than cores over the last minute, or
    another task running now -- the minute's average lags, and a probe taken while a
    build had just started (load average 1.2 on 2 cores) read 17 GB/s and a 0.25 ms
    call for 39 GB/s and 4 us quiet. A probe taken now reads the load, not the
    machine: even the fastest of 2,000 calls of a 64-element OpenMP kernel takes 60x
    its quiet time when OpenMP's second thread waits for a core, and every plan made
    with that launch cost weighed each kernel as 0.25 ms (MobileNetV2's 53 kernels
    predicted 14 ms for 0.5 measured)."""
    cores = os.cpu_count() or 1
    return _load() > cores or _others_running() >= max(1, cores // 2)


def _probe_path(loaded: bool) -> Path:
    # a busy machine's probe is kept apart, used until one is taken on a quiet machine
    return devices_dir() / f"cpu-{_machine_key()}{'.busy' if loaded else ''}.json"


def _read_device(path: Path) -> Device | None:
    try:
        return Device(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None     # absent, unreadable or from another version: measure again


@lru_cache(maxsize=1)
def _cached_cpu_device() -> Device:
    """The quiet machine's probe; else, on a busy machine, the busy probe (taken once);
    on a quiet machine with only a busy probe, a new one, which replaces it."""
    quiet = _read_device(_probe_path(False))
    if quiet is not None:
        return _with_current_op_rates(quiet)
    loaded = busy()
    if loaded and (dev := _read_device(_probe_path(True))) is not None:
        return _with_current_op_rates(dev)
    dev = measure_cpu()
    _write_json(_op_rates_path(), dev.op_rates)
    loaded = loaded or busy()       # (the load may have come while it ran)
    _write_json(_probe_path(loaded), dataclasses.asdict(dev))
    if not loaded:
        _probe_path(True).unlink(missing_ok=True)
    return dev


def _write_json(path: Path, value) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)   # atomic: concurrent sessions race harmlessly


def _op_rates_path() -> Path:
    """Where the op rates measured with the current kernel helpers are kept: keyed by
    the op probe's source, which holds the C prelude's helpers (wb_expf...) as kernels
    have them, so a workbench whose helpers changed measures its ops again."""
    src, _ = _op_probe_source()
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    return devices_dir() / f"ops-{_machine_key()}-{key}.json"


def _with_current_op_rates(dev: Device) -> Device:
    """``dev`` (a cached probe) with op rates of the current helpers: a cached probe's
    rates are those of the helpers it was taken with (an exp measured at 0.46 ns an
    element after a new ``wb_expf`` ran it in 0.34). Only the ops are timed again
    (about a second), not the bandwidth and call cost, which the helpers do not move."""
    path = _op_rates_path()
    try:
        rates = tuple((str(n), float(r)) for n, r in json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        rates = _op_rates()
        _write_json(path, rates)
    return dev.with_(op_rates=rates)


def cpu_device(refresh: bool = False) -> Device:
    """This machine's CPU as a Device: measured once (again once the machine is quiet
    if it was busy then), then read from the cache."""
    if refresh:
        _cached_cpu_device.cache_clear()
        for loaded in (False, True):
            _probe_path(loaded).unlink(missing_ok=True)
    return _cached_cpu_device()


def gpu_device(cp, measure: bool = True) -> Device:
    """The current CUDA device: its limits from the H100/A100 description when the name
    matches, else from the device properties (bandwidth from memory clock and bus
    width, FP32 peak from 128 lanes per SM at the SM clock); with ``measure``, its copy
    bandwidth, launch cost and grid-barrier cost measured once by a probe (about a
    second) and cached, as the CPU's are."""
    base = _gpu_description(cp)
    if not measure:
        return base
    return base.with_(**_cached_gpu_probe(cp, base))


def _gpu_description(cp) -> Device:
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    known = gpu_by_name(name)
    if known is not None:
        return known
    sms = int(props["multiProcessorCount"])
    peak = 2.0 * 128 * sms * props["clockRate"] * 1e3
    return Device(
        name=name, kind="gpu",
        dram_bandwidth=2.0 * props["memoryClockRate"] * 1e3 * props["memoryBusWidth"] / 8,
        launch_overhead=ASSUMED_GPU_LAUNCH, units=sms,
        peak_flops=peak,
        # TF32 tensor cores from compute capability 8.0, about 8x the float32 rate
        # (A100: 156 against 19.5 TFLOP/s dense; assumed for a GPU not in the table)
        tensor_flops=8.0 * peak if int(props["major"]) >= 8 else 0.0,
        shared_per_block=int(props["sharedMemPerBlock"]),
        shared_optin_per_block=int(props.get("sharedMemPerBlockOptin",
                                             props["sharedMemPerBlock"])),
        shared_per_unit=int(props["sharedMemPerMultiprocessor"]),
        registers_per_unit=int(props["regsPerMultiprocessor"]),
        max_threads_per_unit=int(props["maxThreadsPerMultiProcessor"]),
        max_threads_per_block=int(props["maxThreadsPerBlock"]),
        max_blocks_per_unit=int(props.get("maxBlocksPerMultiProcessor", 32)),
        warp=int(props["warpSize"]), grid_barrier=ASSUMED_GRID_BARRIER,
        cache_bytes=int(props["l2CacheSize"]),
        reserved_shared_per_block=int(props.get("reservedSharedMemPerBlock", 0)),
        register_alloc_unit=CUDA_REGISTER_ALLOC_UNIT,
        max_registers_per_thread=CUDA_MAX_REGISTERS_PER_THREAD,
        source="CUDA device properties; launch and barrier costs assumed")


# -- the GPU probe ------------------------------------------------------------------------
_GPU_PROBE = r"""
extern "C" __global__ void wb_probe_empty(float* p) { if (p == 0) p[threadIdx.x] = 0.0f; }
extern "C" __global__ void wb_probe_barriers(int n) { for (int i = 0; i < n; ++i) wb_grid_sync(); }
"""
GPU_PROBE_VERSION = 1


def _gpu_key(cp, dev: Device) -> str:
    drv = cp.cuda.runtime.driverGetVersion()
    rt = cp.cuda.runtime.runtimeGetVersion()
    text = "\0".join([dev.name, str(drv), str(rt), str(GPU_PROBE_VERSION)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_gpu(cp, dev: Device) -> dict:
    """Measure what the cost model needs of this GPU, as the workbench times kernels
    (CUDA events around each launch):

    - copy bandwidth: a device-to-device copy of a large buffer (1 GiB, or a quarter
      of free memory), bytes read + written per second, median of 10;
    - launch cost: one empty kernel between two events, median of 200;
    - grid-barrier cost: a cooperative kernel of 1000 ``wb_grid_sync()`` against one of
      none, on a full wave of 256-thread blocks, per barrier.
    """
    arch = str(cp.cuda.Device().compute_capability)
    major = cp.cuda.runtime.runtimeGetVersion() // 1000
    cubin = compile_cuda(RENDERERS["cuda"].prelude() + _GPU_PROBE, "wb_probe", arch,
                         major=major)
    mod = cp.cuda.function.Module()
    mod.load(cubin)
    empty, barriers = mod.get_function("wb_probe_empty"), mod.get_function("wb_probe_barriers")

    def event_ms(fn, repeats: int) -> float:
        fn()
        cp.cuda.Device().synchronize()
        ts = []
        for _ in range(repeats):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1))
        return float(np.median(ts))

    free = cp.cuda.Device().mem_info[0]
    n = int(min(2**28, free // 16))        # floats per buffer: 1 GiB, or what fits
    bufs = [cp.random.default_rng(0).random(n, dtype=cp.float32)]
    bufs.append(cp.empty_like(bufs[0]))
    t_copy = event_ms(lambda: cp.copyto(bufs[1], bufs[0]), 10) / 1e3
    bufs.clear()
    cp.get_default_memory_pool().free_all_blocks()
    ptr = cp.empty(1, cp.float32)
    t_launch = event_ms(lambda: empty((1,), (dev.warp,), (ptr,)), 200) / 1e3
    grid = dev.units * max(1, min(dev.max_blocks_per_unit, dev.max_threads_per_unit // 256))
    reps = 1000

    def run(k):
        return lambda: barriers((grid,), (256,), (np.int32(k),), enable_cooperative_groups=True)
    t_bar = max(0.0, (event_ms(run(reps), 5) - event_ms(run(0), 5)) / 1e3 / reps)
    return {"dram_bandwidth": 2 * n * 4 / t_copy, "launch_overhead": t_launch,
            "grid_barrier": t_bar,
            "source": (f"{dev.source}; measured {time.strftime('%Y-%m-%d %H:%M')}: "
                       f"copy of 2 x {n * 4 / 2**20:.0f} MiB, an empty launch, "
                       f"{reps} grid barriers over {grid} blocks")}


_gpu_probes: dict[str, dict] = {}


def _cached_gpu_probe(cp, dev: Device, refresh: bool = False) -> dict:
    """The probe's numbers for this GPU, driver and runtime: in memory, else from
    ``<cache>/devices/gpu-<key>.json``, else measured now and written there."""
    key = _gpu_key(cp, dev)
    path = devices_dir() / f"gpu-{key}.json"
    if not refresh:
        if key in _gpu_probes:
            return _gpu_probes[key]
        if path.exists():
            try:
                _gpu_probes[key] = json.loads(path.read_text())
                return _gpu_probes[key]
            except ValueError:
                pass          # unreadable: measure again
    found = measure_gpu(cp, dev)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found, indent=1))
    os.replace(tmp, path)
    _gpu_probes[key] = found
    return found
