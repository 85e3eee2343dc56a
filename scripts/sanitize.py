"""Run the generated C kernels under AddressSanitizer and UndefinedBehaviorSanitizer.

The CPU backend's kernels are compiled with their real flags (``-O3 -march=native
-fopenmp`` ...) plus ``SANITIZE_CFLAGS`` (through ``$WB_EXTRA_CFLAGS``, which is part of
the kernel cache key, so these libraries are never served to an ordinary run), loaded
into this Python process and run on every sample graph and on small graphs at the edges
of the integer and float semantics (MIN / -1, x / 0, overflowing add and mul, float ->
int casts of NaN, inf and 1e10, gathers at huge and negative indices, reductions over
empty and length-1 axes, float16 overflow, row kernels of odd sizes), at their boundary
values. Outputs are compared with the NumPy reference (``run_reference``, within the
dtype's tolerance; the edge graphs' every kernel also on its own inputs,
``measure.verify``; see :func:`check_plan`). One line per graph and planner; exit
status 1 on any mismatch. A sanitizer error aborts the process at once with its report
on stderr (``halt_on_error``; exit status 1 from the sanitizer runtime).

    python scripts/sanitize.py            # sample graphs under none, rules, stitch; the
                                          # edge graphs under every planner (~1.5 min)
    python scripts/sanitize.py --all      # also xla, every row kernel's mappings, launch
                                          # candidates and stitch schemes, every kernel
                                          # checked on its inputs, more graphs
    python scripts/sanitize.py --only softmax.json --planners rules
    python scripts/sanitize.py --selftest oob      # a broken kernel: must abort (ASan)

Started in an ordinary environment, the script runs itself again in a child process
with the sanitizer environment (:func:`sanitizer_env`): an ASan-instrumented library can
only be loaded into an uninstrumented Python when the ASan runtime is preloaded
(``LD_PRELOAD``), and CPython's intentional leaks at exit must not count
(``detect_leaks=0``). ``tests/runtime/test_sanitizers.py`` runs it the same way. The
device plans are made for is measured without the sanitizers (``calibrate``), so the
plans, and the kernels, are the ones an ordinary run gets.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# added to the kernels' own flags. float-cast-overflow is not part of GCC's "undefined"
# group; it checks the claim that float -> int casts saturate (ops.elementwise.wb_f2i).
# -g only names source lines in reports (the code is the same).
SANITIZE_CFLAGS = ("-fsanitize=address,undefined,float-cast-overflow "
                   "-fno-sanitize-recover=undefined,float-cast-overflow "
                   "-fno-omit-frame-pointer -g")
# the runtimes' options. ASan: stop at the first error (its default, said out loud);
# no leak check -- CPython does not free everything at exit, by design; no quarantine
# of freed memory -- under ASan every large allocation is mapped afresh, and holding
# NumPy's freed temporaries of many MB back cost time (the kernels free nothing, so
# use-after-free is not what this looks for). UBSan: stop at the first error with a
# stack trace (the flags above already make every check fatal).
# OpenMP: libgomp's worker threads are created through pthread_create, which ASan
# intercepts, so the kernels run with their real thread count; no false positives were
# seen. (If libgomp ever reports one, OMP_NUM_THREADS=1 here is the fallback, at the
# cost of no longer checking the parallel loops' partition of the index space.)
ASAN_OPTIONS = ("detect_leaks=0:halt_on_error=1:abort_on_error=0:print_summary=1:"
                "quarantine_size_mb=0:thread_local_quarantine_size_kb=0")
UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1:report_error_type=1"
_CHILD_MARK = "WB_SANITIZE_CHILD"


# -- the environment (also used by tests/runtime/test_sanitizers.py) -------------------
def _compiler() -> str:
    sys.path.insert(0, str(ROOT))
    from workbench.runtime.cc import find_compiler
    return find_compiler()[0]


def asan_runtime(cc: str | None = None) -> str | None:
    """The compiler's ASan runtime (``cc -print-file-name=libasan.so``), or None."""
    cc = cc or _compiler()
    try:
        r = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = r.stdout.strip()
    # (without the library, the compiler echoes the bare name back)
    return str(Path(path).resolve()) if r.returncode == 0 and os.path.isabs(path) \
        and os.path.exists(path) else None


def unavailable() -> str | None:
    """Why the compiler cannot build and load a sanitized kernel here, or None: a tiny
    shared library is built with the backend's flags and the sanitizers and loaded in a
    child with the runtime preloaded."""
    try:
        cc = _compiler()
    except Exception as e:      # noqa: BLE001 -- BackendUnavailable, with its reason
        return str(e)
    from workbench.runtime.cc import BASE_CFLAGS
    lib = asan_runtime(cc)
    if lib is None:
        return f"{cc} has no ASan runtime (-print-file-name=libasan.so finds nothing)"
    with tempfile.TemporaryDirectory() as tmp:
        c, so = Path(tmp) / "t.c", Path(tmp) / "t.so"
        c.write_text("int wb_t(int* x, int n) { int s = 0; for (int i = 0; i < n; ++i) "
                     "s += x[i]; return s; }\n")
        r = subprocess.run([cc, *BASE_CFLAGS, *shlex.split(SANITIZE_CFLAGS), str(c), "-o",
                            str(so)], capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["unknown error"])[-1][:300]
            return f"{cc} cannot build with {SANITIZE_CFLAGS} here: {last}"
        load = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(so)!r})"],
                              env=sanitizer_env(lib), capture_output=True, text=True)
        if load.returncode != 0:
            return (f"a sanitized library does not load with LD_PRELOAD={lib}: "
                    + (load.stderr.strip().splitlines() or ["?"])[-1][:300])
    return None


def sanitizer_env(asan_lib: str | None = None, base: dict | None = None) -> dict:
    """The environment the checks run in (raises RuntimeError without an ASan runtime)."""
    lib = asan_lib or asan_runtime()
    if lib is None:
        raise RuntimeError("no ASan runtime: the C compiler cannot build with "
                           "-fsanitize=address here")
    env = dict(os.environ if base is None else base)
    env.update(LD_PRELOAD=lib, ASAN_OPTIONS=ASAN_OPTIONS, UBSAN_OPTIONS=UBSAN_OPTIONS,
               WB_EXTRA_CFLAGS=SANITIZE_CFLAGS, PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p]))
    env[_CHILD_MARK] = "1"
    return env


def _asan_loaded() -> bool:
    try:
        return "libasan" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


# -- graphs ----------------------------------------------------------------------------
def sample_graphs() -> dict:
    from workbench.frontends import load
    paths = sorted((ROOT / "sample_graphs").glob("*.json")) + \
        sorted((ROOT / "sample_graphs").glob("*.onnx"))
    return {p.name: load(p) for p in paths}


def sample_inputs(name: str, g, seed: int = 0) -> dict:
    """Random inputs in each sample graph's domain (as tests/test_sample_graphs.py)."""
    import numpy as np
    from workbench.runtime import random_inputs
    ins = random_inputs(g, seed)
    if name == "cross_entropy.json":
        n, classes = g.value("logits").shape
        labels = np.random.default_rng(seed + 1).integers(0, classes, n).astype(np.int64)
        labels[::97] = -100            # ignore_index: outside the classes, contributes 0
        ins["labels"] = labels
    return ins


def _fill(values, shape, dtype, shift: int = 0):
    """``values`` repeated (rotated by ``shift``) to fill ``shape``."""
    import numpy as np
    v = np.asarray(values, dtype=dtype)
    n = int(np.prod(shape, dtype=np.int64))
    return np.roll(np.resize(v, n), shift).reshape(shape)


def edge_graphs() -> dict:
    """name -> (graph, inputs): small graphs at the edges of the kernels' semantics,
    with the boundary values as inputs. Shapes are odd on purpose (vector loops'
    remainders)."""
    import numpy as np
    from workbench.ir import GraphBuilder
    out = {}

    for dt in ("int32", "int64"):
        info = np.iinfo(dt)
        edge = [info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 7, info.max - 1, info.max]
        n = len(edge)
        b = GraphBuilder(f"int_edges_{dt}", f"{dt} arithmetic at MIN/MAX, / 0 and / -1")
        x = b.input("x", (n, 1), dt)
        y = b.input("y", (1, n), dt)
        b.output(b.add(x, y), "add")
        b.output(b.sub(x, y), "sub")
        b.output(b.mul(x, y), "mul")
        b.output(b.div(x, y), "div")
        b.output(b.max(x, y), "max")
        b.output(b.min(x, y), "min")
        b.output(b.lt(x, y), "lt")
        b.output(b.neg(x), "neg")
        b.output(b.abs(x), "abs")
        b.output(b.relu(x), "relu")
        b.output(b.pow(x, y), "pow")
        # a chain a fusing planner puts in one kernel, and reductions that wrap
        q = b.output(b.div(b.add(b.mul(x, y), x), b.sub(y, x)), "chain")
        b.output(b.reduce_sum(b.mul(x, y), axes=[1]), "rowsum")
        b.output(b.reduce_prod(b.add(x, y), axes=[1]), "rowprod")
        b.output(b.reduce_mean(b.mul(x, y), axes=[0]), "colmean")
        b.output(b.reduce_max(b.sub(x, y), axes=[1]), "rowmax")
        b.output(b.reduce_min(b.sub(x, y), axes=[0], keepdims=False), "colmin")
        b.output(b.reduce_sum(q, axes=[0, 1], keepdims=False), "total")
        g = b.build()
        out[f"int_edges_{dt}"] = (g, {"x": np.asarray(edge, dt).reshape(n, 1),
                                      "y": np.asarray(edge, dt).reshape(1, n)})

    # float -> int (NaN, inf, past the range, just inside it), float16 and back
    fvals = [np.nan, np.inf, -np.inf, 1e10, -1e10, 2147483520.0, 2147483648.0,
             -2147483648.0, -2147483904.0, 9.2233715e18, 9.223372e18, -9.223372e18, -9.3e18,
             1e30, -1e30, 0.5, -0.5, -1.5, 2.5, 1e-30, 65504.0, 65520.0, -65536.0, 1e5,
             6e-8, 3e-8, -0.0, 255.5, 127.9]
    b = GraphBuilder("float_casts", "float -> int32/int64/bool/float16 at NaN, inf, 1e10")
    x = b.input("x", (37,), "float32")
    for to in ("int32", "int64", "bool", "float16"):
        b.output(b.cast(x, to=to), f"x_{to}")
    h = b.cast(x, to="float16")
    b.output(b.cast(h, to="int32"), "h_int32")
    b.output(b.cast(h, to="int64"), "h_int64")
    b.output(b.cast(b.mul(x, 3.0), to="int32"), "x3_int32")         # fused with a mul
    i = b.input("i", (37,), "int64")
    b.output(b.cast(i, to="int32"), "i_int32")                     # wraps, as NumPy
    b.output(b.cast(i, to="float16"), "i_float16")
    b.output(b.cast(i, to="float32"), "i_float32")
    b.output(b.cast(b.cast(i, to="float32"), to="int64"), "i_roundtrip")
    g = b.build()
    i64 = np.iinfo(np.int64)
    ivals = [i64.min, i64.max, -1, 0, 1, 2**31, -2**31 - 1, 2**53 + 1, 65504, 65520, 70000,
             -70000, 2**40]
    out["float_casts"] = (g, {"x": _fill(fvals, (37,), np.float32),
                              "i": _fill(ivals, (37,), np.int64)})

    # gather at huge and negative indices (clamped, as documented), both index dtypes
    for dt in ("int64", "int32"):
        info = np.iinfo(dt)
        idx = [info.min, info.min + 1, -2**20, -8, -7, -6, -1, 0, 3, 6, 7, 8, 2**20,
               info.max - 1, info.max]
        if dt == "int64":
            idx += [-2**40, 2**40, 2**62]
        b = GraphBuilder(f"gather_{dt}", f"gather at {dt} indices past both ends")
        d = b.input("d", (7, 9), "float32")
        k = b.input("k", (len(idx),), dt)
        k2 = b.input("k2", (3, 5), dt)
        b.output(b.gather(d, k, axis=0), "rows")
        b.output(b.gather(d, k, axis=1), "cols")
        b.output(b.gather(d, k2, axis=-1), "cols2d")
        # fused with a producer and a consumer, and into a row reduction
        t = b.gather(b.mul(d, 2.0), k, axis=1)
        b.output(b.add(t, 1.0), "fused")
        b.output(b.reduce_sum(t, axes=[1]), "fused_sum")
        g = b.build()
        out[f"gather_{dt}"] = (g, {
            "d": np.arange(63, dtype=np.float32).reshape(7, 9) - 31.0,
            "k": np.asarray(idx, dt), "k2": _fill(idx, (3, 5), dt, 3)})

    # reductions over empty and length-1 axes
    b = GraphBuilder("reduce_empty", "reductions over axes of length 0 and 1")
    e = b.input("e", (5, 0), "float32")
    z = b.input("z", (0, 6), "float32")
    one = b.input("one", (6, 1), "float32")
    row = b.input("row", (1, 7), "float32")
    ei = b.input("ei", (5, 0), "int32")
    for op in ("reduce_sum", "reduce_mean", "reduce_prod"):
        b.output(b.op(op, e, axes=[1]), f"{op}_empty_f")
        b.output(b.op(op, ei, axes=[1]), f"{op}_empty_i")
        b.output(b.op(op, z, axes=[0]), f"{op}_norows")
    for op in ("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min"):
        b.output(b.op(op, one, axes=[1]), f"{op}_len1")
        b.output(b.op(op, row, axes=[0]), f"{op}_len1_rows")
        b.output(b.op(op, z, axes=[1]), f"{op}_zero_rows")
    b.output(b.softmax(one, axis=-1), "softmax_len1")
    b.output(b.layer_norm(row, axis=0), "layernorm_len1")
    b.output(b.reduce_sum(b.add(one, 1.0), axes=[0, 1], keepdims=False), "sum_all")
    g = b.build()
    out["reduce_empty"] = (g, {
        "e": np.zeros((5, 0), np.float32), "z": np.zeros((0, 6), np.float32),
        "one": np.linspace(-2, 3, 6, dtype=np.float32).reshape(6, 1),
        "row": np.linspace(-1, 1, 7, dtype=np.float32).reshape(1, 7),
        "ei": np.zeros((5, 0), np.int32)})

    # float16: overflow to inf, subnormals, NaN, and a row kernel in half precision
    hvals = [65504.0, -65504.0, 60000.0, 6e-8, -6e-8, 0.0, np.nan, np.inf, -np.inf, 1.0,
             -3.5, 1000.0, 0.1]
    b = GraphBuilder("float16_edges", "float16 arithmetic and casts at its limits")
    h = b.input("h", (5, 37), "float16")
    f = b.input("f", (5, 37), "float32")
    b.output(b.add(h, h), "h_twice")                                 # 65504 + 65504 = inf
    b.output(b.cast(f, to="float16"), "f_to_h")
    b.output(b.cast(b.mul(f, 1e5), to="float16"), "f_big_to_h")
    b.output(b.reduce_sum(h, axes=[1]), "h_rowsum")
    b.output(b.reduce_max(h, axes=[0]), "h_colmax")
    b.output(b.cast(b.reduce_sum(b.cast(h, to="float32"), axes=[1]), to="float16"), "h_sum32")
    g = b.build()
    out["float16_edges"] = (g, {"h": _fill(hvals, (5, 37), np.float16),
                                "f": _fill([*hvals, 70000.0, 1e-10, -1e9], (5, 37), np.float32,
                                           5)})
    return out


def shape_graphs(more: bool = False) -> dict:
    """name -> (graph, inputs): row kernels at odd sizes (vector remainders, one row,
    one column; with --all the mapping rule's boundaries: few long rows, split), with
    the sample graphs' own builders, a MobileNetV2 block (``_mbconv``) and ResNet's stem
    (``_stem``). Checked
    like the sample graphs (float32 rounding through a LayerNorm of 16384 columns
    passes the tolerance of one op)."""
    import numpy as np
    sys.path.insert(0, str(ROOT / "sample_graphs"))
    import make_samples as ms
    out = {}
    rng = np.random.default_rng(7)
    shapes = [(3, 1031), (65, 17), (1, 4099)]
    if more:
        shapes += [(96, 16384), (40, 512), (1, 8192), (7, 1), (1, 1), (257, 33)]
    for r, c in shapes:
        for name, fn in (("layernorm", ms.layernorm), ("softmax", ms.softmax)):
            g = fn(r, c)
            out[f"{name}_{r}x{c}"] = (g, {"x": rng.standard_normal((r, c)).astype(np.float32)})
    if more:
        g = ms.block_chain(4)
        from workbench.runtime import random_inputs
        out["chain_4"] = (g, random_inputs(g, 3))
    out["mbconv_4x4"] = _mbconv(rng)
    out["stem_23x21"] = _stem(rng)
    out["pads_past_the_map_3x3"] = _pads_past_the_map(rng)
    out["packed_products"] = _packed_products(rng)
    return out


def _packed_products(rng):
    """Products whose B the kernel packs once per run (fusion/gemm/right_pack.py): one
    row tile of 7 rows reading W^T through 8 x 8 register transposes with partial blocks
    at both edges (k = 37, n = 1795; each tile packs its own panels), the same W
    untransposed, the two again over k = 300 (37 blocks of 8 rows and 4 one by one) and
    k = 515 (each tile packs a block of 256 rows of k at a time into the same floats:
    two whole blocks, then 3 rows one by one), and a weight gradient dy^T @ x (A read transposed, B in a partial panel) -- the
    packs' edges are where a read or write past the buffer would be."""
    import numpy as np

    from workbench.ir import GraphBuilder
    b = GraphBuilder("packed_products")
    feeds = {}

    def inp(name, shape):
        feeds[name] = rng.standard_normal(shape).astype(np.float32)
        return b.input(name, shape)
    w_t = b.op("transpose", inp("w", (1795, 37)), perm=[1, 0])
    b.output(b.matmul(inp("x", (7, 37)), w_t), "y_wt")
    b.output(b.matmul(inp("x2", (7, 37)), inp("w2", (37, 1795))), "y_w")
    w3_t = b.op("transpose", inp("w3", (2000, 300)), perm=[1, 0])
    b.output(b.matmul(inp("x3", (7, 300)), w3_t), "y_wt_deep")
    b.output(b.matmul(inp("x4", (7, 300)), inp("w4", (300, 2000))), "y_w_deep")
    w5_t = b.op("transpose", inp("w5", (2000, 515)), perm=[1, 0])
    b.output(b.matmul(inp("x5", (7, 515)), w5_t), "y_wt_blocks")
    b.output(b.matmul(inp("x6", (7, 515)), inp("w6", (515, 2000))), "y_w_blocks")
    dy_t = b.op("transpose", inp("dy", (24, 520)), perm=[1, 0])
    b.output(b.matmul(dy_t, inp("a", (24, 70))), "dw")
    return b.build(), feeds


def _pads_past_the_map(rng):
    """Dilated 5 x 5 convolutions padded by 4 over 3 x 3 maps (ASPP's dilated branches
    on a small map are like it): some taps' left padding covers a whole output row,
    and some of their rows lie past the edge -- where the gather's run ran one element
    past the row and read outside the input (found by the fuzzer's convs family). One
    filter per group (its taps added into the tile directly) and two (the patches
    gathered per tile)."""
    import numpy as np

    from workbench.ir import GraphBuilder
    b = GraphBuilder("pads_past_the_map_3x3")
    x = b.input("x", (1, 16, 3, 3))
    for k, filters in enumerate((2, 4)):
        w = b.constant(rng.standard_normal((filters, 8, 5, 5)).astype(np.float32))
        b.output(b.op("conv2d", x, w, dilations=[2, 2], pads=[4, 4, 4, 4], group=2), f"y{k}")
    return b.build(), {"x": rng.standard_normal((1, 16, 3, 3)).astype(np.float32)}


def _stem(rng):
    """ResNet's stem at odd sizes, whose kernels keep buffers on the stack: a 7 x 7
    convolution with stride 2 computed directly (the input rows copied with their
    border; output rows of 12, a block and part of one), its ReLU, then the 3 x 3 max
    pool a plane at a time; and a strided 1-D convolution of 40 filters (a pair of
    vectors and part of one) with a bias."""
    import numpy as np

    from workbench.ir import GraphBuilder, composites_nn
    b = GraphBuilder("stem_23x21")
    x = b.input("x", (2, 3, 23, 21))
    w = b.constant(rng.standard_normal((16, 3, 7, 7)).astype(np.float32))
    h = b.relu(b.op("conv", x, w, strides=[2, 2], pads=[3, 3, 3, 3]))
    b.output(composites_nn.max_pool(b, h, (3, 3), (2, 2), None, [1, 1, 1, 1]), "y")
    a = b.input("a", (1, 6, 37))
    b.output(b.op("conv", a, b.constant(rng.standard_normal((40, 6, 5)).astype(np.float32)),
                  b.constant(rng.standard_normal(40).astype(np.float32)), strides=[2],
                  pads=[2, 1]), "a2")
    g = b.build()
    return g, {"x": rng.standard_normal((2, 3, 23, 21)).astype(np.float32),
               "a": rng.standard_normal((1, 6, 37)).astype(np.float32)}


def _mbconv(rng):
    """MobileNetV2's inverted residual over 4 x 4 planes, whose kernels keep buffers on
    the stack: a 1 x 1 expansion of 24 to 144 channels (made transposed against its
    filters packed once), a 3 x 3 depthwise convolution (the channels in the lanes),
    each with a ReLU6, then a 1 x 1 projection back and the residual; and a strided
    depthwise one over 40 channels of one image (a partial vector of lanes)."""
    import numpy as np

    from workbench.ir import GraphBuilder, composites
    b = GraphBuilder("mbconv_4x4")
    x = b.input("x", (2, 24, 4, 4))

    def conv(v, shape, **attrs):
        return b.op("conv", v, b.constant(rng.standard_normal(shape).astype(np.float32)),
                    **attrs)

    def relu6(v):
        return composites.clip(b, v, b.constant(np.float32(0)), b.constant(np.float32(6)))
    h = relu6(conv(x, (144, 24, 1, 1)))
    h = relu6(conv(h, (144, 1, 3, 3), group=144, pads=[1, 1, 1, 1]))
    b.output(conv(h, (24, 144, 1, 1)) + x, "y")
    z = b.input("z", (1, 40, 7, 7))
    b.output(conv(z, (40, 1, 3, 3), group=40, pads=[1, 1, 1, 1], strides=[2, 2]), "z2")
    g = b.build()
    return g, {"x": rng.standard_normal((2, 24, 4, 4)).astype(np.float32),
               "z": rng.standard_normal((1, 40, 7, 7)).astype(np.float32)}


# -- running ---------------------------------------------------------------------------
class Failure(Exception):
    pass


def _instrumented(path) -> bool:
    """Whether a built kernel library calls into ASan (a guard against a harness
    that silently builds without the sanitizers)."""
    return path is None or b"__asan_" in Path(path).read_bytes()


def _output_errors(g, outs: dict, refs: dict, slack: float = 1.0
                   ) -> tuple[list[str], float, list[str]]:
    """Graph outputs against the whole-graph reference: (what is past ``slack`` times
    the tolerance, worst error, the names of the outputs past the tolerance itself)."""
    import numpy as np
    from workbench.tolerance import output_error, tolerance
    bad, worst, past = [], 0.0, []
    for name in g.outputs:
        v = g.value(name)
        got, ref = np.asarray(outs[name]), np.asarray(refs[name])
        e = output_error(v.dtype, got, ref)
        worst = max(worst, e)
        if not e <= tolerance(v.dtype):
            past.append(name)
        if not e <= slack * tolerance(v.dtype):
            got, ref = got.ravel(), ref.ravel()
            if got.shape != ref.shape:
                at = np.arange(0)
            elif got.dtype.kind in "biu":
                at = np.flatnonzero(got != ref)[:6]
            else:
                at = np.flatnonzero(~np.isclose(got.astype(np.float64), ref.astype(np.float64),
                                                rtol=tolerance(v.dtype), equal_nan=True))[:6]
            bad.append(f"output {name} ({v.dtype.value}{list(v.shape)}): max_rel_error "
                       f"{e:.3g}; at flat {at.tolist()}: got {got[at].tolist()}, "
                       f"reference {ref[at].tolist()}")
    return bad, worst, past


# Deep float32 graphs (bert_chain: LayerNorm after two GEMMs) compound rounding past the
# per-op tolerance by the graph outputs (3.5e-4 against 1e-4 on bert_chain.json, without
# sanitizers too); there the kernels are checked on their own inputs, as Session.measure
# does, and the outputs must still be within this many tolerances: a wrong index or an
# element never written is off by far more.
E2E_SLACK = 10.0
# ... and by default only the kernels writing those outputs plus this many others,
# drawn by a seeded generator, are checked one by one (--all: every kernel); the
# check of a kernel over millions of elements costs more than running it
SAMPLED_KERNELS = 2


def check_plan(s, plan, inputs: dict, refs, exact: bool, every_kernel: bool, seed: int = 0,
               checked_groups: set | None = None) -> tuple[int, float, str]:
    """Run ``plan`` on ``inputs`` and compare with the NumPy reference. Returns
    (generated kernels, the outputs' worst relative error, what was checked); raises
    Failure naming what is wrong.

    The graph outputs are compared with the whole-graph reference ``refs()`` (computed
    once per graph), within the tolerance of their dtype. Where that fails on a sample
    graph, or always with ``every_kernel``, kernels are checked on the inputs they
    received (``measure.verify.check_kernel``; see E2E_SLACK and SAMPLED_KERNELS). The
    edge graphs (``exact``) have every output within the tolerance, and every kernel
    checked. The kernels of groups in ``checked_groups`` (checked in an earlier plan of
    the graph, on the same inputs) are not checked again; those checked here are added."""
    checked_groups = set() if checked_groups is None else checked_groups
    import numpy as np
    from workbench.measure.verify import check_kernel
    prog = s.program(plan)
    gen = [ck for ck in prog.compiled if ck.kernel.library is None]
    bare = [ck.kernel.name for ck in gen if not _instrumented(ck.path)]
    if bare:
        raise Failure(f"kernels built without ASan instrumentation: {bare} "
                      "(is $WB_EXTRA_CFLAGS applied?)")
    per_kernel = every_kernel or exact
    env = prog.run(inputs, keep_all=per_kernel)
    bad, worst, past = _output_errors(s.graph, env, refs(), 1.0 if exact else E2E_SLACK)
    how = "outputs"
    if past and not per_kernel:
        env = prog.run(inputs, keep_all=True)
    if per_kernel or past:
        todo = [ck for ck in prog.compiled
                if plan.group(ck.kernel.group) not in checked_groups]
        if not per_kernel:       # the writers of the outputs past the tolerance, and a few
            writers = [ck for ck in todo if {b.value for b in ck.kernel.outputs} & set(past)]
            rest = [ck for ck in todo if ck not in writers]
            pick = np.random.default_rng(seed).permutation(len(rest))[:SAMPLED_KERNELS]
            todo = writers + [rest[i] for i in sorted(pick)]
        host = {**{k: np.asarray(v) for k, v in inputs.items()},
                **{k: np.asarray(v) for k, v in env.items()}}
        kworst = 0.0
        for ck in todo:
            c = check_kernel(prog.graph, ck.kernel, plan.group(ck.kernel.group).nodes, host)
            kworst = max(kworst, c.max_rel_error)
            if not c.within_tolerance:
                bad.append(f"kernel {c.kernel}: max_rel_error {c.max_rel_error:.3g}")
        how = (f"{how}; kernels {len(todo)}/{len(prog.compiled)} "
               f"max_rel_error={kworst:.2g}")
        checked_groups.update(plan.group(ck.kernel.group) for ck in todo)
    if bad:
        raise Failure("; ".join(bad))
    return len(gen), worst, how


def variants(plan):
    """(label, plan) for each other way to run the plan's kernels: every row kernel's
    thread mappings and launch candidates (measure.tune.candidates), every internal
    edge's stitch schemes. Refused ones are skipped."""
    from workbench.errors import FusionRefused
    from workbench.measure.tune import candidates
    for gr in plan.groups:
        ref = gr.nodes[0]
        if gr.schedule.kind == "row_reduce":
            for mp in ("warp", "block", "split", "thread"):
                try:
                    yield f"{gr.id}:map={mp}", plan.set_mapping(ref, mp)
                except FusionRefused:
                    pass
        for cand in candidates(gr)[1:]:
            try:
                p = plan.set_mapping(ref, cand.mapping) if cand.mapping else plan
                yield f"{gr.id}:{cand.label}", p.set_launch(ref, **dict(cand.launch))
            except FusionRefused:
                pass
        for v, _ in gr.schemes:
            for sc in ("local", "regional", "global"):
                try:
                    yield f"{gr.id}:{v}={sc}", plan.set_scheme(v, sc)
                except FusionRefused:
                    pass


def run_graph(name, g, planners, inputs, exact: bool, thorough: bool, seed: int = 0):
    """Check one graph under each planner; yields (ok, summary line) per planner. A
    planner whose kernels are the same C as an earlier planner's is not run again.
    ``thorough``: every kernel checked on its own inputs, and every variant of the
    rules and stitch plans (:func:`variants`)."""
    from functools import lru_cache
    from workbench.codegen import render_kernel
    from workbench.fusion import run_planner
    from workbench.runtime import run_reference
    from workbench.session import Session
    s = Session(g, backend="cpu", calibrate=False)
    refs = lru_cache(maxsize=1)(lambda: run_reference(g, inputs))

    def code(plan):       # the C compiled, without comments (they name the launch)
        return tuple(sorted(re.sub(r"/\*.*?\*/", "", render_kernel(k, "c"), flags=re.S)
                            for k in s.kernels(plan) if k.library is None))
    checked: dict = {}
    groups: set = set()          # groups whose kernels were checked on their own inputs
    for planner in planners:
        t0 = time.perf_counter()
        plan = s.history[0].plan if planner == "none" else \
            run_planner(planner, g, model=s.cost_model)[0]
        plans = [("", plan)]
        if thorough and planner in ("rules", "stitch"):
            for label, p in variants(plan):
                plans.append((label, p))
        kernels, worst, failed, hows, runs = 0, 0.0, [], [], 0
        same = None
        for label, p in plans:
            c = code(p)
            if c in checked:                  # the same C (comments aside): done
                same = same if label else checked[c]
                continue
            checked[c] = planner
            runs += 1
            try:
                n, e, how = check_plan(s, p, inputs, refs, exact, thorough, seed, groups)
                kernels, worst = kernels + n, max(worst, e)
                hows.append(how)
            except Failure as f:
                failed.append(f"[{label or 'plan'}] {f}")
        status = "FAIL" if failed else "ok"
        if runs == 0:
            line = f"sanitize {status:4} {name:36} {planner:7} same kernels as {same}"
        else:
            extra = f" ({runs} plans: the planner's and its variants)" if len(plans) > 1 \
                else ""
            checked_how = hows[0] if len(hows) == 1 else \
                "outputs; every kernel not checked before, on its inputs"
            line = (f"sanitize {status:4} {name:36} {planner:7} kernels={kernels:<4d} "
                    f"outputs max_rel_error={worst:.2g} [{checked_how}]{extra} "
                    f"{time.perf_counter() - t0:.1f}s")
        if failed:
            line += "\n    " + "\n    ".join(failed)
        yield not failed, line


def selftest(kind: str) -> int:
    """A deliberately broken kernel, built like every kernel (cc.build_library with
    $WB_EXTRA_CFLAGS) and called: the sanitizers must abort the process. Returns 0 only
    when nothing caught it -- which tests/runtime/test_sanitizers.py counts as a failure."""
    import numpy as np
    from workbench.runtime.cc import build_library
    src = {
        # one element past the end of the output
        "oob": "void wb_selftest_oob(int* restrict y, const int* restrict x, int n) {\n"
               "  for (int i = 0; i <= n; ++i) y[i] = x[i % n];\n}\n",
        # signed overflow (MAX + 1), the value read from memory so nothing folds it
        "overflow": "void wb_selftest_overflow(int* restrict y, const int* restrict x, int n) {\n"
                    "  for (int i = 0; i < n; ++i) y[i] = x[i] + 1;\n}\n",
    }[kind]
    lib = ctypes.CDLL(str(build_library(f"wb_selftest_{kind}", src)))
    fn = getattr(lib, f"wb_selftest_{kind}")
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int], None
    x = np.full(13, np.iinfo(np.int32).max, np.int32)
    y = np.zeros(13, np.int32)
    fn(y.ctypes.data, x.ctypes.data, 13)
    print(f"sanitize selftest {kind}: NOT caught (the kernel ran to the end)", flush=True)
    return 0


def child(args) -> int:
    # the compiler runs in subprocesses of this one: not with the ASan runtime preloaded
    os.environ.pop("LD_PRELOAD", None)
    import workbench
    from workbench.runtime.cc import cflags, extra_cflags
    flags = extra_cflags()
    if not _asan_loaded() or not any(f.startswith("-fsanitize=") for f in flags):
        print("sanitize: not running under the sanitizers (no ASan runtime loaded or no "
              "-fsanitize in $WB_EXTRA_CFLAGS); run this script directly, it sets them up",
              file=sys.stderr)
        return 3
    print(f"sanitize: workbench {workbench.__file__}; kernels built with "
          f"{' '.join(cflags())}", flush=True)
    if args.selftest:
        return selftest(args.selftest)
    # the CPU's description (which plans are made for) is measured once and cached for
    # every later session: never in this process, whose allocator and calls ASan slows
    # -- in a plain Python (no LD_PRELOAD now), or read from the cache if it is there
    dev = subprocess.run([sys.executable, "-c", "from workbench.runtime.calibrate import "
                          "cpu_device; print(cpu_device().name)"], capture_output=True,
                         text=True, cwd=ROOT)
    if dev.returncode != 0:
        print(f"sanitize: measuring the CPU failed:\n{dev.stderr[-2000:]}", file=sys.stderr)
        return 2
    # the references divide by zero, overflow and take means of empty slices on purpose
    warnings.filterwarnings("ignore", category=RuntimeWarning)

    every = ("none", "xla", "rules", "stitch")
    # the sample graphs under none, rules and stitch by default (a planner whose kernels
    # are the same C as an earlier one's -- stitch and rules on most sample graphs -- is
    # not run again; --all adds xla), the small edge and shape graphs under every planner
    sample_planners = tuple(args.planners or (every if args.all else ("none", "rules",
                                                                      "stitch")))
    edge_planners = tuple(args.planners or every)
    cases = []       # (name, graph, its inputs when called, exact, planners)
    for name, g in sample_graphs().items():
        cases.append((name, g, lambda name=name, g=g: sample_inputs(name, g, args.seed),
                      False, sample_planners))
    for name, (g, ins) in edge_graphs().items():
        cases.append((name, g, lambda ins=ins: ins, True, edge_planners))
    for name, (g, ins) in shape_graphs(more=args.all).items():
        cases.append((name, g, lambda ins=ins: ins, False, edge_planners))
    if args.only:
        cases = [c for c in cases if c[0] in set(args.only)]
        missing = set(args.only) - {c[0] for c in cases}
        if missing:
            print(f"sanitize: no such graph: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
    t0, failed, ran = time.perf_counter(), [], 0
    for name, g, ins, exact, planners in cases:
        for planner, (ok, line) in zip(planners, run_graph(name, g, planners, ins(), exact,
                                                           args.all, args.seed)):
            ran += 1
            print(line, flush=True)
            if not ok:
                failed.append(f"{name}/{planner}")
    print(f"sanitize: {ran} graph/planner runs, {len(failed)} failed, no sanitizer error, "
          f"{time.perf_counter() - t0:.0f}s" + (f": {', '.join(failed)}" if failed else ""),
          flush=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true",
                    help="every planner; every row kernel's mappings, launch candidates and "
                         "stitch schemes under rules and stitch; more edge graphs")
    ap.add_argument("--planners", nargs="+", choices=("none", "xla", "rules", "stitch"))
    ap.add_argument("--only", nargs="+", metavar="GRAPH", help="graphs by name "
                    "(softmax.json, int_edges_int32, ...)")
    ap.add_argument("--seed", type=int, default=0, help="the sample graphs' random inputs")
    ap.add_argument("--selftest", choices=("oob", "overflow"),
                    help="build and run a broken kernel, which the sanitizers must abort")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if os.environ.get(_CHILD_MARK):
        return child(args)
    why = unavailable()
    if why:
        print(f"sanitize: {why}", file=sys.stderr)
        return 3
    # run again with the sanitizers' runtime preloaded and their flags
    return subprocess.run([sys.executable, __file__, *(argv if argv is not None
                                                       else sys.argv[1:])],
                          env=sanitizer_env()).returncode


if __name__ == "__main__":
    sys.exit(main())
