"""The ONNX importer refuses malformed models in one line naming the model's fault (not
the importer's), and refuses what it does not know (newer opsets) instead of guessing."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from workbench.errors import GraphError  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402
from workbench.frontends.onnx import MAX_OPSET, MIN_OPSET  # noqa: E402
from workbench.runtime.reference import run_reference  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=18, check=False):
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m)
    return m


def refused(m, match):
    with pytest.raises(GraphError, match=match) as e:
        load_onnx(m)
    text = str(e.value)
    assert "\n" not in text and "importer bug" not in text, text
    return text


def test_newer_opset_is_refused_naming_the_supported_range():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4])], [("y", F32, [4])],
              opset=99)
    text = refused(m, "opset 99")
    assert f"{MIN_OPSET} to {MAX_OPSET}" in text
    assert MAX_OPSET >= 21
    ok = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4])], [("y", F32, [4])],
               opset=MAX_OPSET)
    assert load_onnx(ok).outputs == ("y",)


def test_older_opset_imports_when_no_op_changed_since_and_is_refused_naming_what_did():
    # And kept its opset-7 definition through opset 13: an opset-7 model means what it
    # would at 13, so it imports and runs as onnxruntime runs it
    B = TensorProto.BOOL
    m = model([helper.make_node("And", ["a", "b"], ["y"])], [("a", B, [3, 4]), ("b", B, [4])],
              [("y", B, [3, 4])], opset=7, check=True)
    g = load_onnx(m)
    rng = np.random.default_rng(7)
    a, b = rng.random((3, 4)) < 0.5, rng.random(4) < 0.5
    (ours,) = run_reference(g, {"a": a, "b": b}).values()
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(ours, sess.run(None, {"a": a, "b": b})[0])
    # Softmax changed at 13 (it flattened from the axis on before): refused, by name
    old = model([helper.make_node("Softmax", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                [("x", F32, [2, 3, 4])], [("z", F32, [2, 3, 4])], opset=11)
    text = refused(old, "opset 11")
    assert "Relu, Softmax changed between opset 11 and 13" in text
    assert "convert_version(model, 13)" in text


def test_transpose_perm_that_is_not_a_permutation_is_the_models_fault():
    m = model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0], name="t")],
              [("x", F32, [4, 8])], [("y", F32, [4, 4])])
    text = refused(m, r"perm \[0, 0\]")
    assert "'t'" in text and "model" in text


@pytest.mark.parametrize("node, inputs, outputs, inits, match", [
    (helper.make_node("Gather", ["x", "i"], ["y"], axis=9), [("x", F32, [4, 8]),
                                                             ("i", I64, [2])],
     [("y", F32, [4, 2])], [], "axis 9"),
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=7), [("x", F32, [4, 8])],
     [("y", F32, [4, 16])], [], "axis 7"),
    (helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1), [("x", F32, [4, 8])],
     [("y", F32, [4, 4]), ("z", F32, [4, 4])],
     [("s", np.array([4194304, -4194296], np.int64))], "sizes"),
    (helper.make_node("Split", ["x"], ["y", "z"], axis=3, num_outputs=2),
     [("x", F32, [4, 8])], [("y", F32, [4, 4]), ("z", F32, [4, 4])], [], "axis 3"),
    (helper.make_node("ReduceMax", ["x", "a"], ["y"]), [("x", F32, [4, 8])],
     [("y", F32, [4, 1])], [("a", np.array([5], np.int64))], "axis 5"),
    (helper.make_node("ReduceSum", ["x", "a"], ["y"]), [("x", F32, [4, 8])],
     [("y", F32, [4, 1])], [("a", np.array([-3], np.int64))], "axis -3"),
    (helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]), [("x", F32, [4, 8])],
     [("y", F32, [4, 1])], [("s", np.array([0], np.int64)), ("e", np.array([1], np.int64)),
                            ("a", np.array([4], np.int64))], "axis 4"),
    (helper.make_node("Softmax", ["x"], ["y"], axis=2), [("x", F32, [4, 8])],
     [("y", F32, [4, 8])], [], "axis 2"),
    (helper.make_node("Flatten", ["x"], ["y"], axis=3), [("x", F32, [4, 8])],
     [("y", F32, [32, 1])], [], "axis 3"),
    (helper.make_node("Squeeze", ["x", "a"], ["y"]), [("x", F32, [1, 8])],
     [("y", F32, [8])], [("a", np.array([2], np.int64))], "axis 2"),
    (helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [("x", F32, [4, 8])],
     [("y", F32, [4, 8, 1])], [("a", np.array([5], np.int64))], "axis 5"),
    (helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=2), [("x", F32, [4, 8])],
     [("y", F32, [4, 8])], [("g", np.ones(8, np.float32))], "axis 2"),
])
def test_out_of_range_attributes_are_refused(node, inputs, outputs, inits, match):
    refused(model([node], inputs, outputs, inits), match)


def test_an_empty_max_folds_to_its_onnx_value():
    # ONNX defines ReduceMax over nothing as -inf: a constant, no kernel
    m = model([helper.make_node("ReduceMax", ["x", "a"], ["y"])], [("x", F32, [4, 0])],
              [("y", F32, [4, 1])], [("a", np.array([1], np.int64))])
    g = load_onnx(m)
    y = run_reference(g, {"x": np.zeros((4, 0), np.float32)})["y"]
    assert y.shape == (4, 1) and np.all(y == -np.inf)


def test_empty_concat_parts_are_dropped(tmp_path):
    # legal ONNX (and a KV cache with no past): the kernels read every part of a concat,
    # so parts with no elements never reach one
    m = model([helper.make_node("Concat", ["past", "x"], ["y"], axis=1)],
              [("past", F32, [2, 0, 4]), ("x", F32, [2, 3, 4])], [("y", F32, [2, 3, 4])],
              check=True)
    path = tmp_path / "kv.onnx"
    onnx.save(m, str(path))
    g = load_onnx(path)
    assert all(n.op != "concat" for n in g.nodes)
    feeds = {"past": np.zeros((2, 0, 4), np.float32),
             "x": np.random.default_rng(0).random((2, 3, 4), dtype=np.float32)}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(run_reference(g, feeds)["y"], want[0])


def test_input_shapes_must_be_integers():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, ["n", 8])],
              [("y", F32, ["n", 8])])
    with pytest.raises(GraphError, match="4.5"):
        load_onnx(m, input_shapes={"x": [4.5, 8]})
    assert load_onnx(m, input_shapes={"x": (np.int64(4), 8)}).value("x").shape == (4, 8)
