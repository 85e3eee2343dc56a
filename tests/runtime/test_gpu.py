"""The cupy backend against the reference, on every sample graph (needs a GPU)."""
from pathlib import Path

import pytest

from workbench.runtime import gpu_available
from workbench.session import Session

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")]

SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("planner", ["none", "rules"])
def test_cupy_matches_reference(path, planner):
    s = Session(str(path), backend="cupy")
    if planner != "none":
        s.auto(planner)
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


def _norm(kind, rows, cols):
    from workbench.ir import GraphBuilder
    b = GraphBuilder(f"{kind}_{rows}x{cols}")
    x = b.input("x", (rows, cols))
    if kind == "layer_norm":
        y = b.layer_norm(x, b.input("gamma", (cols,)), b.input("beta", (cols,)))
    else:
        y = b.softmax(x, axis=-1)
    b.output(y, "y")
    return b.build()


@pytest.mark.parametrize("rows, cols", [(3, 33), (1057, 700), (4, 70000), (2048, 4096)])
@pytest.mark.parametrize("kind", ["layer_norm", "softmax"])
@pytest.mark.parametrize("mapping", ["warp", "block", "split", "thread"])
def test_cupy_every_thread_mapping(kind, rows, cols, mapping):
    if mapping == "thread" and cols > 1024:
        pytest.skip("thread per row over long rows exceeds the float32 bound (as on the CPU)")
    s = Session(_norm(kind, rows, cols), backend="cupy")
    s.auto("rules")
    s.set_mapping("k0", mapping)
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


@pytest.mark.parametrize("rows, cols", [(37, 45), (4096, 1024), (8, 65536)])
def test_cupy_global_stitch_cooperative_launch(rows, cols):
    # the mean through global memory behind a grid barrier: a cooperative launch
    s = Session(_norm("layer_norm", rows, cols), backend="cupy")
    s.auto("rules")
    s.set_scheme(s.graph.node("n0").outputs[0], "global")
    assert s.kernels()[0].launch.cooperative
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)


@pytest.mark.parametrize("name", ["cross_entropy.json", "layernorm_param_grad.json",
                                  "bias_gelu_residual_layernorm.json", "adam.json"])
def test_cupy_whole_graph_stitched(name):
    s = Session(f"sample_graphs/{name}", backend="cupy")
    if len(s.graph.nodes) > 1:
        s.fuse([n.id for n in s.graph.nodes])
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)
