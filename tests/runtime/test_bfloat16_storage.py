"""bfloat16 as a storage type: 16 bits in memory, float32 arithmetic, rounded to
nearest even once per store -- in the C kernels (run here), the CUDA kernels (NVRTC,
PTX read), library calls, the reference, the importers and artifacts.

Every run compares with the NumPy reference on fresh random inputs, outputs poisoned
(``Session.measure`` checks each kernel on its own inputs); fused kernels are also held
to the float32 computation of the same graph rounded once, which is what a fused
bfloat16 kernel promises (torch.compile's kernels do the same)."""
from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest

from workbench.codegen import lower_plan, render_kernel
from workbench.errors import FusionRefused
from workbench.fusion import run_planner
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.tolerance import max_rel_error, tolerance
from workbench.ops.bfloat16 import from_bits, to_bits
from workbench.runtime import run_reference
from workbench.runtime.cpu import CpuBackend
from workbench.session import Session

BF16 = ml_dtypes.bfloat16
ULP = 2.0 ** -8        # bfloat16's spacing at 1: a value rounded once is within half


def _row_graph(kind: str, rows: int, cols: int, dtype: str = "bfloat16"):
    rng = np.random.default_rng(7)
    b = GraphBuilder(f"{kind}_{dtype}_{rows}x{cols}")
    x = b.input("x", (rows, cols), dtype)

    def const(name, lo, hi):    # bfloat16 values in either graph (the twin's exact)
        return b.constant(rng.uniform(lo, hi, cols).astype(BF16).astype(
            DType.of(dtype).np), name)
    if kind == "softmax":
        y = b.softmax(x, axis=-1)
    elif kind == "layer_norm":
        y = b.layer_norm(x, const("gamma", 0.5, 1.5), const("beta", -0.5, 0.5))
    elif kind == "rms_norm":
        y = b.rms_norm(x, const("w", 0.5, 1.5))
    else:   # bias + GELU + residual + LayerNorm (the BERT layer's tail)
        r = b.input("r", (rows, cols), dtype)
        h = b.gelu(x + const("bias", -0.5, 0.5)) + r
        y = b.layer_norm(h, const("gamma", 0.5, 1.5), const("beta", -0.5, 0.5))
    b.output(y, "y")
    return b.build()


def _float32_twin(g):
    """The same workload in float32, on the same (bfloat16-exact) constants."""
    kind = g.name.split("_bfloat16")[0]
    rows, cols = g.value("x").shape
    return _row_graph(kind, rows, cols, "float32")


def _mappings(plan):
    yield "rules", plan
    for m in ("warp", "block", "split", "thread"):
        try:
            yield m, plan.set_mapping("k0", m)
        except FusionRefused:
            pass


# -- the bits, as CuPy holds them -------------------------------------------------------
def test_bits_round_to_nearest_even_like_ml_dtypes():
    """to_bits / from_bits (the integer path an array module without bfloat16 takes)
    against ml_dtypes, over the float32 range: ties, overflow, subnormals, NaN, inf."""
    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.array([0.0, -0.0, np.inf, -np.inf, 3.4028235e38, -3.3961776e38, 1e-40, -1e-45,
                  1.00390625, 1.01171875, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9], np.float32),
        rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    bits = to_bits(np, x)
    assert bits.dtype == np.uint16
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits[~nan], x[~nan].astype(BF16).view(np.uint16))
    back = from_bits(np, bits)
    assert np.isnan(back[nan]).all()          # a NaN stays a NaN (never an inf)
    np.testing.assert_array_equal(np.signbit(back[nan]), np.signbit(x[nan]))
    np.testing.assert_array_equal(back[~nan], x[~nan].astype(BF16).astype(np.float32))


def test_a_backend_holding_bits_widens_and_rounds_library_values():
    """Backend.widen / hold on bits (CuPy's way), run here with NumPy as the module."""
    class Bits(CpuBackend):
        bf16_as_bits = True
    be = Bits()
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32) * 100
    held = be.hold(x, DType.bfloat16)
    assert held.dtype == np.uint16
    np.testing.assert_array_equal(held, x.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(be.widen(held, DType.bfloat16),
                                  x.astype(BF16).astype(np.float32))
    assert CpuBackend().hold(x, DType.bfloat16).dtype == BF16     # NumPy: ml_dtypes'


# -- kernels run here (C) -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm", "gelu_residual_ln"])
def test_row_workloads_in_bfloat16_under_every_planner_and_mapping(kind):
    g = _row_graph(kind, 67, 520)      # rows not a multiple of any tile; 520 = 8 * 65
    s = Session(g, backend="cpu", seed=3)
    ins = s.inputs
    assert all(a.dtype == BF16 for a in ins.values())
    exact = run_reference(_float32_twin(g),
                          {k: v.astype(np.float32) for k, v in ins.items()})["y"]
    for planner in ("none", "xla", "rules", "stitch"):
        plan, _ = run_planner(planner, g)
        for label, p in (_mappings(plan) if planner == "rules" else [(planner, plan)]):
            m = s.measure(p, warmup=1, repeats=1)
            assert m.within_tolerance and m.max_rel_error <= ULP, (planner, label, m.per_kernel)
            y = s.program(p).run(ins)["y"]
            assert y.dtype == BF16
            if len(p.groups) == 1 and kind != "gelu_residual_ln":
                # one kernel: float32 throughout, rounded once as it stores (the BERT
                # tail rounds GELU's result to bfloat16 too, as torch's does)
                err = max_rel_error(y.astype(np.float32), exact)
                assert err <= ULP, (planner, label, err)


def test_casts_between_bfloat16_float_and_integers():
    b = GraphBuilder("bf16_casts")
    x = b.input("x", (4, 1000), "bfloat16")
    w = b.input("w", (1000,), "float32")
    xf = b.cast(x, to="float32") * w                  # bfloat16 -> float32, exact
    y = b.cast(xf * 300.0, to="bfloat16")            # rounds inside the kernel
    i = b.cast(y, to="int32")                         # bfloat16 -> int32 (exact here)
    h = b.cast(y, to="float16")
    b.output(y, "y")
    b.output(i, "i")
    b.output(h, "h")
    b.output(b.cast(b.cast(b.input("n", (4, 1000), "int64"), to="bfloat16") + x, to="float32"),
             "f")
    g = b.build()
    rng = np.random.default_rng(5)
    ins = {"x": rng.uniform(-2, 2, (4, 1000)).astype(BF16),
           "w": rng.uniform(-2, 2, 1000).astype(np.float32),
           "n": rng.integers(-300, 300, (4, 1000))}
    ref_y = (ins["x"].astype(np.float32) * ins["w"] * np.float32(300.0)).astype(BF16)
    for planner in ("none", "rules", "stitch"):
        s = Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        m = s.measure(warmup=1, repeats=1)
        assert m.within_tolerance, (planner, m.per_kernel)
        out = s.run(ins)
        assert out["y"].dtype == BF16 and out["h"].dtype == np.float16
        np.testing.assert_array_equal(out["y"].view(np.uint16), ref_y.view(np.uint16))
        np.testing.assert_array_equal(out["i"], ref_y.astype(np.float32).astype(np.int32))
        np.testing.assert_array_equal(out["h"], ref_y.astype(np.float32).astype(np.float16))
        # int64 -> bfloat16 rounds; the bfloat16 sum is rounded where it is stored: by
        # its own kernel (none), or not at all inside the kernel that casts it on
        want_f = (ins["n"].astype(np.float32).astype(BF16).astype(np.float32)
                  + ins["x"].astype(np.float32))
        if planner == "none":
            want_f = want_f.astype(BF16).astype(np.float32)
        np.testing.assert_array_equal(out["f"], want_f)


def test_a_bfloat16_matmul_computes_in_float32_and_rounds_once():
    b = GraphBuilder("bf16_matmul")
    x = b.input("x", (64, 96), "bfloat16")
    w = b.input("w", (96, 48), "bfloat16")
    b.output(b.gelu(b.matmul(x, w)), "y")
    g = b.build()
    s = Session(g, backend="cpu", seed=2)
    for planner in ("none", "rules", "stitch"):
        s.auto(planner)
        m = s.measure(warmup=1, repeats=1)
        assert m.within_tolerance, (planner, m.per_kernel)
    ins = s.inputs
    y = s.run(ins)["y"]
    assert y.dtype == BF16
    xw = ins["x"].astype(np.float32) @ ins["w"].astype(np.float32)
    assert max_rel_error(y.astype(np.float32), s.reference["y"].astype(np.float32),
                         np.abs(ins["x"].astype(np.float32)) @ np.abs(
                             ins["w"].astype(np.float32))) <= 2 * ULP
    assert np.isfinite(xw).all()


def test_a_bfloat16_artifact_runs_as_the_session(tmp_path):
    from workbench.artifact import load_artifact
    from workbench.ir.serialize import from_json, to_json
    g = _row_graph("layer_norm", 32, 256)
    back = from_json(json.loads(json.dumps(to_json(g))))       # the graph file, exact
    assert back.value("x").dtype is DType.bfloat16
    assert g.constants["gamma"].dtype == BF16
    for k, a in g.constants.items():
        assert back.constants[k].dtype == a.dtype
        assert back.constants[k].tobytes() == a.tobytes() and back.constants[k].shape == a.shape
    s = Session(g, backend="cpu")
    s.auto("stitch")
    s.export(tmp_path / "ln")
    model = load_artifact(tmp_path / "ln", backend="cpu")
    x = s.inputs["x"]
    y = model(x)["y"]
    assert y.dtype == BF16
    np.testing.assert_array_equal(y.view(np.uint16), s.run({"x": x})["y"].view(np.uint16))


def test_a_torch_bfloat16_module_imports_as_bfloat16_and_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    import workbench as wb
    from workbench.artifact import load_artifact

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                            torch.nn.Linear(128, 64), torch.nn.LayerNorm(64),
                            torch.nn.Softmax(-1)).to(torch.bfloat16).eval()
    x = torch.randn(8, 16, 64).to(torch.bfloat16)
    g = wb.from_torch(m, (x,))
    assert g.value(g.inputs[0]).dtype is DType.bfloat16
    assert g.value(g.outputs[0]).dtype is DType.bfloat16
    s = Session(g, backend="cpu")
    s.auto("stitch")
    meas = s.measure(warmup=1, repeats=1)
    assert meas.within_tolerance, meas.per_kernel
    xn = x.view(torch.int16).numpy().view(BF16)
    got = s.run({g.inputs[0]: xn})[g.outputs[0]]
    with torch.no_grad():
        want = m(x).float().numpy()
    # torch rounds every op's result to bfloat16, the fused kernels only their stores
    assert max_rel_error(got.astype(np.float32), want) <= tolerance(DType.bfloat16)
    # the artifact as a torch module takes and gives bfloat16 tensors
    s.export(tmp_path / "m")
    tm = load_artifact(tmp_path / "m", backend="cpu").as_torch_module()
    out = tm(x)
    assert out.dtype is torch.bfloat16
    np.testing.assert_array_equal(out.view(torch.int16).numpy(), got.view(np.int16))


# -- CUDA, compiled by NVRTC as the runtime compiles it -----------------------------------
def _ptx(k) -> str:
    from workbench.runtime import nvrtc
    return nvrtc.compile_cuda(render_kernel(k, "cuda"), k.name, "90", ptx=True).decode()


@pytest.mark.parametrize("kind", ["softmax", "layer_norm", "rms_norm"])
@pytest.mark.parametrize("rows,cols,mapping", [(32768, 4096, None), (4096, 1024, "warp")])
def test_bfloat16_row_kernels_move_16_bytes_per_access(kind, rows, cols, mapping,
                                                       nvrtc_toolchain):
    """8 bfloat16 per 16-byte load and store, each element of x read once, no 2-byte
    accesses of the row, no spills."""
    from workbench.runtime import nvrtc
    plan, _ = run_planner("rules", _row_graph(kind, rows, cols))
    if mapping:
        plan = plan.set_mapping("k0", mapping)
    k = lower_plan(plan)[0]
    assert k.scratch and k.scratch[0].space == "register"
    assert plan.groups[0].schedule.vector == 8
    ptx = _ptx(k)
    per_thread = k.scratch[0].slots // 8
    params = 1 + (kind != "softmax") + (kind == "layer_norm")
    v4_loads = len(re.findall(r"ld\.global(?:\.nc)?\.v4\.[ub]32", ptx))
    assert per_thread <= v4_loads <= per_thread * params
    assert len(re.findall(r"st\.global\.v4\.[ub]32", ptx)) == per_thread
    assert not re.findall(r"(ld|st)\.global(\.nc)?\.[ubf]16", ptx)
    assert ".local" not in ptx
    rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
    assert rep.spill_bytes == 0 and rep.stack_bytes == 0


@pytest.mark.slow   # (every planner's kernels through NVRTC: tens of seconds)
def test_bfloat16_kernels_of_every_planner_compile(nvrtc_compile_plans):
    graphs = [_row_graph(kind, 257, 1000) for kind in
              ("softmax", "layer_norm", "rms_norm", "gelu_residual_ln")]
    b = GraphBuilder("bf16_elementwise")
    x = b.input("x", (4096, 1024), "bfloat16")
    b.output(b.gelu(x) * b.cast(b.input("w", (1024,), "float32"), to="bfloat16"), "y")
    graphs.append(b.build())
    assert nvrtc_compile_plans(graphs, ("none", "xla", "rules", "stitch")) > 8
    k = lower_plan(run_planner("rules", graphs[-1])[0])[0]
    ptx = _ptx(k)
    # 8 x 2 bytes at once (ptxas spells a 16-byte store v4.u32 or v8.u16)
    assert re.findall(r"ld\.global(?:\.nc)?\.(?:v4\.[ub]32|v8\.[ub]16)", ptx)
    assert re.findall(r"st\.global\.(?:v4\.[ub]32|v8\.[ub]16)", ptx)
    assert not re.findall(r"(ld|st)\.global(\.nc)?\.[ub]16", ptx)


def test_the_properties_panel_summarizes_bfloat16_constants():
    from workbench.ui.properties import constant_summary
    text = constant_summary(_row_graph("layer_norm", 4, 16), "gamma")
    assert text.startswith("bfloat16[16]") and "min 0.5" in text and "max " in text


def test_tuning_a_bfloat16_kernel_checks_every_candidate_on_its_bits():
    """Session.tune times and checks each candidate on the values the kernel receives
    (on a GPU those come back as bits and are read as bfloat16 by their dtype)."""
    s = Session(_row_graph("softmax", 64, 4096), backend="cpu")
    s.auto("rules")
    s.tune(repeats=3, use_cache=False)
    r = s.tuning[0]
    assert len(r.timed) > 1 and all(np.isfinite(t) for _, t in r.timed)
    m = s.measure(warmup=1, repeats=1)
    assert m.within_tolerance and s.run(s.inputs)["y"].dtype == BF16
