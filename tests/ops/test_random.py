"""Counter-based random numbers (ops/random.py): Philox-4x32-10 against Random123's
published known answers; the NumPy reference, the C helper and the CUDA helper (in the
emulator) bit for bit on the integers; the ops in a graph on the cpu and cuda-emu
backends; the bad inputs refused with the reason."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import workbench as wb
from workbench.runtime import run_reference
from workbench.codegen.render.c import CRenderer
from workbench.codegen.render.cuda import CudaRenderer
from workbench.errors import GraphError
from workbench.ops.random import philox4x32
from workbench.runtime.cc import build_shared, cflags, find_compiler, link_flags, load_library

EPS32 = float(np.finfo(np.float32).eps)
# Random123's kat_vectors, "philox4x32 10": counter (4 words), key (2 words) -> 4 words
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def _key(lo: int, hi: int) -> np.ndarray:
    """The 64-bit key whose low and high words are lo and hi, as int64."""
    return np.array(lo | (hi << 32), np.uint64).astype(np.int64)


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_philox_known_answers(ctr, key, want):
    got = philox4x32(_key(*key), *(np.uint32(c) for c in ctr))
    assert [int(w) for w in got] == list(want)


def _fresh(n, seed):
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2 ** 32, (n, 4), dtype=np.uint64).astype(np.uint32)
    keys = rng.integers(-2 ** 63, 2 ** 63 - 1, n, dtype=np.int64)
    keys[:4] = [0, -1, 2 ** 32 - 1, -2 ** 63]          # the key words' edges
    return words, keys


def test_c_helper_agrees_with_numpy_on_every_word():
    words, keys = _fresh(5000, 11)
    src = CRenderer().prelude() + """
void wb_test_philox(const unsigned int* c, const long long* key, unsigned int* out, long n) {
  for (long i = 0; i < n; i++) {
    unsigned int w[4] = {c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]};
    const unsigned long long k = (unsigned long long)key[i];
    wb_philox4x32(w, (unsigned int)k, (unsigned int)(k >> 32));
    for (int j = 0; j < 4; j++) out[4 * i + j] = w[j];
  }
}
"""
    lib = load_library(build_shared("wb_test_philox", src, compiler=find_compiler(),
                                    flags=cflags(), link=link_flags(), origin="test"))
    out = np.full((len(keys), 4), 0x5A5A5A5A, np.uint32)
    p = lambda a: ctypes.c_void_p(a.ctypes.data)
    lib.wb_test_philox(p(words), p(keys), p(out), ctypes.c_long(len(keys)))
    want = np.stack(philox4x32(keys, *words.T), axis=1)
    assert np.array_equal(out, want)


def test_cuda_helper_agrees_with_numpy_in_the_emulator():
    from workbench.runtime import cuda_emu
    if cuda_emu.find_cxx() is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    words, keys = _fresh(300, 12)
    rd = CudaRenderer()
    src = rd.prelude() + f"""
{rd.kernel_prefix} wb_test_philox(const unsigned int* c, const long long* key,
                                  unsigned int* out, long long n) {{
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned int w[4] = {{c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]}};
  const unsigned long long k = (unsigned long long)key[i];
  wb_philox4x32(w, (unsigned int)k, (unsigned int)(k >> 32));
  for (int j = 0; j < 4; j++) out[4 * i + j] = w[j];
}}
"""
    fn = cuda_emu.build("wb_test_philox", src)
    out = np.full((len(keys), 4), 0x5A5A5A5A, np.uint32)
    cuda_emu.run(fn, 3, 128, [words, keys, out, np.array(len(keys), np.int64)])
    assert np.array_equal(out, np.stack(philox4x32(keys, *words.T), axis=1))


def _graph(n=4099):
    """A dropout-like use: (seed, flat element index, a layer's number) per element."""
    b = wb.GraphBuilder("noise")
    key = b.input("key", (), "int64", range=(-2 ** 40, 2 ** 40))
    idx = b.input("idx", (n,), "int32", range=(0, 2 ** 31 - 1))
    layer = b.input("layer", (), "uint32", range=(0, 100))
    b.output(b.op("random_uniform", key, idx, layer), "u")
    b.output(b.op("random_normal", key, idx, layer), "z")
    return b.build()


def _inputs(g, seed):
    rng = np.random.default_rng(seed)
    n = g.value("idx").shape[0]
    return {"key": np.array(rng.integers(-2 ** 40, 2 ** 40), np.int64),
            "idx": rng.permutation(n).astype(np.int32),
            "layer": np.array(rng.integers(0, 100), np.uint32)}


@pytest.mark.parametrize("backend", ["cpu", "cuda-emu"])
def test_ops_in_a_graph_match_the_reference(backend):
    if backend == "cuda-emu":
        from workbench.runtime import cuda_emu
        if cuda_emu.find_cxx() is None:
            pytest.skip("no C++ compiler for the CUDA emulator")
    g = _graph(4099 if backend == "cpu" else 517)
    s = wb.Session(g, backend=backend)
    ins = _inputs(g, 7)
    got = s.run(ins)
    want = run_reference(g, ins)
    # uniform: exact (24 bits of a word times 2^-24) -- bit for bit
    assert np.array_equal(got["u"].view(np.uint32), want["u"].view(np.uint32))
    # normal: the words are exact; logf/cosf/sqrtf round as each library does
    err = np.abs(got["z"].astype(np.float64) - want["z"]) / (np.abs(want["z"]) + 1)
    assert err.max() <= 8 * EPS32, err.max() / EPS32


def test_distribution_and_independence_of_the_counters():
    n = 1 << 16
    idx = np.arange(n, dtype=np.int32)
    u = wb.ops.get_op("random_uniform").reference([np.int64(5), idx], {})[0]
    z = wb.ops.get_op("random_normal").reference([np.int64(5), idx], {})[0]
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    # 5 standard errors: a mean, a variance, a neighbour correlation
    assert abs(u.mean() - 0.5) < 5 * (1 / 12) ** 0.5 / n ** 0.5
    assert abs(z.mean()) < 5 / n ** 0.5 and abs(z.var() - 1) < 5 * 2 ** 0.5 / n ** 0.5
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / n ** 0.5
    # another key or another second counter: other numbers
    other = wb.ops.get_op("random_uniform").reference([np.int64(6), idx], {})[0]
    step1 = wb.ops.get_op("random_uniform").reference([np.int64(5), idx, np.int32(1)], {})[0]
    assert (other != u).mean() > 0.99 and (step1 != u).mean() > 0.99


def test_float_counters_are_refused_with_the_reason():
    b = wb.GraphBuilder("bad")
    x = b.input("x", (8,))
    with pytest.raises(GraphError, match="counter 0 is float32.*integers"):
        b.op("random_uniform", b.input("key", (), "int32"), x)
    with pytest.raises(GraphError, match="takes 2 to 5 inputs"):
        b.op("random_normal", b.input("k2", (), "int32"))
