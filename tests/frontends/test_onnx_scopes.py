"""Module scopes of ONNX files written by torch's two exporters: the dynamo exporter's
node metadata and the legacy exporter's scoped node names come in as the same nested
namespaces from_torch makes from the module itself (frontends/onnx/scopes.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

from workbench.frontends import from_torch, load  # noqa: E402
from workbench.frontends.onnx.scopes import module_path, node_source  # noqa: E402
from workbench.runtime.reference import run_reference  # noqa: E402
from workbench.ui.namespaces import namespaces  # noqa: E402


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        s = self.query(x) @ self.key(x).transpose(-1, -2)
        return torch.softmax(s, -1) @ x


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attention, self.norm = Attention(), torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.attention(x))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.head = Encoder(), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


SHAPE = (2, 8, 16)
# the module scopes this model has, as namespaces draws them (a Linear's MatMul and
# Add make its box; LayerNorm is one ONNX node, one composite: no scope box of its own)
SCOPES = {"encoder", "encoder/layer.0", "encoder/layer.0/attention",
          "encoder/layer.0/attention/query", "encoder/layer.0/attention/key",
          "encoder/layer.1", "encoder/layer.1/attention",
          "encoder/layer.1/attention/query", "encoder/layer.1/attention/key", "head"}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Model().eval()


def _export(model, path, dynamo):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(SHAPE),), str(path), dynamo=dynamo,
                          input_names=["x"], output_names=["y"])
    return path


def _scope_paths(g):
    return {c.path for c in namespaces(g).containers.values() if c.kind == "scope"}


# (the dynamo export takes ~5-12 s on 2 cores, onnxscript's import included: slow tier;
# the fast tier reads its metadata keys in the tests below)
@pytest.mark.parametrize("dynamo", [pytest.param(True, marks=pytest.mark.slow), False],
                         ids=["dynamo", "legacy"])
def test_exported_scopes_nest_as_from_torch_does(model, dynamo, tmp_path):
    if dynamo:
        pytest.importorskip("onnxscript")
    path = _export(model, tmp_path / "m.onnx", dynamo)
    proto = onnx.load(str(path))
    if dynamo:   # the exporter writes names without scopes and the scopes as metadata
        assert not any("/" in n.name for n in proto.graph.node)
        assert any(module_path(n) == "encoder.layer.1.attention.key"
                   for n in proto.graph.node)
    g = load(path)
    ns = namespaces(g)
    paths = _scope_paths(g)
    assert paths == SCOPES
    # from_torch's boxes, the same words; its Linear is one composite (one aten op),
    # the ONNX Linear two nodes (MatMul, Add), so there the Linear gets a box too
    torch_paths = _scope_paths(from_torch(model, (torch.zeros(SHAPE),)))
    assert "encoder/layer.1/attention" in torch_paths and torch_paths <= paths
    assert {p.rsplit("/", 1)[-1] for p in paths - torch_paths} <= {"query", "key", "head"}
    # nested: each layer's attention sits in that layer, which sits in the encoder
    by_path = {c.path: c for c in ns.containers.values() if c.kind == "scope"}
    att = by_path["encoder/layer.1/attention"]
    assert ns[att.parent].path == "encoder/layer.1"
    assert ns[ns[att.parent].parent].path == "encoder"
    # search's words (ui/app.py matches Origin.source): both attentions' softmaxes
    softmax = [n for n in g.nodes if n.op == "softmax" or (
        n.origin is not None and n.origin.composite == "Softmax")]
    assert softmax and all("attention" in n.origin.source for n in softmax)
    assert all(ns.ancestors(n.id)[0] == by_path["encoder"].id for n in softmax)
    # the numbers are the model's, on a fresh random input
    x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
    got = run_reference(g, {"x": x})[g.outputs[0]]
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _node(**meta):
    n = helper.make_node("Relu", ["a"], ["b"], name="node_relu_3")
    for k, v in meta.items():
        n.metadata_props.add(key=k, value=v)
    return n


def test_the_module_path_from_either_metadata_key():
    scopes = _node(**{"pkg.torch.onnx.name_scopes":
                      "['', 'encoder', 'encoder.layer.10', 'relu_3']"})
    assert module_path(scopes) == "encoder.layer.10"
    assert node_source(scopes, "node_relu_3") == "/encoder/layer.10/node_relu_3"
    # older exporters: only "namespace", "name: Class" per level
    space = _node(namespace=": __main__.M/encoder: __main__.Enc/encoder.layer.10: "
                            "__main__.Layer/relu_3: aten.relu.default")
    assert node_source(space, "node_relu_3") == "/encoder/layer.10/node_relu_3"


def test_nodes_without_a_module_keep_their_names():
    top = _node(**{"pkg.torch.onnx.name_scopes": "['', 'relu_3']"})
    assert node_source(top, "node_relu_3") == "node_relu_3"
    damaged = _node(**{"pkg.torch.onnx.name_scopes": "['', 'enc"})
    assert node_source(damaged, "node_relu_3") == "node_relu_3"
    assert node_source(_node(), "Relu_0") == "Relu_0"
    # a name that is already scoped (the legacy exporter's) is read as it is
    assert node_source(_node(), "/encoder/Relu") == "/encoder/Relu"


def test_a_hand_made_model_imports_as_before():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")],
                              "g", [x], [y])
    g = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.origin.source for n in g.nodes] == ["r"]
