"""bfloat16, held in float32: round_bf16 against ml_dtypes' bfloat16 (round to nearest
even, NaN, inf, overflow, subnormals) in the reference and in the kernels (C, and CUDA
through NVRTC); bfloat16 constants and casts through the ONNX and torch importers."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.codegen import lower_plan, render_kernel
from workbench.fusion import run_planner
from workbench.dtypes import DType
from workbench.ir import GraphBuilder
from workbench.ops.bfloat16 import round_bf16

ml_dtypes = pytest.importorskip("ml_dtypes")


def _edges(rng):
    x = rng.standard_normal(4096).astype(np.float32) * np.float32(10.0) ** rng.integers(
        -40, 38, 4096).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4028235e38,
                        1e-40, -1e-45, 1.00390625, 1.01171875, 1.0 + 2 ** -9], np.float32)
    return np.concatenate([special, x.astype(np.float32)])


def _bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_reference_is_ml_dtypes():
    x = _edges(np.random.default_rng(0))
    np.testing.assert_array_equal(round_bf16(x), _bf16(x))   # (NaN == NaN here)


@pytest.mark.parametrize("planner", ["none", "rules"])
def test_kernel_matches(wb, planner):
    b = GraphBuilder("bf16")
    x = b.input("x", (4108,))
    b.output(b.round_bf16(x) * 1.0, "y")
    g = b.build()
    xs = _edges(np.random.default_rng(1))
    s = wb.check_graph(g, planner, inputs={"x": xs})
    np.testing.assert_array_equal(s.run({"x": xs})["y"], _bf16(xs))
    if planner == "rules":
        nvrtc = pytest.importorskip("workbench.runtime.nvrtc")
        try:
            nvrtc.toolchain()
        except Exception as e:  # noqa: BLE001
            pytest.skip(str(e))
        plan, _ = run_planner(planner, g)
        for k in lower_plan(plan):
            assert nvrtc.compile_cuda(render_kernel(k, "cuda"), k.name, "90")[:4] == b"\x7fELF"


def test_onnx_bf16_constant_and_cast():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from workbench import onnx_backend
    w = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    wt = onnx.numpy_helper.from_array(w.astype(ml_dtypes.bfloat16), "w")
    assert wt.data_type == TensorProto.BFLOAT16
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["xb"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xf", "wf"], ["y"])]
    g = helper.make_graph(nodes, "bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("xb", TensorProto.BFLOAT16, [3, 4])],
                          [wt])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    y, xb = onnx_backend.prepare(model, planner="rules", backend="cpu").run([x])
    np.testing.assert_array_equal(y, _bf16(x) * _bf16(w))
    assert xb.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(xb.astype(np.float32), _bf16(x))


def test_torch_bf16_parameter_and_cast():
    torch = pytest.importorskip("torch")
    import workbench as wb
    from workbench.session import Session

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 4).to(torch.bfloat16))

        def forward(self, x):
            return x.to(torch.bfloat16).float() * self.w.float()

    m = M()
    x = torch.randn(3, 4)
    g = wb.from_torch(m, (x,))
    assert any(v.dtype is DType.bfloat16 for v in g.values)   # stored as such
    got = Session(g, backend="cpu").run({g.inputs[0]: x.numpy()})[g.outputs[0]]
    with torch.no_grad():
        np.testing.assert_array_equal(got, m(x).numpy())
