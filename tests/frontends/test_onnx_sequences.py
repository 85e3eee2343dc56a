"""Tensor sequences that only split a tensor (``SplitToSequence`` read back by
``SequenceAt``, as torch's legacy exporter writes an unbind over a loop): every form of
the split (a size list, a scalar chunk with a smaller last piece, no split with and
without keepdims), negative positions, a constant source; compared with onnxruntime on
the cpu backend. A sequence used any other way is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import workbench as wb  # noqa: E402
from workbench.errors import UnsupportedOpError  # noqa: E402
from workbench.tolerance import relative_to_largest  # noqa: E402

F32 = TensorProto.FLOAT
SHAPE = [2, 7, 5]


def _save(tmp_path, nodes, outputs, inits=(), name="seq"):
    """``outputs``: name -> shape."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", F32, SHAPE)],
                          [helper.make_tensor_value_info(o, F32, sh)
                           for o, sh in outputs.items()], list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _at(seq, i, out):
    return [helper.make_node("Constant", [], [f"{out}_i"],
                             value=numpy_helper.from_array(np.asarray(i, np.int64))),
            helper.make_node("SequenceAt", [seq, f"{out}_i"], [out])]


CASES = {
    # split input, attributes, positions read back (negative from the end) and the
    # pieces' sizes along axis 1 (None: squeezed)
    "sizes": (np.asarray([2, 0, 4, 1], np.int64), {}, [0, 2, -1], [2, 4, 1]),
    "scalar_chunk": (np.asarray(3, np.int64), {}, [0, 1, -1], [3, 3, 1]),
    "ones_keepdims": (None, {}, [0, 4, -1], [1, 1, 1]),
    "ones_squeezed": (None, {"keepdims": 0}, [1, -2], [None, None]),
}


@pytest.mark.parametrize("case", CASES)
def test_split_to_sequence_matches_onnxruntime(tmp_path, case):
    split, attrs, positions, sizes = CASES[case]
    nodes, inits = [helper.make_node("Tanh", ["x"], ["t"])], []
    ins = ["t"]
    if split is not None:
        inits.append(numpy_helper.from_array(split, "split"))
        ins.append("split")
    nodes.append(helper.make_node("SplitToSequence", ins, ["seq"], axis=1, **attrs))
    outs = {}
    for k, (i, size) in enumerate(zip(positions, sizes)):
        nodes += _at("seq", i, f"p{k}")
        nodes.append(helper.make_node("Mul", [f"p{k}", f"p{k}"], [f"y{k}"]))
        outs[f"y{k}"] = [SHAPE[0], SHAPE[2]] if size is None else [SHAPE[0], size, SHAPE[2]]
    path = _save(tmp_path, nodes, outs, inits, name=case)
    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    want = dict(zip(outs, ort.InferenceSession(str(path)).run(None, {"x": x})))
    s = wb.Session(wb.load(path), backend="cpu")
    s.auto("stitch")
    got = s.run({"x": x})
    for o in outs:
        assert got[o].shape == want[o].shape, (o, got[o].shape, want[o].shape)
        assert relative_to_largest(got[o], want[o]) < 1e-6


def test_sequence_of_a_constant_folds(tmp_path):
    c = np.arange(14, dtype=np.float32).reshape(14, 1)
    nodes = [helper.make_node("SplitToSequence", ["c"], ["seq"], axis=0, keepdims=0),
             *_at("seq", 5, "p"), helper.make_node("Add", ["x", "p"], ["y"])]
    path = _save(tmp_path, nodes, {"y": SHAPE}, [numpy_helper.from_array(c, "c")],
                 name="const")
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    g = wb.load(path)
    assert not any(n.op == "slice" for n in g.nodes)    # the piece is a constant
    assert relative_to_largest(wb.Session(g, backend="cpu").run({"x": x})["y"], want) < 1e-6


def test_sequence_used_otherwise_is_refused(tmp_path):
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=1),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=1)]
    with pytest.raises(UnsupportedOpError, match="ConcatFromSequence"):
        wb.load(_save(tmp_path, nodes, {"y": [2, 7, 5]}, name="concat"))
