"""onnxruntime-training's com.microsoft gradient ops one by one (frontends/onnx/
handlers_gradients.py), in single-node ONNX models built here, at the attribute values
the sample training graphs do not reach (LayerNormalizationGrad's dX and a middle axis,
SoftmaxGrad_13 along a middle axis, every reduction of SoftmaxCrossEntropyLossGrad with weights and ignore_index on [N, C,
d], FusedMatMul's transposes and alpha on batched operands, Scale multiplying): run on
the cpu backend (checked: outputs poisoned first) against torch autograd or NumPy on
fresh random inputs, within the training bound (1e-4 relative to the largest
element)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import workbench as wb  # noqa: E402
from workbench.errors import UnsupportedOpError  # noqa: E402
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(47)


def _model(op, inputs: dict[str, np.ndarray], outputs: dict[str, list[int]], **attrs):
    """One com.microsoft node ``op`` of ``inputs`` (name -> array) to ``outputs`` (name
    -> shape; an empty name: an absent output)."""
    types = {np.dtype(np.float32): F32, np.dtype(np.int64): I64}
    node = helper.make_node(op, list(inputs), list(outputs), domain="com.microsoft", **attrs)
    g = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, types[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, F32, s) for k, s in outputs.items() if k])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _run(op, inputs: dict[str, np.ndarray], outputs: dict[str, list[int]], **attrs):
    """The node of :func:`_model`, imported and run on the cpu backend."""
    s = wb.Session(wb.load(_model(op, inputs, outputs, **attrs)), backend="cpu")
    s.auto("stitch")
    return s.run(inputs)


def _close(got, want):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else want
    assert relative_to_largest(got, want) <= FRAMEWORK_TOLERANCE


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape,axis", [((6, 16), -1), ((2, 3, 8), 1)])
def test_layer_norm_grad_matches_autograd(shape, axis):
    x, dy = _f32(*shape, scale=2.0), _f32(*shape)
    norm = shape[axis:] if axis >= 0 else shape[axis:]
    scale = _f32(*norm)
    xt, st, bt = (torch.tensor(a, requires_grad=True) for a in (x, scale, _f32(*norm)))
    y = F.layer_norm(xt, norm, st, bt, eps=1e-5)
    y.backward(torch.tensor(dy))
    axes = tuple(range(axis % len(shape), len(shape)))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)
    got = _run("LayerNormalizationGrad",
               {"dy": dy, "x": x, "scale": scale, "mean": mean.astype(np.float32),
                "inv": inv.astype(np.float32)},
               {"dx": list(shape), "dscale": list(norm), "dbias": list(norm)},
               axis=axis, epsilon=1e-5)
    _close(got["dx"], xt.grad)
    _close(got["dscale"], st.grad)
    _close(got["dbias"], bt.grad)


def test_layer_norm_grad_without_dx_computes_no_dx():
    """An absent dX (a data input's gradient, blanked by the training import) is not
    computed: no row means over the normalized axis, only dscale's and dbias' sums."""
    x, dy = _f32(6, 16), _f32(6, 16)
    mean = x.mean(axis=1, keepdims=True)
    inv = (1 / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5)).astype(np.float32)
    m = _model("LayerNormalizationGrad", {"dy": dy, "x": x, "scale": _f32(16),
                                          "mean": mean, "inv": inv},
               {"": [6, 16], "dscale": [16], "dbias": [16]})
    g = wb.load(m)
    assert sorted(n.op for n in g.nodes) == ["mul", "mul", "reduce_sum", "reduce_sum", "sub"]
    got = wb.Session(g, backend="cpu").run({"dy": dy, "x": x, "mean": mean, "inv": inv,
                                            "scale": np.zeros(16, np.float32)})
    _close(got["dscale"], (dy * (x - mean) * inv).sum(axis=0))
    _close(got["dbias"], dy.sum(axis=0))


@pytest.mark.parametrize("reduction,weighted,ignore", [
    ("mean", False, None), ("mean", True, -100), ("mean", False, 2), ("sum", True, None),
    ("none", False, 2), ("none", True, -100)])
def test_softmax_cross_entropy_grad_matches_autograd(reduction, weighted, ignore):
    n, c, d = 4, 5, 3                              # scores [N, C, d], labels [N, d]
    scores = _f32(n, c, d, scale=2.0)
    labels = RNG.integers(0, c, (n, d)).astype(np.int64)
    if ignore is not None:
        labels.reshape(-1)[::4] = ignore
    weight = RNG.uniform(0.2, 2.0, c).astype(np.float32) if weighted else None
    dy = _f32(n, d) if reduction == "none" else np.asarray(_f32(1)[0])
    st = torch.tensor(scores, requires_grad=True)
    loss = F.cross_entropy(st, torch.tensor(labels),
                           weight=None if weight is None else torch.tensor(weight),
                           ignore_index=-1000 if ignore is None else ignore,
                           reduction=reduction)
    loss.backward(torch.tensor(dy))
    logp = torch.log_softmax(torch.tensor(scores), dim=1).numpy()
    inputs = {"dy": dy, "log_prob": logp, "labels": labels}
    if weighted:
        inputs["weight"] = weight
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    got = _run("SoftmaxCrossEntropyLossGrad", inputs, {"d": [n, c, d]}, **attrs)
    _close(got["d"], st.grad)


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 1, 1.0), (1, 0, 0.5), (1, 1, 2.0)])
def test_fused_matmul_transposes_batched_operands(trans_a, trans_b, alpha):
    a = _f32(*((2, 7, 5) if trans_a else (2, 5, 7)))
    b = _f32(*((6, 7) if trans_b else (7, 6)))
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = b.T if trans_b else b
    got = _run("FusedMatMul", {"a": a, "b": b}, {"y": [2, 5, 6]},
               transA=trans_a, transB=trans_b, alpha=alpha)
    _close(got["y"], alpha * (op_a @ op_b))


def test_gelu_grads_and_relu_grad_and_scale():
    x, b, dy = _f32(3, 8, scale=2.0), _f32(8), _f32(3, 8)
    xt = torch.tensor(x + b, requires_grad=True)
    F.gelu(xt).backward(torch.tensor(dy))
    _close(_run("GeluGrad", {"dy": dy, "x": x + b}, {"dx": [3, 8]})["dx"], xt.grad)
    _close(_run("BiasGeluGrad_dX", {"dy": dy, "x": x, "b": b}, {"dx": [3, 8]})["dx"],
           xt.grad)
    _close(_run("BiasGelu", {"x": x, "b": b}, {"y": [3, 8]})["y"], F.gelu(xt))
    y = np.maximum(x, 0)
    _close(_run("ReluGrad", {"dy": dy, "y": y}, {"dx": [3, 8]})["dx"], dy * (y > 0))
    s = np.asarray([4.0], np.float32)
    _close(_run("Scale", {"x": x, "s": s}, {"y": [3, 8]})["y"], x * 4)
    _close(_run("Scale", {"x": x, "s": s}, {"y": [3, 8]}, scale_down=1)["y"], x / 4)


def test_softmax_grad_along_a_middle_axis_matches_autograd():
    x, dy = _f32(2, 5, 3, scale=2.0), _f32(2, 5, 3)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.softmax(xt, dim=1)
    y.backward(torch.tensor(dy))
    got = _run("SoftmaxGrad_13", {"dy": dy, "y": y.detach().numpy()}, {"dx": [2, 5, 3]},
               axis=1)
    _close(got["dx"], xt.grad)


def test_fused_matmul_moving_a_batch_axis_is_refused_naming_the_attribute():
    with pytest.raises(UnsupportedOpError, match="transBatchA"):
        _run("FusedMatMul", {"a": _f32(2, 3, 4), "b": _f32(4, 5)}, {"y": [2, 3, 5]},
             transBatchA=1)
