"""Pools whose window is larger than their map, as torch exports them to ONNX
(EfficientNet's pooler ``AvgPool2d(1280, ceil_mode=True)`` on a 7 x 7 map, and padded
AvgPool/MaxPool variants, the padding counted and not): imported, lowered with the
window clipped to what it reads, compiled on the cpu backend and compared with
onnxruntime and torch on fresh random inputs (and through ``from_torch``, the same
windows); and a small transformers EfficientNet (random weights from a config) end to
end."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import workbench as wb  # noqa: E402
from workbench.tolerance import relative_to_largest  # noqa: E402

# name: (module, input shape, the taps of the window as imported: those that read the
# input, counted by hand; 0 for none, the map reduced)
POOLS = {
    "effnet_pooler": (lambda: torch.nn.AvgPool2d(1280, ceil_mode=True), (1, 96, 7, 7), 0),
    "avg_pad_counted": (lambda: torch.nn.AvgPool2d(20, stride=2, padding=10,
                                                   ceil_mode=True, count_include_pad=True),
                        (2, 16, 4, 5), 8 * 11),
    "avg_pad_not_counted": (lambda: torch.nn.AvgPool2d(20, stride=2, padding=10,
                                                       ceil_mode=True,
                                                       count_include_pad=False),
                            (2, 16, 4, 5), 8 * 11),
    "avg_floor": (lambda: torch.nn.AvgPool2d((9, 7), stride=(4, 3), padding=(4, 3)),
                  (1, 8, 5, 3), 9 * 3),
    "avg_whole_map_padded": (lambda: torch.nn.AvgPool2d(16, stride=16, padding=8,
                                                        ceil_mode=True,
                                                        count_include_pad=True),
                             (1, 16, 7, 7), 0),
    "max_pad": (lambda: torch.nn.MaxPool2d(20, stride=2, padding=10, ceil_mode=True),
                (2, 16, 4, 4), 8 * 8),
    "max_stride_1": (lambda: torch.nn.MaxPool2d(12, stride=1, padding=6), (1, 8, 3, 3),
                     6 * 6),
    "max_1d": (lambda: torch.nn.MaxPool1d(31, stride=5, padding=15, ceil_mode=True),
               (2, 8, 9), 19),
}


def _export(module, shape, path, dynamo=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(shape),), str(path), dynamo=dynamo,
                          input_names=["x"], output_names=["y"])
    return path


@pytest.mark.parametrize("name", list(POOLS))
def test_a_pool_larger_than_its_map_matches_onnxruntime_and_torch(name, tmp_path):
    make, shape, taps = POOLS[name]
    module = make().eval()
    path = _export(module, shape, tmp_path / f"{name}.onnx")
    g = wb.load(path)
    windows = [int(np.prod(n.attr_map["kernel"])) for n in g.nodes if n.op == "window"]
    assert windows == ([taps] if taps else []), windows
    if taps == 0:     # one window over the whole map: GlobalAveragePool's reduction
        assert windows == [] and [n.op for n in g.nodes if n.op.startswith("reduce")] == \
            ["reduce_mean" if name == "effnet_pooler" else "reduce_sum"]
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for _ in range(2):
        x = rng.standard_normal(shape).astype(np.float32)
        got = s.run({"x": x})["y"]           # checked: the outputs poisoned first
        (want,) = sess.run(None, {"x": x})
        with torch.no_grad():
            eager = module(torch.from_numpy(x)).numpy()
        assert got.shape == want.shape == eager.shape
        assert relative_to_largest(got, want) <= 1e-6, name
        assert relative_to_largest(got, eager) <= 1e-6, name


def test_the_pooler_through_the_dynamo_exporter(tmp_path):
    pytest.importorskip("onnxscript")
    module = torch.nn.AvgPool2d(1280, ceil_mode=True).eval()
    path = _export(module, (1, 64, 7, 7), tmp_path / "pooler.onnx", dynamo=True)
    g = wb.load(path)
    assert [n.op for n in g.nodes] == ["reduce_mean"]
    x = np.random.default_rng(3).standard_normal((1, 64, 7, 7)).astype(np.float32)
    got = wb.Session(g, backend="cpu").run({g.inputs[0]: x})[g.outputs[0]]
    np.testing.assert_allclose(got, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6,
                               atol=1e-7)


@pytest.mark.slow   # (the export and ~100 kernels compiled: tens of seconds on 2 cores)
def test_a_small_transformers_efficientnet_end_to_end(tmp_path):
    pytest.importorskip("transformers")
    from workbench.testing import zoo
    torch.manual_seed(0)
    module = zoo.efficientnet(64, width=0.25, depth=0.25, hidden_dim=320, pooled=True)
    path = _export(module, (1, 3, 64, 64), tmp_path / "efficientnet.onnx")
    g = wb.load(path)
    assert not [n for n in g.nodes if n.op == "window"]    # the pooler: a reduce_mean
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(5).standard_normal((1, 3, 64, 64)).astype(np.float32)
    got = s.run({"x": x})["y"]
    (want,) = sess.run(None, {"x": x})
    with torch.no_grad():
        eager = module(torch.from_numpy(x)).numpy()
    assert np.abs(eager).max() > 1e-3           # (a pooled output that is not all zero)
    assert relative_to_largest(got, want) <= 1e-5
    assert relative_to_largest(got, eager) <= 1e-5


@pytest.mark.parametrize("name", ["effnet_pooler", "avg_pad_not_counted", "max_pad"])
def test_from_torch_clips_the_same_windows(name):
    make, shape, taps = POOLS[name]
    module = make().eval()
    x = torch.from_numpy(np.random.default_rng(9).standard_normal(shape).astype(np.float32))
    g = wb.from_torch(module, (x,))
    windows = [int(np.prod(n.attr_map["kernel"])) for n in g.nodes if n.op == "window"]
    assert windows == ([taps] if taps else [])
    got = wb.Session(g, backend="cpu").run({g.inputs[0]: x.numpy()})[g.outputs[0]]
    with torch.no_grad():
        assert relative_to_largest(got, module(x).numpy()) <= 1e-6
