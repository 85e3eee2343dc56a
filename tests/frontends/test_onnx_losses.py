"""SoftmaxCrossEntropyLoss (what ``F.cross_entropy`` exports as) and
NegativeLogLikelihoodLoss imported as composites (log-softmax, ``gather_elements``
along the class axis, masks, reductions): every reduction, ignore_index, weights, the
optional log_prob output, inputs of rank 2 to 4, int32 and int64 labels; compared with
onnxruntime and ONNX's reference implementation, run on the cpu backend (checked runs,
outputs poisoned), and torch's ``F.cross_entropy`` / ``F.nll_loss`` through both torch
exporters compared with torch."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import workbench as wb  # noqa: E402
from workbench.errors import GraphError  # noqa: E402
from workbench.tolerance import relative_to_largest  # noqa: E402

F32 = TensorProto.FLOAT
LABELS = {np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}


def _model(tmp_path, op, shape, label_type, reduction, ignore_index, weights, log_prob):
    """One loss node: scores/log-probabilities x [N, C, ...], labels [N, ...]."""
    labels_shape = shape[:1] + shape[2:]
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    ins = ["x", "labels"] + (["w"] if weights else [])
    outs = ["loss"] + (["log_prob"] if log_prob else [])
    node = helper.make_node(op, ins, outs, **attrs)
    loss_shape = labels_shape if reduction == "none" else []
    out_info = [helper.make_tensor_value_info("loss", F32, loss_shape)]
    if log_prob:
        out_info.append(helper.make_tensor_value_info("log_prob", F32, shape))
    inits = []
    if weights:
        w = np.random.default_rng(2).uniform(0.2, 2.0, shape[1]).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w"))
    g = helper.make_graph([node], "loss",
                          [helper.make_tensor_value_info("x", F32, shape),
                           helper.make_tensor_value_info("labels", LABELS[label_type],
                                                         labels_shape)],
                          out_info, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{op}.onnx"
    onnx.save(model, str(path))
    return path


def _feeds(shape, label_type, ignore_index, rng):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    labels = rng.integers(0, shape[1], shape[:1] + shape[2:]).astype(label_type)
    if ignore_index is not None:      # some positions ignored (a label no class has, too)
        labels.reshape(-1)[::3] = ignore_index
    return {"x": x, "labels": labels}


def _check(path, feeds, tol=1e-6):
    g = wb.load(path)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    got = s.run(feeds)                      # checked: outputs poisoned first
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]) \
        .run(None, feeds)
    reference = ReferenceEvaluator(str(path)).run(None, feeds)
    for name, want, ref in zip(g.outputs, theirs, reference):
        assert got[name].shape == want.shape and got[name].dtype == want.dtype, name
        assert relative_to_largest(got[name], want) <= tol, name
        assert relative_to_largest(got[name], np.asarray(ref, want.dtype)) <= tol, name
    return g


# every reduction x ignore_index x weights, a rank and a label type each
CASES = [(shape, lt, red, ign, w) for (shape, lt), red, ign, w in itertools.product(
    [((6, 5), np.int64), ((3, 7, 4), np.int32), ((2, 4, 3, 5), np.int64)],
    ["none", "sum", "mean"], [None, 2, -100], [False, True])]


@pytest.mark.parametrize("shape,label_type,reduction,ignore_index,weights", CASES,
                         ids=["x".join(map(str, c[0])) + f"-{c[1].__name__}-{c[2]}-"
                              f"ignore{c[3]}-{'weights' if c[4] else 'unweighted'}"
                              for c in CASES])
def test_softmax_cross_entropy_matches_onnxruntime_and_the_reference(
        tmp_path, shape, label_type, reduction, ignore_index, weights):
    rng = np.random.default_rng(len(shape) * 10 + len(reduction))
    log_prob = reduction != "sum"          # (the optional output, in two of three)
    path = _model(tmp_path, "SoftmaxCrossEntropyLoss", shape, label_type, reduction,
                  ignore_index, weights, log_prob)
    g = _check(path, _feeds(shape, label_type, ignore_index, rng))
    assert {n.origin.composite for n in g.nodes} == {"SoftmaxCrossEntropyLoss"}
    assert "gather_elements" in {n.op for n in g.nodes}


@pytest.mark.parametrize("reduction,ignore_index,weights", [
    ("none", None, False), ("mean", 1, True), ("sum", -1, False), ("mean", None, True)])
def test_negative_log_likelihood_matches_onnxruntime_and_the_reference(
        tmp_path, reduction, ignore_index, weights):
    shape = (4, 6, 3)
    rng = np.random.default_rng(11)
    path = _model(tmp_path, "NegativeLogLikelihoodLoss", shape, np.int64, reduction,
                  ignore_index, weights, False)
    feeds = _feeds(shape, np.int64, ignore_index, rng)
    feeds["x"] = feeds["x"] - np.log(np.exp(feeds["x"]).sum(1, keepdims=True))
    _check(path, feeds)


def test_a_batch_whose_every_label_is_ignored_has_a_nan_mean(tmp_path):
    path = _model(tmp_path, "SoftmaxCrossEntropyLoss", (3, 4), np.int64, "mean", 0,
                  False, False)
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32),
             "labels": np.zeros(3, np.int64)}
    got = wb.Session(wb.load(path), backend="cpu").run(feeds)["loss"]
    (want,) = ort.InferenceSession(str(path)).run(None, feeds)
    assert np.isnan(got) and np.isnan(want)


def test_labels_that_are_not_integers_are_refused(tmp_path):
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss"])
    g = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", F32, [2, 3]),
                                          helper.make_tensor_value_info("labels", F32, [2])],
                          [helper.make_tensor_value_info("loss", F32, [])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match="labels of type float32"):
        wb.load(model)


# -- torch's F.cross_entropy and F.nll_loss, through both exporters ---------------------

torch_cases = [("cross_entropy", dict()), ("cross_entropy", dict(ignore_index=1)),
               ("cross_entropy", dict(reduction="sum", weight=True)),
               ("cross_entropy", dict(reduction="none", ignore_index=0, weight=True)),
               ("nll_loss", dict(ignore_index=2, weight=True))]


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("fn,kw", torch_cases)
def test_torch_losses_exported_match_torch(tmp_path, fn, kw, dynamo):
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    import torch.nn.functional as F
    kw = dict(kw)
    if kw.pop("weight", False):
        kw["weight"] = torch.linspace(0.5, 2.0, 5)

    class Loss(torch.nn.Module):
        def forward(self, x, t):
            x = F.log_softmax(x, dim=1) if fn == "nll_loss" else x
            return getattr(F, fn)(x, t, **kw)

    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.standard_normal((4, 5, 3)).astype(np.float32))
    t = torch.from_numpy(rng.integers(0, 5, (4, 3)))
    path = tmp_path / "loss.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Loss(), (x, t), str(path), dynamo=dynamo,
                          input_names=["x", "t"], output_names=["loss"])
    g = wb.load(path)
    if fn == "cross_entropy":   # (nll_loss: the TorchScript exporter folds it with the
        # log_softmax into one SoftmaxCrossEntropyLoss; the dynamo one spells it out)
        assert "SoftmaxCrossEntropyLoss" in {n.origin.composite for n in g.nodes}
    s = wb.Session(g, backend="cpu")
    for _ in range(2):        # the export's inputs, then fresh ones
        feeds = {g.inputs[0]: x.numpy(), g.inputs[1]: t.numpy()}
        got = s.run(feeds)[g.outputs[0]]
        with torch.no_grad():
            want = Loss()(x, t).numpy()
        assert got.shape == want.shape
        assert relative_to_largest(got, want) <= 1e-6
        x = torch.from_numpy(rng.standard_normal((4, 5, 3)).astype(np.float32))
        t = torch.from_numpy(rng.integers(0, 5, (4, 3)))
