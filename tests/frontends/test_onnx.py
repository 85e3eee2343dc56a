"""The ONNX importer: real models made with onnx.helper, saved to files, imported,
run with the NumPy reference and compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from workbench import onnx_backend  # noqa: E402
from workbench.errors import GraphError, UnsupportedOpError, WorkbenchError  # noqa: E402
from workbench.frontends import load, load_onnx  # noqa: E402
from workbench.ir import Graph, Origin  # noqa: E402
from workbench.runtime.reference import run_reference  # noqa: E402

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
RNG = np.random.default_rng(0)


def make(tmp_path, nodes, inputs, outputs, inits=(), opset=18, name="m"):
    """Save a one-graph model; inputs/outputs are (name, elem type, shape) triples."""
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def feeds_for(g: Graph):
    return {i: RNG.uniform(-2, 2, g.value(i).shape).astype(g.value(i).dtype.np)
            for i in g.inputs}


def assert_matches_ort(path, rtol=1e-5, atol=1e-5, **load_kw):
    """Import, run on the reference, compare every output with onnxruntime."""
    g = load_onnx(path, **load_kw)
    feeds = feeds_for(g)
    ours = run_reference(g, feeds)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    assert list(g.outputs) == [o.name for o in sess.get_outputs()]
    for name, want in zip(g.outputs, theirs):
        assert ours[name].shape == want.shape and ours[name].dtype == want.dtype
        np.testing.assert_allclose(ours[name], want, rtol=rtol, atol=atol, err_msg=name)
    return g


def composites_of(g: Graph) -> set[str]:
    return {n.origin.composite for n in g.nodes if n.origin}


# -- composites against onnxruntime --------------------------------------------------

def test_layer_norm_with_stats(tmp_path):
    path = make(tmp_path, [helper.make_node("LayerNormalization", ["x", "w", "b"],
                                            ["y", "mean", "inv"], axis=-1, epsilon=1e-5,
                                            name="ln")],
                [("x", F32, [4, 6, 32])], [("y", F32, [4, 6, 32]), ("mean", F32, [4, 6, 1]),
                                           ("inv", F32, [4, 6, 1])],
                [("w", RNG.uniform(0.5, 1.5, 32).astype(np.float32)),
                 ("b", RNG.uniform(-1, 1, 32).astype(np.float32))], opset=17)
    g = assert_matches_ort(path)
    assert composites_of(g) == {"LayerNormalization"}
    assert {n.op for n in g.nodes} >= {"reduce_mean", "rsqrt"}


def test_layer_norm_over_two_axes_fp16(tmp_path):
    path = make(tmp_path, [helper.make_node("LayerNormalization", ["x", "w"], ["y"], axis=1)],
                [("x", F16, [4, 6, 8])], [("y", F16, [4, 6, 8])],
                [("w", np.ones((6, 8), np.float16))], opset=17)
    assert_matches_ort(path, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op,axis", [("Softmax", -1), ("Softmax", 1), ("LogSoftmax", -1),
                                     ("LogSoftmax", 0)])
def test_softmax_family(tmp_path, op, axis):
    path = make(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=axis)],
                [("x", F32, [5, 7, 9])], [("y", F32, [5, 7, 9])], opset=13)
    g = assert_matches_ort(path)
    assert composites_of(g) == {op}


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_op(tmp_path, approximate):
    path = make(tmp_path, [helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)],
                [("x", F32, [8, 64])], [("y", F32, [8, 64])], opset=20)
    g = assert_matches_ort(path)
    assert composites_of(g) == {"Gelu"}
    assert ("tanh" if approximate == "tanh" else "erf") in {n.op for n in g.nodes}


def test_reduce_log_sum_exp(tmp_path):
    path = make(tmp_path, [helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"],
                                            keepdims=0)],
                [("x", F32, [3, 4, 5])], [("y", F32, [3, 5])],
                [("axes", np.array([1], np.int64))], opset=18)
    assert_matches_ort(path)


def test_batch_norm_inference(tmp_path):
    c = 6
    inits = [("s", RNG.uniform(0.5, 2, c)), ("bias", RNG.uniform(-1, 1, c)),
             ("m", RNG.uniform(-1, 1, c)), ("v", RNG.uniform(0.1, 2, c))]
    path = make(tmp_path, [helper.make_node("BatchNormalization", ["x", "s", "bias", "m", "v"],
                                            ["y"], epsilon=1e-3)],
                [("x", F32, [2, c, 5, 5])], [("y", F32, [2, c, 5, 5])],
                [(n, a.astype(np.float32)) for n, a in inits], opset=15)
    g = assert_matches_ort(path)
    assert composites_of(g) == {"BatchNormalization"}
    # the statistics' arithmetic computed once at import: (x - mean) * inv + bias
    assert [n.op for n in g.nodes] == ["sub", "mul", "add"]


def test_gemm_trans_b(tmp_path):
    w = RNG.uniform(-1, 1, (4, 16)).astype(np.float32)
    path = make(tmp_path, [helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1,
                                            alpha=0.5, beta=2.0)],
                [("a", F32, [8, 16])], [("y", F32, [8, 4])],
                [("w", w),
                 ("c", RNG.uniform(-1, 1, 4).astype(np.float32))], opset=13)
    g = assert_matches_ort(path)
    # the transposed weight computed once at import (ir/constant_folding.py)
    mm = g.nodes[0]
    assert mm.op == "matmul" and g.value(mm.inputs[1]).shape == (16, 4)
    assert np.array_equal(g.constants[mm.inputs[1]], w.T)


@pytest.mark.parametrize("op,attrs", [
    ("HardSigmoid", {"alpha": 0.3}), ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.2}),
    ("Elu", {}), ("Selu", {}), ("Softplus", {}), ("Softsign", {}), ("Mish", {}),
    ("Sign", {}), ("ThresholdedRelu", {"alpha": 0.5}), ("Celu", {"alpha": 2.0})])
def test_activations(tmp_path, op, attrs):
    path = make(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)],
                [("x", F32, [6, 10])], [("y", F32, [6, 10])], opset=18)
    assert_matches_ort(path)


def test_clip_tile_flatten_split_slice(tmp_path):
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             helper.make_node("Tile", ["c", "reps"], ["t"]),
             helper.make_node("Flatten", ["t"], ["f"], axis=1),
             helper.make_node("Split", ["f", "sizes"], ["s0", "s1"], axis=1),
             helper.make_node("Slice", ["s1", "st", "en", "ax", "sp"], ["y"])]
    inits = [("lo", np.float32(-0.5)), ("hi", np.float32(0.5)), ("reps", np.array([2, 3], np.int64)),
             ("sizes", np.array([5, 7], np.int64)), ("st", np.array([-1], np.int64)),
             ("en", np.array([-100], np.int64)), ("ax", np.array([1], np.int64)),
             ("sp", np.array([-2], np.int64))]
    path = make(tmp_path, nodes, [("x", F32, [3, 4])], [("s0", F32, [6, 5]), ("y", F32, [6, 4])],
                inits, opset=13)
    assert_matches_ort(path)


# -- folding and opset differences --------------------------------------------------

def test_shape_subgraph_folds_away(tmp_path):
    # y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])): what exporters emit for flatten
    nodes = [helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Gather", ["shp", "zero"], ["batch"], axis=0),
             helper.make_node("Unsqueeze", ["batch", "ax0"], ["batch1"]),
             helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    inits = [("zero", np.array(0, np.int64)), ("ax0", np.array([0], np.int64)),
             ("minus1", np.array([-1], np.int64))]
    path = make(tmp_path, nodes, [("x", F32, [4, 3, 5])], [("y", F32, [4, 15])], inits)
    g = assert_matches_ort(path)
    assert [n.op for n in g.nodes] == ["reshape", "relu"]
    assert g.nodes[0].attr("shape") == (4, 15)


def test_constant_nodes_and_range_fold(tmp_path):
    nodes = [helper.make_node("Constant", [], ["lim"], value=numpy_helper.from_array(
                 np.array(6, np.int64))),
             helper.make_node("Range", ["start", "lim", "step"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F32),
             helper.make_node("Add", ["x", "rf"], ["y"])]
    inits = [("start", np.array(0, np.int64)), ("step", np.array(2, np.int64))]
    path = make(tmp_path, nodes, [("x", F32, [2, 3])], [("y", F32, [2, 3])], inits)
    g = assert_matches_ort(path)
    assert [n.op for n in g.nodes] == ["add"]


def test_reduce_axes_attribute_at_13_and_input_at_18(tmp_path):
    v13 = make(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, 2])],
               [("x", F32, [3, 4, 5])], [("y", F32, [1, 4, 1])], opset=13, name="r13")
    v18 = make(tmp_path, [helper.make_node("ReduceMean", ["x", "axes"], ["y"])],
               [("x", F32, [3, 4, 5])], [("y", F32, [1, 4, 1])],
               [("axes", np.array([0, 2], np.int64))], opset=18, name="r18")
    g13, g18 = assert_matches_ort(v13), assert_matches_ort(v18)
    assert g13.nodes[0].attr("axes") == g18.nodes[0].attr("axes") == (0, 2)


def test_reduce_sum_noop_with_empty_axes(tmp_path):
    path = make(tmp_path, [helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1),
                           helper.make_node("ReduceSum", ["x"], ["z"], keepdims=0)],
                [("x", F32, [3, 4])], [("y", F32, [3, 4]), ("z", F32, [])], opset=13)
    assert_matches_ort(path)


# -- errors --------------------------------------------------------------------------

def test_dynamic_dims_need_input_shapes(tmp_path):
    path = make(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                [("x", F32, ["batch", 16])], [("y", F32, ["batch", 16])])
    with pytest.raises(GraphError, match=r"input 'x' dim 0 \(batch\).*input_shapes"):
        load_onnx(path)
    g = load_onnx(path, input_shapes={"x": [4, 16]})
    assert g.value("x").shape == (4, 16) and g.value("y").shape == (4, 16)
    with pytest.raises(GraphError, match="does not fit"):
        load_onnx(path, input_shapes={"x": [4, 8]})


def test_unsupported_lists_every_op_type_and_node(tmp_path):
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top"),
             helper.make_node("Relu", ["v"], ["r"], name="relu"),
             helper.make_node("Hardmax", ["r"], ["y"], name="hardmax1"),
             helper.make_node("Hardmax", ["x"], ["z"], name="hardmax2"),
             helper.make_node("Conv", ["x3", "w"], ["c"], name="conv4d")]
    # (TopK's K a graph input: a data-dependent count)
    path = make(tmp_path, nodes, [("x", F32, [4, 8]), ("x3", F32, [1, 2, 4, 4, 4, 4]),
                                  ("k", I64, [1])],
                [("y", F32, [4, 3]), ("z", F32, [4, 8]), ("i", I64, [4, 3]),
                 ("c", F32, [1, 2, 2, 2, 2, 2])],
                [("w", np.ones((2, 2, 3, 3, 3, 3), np.float32))])
    with pytest.raises(UnsupportedOpError) as e:
        load_onnx(path)
    topk = ("TopK [data-dependent K input (the workbench compiles for static shapes and "
            "values; make it a constant)]")
    assert e.value.unsupported == {
        "Conv [4-D convolution (1-D, 2-D and 3-D are supported)]": ["conv4d"],
        "Hardmax": ["hardmax1", "hardmax2"], topk: ["top"]}
    assert "TopK" in str(e.value) and "hardmax2" in str(e.value)
    # unnamed scopes: each node with its nearest named producer (here a graph input)
    assert "Hardmax (2 nodes: hardmax1 (after x), hardmax2 (after x))" in str(e.value)


@pytest.mark.parametrize("content", [b"not a protobuf at all \x00\xff\x13", b""])
def test_malformed_file(tmp_path, content):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(GraphError, match="bad.onnx") as e:
        load_onnx(path)
    assert "\n" not in str(e.value)


def test_truncated_file(tmp_path):
    good = make(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                [("x", F32, [4])], [("y", F32, [4])],
                [("unused", np.ones(1000, np.float32))])
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphError, match="m.onnx"):
        load_onnx(good)


def test_unsupported_dtype_names_the_value(tmp_path):
    path = make(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                [("x", TensorProto.DOUBLE, [4])], [("y", TensorProto.DOUBLE, [4])])
    with pytest.raises(GraphError, match="input 'x' has element type DOUBLE"):
        load_onnx(path)


def test_old_opset_refused_with_fix(tmp_path):
    path = make(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                [("x", F32, [4])], [("y", F32, [4])], opset=11)
    with pytest.raises(GraphError, match="version_converter"):
        load_onnx(path)


# -- names, origins, outputs ----------------------------------------------------------

def test_origins_and_names(tmp_path):
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="attn/softmax"),
             helper.make_node("Mul", ["p", "two"], ["y"])]
    path = make(tmp_path, nodes, [("x", F32, [2, 8])], [("y", F32, [2, 8])],
                [("two", np.float32(2.0))])
    g = load_onnx(path)
    origins = [n.origin for n in g.nodes]
    assert set(origins[:-1]) == {Origin("Softmax", "attn/softmax")}
    assert origins[-1] == Origin("Mul", "Mul_1")   # unnamed node: op_type_index
    assert g.producer["p"].origin.composite == "Softmax"  # the composite's result keeps
    assert "two" in g.constants                            # the ONNX names


def test_model_names_that_look_like_invented_ones(tmp_path):
    # the builder invents t1, t2...; a model using those names must not collide
    nodes = [helper.make_node("Softmax", ["x"], ["t1"]),
             helper.make_node("Softmax", ["t1"], ["t3"]),
             helper.make_node("Identity", ["x"], ["c4"])]
    path = make(tmp_path, nodes, [("x", F32, [2, 8])], [("t3", F32, [2, 8]), ("c4", F32, [2, 8])])
    assert_matches_ort(path)


def test_output_that_is_an_input_or_a_constant(tmp_path):
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Shape", ["x"], ["shape"])]
    path = make(tmp_path, nodes, [("x", F32, [2, 3])], [("same", F32, [2, 3]), ("shape", I64, [2])])
    g = assert_matches_ort(path)
    assert g.outputs == ("same", "shape")


# -- load() and the onnx backend --------------------------------------------------------

def test_load_dispatch(tmp_path):
    path = make(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4])],
                [("y", F32, [4])])
    g = load(path)
    assert load(g) is g
    assert load(onnx.load(str(path))).outputs == ("y",)
    with pytest.raises(WorkbenchError, match="file not found: .*nope.onnx; check the path"):
        load(tmp_path / "nope.onnx")
    other = tmp_path / "x.foo"
    other.write_text("")
    with pytest.raises(WorkbenchError, match="unknown graph format 'x.foo'; use .onnx or .json"):
        load(other)


def test_backend_prepare_and_run(tmp_path):
    path = make(tmp_path, [helper.make_node("Add", ["a", "b"], ["y"]),
                           helper.make_node("Neg", ["y"], ["z"])],
                [("a", F32, [3]), ("b", F32, [3])], [("y", F32, [3]), ("z", F32, [3])])
    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    rep = onnx_backend.prepare(str(path), backend="reference")
    y, z = rep.run([a, b])
    np.testing.assert_array_equal(y, a + b)
    out = rep.run({"a": a, "b": b})
    np.testing.assert_array_equal(out["z"], -(a + b))
    assert onnx_backend.supports_device("CPU")
    assert not onnx_backend.supports_device("TPU")
    res = onnx_backend.run_model(onnx.load(str(path)), [a, b], backend="reference")
    np.testing.assert_array_equal(res[1], -(a + b))


def test_folding_an_op_whose_handler_makes_its_own_constants():
    # Softplus of an initializer folds at import; its decomposition adds a scalar
    # constant (the 1 in log(1 + exp(x))) that folding must see as an input.
    c = np.random.default_rng(0).random(4).astype(np.float32) + 0.5
    nodes = [helper.make_node("Softplus", ["c"], ["sp"]),
             helper.make_node("Add", ["x", "sp"], ["y"])]
    graph = helper.make_graph(
        nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(c, "c")])
    g = load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op for n in g.nodes] == ["add"]
    x = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(run_reference(g, {"x": x})["y"], x + np.log1p(np.exp(c)),
                               rtol=1e-6)
