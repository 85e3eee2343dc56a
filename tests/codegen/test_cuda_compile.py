"""What the GPU runtime compiles, compiled here without a GPU: NVRTC itself with the
runtime's options (``workbench.runtime.nvrtc.compile_cuda``, the call the cupy backend
makes) for sm_90.

Every sample graph under every planner, every thread mapping of every row kernel and
every stitch scheme of every internal edge: each distinct kernel source is compiled on
its own, as the runtime compiles it. Then the PTX and ptxas' report of the row kernels
are read: 16-byte loads and stores, each element of a row read once, registers without
spills, and no 32-bit wrap in the address arithmetic of a tensor past 2^31 elements.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from workbench.codegen import lower_plan, render_kernel
from workbench.codegen.kir import Loop
from workbench.frontends import load
from workbench.fusion import run_planner
from workbench.ir import GraphBuilder

from plan_checks import plan_variants

SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_kernel_compiles_as_the_runtime_compiles_it(path, nvrtc_toolchain):
    from workbench.runtime import nvrtc
    g = load(path)
    sources = {}
    for planner in ("none", "xla", "rules", "stitch"):
        plan, _ = run_planner(planner, g)
        for variant in plan_variants(plan) if planner in ("rules", "stitch") else [plan]:
            for k in lower_plan(variant):
                if k.library is None:
                    sources.setdefault(render_kernel(k, "cuda"), k.name)
    assert sources
    with ThreadPoolExecutor(2) as pool:   # NVRTC releases the GIL while it compiles
        cubins = list(pool.map(lambda item: nvrtc.compile_cuda(item[0], item[1], "90"),
                               sources.items()))
    assert all(c[:4] == b"\x7fELF" for c in cubins)     # sm_90 cubins


def test_the_runtime_and_the_check_share_one_compile():
    """The cupy backend builds kernels with nvrtc.compile_cuda and its OPTIONS (no
    CuPy-assembled option list beside them), so this check cannot drift from it."""
    import inspect
    from workbench.runtime import cupy_backend, nvrtc
    src = inspect.getsource(cupy_backend.CupyBackend.compile_source)
    assert "compile_cuda(" in src and "RawModule" not in src
    assert nvrtc.OPTIONS == ("--std=c++17",)


def test_cxx14_cannot_compile_what_the_runtime_compiles(nvrtc_toolchain):
    """The failure the H100 showed: CUDA 13's headers need C++17. A source that
    includes <cuda/std/...> (as cooperative_groups.h does) fails under C++14 -- and no
    generated source includes cooperative groups any more (the grid barrier is ours)."""
    tc = nvrtc_toolchain
    from workbench.runtime import nvrtc
    src = "#include <cuda/std/cstdint>\nextern \"C\" __global__ void k(int* p) { *p = 1; }\n"
    if tc.version[0] >= 13:
        with pytest.raises(nvrtc.NvrtcError, match="C\\+\\+ ?17"):
            nvrtc._nvrtc(src, "k", ("--std=c++14", "-arch=sm_90")
                         + tuple(f"-I{d}" for d in tc.include_dirs), tc, False)
    assert nvrtc.compile_cuda(src, "k", "90")
    g = load("sample_graphs/layernorm.json")
    split = run_planner("rules", g)[0].set_mapping("k0", "split")
    cuda = render_kernel(lower_plan(split)[0], "cuda")
    assert "cooperative_groups" not in cuda and "wb_grid_sync();" in cuda


# -- the row kernels' PTX -----------------------------------------------------------------
def _ptx(k) -> str:
    from workbench.runtime import nvrtc
    return nvrtc.compile_cuda(render_kernel(k, "cuda"), k.name, "90", ptx=True).decode()


def _row_kernel(kind: str, rows: int, cols: int, mapping: str | None = None):
    b = GraphBuilder(f"{kind}_{rows}x{cols}")
    x = b.input("x", (rows, cols))
    w = b.constant(np.linspace(0.5, 1.5, cols, dtype=np.float32), "w")
    bias = b.constant(np.linspace(-0.5, 0.5, cols, dtype=np.float32), "b")
    y = {"softmax": lambda: b.softmax(x, axis=-1),
         "layer_norm": lambda: b.layer_norm(x, w, bias),
         "rms_norm": lambda: b.rms_norm(x, w)}[kind]()
    b.output(y, "y")
    plan, _ = run_planner("rules", b.build())
    assert len(plan.groups) == 1
    if mapping:
        plan = plan.set_mapping("k0", mapping)
    return lower_plan(plan)[0]


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("rows,cols,mapping", [(32768, 4096, None), (4096, 1024, "warp"),
                                               (8, 768, "warp"), (64, 8192, None),
                                               (64, 32768, None)])
def test_row_kernels_read_each_element_once_with_16_byte_accesses(kind, rows, cols,
                                                                  mapping, nvrtc_toolchain):
    """The row in registers: the input row is loaded once (one 16-byte ld.global.v4
    per 4 elements of each thread's columns), the output stored with st.global.v4, no
    scalar float loads or stores of the row, no local memory, no spills."""
    from workbench.runtime import nvrtc
    k = _row_kernel(kind, rows, cols, mapping)
    s = k.launch
    assert k.scratch and k.scratch[0].space == "register" and k.scratch[0].value == "x"
    ptx = _ptx(k)
    per_thread = k.scratch[0].slots // 4          # 16-byte loads of x per thread
    params = 1 + (kind != "softmax") + (kind == "layer_norm")   # x, w, b
    # fully unrolled: x once, and each broadcast parameter once per pass that uses it
    v4_loads = len(re.findall(r"ld\.global(?:\.nc)?\.v4\.[fub]32", ptx))
    assert per_thread <= v4_loads <= per_thread * params
    assert len(re.findall(r"st\.global\.v4\.[fub]32", ptx)) == per_thread
    assert not re.findall(r"(ld|st)\.global(\.nc)?\.f32", ptx)
    assert ".local" not in ptx
    src = render_kernel(k, "cuda")
    assert f"__launch_bounds__({s.block}, 1)" in src   # ptxas keeps to the block's registers
    rep = nvrtc.ptxas_report(src, k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0
    # two blocks fit an SM: registers x threads within half the register file
    threads = s.block
    assert rep.registers * threads <= 65536 // (2 if threads <= 512 else 1)


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("rows,cols,mapping", [(4096, 1001, None), (1024, 77, "warp"),
                                               (64, 50257, None), (2048, 30522, None)])
def test_rows_no_vector_divides_move_16_bytes_inside_the_row(kind, rows, cols, mapping,
                                                             nvrtc_toolchain):
    """A row length 4 does not divide (GPT-2's 50257-word vocabulary, 77 CLIP tokens):
    the tile is shifted by the row's misalignment, so each thread's 4 columns inside
    the row still move as one 16-byte access (one ld.global.v4 and one st.global.v4
    per slot), and only the row's two ends element by element; no local memory, no
    spills. (Counted in the CUDA emulator: tests/runtime/test_cuda_emu_samples.py.)"""
    from workbench.runtime import nvrtc
    k = _row_kernel(kind, rows, cols, mapping)
    # x kept on chip: in registers, or (50257 floats) in shared memory
    assert k.scratch[0].value == "x"
    (loop,) = [x for x in k.body if isinstance(x, Loop)]
    tile = next(x.tile for x in _loops(loop) if x.tile)
    assert tile[2] == 4 and tile[3] == f"(int)(row * {cols} % 4)"
    per_thread = tile[1]
    ptx = _ptx(k)
    # x moves in 16-byte loads, once per slot; w and b (read at the column, not where
    # the row starts) element by element
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.[fub]32", ptx)) == per_thread
    assert len(re.findall(r"st\.global\.v4\.[fub]32", ptx)) == per_thread
    # the ends: at most a vector's elements of each slot, one by one
    assert 0 < len(re.findall(r"st\.global\.f32", ptx)) <= 4 * per_thread
    assert ".local" not in ptx
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0


@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
@pytest.mark.parametrize("cols, dtype", [(50257, "float32"), (40000, "float32"),
                                         (50257, "bfloat16")])
def test_rows_too_long_for_registers_are_kept_in_dynamic_shared_memory(kind, cols, dtype,
                                                                       nvrtc_toolchain):
    """A row no block's registers hold (GPT-2's logits, 50257 float32) is kept in
    shared memory past the static 48 KB: declared in dynamic shared memory, which the
    launch sizes and the kernel opts in to, and read from global memory once (16-byte
    loads, one per slot); ptxas sees no static shared memory beyond the reduction
    slots. (A bfloat16 row is kept as float32.) 65536 float32 (256 KB) fit nowhere and
    are read once per pass."""
    from workbench.device import H100
    from workbench.runtime import nvrtc
    b = GraphBuilder(f"{kind}_{cols}")
    x = b.input("x", (8, cols), dtype)
    y = b.softmax(x, axis=-1) if kind == "softmax" else b.layer_norm(
        x, b.constant(np.linspace(0.5, 1.5, cols, dtype=np.float32), "w"),
        b.constant(np.linspace(-0.5, 0.5, cols, dtype=np.float32), "b"))
    b.output(y, "y")
    (k,) = lower_plan(run_planner("rules", b.build(), device=H100)[0])
    (cache,) = k.scratch
    assert cache.space == "shared" and cache.value == "x"
    assert k.dynamic_shared == {cache.name: 0}
    assert cols * 4 <= k.dynamic_shared_bytes <= H100.shared_optin_limit
    src = render_kernel(k, "cuda")
    assert f"WB_SHARED_DYN(float, {cache.name}, {cols}, 0);" in src
    rep = nvrtc.ptxas_report(src, k.name)
    assert rep.spill_bytes == 0 and rep.shared_bytes <= 1024      # the reduction slots
    ptx = _ptx(k)
    (loop,) = [s for s in k.body if isinstance(s, Loop)]
    per_thread = next(t.tile for t in _loops(loop) if t.tile)[1]
    # x once per slot; LayerNorm's w and b too where the row is aligned (8 float32 of
    # each beside 8 bfloat16: two 16-byte loads)
    v4_loads = len(re.findall(r"ld\.global(?:\.nc)?\.v4\.[fub]32", ptx))
    assert v4_loads == per_thread or (kind == "layer_norm" and cols % 4 == 0
                                      and v4_loads in (3 * per_thread, 5 * per_thread))


@pytest.mark.parametrize("cols", [65536, 70001])
def test_a_row_too_long_for_either_is_split_between_registers_and_shared_memory(
        cols, nvrtc_toolchain):
    """65536 float32 (256 KB, the issue's softmax_long) fit neither the registers a
    1024-thread block has left (32 a thread: 128 KB) nor the shared memory (227 KB)
    alone: each thread keeps its tile's first 8 steps in registers (5 of a shifted
    tile: 70001 columns) and the rest in
    dynamic shared memory (a warp's lanes on 32 consecutive words), so the row is
    still read from global memory once -- one 16-byte load per slot -- with no local
    memory and no spills."""
    from workbench.device import H100
    from workbench.runtime import nvrtc
    b = GraphBuilder(f"softmax_{cols}")
    b.output(b.softmax(b.input("x", (8, cols)), axis=-1), "y")
    (k,) = lower_plan(run_planner("rules", b.build(), device=H100)[0])
    (x,) = k.scratch
    assert x.space == "hybrid" and x.value == "x" and x.threads == k.launch.block == 1024
    (loop,) = [s for s in k.body if isinstance(s, Loop)]
    _, steps, vector, _ = next(t.tile for t in _loops(loop) if t.tile)
    kept = 8 if cols % 4 == 0 else 5        # (a shifted tile needs 12 registers more)
    assert x.slots == kept * vector and x.numel == (steps - kept) * vector * 1024
    assert k.dynamic_shared == {x.name: 0} and k.dynamic_shared_bytes == x.numel * 4
    src = render_kernel(k, "cuda")
    ptx = _ptx(k)
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.[fub]32", ptx)) == steps
    assert ".local" not in ptx
    rep = nvrtc.ptxas_report(src, k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0 and rep.shared_bytes <= 1024


def _loops(loop):
    yield loop
    for x in loop.body:
        if isinstance(x, Loop):
            yield from _loops(x)


def test_elementwise_kernels_move_16_bytes_per_access(nvrtc_toolchain):
    b = GraphBuilder("gelu")
    x = b.input("x", (4096, 1024))
    b.output(b.gelu(x + b.constant(np.ones(1024, np.float32), "bias")), "y")
    k = lower_plan(run_planner("rules", b.build())[0])[0]
    ptx = _ptx(k)
    # x and the bias (a row vector, read at i % 1024) 16 bytes at a time, nothing scalar
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.f32", ptx)) == 2
    assert re.findall(r"st\.global\.v4\.f32", ptx)
    assert not re.findall(r"(ld|st)\.global(\.nc)?\.f32", ptx)


@pytest.mark.parametrize("dtype, n, vector", [("bfloat16", 4099, 8), ("float16", 8192, 8),
                                              ("int32", 1027, 4), ("bool", 5000, 8)])
def test_elementwise_kernels_of_every_type_and_length_move_16_bytes(dtype, n, vector,
                                                                   nvrtc_toolchain):
    """A flat loop of 1024 elements or more moves 16 bytes a thread a step whatever
    its length (the last n % vector elements one by one) and element type: 8 of a
    2-byte type, 4 of a 4-byte one; a bool loop 8 bytes, 8 at a time. (Measured in the
    CUDA emulator: tests/runtime/test_cuda_emu_samples.py.)"""
    from workbench.codegen.kir import Loop
    b = GraphBuilder(f"ew_{dtype}")
    x, y = b.input("x", (n,), dtype), b.input("y", (n,), dtype)
    b.output(b.op("and" if dtype == "bool" else "max", x, y), "z")
    k = lower_plan(run_planner("rules", b.build())[0])[0]
    (loop,) = [s for s in k.body if isinstance(s, Loop)]
    assert loop.vector == vector
    ptx = _ptx(k)
    wide = "v4.[fub]32" if dtype != "bool" else "v2.[ub]32"
    assert len(re.findall(rf"ld\.global(?:\.nc)?\.{wide}", ptx)) == 2
    assert len(re.findall(rf"st\.global\.{wide}", ptx)) == 1
    src = render_kernel(k, "cuda")
    assert ("the tail" in src) == (n % vector != 0)
