"""Narrow floats held in float32 (``round_float``) and the narrow integer types: the
NumPy references agree with ml_dtypes (the library ONNX and JAX use for these
formats) and with ONNX's own E8M0 conversion; the C kernels agree with the references
bit for bit, unfused and fused; and the CUDA kernels compile with NVRTC as the GPU
runtime compiles them."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.ops.minifloat import E8M0, FORMATS, ROUND_MODES, round_e8m0, round_mini
from workbench.runtime import run_reference
from workbench.session import Session

ml_dtypes = pytest.importorskip("ml_dtypes")

ML = {"float8e4m3fn": ml_dtypes.float8_e4m3fn, "float8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
      "float8e5m2": ml_dtypes.float8_e5m2, "float8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
      "float4e2m1": ml_dtypes.float4_e2m1fn}
EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 465, 480, 240, 248, 57344,
                  61440, 6, 5, 7, 0.25, 0.75, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11,
                  1e-38, 2.0 ** 127, 3.4e38], np.float32)


def _values(seed: int) -> np.ndarray:
    """Fresh values over every binade the formats have, and their edges."""
    rng = np.random.default_rng(seed)
    spread = [rng.standard_normal(4000).astype(np.float32) * np.float32(s)
              for s in (1e-4, 1e-2, 1, 30, 500, 1e5)]
    return np.concatenate(spread + [EDGES])


def _same(a, b) -> np.ndarray:
    return (a == b) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("saturate", [True, False])
def test_reference_rounds_as_ml_dtypes(fmt, saturate):
    x = _values(1)
    info = ml_dtypes.finfo(ML[fmt])
    # ml_dtypes' cast does not saturate (ONNX's saturating cast clips first)
    src = np.clip(x, float(info.min), float(info.max)) if saturate else x
    want = src.astype(ML[fmt]).astype(np.float32)
    got = round_mini(x, FORMATS[fmt], saturate)
    ok = _same(got, want) | (np.isnan(x) & (fmt == "float4e2m1"))   # FP4 has no NaN
    assert ok.all(), (x[~ok][:5], got[~ok][:5], want[~ok][:5])
    assert (np.signbit(got) == np.signbit(want))[ok & (want == 0) & ~np.isnan(x)].all()


@pytest.mark.parametrize("mode", ROUND_MODES)
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_reference_rounds_as_onnx(mode, saturate):
    nh = pytest.importorskip("onnx.numpy_helper")
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(4000).astype(np.float32) * np.float32(s)
                        for s in (1e-39, 1e-30, 1, 1e30)] + [EDGES])
    want = nh.to_float8e8m0(x, saturate, mode).astype(np.float32)
    got = round_e8m0(x, mode, saturate)
    assert _same(got, want).all()


def _rounding_graph(fmt: str, saturate: bool, mode: str = "up"):
    # a scale before and an add after: fused, the rounding sits inside one kernel
    b = GraphBuilder(f"q_{fmt}")
    x = b.input("x", (64, 100), DType.float32)
    s = b.input("s", (100,), DType.float32)
    attrs = {"format": fmt, "saturate": saturate}
    if fmt == E8M0:
        attrs["round_mode"] = mode
    q = b.op("round_float", b.op("mul", x, s), **attrs)
    q = b.output(q, "q")
    b.output(b.op("add", q, x), "y")
    return b.build()


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    pick = rng.choice(_values(seed), 6400 - EDGES.size, replace=False)
    x = rng.permutation(np.concatenate([pick, EDGES])).reshape(64, 100)
    s = rng.uniform(0.5, 2.0, 100).astype(np.float32)
    return {"x": x, "s": s}


CASES = [(f, sat, "up") for f in sorted(FORMATS) for sat in (True, False)] + \
    [(E8M0, True, m) for m in ROUND_MODES] + [(E8M0, False, "up")]


@pytest.mark.parametrize("planner", ["none", "rules"])
@pytest.mark.parametrize("fmt,saturate,mode", CASES)
def test_kernels_round_as_the_reference(fmt, saturate, mode, planner):
    g = _rounding_graph(fmt, saturate, mode)
    inputs = _inputs(3)
    ref = run_reference(g, inputs)
    s = Session(g, backend="cpu", seed=0)
    if planner != "none":
        s.auto(planner)
        assert len(s.plan.groups) == 1       # the rounding fused with its neighbours
    got = s.run(inputs)
    for name in ("q", "y"):
        assert _same(got[name], ref[name]).all(), name
    assert np.isnan(got["q"]).any() or fmt == "float4e2m1" or saturate


def test_round_float_refuses_what_it_cannot_do():
    from workbench.errors import GraphError
    b = GraphBuilder("bad")
    x = b.input("x", (4,), DType.float32)
    with pytest.raises(GraphError, match="attr format 'float7'"):
        b.op("round_float", x, format="float7")
    with pytest.raises(GraphError, match="round_mode 'sideways'"):
        b.op("round_float", x, format=E8M0, round_mode="sideways")
    h = b.input("h", (4,), DType.float16)
    with pytest.raises(GraphError, match="needs a float32 input"):
        b.op("round_float", h, format="float8e5m2")


def _int_graph():
    b = GraphBuilder("ints")
    outs = []
    for dt in (DType.int8, DType.int16, DType.uint8, DType.uint16, DType.uint32,
               DType.uint64):
        x, y = b.input(f"x_{dt.value}", (256,), dt), b.input(f"y_{dt.value}", (256,), dt)
        z = b.op("div", b.op("mul", b.op("add", x, y), y), y)
        z = b.op("max", b.op("pow", z, b.constant(np.array(2, dt.np))), b.op("mod", x, y))
        outs.append(b.op("cast", b.op("reduce_sum", z, axes=[0], keepdims=False),
                         to="float32"))
        f = b.op("cast", b.op("cast", x, to="float32"), to=dt.value)
        outs.append(b.op("cast", b.op("reduce_max", f, axes=[0], keepdims=False),
                         to="float32"))
    acc = outs[0]
    for o in outs[1:]:
        acc = b.op("add", acc, o)
    b.output(acc, "y")
    return b.build()


def test_narrow_integer_graph_runs_as_the_reference():
    g = _int_graph()
    rng = np.random.default_rng(4)
    inputs = {}
    for name in g.inputs:
        dt = g.value(name).dtype.np
        top = min(int(np.iinfo(dt).max), 1000)
        lo = -top if np.iinfo(dt).min < 0 else 0
        inputs[name] = rng.integers(lo, top, 256).astype(dt)
    ref = run_reference(g, inputs)
    for planner in ("none", "rules"):
        s = Session(g, backend="cpu", seed=0)
        if planner != "none":
            s.auto(planner)
        np.testing.assert_array_equal(s.run(inputs)["y"], ref["y"])


@pytest.mark.parametrize("planner", ["none", "rules", "stitch"])
def test_cuda_kernels_compile(planner, nvrtc_compile_plans):
    graphs = [_int_graph()] + [_rounding_graph(f, s, m) for f, s, m in CASES[::2]]
    assert nvrtc_compile_plans(graphs, [planner]) >= 2


def test_torch_fp8_and_int8_casts_import_and_round_as_torch():
    torch = pytest.importorskip("torch")
    from workbench.frontends import from_torch

    class Quant(torch.nn.Module):
        def forward(self, x, i):
            q = x.to(torch.float8_e4m3fn).float() * 2.0      # saturating
            r = (x * 300.0).to(torch.float8_e5m2).float()   # overflows to inf
            n = (x * 300.0).to(torch.float8_e4m3fnuz).float()   # overflows to NaN
            j = (i + i).to(torch.int16) * 3                  # int8 wraps, then int16
            return q + r, n, j

    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.standard_normal((16, 64)).astype(np.float32) * 200)
    i = torch.from_numpy(rng.integers(-128, 128, (16, 64)).astype(np.int8))
    g = from_torch(Quant(), (x, i))
    want = [t.numpy() for t in Quant()(x, i)]
    for planner in ("none", "rules"):
        s = Session(g, backend="cpu", seed=0)
        if planner != "none":
            s.auto(planner)
        got = list(s.run({n: a.numpy() for n, a in zip(g.inputs, (x, i))}).values())
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            assert _same(a, b).all(), planner
    assert np.isinf(want[0]).any() and np.isnan(want[1]).any()


@pytest.mark.parametrize("elem", ["INT4", "UINT2", "FLOAT8E4M3FN"])
def test_onnx_cast_to_a_held_type_leaves_no_dead_node(elem):
    # the wrap or rounding starts from the Cast's input: no holder cast made and dropped
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from workbench.frontends import load_onnx
    T = getattr(TensorProto, elem)
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=T)], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", T, [4])]),
        opset_imports=[helper.make_opsetid("", 21)])
    g = load_onnx(m)
    read = {i for n in g.nodes for i in n.inputs} | set(g.outputs)
    assert all(o in read for n in g.nodes for o in n.outputs), [n.op for n in g.nodes]
