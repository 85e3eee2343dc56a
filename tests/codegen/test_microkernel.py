"""The CPU GEMM micro-kernel (codegen/microkernel.py) compiled as the kernels are --
the C prelude, the backend's flags -- and for each register block it has (AVX-512,
AVX, 128-bit vectors, chosen by the compiler's target macros), held to float32's
bound on ``|A| @ |B|`` against NumPy on fresh random operands, output poisoned first;
and the packing done once per buffer."""
import ctypes
import platform

import ml_dtypes
import numpy as np
import pytest

from workbench.codegen.microkernel import KC, STATE_SLOTS, packed_numel
from workbench.codegen.render import CRenderer
from workbench.fusion.gemm.tiles import PANEL
from workbench.runtime import cc

LL, P = ctypes.c_longlong, ctypes.c_void_p
BF16 = ml_dtypes.bfloat16
WRAPPERS = r"""
void t_pack(const void* b, int bf16, long long k, long long n, long long rs, long long cs,
            float* bp) {
  wb_pack_b_once(b, bf16, k, n, rs, cs, bp);
}
void t_gemm(long long m, long long n, long long k, const float* a, long long ars,
            long long acs, const float* bp, float* c, long long ldc) {
  wb_gemm_packed(m, n, k, a, ars, acs, bp, c, ldc);
}
void t_gemm_pairs(long long m, long long n, long long k, const unsigned short* a,
                  long long ars, long long acs, const float* bp, float* c, long long ldc) {
  wb_gemm_packed_pairs(m, n, k, a, ars, acs, bp, c, ldc);
}
int t_dpbf16(void) {
#ifdef WB_DPBF16
  return 1;
#else
  return 0;
#endif
}
int t_block(void) { return WB_MR * 1000 + WB_NB; }
void t_conv_lanes(const float* x, long long c, long long h, long long w, const float* fp,
                  long long f0, long long f1, float* y, long long ldy, long long oy0,
                  long long oy1, long long ow, long long kh, long long kw, long long sy,
                  long long sx, long long py, long long px) {
  wb_conv_lanes(x, c, h, w, fp, f0, f1, y, ldy, oy0, oy1, ow, kh, kw, sy, sx, 1, 1, py, px);
}
"""

# the register block each set of flags leaves (after the backend's -march=native)
ISAS = {"native": "", "avx": "-mno-avx512f", "128-bit": "-mno-avx"}


def _cpu_flags() -> set:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@pytest.fixture(scope="module", params=list(ISAS))
def lib(request, tmp_path_factory):
    flags = ISAS[request.param]
    if flags and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86 flags select the register blocks here")
    if request.param == "avx" and "avx" not in _cpu_flags():
        pytest.skip("this CPU has no AVX")
    mp = pytest.MonkeyPatch()
    mp.setenv(cc.EXTRA_CFLAGS_ENV, flags)
    try:
        path = cc.build_library("t_micro", CRenderer().prelude() + WRAPPERS)
    finally:
        mp.undo()
    lib = cc.load_library(path)
    lib.isa = request.param
    lib.t_pack.argtypes = [P, ctypes.c_int, LL, LL, LL, LL, P]
    lib.t_gemm.argtypes = [LL, LL, LL, P, LL, LL, P, P, LL]
    lib.t_gemm_pairs.argtypes = [LL, LL, LL, P, LL, LL, P, P, LL]
    lib.t_conv_lanes.argtypes = [P, LL, LL, LL, P, LL, LL, P, LL] + [LL] * 9
    for f in (lib.t_pack, lib.t_gemm, lib.t_gemm_pairs, lib.t_conv_lanes):
        f.restype = None
    return lib


def test_register_block_follows_the_target(lib):
    """rows x columns of the block: AVX-512 6 x 64, AVX 6 x 16, SSE 3 x 16."""
    native = 6064 if "avx512f" in _cpu_flags() else 6016 if "avx" in _cpu_flags() else None
    want = {"native": native, "avx": 6016, "128-bit": 3016}[lib.isa]
    if want is None:
        pytest.skip("another architecture")
    assert lib.t_block() == want


def _packed(lib, b: np.ndarray, trans: bool) -> np.ndarray:
    """B packed by the kernel's own routine into a poisoned buffer (B stored
    transposed when ``trans``: element (r, c) at c * k + r)."""
    k, n = b.shape
    bp = np.full(packed_numel(k, n), np.nan, np.float32)
    src = np.ascontiguousarray(b.T) if trans else b
    lib.t_pack(src.ctypes.data, int(src.dtype == BF16), k, n, 1 if trans else n,
               k if trans else 1, bp.ctypes.data)
    return bp


# (m, n, k): blocks of 6 rows and 64 columns with ragged edges, k past one KC block,
# n past one panel and under one, the degenerate 1 x 1 x 1, an empty sum (k = 0); the
# blocks at a tile's edge of 1, 2 and 3 vectors, whole (96, 48, 16) and not (196, 100)
SHAPES = [(1, 1, 1), (4, 9, 0), (7, 100, 300), (65, 256, 1024), (13, 64, KC + 1), (6, 16, KC),
          (130, 1000, 256), (5, 3, 40), (48, 129, 2 * KC + 7), (9, 96, 70), (11, 48, 300),
          (20, 196, 33)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True), (False, True)])
def test_micro_kernel_matches_numpy(lib, m, n, k, trans_a, trans_b):
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bp = _packed(lib, b, trans_b)
    # a wider C than the tile (ldc > n) poisoned all over: the kernel writes its tile only
    c = np.full((m, n + 5), np.nan, np.float32)
    src = np.asfortranarray(a) if trans_a else a
    ars, acs = (1, m) if trans_a else (k, 1)
    lib.t_gemm(m, n, k, src.ctypes.data, ars, acs, bp.ctypes.data, c.ctypes.data, n + 5)
    ref = a.astype(np.float64) @ b
    bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    got = c[:, :n]
    assert np.isfinite(got).all()
    assert (np.abs(got - ref) <= bound + 1e-30).all(), np.abs(got - ref).max()
    assert np.isnan(c[:, n:]).all(), "wrote past the tile's columns"


# (filters, stride, output width): one vector of filters and a pair (whole, and a last
# pair part full) on every ISA; rows of whole blocks and a partial last one (7, 8 or 6
# positions a block: codegen wb_conv_cr)
CONV_SHAPES = [(16, 2, 15), (40, 1, 14), (24, 1, 16), (8, 2, 7)]


@pytest.mark.parametrize("filters,stride,ow", CONV_SHAPES)
def test_direct_convolution_matches_numpy(lib, filters, stride, ow):
    """A direct convolution (wb_conv_lanes: filters in the lanes, each block stored
    transposed, whole blocks through a buffer a row per filter) of 3 x 3 taps with a
    pad of 1, output rows 1..oh-1 of filters 0..filters, into a poisoned output wider
    than the tile (ldy past its positions)."""
    rng = np.random.default_rng(filters * 31 + ow)
    c, oh = 3, 5
    h, w = (oh - 1) * stride + 1, (ow - 1) * stride + 1
    x = rng.standard_normal((c, h, w)).astype(np.float32)
    wt = rng.standard_normal((filters, c, 3, 3)).astype(np.float32)
    k = c * 9
    bp = _packed(lib, wt.reshape(filters, k).T, True)
    rows, ldy = oh - 1, (oh - 1) * ow + 3
    y = np.full((filters, ldy), np.nan, np.float32)
    lib.t_conv_lanes(x.ctypes.data, c, h, w, bp.ctypes.data, 0, filters, y.ctypes.data, ldy,
                     1, oh, ow, 3, 3, stride, stride, 1, 1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((filters, oh, ow))
    mag = np.zeros((filters, oh, ow))
    for ky in range(3):
        for kx in range(3):
            win = xp[:, ky:ky + (oh - 1) * stride + 1:stride, kx:kx + (ow - 1) * stride + 1:stride]
            ref += np.einsum("fc,chw->fhw", wt[:, :, ky, kx], win)
            mag += np.einsum("fc,chw->fhw", np.abs(wt[:, :, ky, kx]), np.abs(win))
    got = y[:, :rows * ow].reshape(filters, rows, ow)
    bound = 2 * k * np.finfo(np.float32).eps * mag[:, 1:]
    assert np.isfinite(got).all()
    assert (np.abs(got - ref[:, 1:]) <= bound + 1e-30).all(), np.abs(got - ref[:, 1:]).max()
    assert np.isnan(y[:, rows * ow:]).all(), "wrote past the tile's positions"


def test_tile_starting_on_a_later_panel(lib):
    """A tile's columns c0.. read from the panel c0 / PANEL onward (the kernel passes
    the packed buffer plus c0 * k), as a GEMM kernel's second column tile does."""
    rng = np.random.default_rng(3)
    m, n, k, c0 = 20, 3 * PANEL + 10, 70, 2 * PANEL
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bp = _packed(lib, b, False)
    c = np.full((m, n - c0), np.nan, np.float32)
    lib.t_gemm(m, n - c0, k, a.ctypes.data, k, 1, bp[c0 * k:].ctypes.data, c.ctypes.data,
               n - c0)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b[:, c0:], rtol=1e-4, atol=1e-4)


def test_packing_happens_once_per_buffer(lib):
    """The first call packs and marks the buffer; later calls leave it as it is (the
    constant never changes, so packing again would only cost time). A fresh buffer
    (a new program's workspace, poisoned) packs again."""
    rng = np.random.default_rng(5)
    k, n = 33, 70
    b = rng.standard_normal((k, n)).astype(np.float32)
    bp = _packed(lib, b, False)
    panels = -(-n // PANEL)
    assert bp.size == panels * PANEL * k + STATE_SLOTS
    first = bp.copy()
    other = rng.standard_normal((k, n)).astype(np.float32)
    lib.t_pack(other.ctypes.data, 0, k, n, n, 1, bp.ctypes.data)
    np.testing.assert_array_equal(bp, first)
    # the panels: column c of B at panel c // PANEL, zero past n
    grid = first[:-STATE_SLOTS].reshape(panels, k, PANEL)
    np.testing.assert_array_equal(grid.transpose(1, 0, 2).reshape(k, -1)[:, :n], b)
    assert (grid.transpose(1, 0, 2).reshape(k, -1)[:, n:] == 0).all()
    np.testing.assert_array_equal(_packed(lib, other, False)[:-STATE_SLOTS].reshape(
        panels, k, PANEL).transpose(1, 0, 2).reshape(k, -1)[:, :n], other)


def test_bfloat16_b_is_widened_as_it_is_packed(lib):
    """A bfloat16 B multiplied by float32 rows (a fused attention's V): its panels
    hold the widened values exactly, zero past n."""
    rng = np.random.default_rng(9)
    k, n = 37, 70
    b = rng.standard_normal((k, n)).astype(BF16)
    bp = _packed(lib, b, False)
    panels = -(-n // PANEL)
    grid = bp[:-STATE_SLOTS].reshape(panels, k, PANEL).transpose(1, 0, 2).reshape(k, -1)
    np.testing.assert_array_equal(grid[:, :n], b.astype(np.float32))
    assert (grid[:, n:] == 0).all()


def test_bfloat16_pairs_use_the_dot_product_instruction_where_there_is_one(lib):
    """AVX512-BF16's vdpbf16ps with 512-bit vectors, else the widening loop."""
    has = "avx512_bf16" in _cpu_flags() and lib.isa == "native"
    assert lib.t_dpbf16() == int(has)


def _pairs_packed(lib, b, trans: bool) -> np.ndarray:
    k, n = b.shape
    bp = np.full(packed_numel(k, n, pairs=True), np.nan, np.float32)
    src = np.ascontiguousarray(b.T) if trans else b
    lib.t_pack(src.ctypes.data, 2, k, n, 1 if trans else n, k if trans else 1, bp.ctypes.data)
    return bp


# odd k (a last pair half zero), k past one and two KC blocks, fewer rows than a
# register block, n past one panel and under one
PAIR_SHAPES = [(1, 1, 1), (4, 9, 0), (7, 100, 301), (65, 256, 1024), (13, 64, KC + 1),
               (5, 3, 40), (48, 129, 2 * KC + 7), (20, 196, 33), (9, 16, 70)]


@pytest.mark.parametrize("m,n,k", PAIR_SHAPES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, True)])
def test_bfloat16_pairs_match_float32_of_the_operands(lib, m, n, k, trans_a, trans_b):
    """bfloat16 A and B, B packed two rows to a word (the layout checked word by
    word), multiplied two rows of k at a time: float32's product of the bfloat16
    operands, to float32's bound, every element of C written and none past it."""
    rng = np.random.default_rng(m * 131 + n * 7 + k)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    bp = _pairs_packed(lib, b, trans_b)
    panels, k2 = -(-n // PANEL), -(-k // 2)
    words = bp[:-STATE_SLOTS].view(np.uint32).reshape(panels, k2, PANEL)
    words = words.transpose(1, 0, 2).reshape(k2, panels * PANEL)[:, :n]
    bits = b.view(np.uint16).astype(np.uint32)
    if k % 2:
        bits = np.vstack([bits, np.zeros((1, n), np.uint32)])
    np.testing.assert_array_equal(words, bits[0::2] | bits[1::2] << 16)
    c = np.full((m, n + 3), np.nan, np.float32)
    src = np.asfortranarray(a) if trans_a else a
    ars, acs = (1, m) if trans_a else (k, 1)
    lib.t_gemm_pairs(m, n, k, src.ctypes.data, ars, acs, bp.ctypes.data, c.ctypes.data, n + 3)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = 2 * max(k, 1) * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))
    got = c[:, :n]
    assert np.isfinite(got).all()
    assert (np.abs(got - a64 @ b64) <= bound + 1e-30).all(), np.abs(got - a64 @ b64).max()
    assert np.isnan(c[:, n:]).all(), "wrote past the tile's columns"
