"""The import's checks without the weights' bytes (frontends/onnx/skeleton.py): the ONNX
checker and shape inference answer on the skeleton as on the whole model, a weight of
the wrong size is still refused, and weights are held without a copy only where no one
can change them (ir/builder.py)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from workbench.errors import GraphError  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402
from workbench.frontends.onnx.skeleton import SKIP_BYTES, skeleton  # noqa: E402
from workbench.ir import GraphBuilder  # noqa: E402
from workbench.runtime.reference import run_reference  # noqa: E402

F32 = TensorProto.FLOAT


def _mlp(rows=8, hidden=256, raw=None):
    """x @ w + b, reshaped by a shape initializer (data propagation reads it): w is
    256 KB, large enough to be left out of the skeleton."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((hidden, hidden), np.float32), "w")
    if raw is not None:
        w.raw_data = raw
    b = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([rows * 2, hidden // 2], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", F32, [rows, hidden])],
                          [helper.make_tensor_value_info("y", F32, ["p", "q"])], [w, b, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def test_the_skeleton_leaves_out_only_large_float_weights():
    m = _mlp()
    s = skeleton(m)
    assert m.graph.initializer[0].ByteSize() > SKIP_BYTES
    assert s.ByteSize() < 4096
    kept = {t.name: t for t in s.graph.initializer}
    assert list(kept["w"].dims) == [256, 256] and kept["w"].raw_data == bytes(4)
    assert kept["b"] == m.graph.initializer[1] and kept["shape"] == m.graph.initializer[2]
    assert list(skeleton(m, for_checker=True).graph.initializer[0].dims) == [1]
    assert s.graph.node == m.graph.node and s.opset_import == m.opset_import
    assert m.graph.initializer[0].ByteSize() > SKIP_BYTES     # the model is not changed


def test_shape_inference_answers_on_the_skeleton_as_on_the_model():
    m = _mlp()
    whole = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    bare = onnx.shape_inference.infer_shapes(skeleton(m), strict_mode=True, data_prop=True)
    assert list(bare.graph.value_info) == list(whole.graph.value_info)
    assert list(bare.graph.output) == list(whole.graph.output)
    # (the Reshape's output shape comes from the shape initializer's values)
    r = next(v for v in whole.graph.value_info if v.name == "r")
    assert [d.dim_value for d in r.type.tensor_type.shape.dim] == [16, 128]


def test_the_checker_refuses_on_the_skeleton_what_it_refuses_on_the_model():
    bad = _mlp()
    bad.graph.node[1].input[1] = "nowhere"          # an input nothing makes
    for proto in (bad, skeleton(bad, for_checker=True)):
        with pytest.raises(onnx.checker.ValidationError, match="nowhere"):
            onnx.checker.check_model(proto)
    onnx.checker.check_model(skeleton(_mlp(), for_checker=True))


def test_a_weight_of_the_wrong_size_is_still_refused(tmp_path):
    p = tmp_path / "short.onnx"
    onnx.save(_mlp(raw=bytes(SKIP_BYTES)), p)        # 64 KB for a 256 KB weight
    with pytest.raises(GraphError, match=r"short.onnx: initializer 'w' does not hold the "
                       r"65536 values of its shape \[256, 256\].*re-export the model"):
        load_onnx(p)


def test_an_imported_model_computes_what_its_weights_say(tmp_path):
    m = _mlp()
    p = tmp_path / "mlp.onnx"
    onnx.save(m, p)
    g = load_onnx(p)
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    w, b, _ = (numpy_helper.to_array(t) for t in m.graph.initializer)
    got = run_reference(g, {"x": x})["y"]
    np.testing.assert_allclose(got, np.maximum(x @ w + b, 0).reshape(16, 128), rtol=1e-5,
                               atol=1e-4)


def test_constants_are_copied_unless_no_one_can_change_them():
    b = GraphBuilder("c")
    mine = np.arange(6, dtype=np.float32).reshape(2, 3)
    frozen = np.frombuffer(np.arange(6, dtype=np.float32).tobytes(), np.float32).reshape(2, 3)
    view = mine[:, :2]
    view.flags.writeable = False                     # read-only, but mine can change it
    x = b.input("x", (2, 3))
    b.output(b.add(b.add(b.add(x, b.constant(mine)), b.constant(frozen)),
                   b.pad(b.constant(view), pads=[0, 0, 0, 1])), "y")
    g = b.build()
    held = [g.constants[n] for n in g.constants]
    assert any(a is frozen or np.shares_memory(a, frozen) for a in held)
    assert not any(np.shares_memory(a, mine) for a in held)
    mine[:] = -1
    assert all((a >= 0).all() for a in held)
