"""The generated C kernels' SIMD loops are vectorized by the compiler the CPU backend
really uses, with the flags it really passes (GCC's own ``-fopt-info-vec`` report,
``workbench/runtime/vectorization.py``).

Why: ``#pragma omp simd`` is a request GCC may quietly decline. Until 2026-11-24 the
NaN-propagating ``wb_fmax``/``wb_fmin`` helpers were written ``((a != a) | (a > b)) ?
a : b``; two in a row (a ReLU6, a Clip, max after exp) could not be if-converted, so
every MobileNetV2 convolution epilogue ran as a branch per element: MobileNetV2 as a
whole 2.1x slower (``benchmarks/results/minmax-select-2026-11-24.md``), with every
result still right. These tests keep such a helper form from coming back. They skip
where the C compiler is not GCC (another compiler reports differently).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.codegen import lower_plan
from workbench.ir import GraphBuilder
from workbench.ir import composites
from workbench.runtime import get_backend
from workbench.runtime.vectorization import simd_loops, supported
from workbench.session import Session

SAMPLES = Path(__file__).parents[2] / "sample_graphs"


@pytest.fixture(scope="module", autouse=True)
def _gcc():
    if not supported():
        pytest.skip("the C compiler is not GCC: its vectorization report is not read here")


def _kernels(g, planner: str):
    s = Session(g, backend="cpu")
    s.auto(planner)
    backend = get_backend("cpu")
    return [(k, backend.render(k)) for k in lower_plan(s.plan) if k.library is None]


def _scalar(kernels) -> list[str]:
    """The SIMD loops of these kernels the compiler left scalar, described."""
    return [f"{k.name}: `{loop.text}` ({'; '.join(loop.reasons) or 'no reason given'})"
            for k, src in kernels for loop in simd_loops(src, k.name) if not loop.vectorized]


@pytest.mark.parametrize("first", ["relu", "max", "min", "exp", "sigmoid", "abs"])
def test_selects_in_a_row_vectorize(first):
    # first(x) -> max(., y) -> min(., 6): every pair of max/min in a row, and each op
    # before one, fused into one elementwise kernel of a long loop
    b = GraphBuilder(f"chain_{first}")
    x, y = b.input("x", (64, 4096)), b.input("y", (64, 4096))
    v = b.op(first, x, y) if first in ("max", "min") else b.op(first, x)
    v = b.op("min", b.op("max", v, y), b.constant(np.float32(6.0)))
    b.output(b.op("relu", v), "out")
    kernels = _kernels(b.build(), "rules")
    assert len(kernels) == 1
    scalar = _scalar(kernels)
    assert not scalar, scalar


def test_a_convolution_epilogue_of_relu6_vectorizes():
    # MobileNetV2's expansion: a 1 x 1 convolution of few channels, then ReLU6 (Clip)
    # in its epilogue, applied to each tile while it is in cache
    b = GraphBuilder("mbconv")
    x = b.input("x", (2, 8, 32, 32))
    w = b.constant(np.random.default_rng(0).standard_normal((48, 8, 1, 1), np.float32))
    y = composites.clip(b, b.op("conv", x, w), b.constant(np.float32(0.0)),
                        b.constant(np.float32(6.0)))
    b.output(y, "y")
    kernels = _kernels(b.build(), "stitch")
    assert len(kernels) == 1 and kernels[0][0].schedule.startswith("conv as gemm")
    loops = simd_loops(kernels[0][1], kernels[0][0].name)
    assert loops, "the epilogue is a SIMD loop"
    scalar = _scalar(kernels)
    assert not scalar, scalar


@pytest.mark.parametrize("kind", ["softmax", "logsumexp", "layer_norm", "rms_norm"])
def test_row_kernels_vectorize(kind):
    # issue 44's row kernels, one fused kernel each: every pass over the row (the max,
    # the exp and sum, the write) a SIMD loop the compiler vectorized
    b = GraphBuilder(kind)
    x = b.input("x", (64, 1024))
    if kind == "softmax":
        y = composites.softmax(b, x)
    elif kind == "logsumexp":
        m = b.reduce_max(x, axes=[-1], keepdims=True)
        y = b.log(b.reduce_sum(b.exp(x - m), axes=[-1], keepdims=True)) + m
    elif kind == "layer_norm":
        y = composites.layer_norm(b, x, b.input("g", (1024,)), b.input("b", (1024,)))
    else:
        y = composites.rms_norm(b, x, b.input("g", (1024,)))
    b.output(y, "y")
    kernels = _kernels(b.build(), "stitch")
    assert len(kernels) == 1
    loops = simd_loops(kernels[0][1], kernels[0][0].name)
    # (the exp pass and its sum are one call, wb_expf_shift_n: render/c_exp_rows.py)
    passes = {"softmax": 2, "logsumexp": 1, "layer_norm": 3, "rms_norm": 2}[kind]
    assert len(loops) == passes, loops
    scalar = _scalar(kernels)
    assert not scalar, scalar


def test_the_cross_entropy_samples_row_kernel_vectorizes():
    # its one-hot pass compares an int64 column index with the label: in the 16 lanes
    # of render/c_lanes.py GCC found "no vectype" for that load and left the pass
    # scalar (the kernel 5.1 ms where the omp simd reduction takes 2.1)
    kernels = [(k, src) for k, src in _kernels(str(SAMPLES / "cross_entropy.json"), "stitch")
               if k.name.startswith("k0_reduce_max")]
    assert len(kernels) == 1
    scalar = _scalar(kernels)
    assert not scalar, scalar


def test_the_report_names_a_loop_left_scalar_and_why():
    # a call the compiler cannot see into keeps a loop scalar, whatever the pragma
    src = ("float opaque(float);\n"
           "void k(const float* restrict x, float* restrict y) {\n"
           "  #pragma omp simd\n"
           "  for (int i = 0; i < 4096; ++i) {\n"
           "    y[i] = opaque(x[i]);\n"
           "  }\n"
           "  #pragma omp simd\n"
           "  for (int i = 0; i < 4096; ++i) {\n"
           "    y[i] = y[i] * 2.0f;  /* { a brace in a comment } */\n"
           "  }\n"
           "}\n")
    first, second = simd_loops(src, "k")
    assert (first.line, first.vectorized) == (4, False)
    assert first.reasons and not any(r.startswith("couldn't") for r in first.reasons)
    assert (second.line, second.vectorized, second.reasons) == (8, True, ())


def _body_of_simd_loops(src: str, name: str) -> list[str]:
    """The text of each SIMD loop of kernel ``name`` (its ``for`` line to its end)."""
    lines = src.splitlines()
    out = []
    for loop in simd_loops(src, name):
        depth, body = 0, []
        for text in lines[loop.line - 1:]:
            body.append(text)
            depth += text.count("{") - text.count("}")
            if depth == 0:
                break
        out.append("\n".join(body))
    return out


def test_broadcast_operands_are_read_with_plain_loads_in_the_vectorized_loop(check_graph):
    """GELU of x + bias (a bias row broadcast over the rows) times a per-row scale:
    the elementwise loop runs rows outer and a contiguous inner loop, so the inner loop
    vectorizes with plain loads of the bias and the scale is loop-invariant -- no
    ``i % 256`` (a gather per vector, the fused GELU-with-bias loop 2x slower than its
    erf alone) nor ``i / 256`` per element; the result is NumPy's on fresh random
    inputs, outputs poisoned."""
    b = GraphBuilder("bias_gelu_scaled")
    x = b.input("x", (48, 256))
    h = x + b.constant(np.random.default_rng(1).standard_normal(256, np.float32), "bias")
    b.output(b.gelu(h) * b.input("scale", (48, 1)), "y")
    g = b.build()
    kernels = _kernels(g, "stitch")
    assert len(kernels) == 1
    (k, src), = kernels
    bodies = _body_of_simd_loops(src, k.name)
    assert len(bodies) == 1 and not _scalar(kernels), _scalar(kernels)
    loads = [ln for ln in bodies[0].splitlines() if "in" in ln and "[" in ln]
    assert loads and not any("%" in ln or "/ " in ln.split("=", 1)[1].split("]")[0]
                             for ln in loads), bodies[0]
    for seed in (1, 2):
        check_graph(g, "stitch", seed=seed)
