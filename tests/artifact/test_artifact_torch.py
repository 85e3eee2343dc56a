"""The torch face of a loaded artifact: an nn.Module passing tensors through DLPack."""

import numpy as np
import pytest

from workbench import GraphBuilder, Session, load_artifact

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def exported(art, tmp_path_factory):
    s = Session(art.small_graph(), backend="cpu", seed=5)
    s.auto("rules")
    return s, load_artifact(s.export(tmp_path_factory.mktemp("t") / "m.zip"), backend="cpu")


def test_module_on_cpu_tensors(exported):
    s, model = exported
    module = model.as_torch_module()
    assert isinstance(module, torch.nn.Module)
    ins = [torch.from_numpy(s.inputs[n].copy()) for n in s.graph.inputs]
    ins[0].requires_grad_(True)             # inference only: detached on the way in
    outs = module(*ins)
    assert isinstance(outs, tuple) and len(outs) == len(s.graph.outputs)
    want = s.run(s.inputs)
    for t, name in zip(outs, s.graph.outputs):
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
        assert np.array_equal(t.numpy(), want[name])
    by_name = module(**{n: t for n, t in zip(s.graph.inputs, ins)})
    assert all(torch.equal(a, b) for a, b in zip(outs, by_name))


def test_single_output_returns_a_tensor_and_int_and_bool_cross(tmp_path):
    b = GraphBuilder("where")
    c = b.input("c", (8, 33), "bool")
    i = b.input("i", (8, 33), "int64")
    y = b.where(c, b.cast(i, to="float32") * 0.5, 1.0)
    b.output(y, "y")
    s = Session(b.build(), backend="cpu", seed=2)
    module = load_artifact(s.export(tmp_path / "w"), backend="cpu").as_torch_module()
    out = module(torch.from_numpy(s.inputs["c"]), torch.from_numpy(s.inputs["i"]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert np.array_equal(out.numpy(), s.run(s.inputs)["y"])
    with pytest.raises(Exception, match="has dtype int32"):
        module(torch.from_numpy(s.inputs["c"]), torch.from_numpy(s.inputs["i"]).int())


@pytest.mark.gpu
def test_module_on_cuda_tensors(exported):
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    s, _ = exported
    model = load_artifact(exported[1].artifact.where)
    module = model.as_torch_module()
    outs = module(*[torch.from_numpy(s.inputs[n]).cuda() for n in s.graph.inputs])
    want = s.run(s.inputs)
    for t, name in zip(outs, s.graph.outputs):
        assert t.is_cuda
        np.testing.assert_allclose(t.cpu().numpy(), want[name], rtol=1e-4, atol=1e-5)


def test_shipped_cuda_sources_compile(exported, compile_cuda):
    """Each shipped .cu file is self-contained and valid CUDA (no GPU needed)."""
    _, model = exported
    for name, src in model.sources("cuda").items():
        compile_cuda(src, [name], name)
