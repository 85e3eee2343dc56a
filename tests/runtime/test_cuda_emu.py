"""The CUDA emulator (runtime/cuda_emu.py) on hand-written CUDA C: it must keep CUDA's
documented semantics (warp shuffles, barriers, shared memory, grid barriers) and stop
each kind of bug it exists to catch with a message that names it, leaving the caller's
buffers as they were. Its use on the workbench's own kernels is in test_gpu.py and
test_fuzz.py."""
from __future__ import annotations

import os

import numpy as np
import pytest

from workbench.codegen.render.cuda import GRID_SYNC
from workbench.runtime import cuda_emu

# (CI sets WB_REQUIRE_CUDA_EMU: there these fail rather than skip)
EMU_MISSING = (None if os.environ.get("WB_REQUIRE_CUDA_EMU")
               else cuda_emu.CudaEmuBackend.unavailable())
pytestmark = pytest.mark.skipif(EMU_MISSING is not None, reason=str(EMU_MISSING))

SHUFFLES = r"""
extern "C" __global__ void t_shfl(const int* __restrict__ src, int* __restrict__ out) {
  const int t = threadIdx.x, v = src[t];
  out[0 * 96 + t] = __shfl_down_sync(0xffffffffu, v, 3);
  out[1 * 96 + t] = __shfl_up_sync(0xffffffffu, v, 5, 16);
  out[2 * 96 + t] = __shfl_xor_sync(0xffffffffu, v, 6, 8);
  out[3 * 96 + t] = __shfl_sync(0xffffffffu, v, 37, 16);
  out[4 * 96 + t] = (int)__ballot_sync(0xffffffffu, v & 1);
}
"""


def _lanes(block, f):
    return np.array([f(t & 31, t - (t & 31)) for t in range(block)])


def test_warp_shuffles_follow_the_programming_guide():
    """Each lane's value as CUDA C++ Programming Guide's definitions give it: down and up
    stay inside their width-wide segment (out-of-range lanes keep their own value),
    xor returns the own value for a partner in a later segment, shfl takes srcLane
    modulo width, ballot gathers one bit per lane."""
    fn = cuda_emu.build("t_shfl", SHUFFLES)
    src = np.random.default_rng(0).integers(-1000, 1000, 96).astype(np.int32)
    out = np.full(5 * 96, -7, np.int32)
    cuda_emu.run(fn, 1, 96, [src, out])
    got = out.reshape(5, 96)
    v = lambda t: src[t]                                       # noqa: E731
    down = _lanes(96, lambda l, w: v(w + l + 3) if l + 3 < 32 else v(w + l))
    up = _lanes(96, lambda l, w: v(w + l - 5) if (l % 16) >= 5 else v(w + l))
    xor = _lanes(96, lambda l, w: v(w + (l ^ 6)) if (l ^ 6) < (l // 8 + 1) * 8 else v(w + l))
    idx = _lanes(96, lambda l, w: v(w + (l // 16) * 16 + 37 % 16))
    ballot = np.array([sum(1 << l for l in range(32) if src[(t // 32) * 32 + l] & 1)
                       for t in range(96)], dtype=np.uint32).view(np.int32)
    for row, want in zip(got, [down, up, xor, idx, ballot]):
        np.testing.assert_array_equal(row, want)


REVERSE = r"""
extern "C" __global__ void t_reverse(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float s[1024];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  const int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - threadIdx.x);
  if (j < n) y[j] = s[threadIdx.x];
}
"""


@pytest.mark.parametrize("block", [1, 7, 32, 100, 1024])
def test_shared_memory_is_per_block_and_the_barrier_orders_it(block):
    fn = cuda_emu.build("t_reverse", REVERSE)
    grid = 5
    n = np.array(grid * block, np.int32)
    x = np.random.default_rng(block).standard_normal(grid * block).astype(np.float32)
    y = np.full_like(x, np.nan)
    cuda_emu.run(fn, grid, block, [x, y, n], seed=block)
    np.testing.assert_array_equal(y, x.reshape(grid, block)[:, ::-1].ravel())


# the integer max's combiner names its operand twice: a shuffle inside ?: is called by
# some lanes only (the bug the emulator found in the workbench's CUDA renderer)
DIVERGENT_SHUFFLE = r"""
extern "C" __global__ void t_diverge(const long long* __restrict__ x, long long* __restrict__ y) {
  __shared__ long long r[32];
  long long a = x[threadIdx.x];
  for (int o = 16; o > 0; o >>= 1)
    a = (a > __shfl_down_sync(0xffffffffu, a, o) ? a : __shfl_down_sync(0xffffffffu, a, o));
  if ((threadIdx.x & 31) == 0) r[threadIdx.x >> 5] = a;
  __syncthreads();
  if (threadIdx.x == 0) y[0] = r[0];
}
"""


def test_a_warp_function_not_every_lane_calls_is_a_deadlock():
    fn = cuda_emu.build("t_diverge", DIVERGENT_SHUFFLE)
    x = np.arange(32, dtype=np.int64)[::-1].copy()     # lane 0 holds the max: it skips
    y = np.array([-1], np.int64)
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=r"deadlock.*wait at __syncthreads"):
        cuda_emu.run(fn, 1, 32, [x, y])
    assert y[0] == -1                                   # nothing written back


MASKED = r"""
extern "C" __global__ void t_masked(float* __restrict__ y) {
  if (threadIdx.x < 16) y[threadIdx.x] = __shfl_down_sync(0x0000ffffu, 1.0f, 8);
}
"""


def test_reading_a_lane_outside_the_mask_is_an_error():
    fn = cuda_emu.build("t_masked", MASKED)
    with pytest.raises(cuda_emu.EmulatedLaunchError,
                       match=r"reads lane (1[6-9]|2[0-3]), which its mask 0x0000ffff"):
        cuda_emu.run(fn, 1, 32, [np.zeros(32, np.float32)])


OUT_OF_BOUNDS = r"""
extern "C" __global__ void t_oob(const float* __restrict__ x, float* __restrict__ y, int n,
                                 int how) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (how == 0) y[i + 1] = x[i];                        /* one past the end */
  if (how == 1) y[i] = x[i + 1];                        /* a read one past */
  if (how == 5) y[i] = x[i + 4096];                     /* a read 16 KB past */
  if (how == 2 && i == 0) y[-1] = 1.0f;                 /* one before */
  if (how == 3) const_cast<float*>(x)[i] = 0.0f;        /* into a const parameter */
  if (how == 4) y[i] = x[i];                            /* right */
}
"""


@pytest.mark.parametrize("n, how, message", [
    # an access into the inaccessible pages after a buffer (a size of 16-byte vectors
    # ends right at them), or into the few bytes before them (a write, seen afterwards)
    (100, 0, r"thread 99: an access 0 bytes past the end of parameter 1 \(400 bytes\)"),
    (99, 0, r"wrote past the end of parameter 1 \(396 bytes\), at byte 396"),
    (100, 1, r"thread 99: an access 0 bytes past the end of parameter 0 \(400 bytes\)"),
    (100, 5, r"an access 16\d\d\d bytes past the end of parameter 0"),
    (100, 2, r"wrote before parameter 1 \(400 bytes\)"),
    (100, 3, r"wrote into parameter 0, which it takes as const"),
])
def test_bad_accesses_are_named_and_leave_the_buffers_alone(n, how, message):
    fn = cuda_emu.build("t_oob", OUT_OF_BOUNDS)
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, np.nan, np.float32)
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=message):
        cuda_emu.run(fn, 1, 128, [x, y, np.array(n, np.int32), np.array(how, np.int32)])
    assert np.isnan(y).all() and (x == np.arange(n)).all()
    cuda_emu.run(fn, 1, 128, [x, y, np.array(n, np.int32), np.array(4, np.int32)])
    np.testing.assert_array_equal(y, x)


UNDEFINED = r"""
extern "C" __global__ void t_ub(const float* __restrict__ x, float* __restrict__ y, int how) {
  if (how == 0) {                                       /* 32-bit index overflow */
    const int big = 2147483000 + (int)threadIdx.x * 1000;
    y[threadIdx.x] = (float)(big % 7);
  } else {                                              /* a 16-byte load off alignment */
    const float4 v = *reinterpret_cast<const float4*>(x + 1);
    y[threadIdx.x] = v.x;
  }
}
"""


@pytest.mark.parametrize("how, message", [(0, "signed integer overflow"),
                                          (1, "misaligned address")])
def test_undefined_behaviour_is_reported(how, message):
    fn = cuda_emu.build("t_ub", UNDEFINED)
    if not any("undefined" in f for f in cuda_emu.flags()):
        pytest.skip("the C++ compiler here cannot link UBSan")
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=message):
        cuda_emu.run(fn, 1, 32, [np.zeros(64, np.float32), np.zeros(32, np.float32),
                                 np.array(how, np.int32)])


# the kernels' own grid barrier, as the CUDA prelude writes it
GRID_SUM = GRID_SYNC + r"""
extern "C" __global__ void t_grid(float* __restrict__ part, float* __restrict__ total) {
  if (threadIdx.x == 0) part[blockIdx.x] = (float)(blockIdx.x + 1);
  for (int round = 0; round < 3; ++round) {
    wb_grid_sync();
    if (blockIdx.x == (unsigned)round && threadIdx.x == 0) {
      float s = 0.0f;
      for (unsigned b = 0; b < gridDim.x; ++b) s += part[b];
      total[round] = s;
    }
  }
}
"""


def test_a_cooperative_launch_runs_the_kernels_own_grid_barrier():
    """The kernels' spin barrier (include/grid_sync.cuh), three rounds: every block's
    write is seen after it; without a cooperative launch blocks run a few at a time and
    the barrier never completes -- a hang the emulator stops."""
    fn = cuda_emu.build("t_grid", GRID_SUM)
    part, total = np.zeros(8, np.float32), np.zeros(3, np.float32)
    cuda_emu.run(fn, 8, 64, [part, total], cooperative=True)
    np.testing.assert_array_equal(total, [36.0] * 3)
    with pytest.raises(cuda_emu.EmulatedLaunchError, match="did not finish in 2 s"):
        cuda_emu.run(fn, 64, 64, [np.zeros(64, np.float32), total], timeout_s=2)


ATOMICS = r"""
extern "C" __global__ void t_atomics(unsigned int* __restrict__ n, int* __restrict__ hi,
                                     int* __restrict__ lo, float* __restrict__ sum) {
  const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(n, 1u);
  atomicMax(hi, i * 7 % 1000);
  atomicMin(lo, 500 - i);
  atomicAdd(sum, 0.5f);
}
"""


def test_atomics_hold_across_blocks_run_at_once():
    """Blocks on several OS threads at once (a cooperative launch: one each) all
    adding into one word: no update lost."""
    fn = cuda_emu.build("t_atomics", ATOMICS)
    n, hi, lo = np.zeros(1, np.uint32), np.array([-1], np.int32), np.array([10**6], np.int32)
    total = np.zeros(1, np.float32)
    cuda_emu.run(fn, 8, 96, [n, hi, lo, total], cooperative=True)
    ids = np.arange(8 * 96)
    assert n[0] == 768 and hi[0] == (ids * 7 % 1000).max() and lo[0] == 500 - 767
    assert total[0] == 384.0


COUNTED = r"""
extern "C" __global__ void t_counted(const float* __restrict__ x, float* __restrict__ y,
                                     unsigned short* __restrict__ h) {
  const int t = threadIdx.x;
  /* 16 bytes each, read as the workbench's row kernels read them */
  const uint4 v = *reinterpret_cast<const uint4*>(x + 4 * t);
  float e[4];
  for (int k = 0; k < 4; ++k) e[k] = reinterpret_cast<const float*>(&v)[k];
  const float first = x[0];                                   /* 4 bytes, every thread */
  reinterpret_cast<float2*>(y)[t] = make_float2(e[0] + e[1] + first, e[2] - e[3]);  /* 8 each */
  if (t < 3) h[t] = (unsigned short)t;                        /* 2 bytes, 3 of 64 */
}
"""


def test_global_accesses_are_counted_by_width():
    """Each launch returns every parameter's global-memory traffic: bytes by access
    width and distinct bytes (the kernel library's loads and stores are instrumented;
    the counts back the checks of test_cuda_emu_samples.py). The widths are those of
    the CPU code compiled from the source: a vector load whose lanes are all used stays
    one access."""
    if not cuda_emu.counting() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip("the C++ compiler here does not take GCC's -fsanitize=thread")
    fn = cuda_emu.build("t_counted", COUNTED)
    x = np.random.default_rng(2).standard_normal(256).astype(np.float32)
    y, h = np.zeros(128, np.float32), np.zeros(64, np.uint16)
    ax, ay, ah = cuda_emu.run(fn, 1, 64, [x, y, h])
    assert ax.read_by_width == (0, 0, 64 * 4, 0, 1024) and ax.read_distinct == 1024
    assert ax.written == 0 and ax.reads_per_byte == (1024 + 256) / 1024
    assert ay.written_by_width == (0, 0, 0, 512, 0) and ay.written_distinct == 512
    assert ah.written_by_width == (0, 6, 0, 0, 0) and ah.written_distinct == 6
    assert ay.vector_fraction(8) == 1.0 and ax.vector_fraction(16) == 0.8
    # two warps: the vector loads 16 sectors a request, x[0] one, the float2 stores 8
    assert (ax.load_requests, ax.load_sectors) == (4, 2 * 16 + 2 * 1)
    assert (ay.store_requests, ay.store_sectors) == (2, 2 * 8) and ay.efficiency(True) == 1.0
    assert (ah.store_requests, ah.store_sectors) == (1, 1)
    np.testing.assert_allclose(y[0::2], x[0::4] + x[1::4] + x[0], rtol=1e-6)
    np.testing.assert_allclose(y[1::2], x[2::4] - x[3::4], rtol=1e-6)


STRIDED = r"""
extern "C" __global__ void t_strided(const float* __restrict__ x, float* __restrict__ y,
                                     int stride) {
  y[threadIdx.x] = x[threadIdx.x * stride];
}
"""


@pytest.mark.parametrize("stride, sectors", [(1, 4), (2, 8), (8, 32), (64, 32)])
def test_a_warps_requests_cost_the_sectors_its_lanes_touch(stride, sectors):
    """The lanes' loads of one instruction make one request, costing the 32-byte
    sectors they touch, as a GPU's memory pipeline counts them: 32 lanes of 4 bytes
    side by side take 4 sectors, 8 apart 32 (one each)."""
    if not cuda_emu.counting() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip("the C++ compiler here does not take GCC's -fsanitize=thread")
    fn = cuda_emu.build("t_strided", STRIDED)
    x, y = np.arange(32 * 64, dtype=np.float32), np.zeros(32, np.float32)
    ax, ay, _ = cuda_emu.run(fn, 1, 32, [x, y, np.array(stride, np.int32)])
    assert (ax.load_requests, ax.load_sectors) == (1, sectors)
    assert ax.efficiency() == 128 / (32 * sectors)
    assert (ay.store_requests, ay.store_sectors) == (1, 4)
    np.testing.assert_array_equal(y, x[::stride][:32])


def test_the_launch_is_checked_before_it_runs():
    fn = cuda_emu.build("t_reverse", REVERSE)
    x = np.zeros(4, np.float32)
    with pytest.raises(cuda_emu.EmulatedLaunchError, match="takes 3"):
        cuda_emu.run(fn, 1, 4, [x, x])
    with pytest.raises(cuda_emu.EmulatedLaunchError, match="block 2048"):
        cuda_emu.run(fn, 1, 2048, [x, x, np.array(4, np.int32)])
    bounded = cuda_emu.build("t_bounded", REVERSE.replace(
        "__global__ void t_reverse", "__global__ void __launch_bounds__(128, 1) t_bounded"))
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=r"256 threads.*__launch_bounds__"
                                                            r"\(128\)"):
        cuda_emu.run(bounded, 1, 256, [x, x, np.array(4, np.int32)])


def test_the_emulators_times_are_not_taken_for_the_gpus(tmp_path):
    """The backend runs the H100's plans, and says its latencies are the emulation's:
    the cost model does not learn from them, tuning refuses, DRAM counters say why
    not, and the CLI's table says so under it."""
    import subprocess
    import sys

    from workbench.errors import WorkbenchError
    from workbench.device import H100
    from workbench.measure.counters import CountersUnavailable, dram_bytes
    from workbench.session import Session
    s = Session("sample_graphs/bias_grad.json", backend="cuda-emu")
    assert s.device == H100 and not s.calibrate and "emulated on the CPU" in \
        s.backend.device_name()
    s.auto("rules")
    with pytest.raises(WorkbenchError, match="times are not the device's"):
        s.tune()
    with pytest.raises(CountersUnavailable, match="does not run on an NVIDIA GPU"):
        dram_bytes(s)
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "optimize",
                        "sample_graphs/bias_grad.json", "--backend", "cuda-emu", "--repeats",
                        "1", "--warmup", "0", "-q"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert "emulated on the CPU" in r.stdout and "emulation's on this CPU" in r.stdout
    assert r.stdout.count(" True") == 2                 # both steps within tolerance


SHARED = r"""
#ifndef WB_SHARED
#define WB_SHARED(type, name, n) __shared__ type name[n]
#endif
extern "C" __global__ void t_shared(const float* __restrict__ x, float* __restrict__ y, int how) {
  WB_SHARED(float, s, 64);
  const int t = threadIdx.x;
  if (how != 1 || t != 5) s[t] = x[blockIdx.x * 64 + t];     /* 1: element 5 left unwritten */
  if (how != 0) __syncthreads();                            /* 0: no barrier */
  float v = s[63 - t];
  if (how == 2) v += s[t + 1];                              /* 2: one past the end */
  if (how == 3) { __syncthreads(); s[t] = v; s[(t + 1) & 63] = v; }   /* 3: two writers */
  y[blockIdx.x * 64 + t] = v;
}
"""


@pytest.mark.parametrize("how, message", [
    (0, r"(a race on shared s\[\d+\]|reads shared s\[\d+\] before any thread of this "
        r"block wrote it \(a missing __syncthreads)"),
    (1, r"reads shared s\[5\] before any thread of this block wrote it"),
    (2, r"shared s\[64\] is out of its bounds \[0, 64\)"),
    (3, r"a race on shared s\[\d+\]: written here and by thread"),
])
def test_shared_memory_races_bounds_and_leftovers_are_named(how, message):
    """The workbench's CUDA declares shared arrays through WB_SHARED: plain __shared__
    arrays for NVRTC, checked ones in the emulator. Each element's accesses since the
    last __syncthreads are compared: another thread's write and a read or write of it
    is a race; an element no thread of the block wrote holds another block's data."""
    fn = cuda_emu.build("t_shared", SHARED)
    x = np.random.default_rng(1).standard_normal(3 * 64).astype(np.float32)
    y = np.full_like(x, np.nan)
    with pytest.raises(cuda_emu.EmulatedLaunchError, match=message):
        cuda_emu.run(fn, 3, 64, [x, y, np.array(how, np.int32)])
    cuda_emu.run(fn, 3, 64, [x, y, np.array(4, np.int32)])      # barrier, in bounds
    np.testing.assert_array_equal(y, x.reshape(3, 64)[:, ::-1].ravel())


def test_the_workbench_declares_its_shared_arrays_checked():
    from workbench.codegen import lower_plan, render_kernel
    from workbench.fusion import run_planner
    from workbench.ir import GraphBuilder
    b = GraphBuilder("ln")
    x = b.input("x", (4, 70000))
    b.output(b.layer_norm(x, b.input("g", (70000,)), b.input("b", (70000,))), "y")
    plan, _ = run_planner("rules", b.build())
    src = render_kernel(lower_plan(plan.set_mapping("k0", "block"))[0], "cuda")
    assert "WB_SHARED(double, wb_red0, 33);" in src and "__shared__ double" not in \
        src.split("extern \"C\"")[-1]
