"""Imports with a budget (frontends/onnx/budget.py): a file of a few hundred bytes that
asks constant folding for gigabytes, or for minutes of pure Python, is refused with
one line naming the node, before anything large is allocated; what is cheap still
folds, and what the workbench can compute past the budget stays ops of the graph."""
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.errors import GraphError
from workbench.frontends import load_onnx
from workbench.frontends.onnx import budget

# what the refusal may allocate at most (the budget's own ceiling is 64 MiB a node)
MEMORY_CEILING = 200 << 20


def _model(nodes, inits, out, out_type=TensorProto.FLOAT, extra_inputs=(), rank=1):
    # (the output's rank given, its extents left to inference: the file stays tiny)
    shape = [f"d{i}" for i in range(rank)]
    g = helper.make_graph(nodes, "blowup", list(extra_inputs),
                          [helper.make_tensor_value_info(out, out_type, shape)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _refused(model, match):
    data = model.SerializeToString()
    assert len(data) < 600, len(data)            # a tiny file
    tracemalloc.start()
    try:
        with pytest.raises(GraphError, match=match) as e:
            load_onnx(model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(e.value)
    assert peak < MEMORY_CEILING, f"{peak / 2**20:.0f} MiB allocated before refusing"
    return str(e.value)


def test_constant_of_shape_of_half_a_billion_is_refused_from_its_shape():
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="zeros")],
               {"s": np.array([2 ** 29], np.int64)}, "y")
    msg = _refused(m, "ConstantOfShape 'zeros' .* would make 2.0 GiB of constants")
    assert "check its shape inputs" in msg


def test_a_range_of_a_billion_is_refused():
    m = _model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="r")],
               {"a": np.array(0, np.int64), "b": np.array(2 ** 30, np.int64),
                "d": np.array(1, np.int64)}, "y", TensorProto.INT64)
    _refused(m, "Range 'r' .* would make 8.0 GiB")
    m = _model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="r0")],
               {"a": np.array(0.0, np.float32), "b": np.array(1.0, np.float32),
                "d": np.array(0.0, np.float32)}, "y")
    _refused(m, "has no end")


@pytest.mark.parametrize("op", ["Tile", "Pad", "Expand"])
def test_a_constant_grown_past_the_budget_stays_an_op(op):
    """Tile, Pad and Expand the workbench computes itself: past the budget they are not
    folded but left as ops of the graph (the model asks for that value when it runs),
    and the import allocates nothing of their size."""
    x = np.ones((4, 4), np.float32)
    if op == "Tile":
        node = helper.make_node("Tile", ["x", "r"], ["y"], name="t")
        inits = {"x": x, "r": np.array([4096, 2048], np.int64)}
    elif op == "Pad":
        node = helper.make_node("Pad", ["x", "p"], ["y"], name="t")
        inits = {"x": x, "p": np.array([0, 0, 16384, 8192], np.int64)}
    else:
        node = helper.make_node("Expand", ["x1", "s"], ["y"], name="t")
        inits = {"x1": np.ones((1, 1), np.float32), "s": np.array([16384, 8192], np.int64)}
    tracemalloc.start()
    try:
        g = load_onnx(_model([node], inits, "y", rank=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_CEILING
    assert g.value("y").numel >= 2 ** 27 and "y" not in g.constants
    assert any(n.outputs == ("y",) or "y" in n.outputs for n in g.nodes)


def test_one_hot_of_a_huge_depth_is_refused():
    m = _model([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="oh")],
               {"d": np.array([2 ** 33], np.int64), "v": np.array([0.0, 1.0], np.float32)},
               "y", extra_inputs=[helper.make_tensor_value_info("i", TensorProto.INT64,
                                                                [3])], rank=2)
    _refused(m, "OneHot 'oh'.s classes .* would make 64.0 GiB")


def test_grid_sample_on_constants_is_refused_not_folded_for_minutes():
    """GridSample is folded only by onnx.reference, in pure Python, in time growing with
    the cube of the size: its output is sized by ONNX's shape inference first."""
    n = 512
    m = _model([helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs")],
               {"x": np.ones((1, 1, n, n), np.float32),
                "grid": np.zeros((1, n, n, 2), np.float32)}, "y", rank=4)
    with pytest.raises(GraphError, match="GridSample 'gs': onnx.reference .* would fold "
                                         f"{n * n} elements"):
        load_onnx(m)


def test_cheap_folds_still_fold():
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["z"], name="zeros"),
                helper.make_node("Tile", ["z", "r"], ["y"], name="t")],
               {"s": np.array([8, 8], np.int64), "r": np.array([2, 3], np.int64)}, "y",
               rank=2)
    g = load_onnx(m)
    assert not g.nodes or all(n.op in ("reshape",) for n in g.nodes)


def test_the_import_wide_budget_adds_up(monkeypatch):
    """Many nodes, each under the per-node budget: together past the import's."""
    monkeypatch.setattr(budget, "IMPORT_GROWTH_BYTES", 3 << 20)
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"c{i}"], name=f"c{i}")
             for i in range(4)]
    nodes.append(helper.make_node("Sum", [f"c{i}" for i in range(4)], ["y"], name="sum"))
    m = _model(nodes, {"s": np.array([256, 1024], np.int64)}, "y", rank=2)
    # (1 MiB a ConstantOfShape: the fourth passes 3 MiB, and has no op to stay as)
    _refused(m, "ConstantOfShape 'c3' would make 1.0 MiB .* all folded nodes together")
    monkeypatch.setattr(budget, "IMPORT_GROWTH_BYTES", 5 << 20)
    assert load_onnx(m).value("y").numel == 256 * 1024
    b = budget.FoldBudget()
    b.admit("a", 3 << 20, 0)
    with pytest.raises(budget.OverBudget, match="all folded nodes together"):
        b.admit("b", 3 << 20, 0)
    b.admit("a transpose", 64 << 20, 64 << 20)       # what grows nothing always folds
