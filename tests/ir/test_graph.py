"""The IR: builder, verifier errors, printer, JSON round trip."""
import json

import numpy as np
import pytest

import workbench as wb
from workbench.errors import GraphError
from workbench.ir import Graph, Node, Value, from_json, load_json, save_json, to_json
from workbench.runtime import random_inputs


def _graph():
    b = wb.GraphBuilder("g", "a small test graph")
    x = b.input("x", (4, 6), range=(0.5, 2.0))
    i = b.input("i", (3,), "int64")
    w = b.constant(np.arange(6, dtype=np.float16), "w")
    h = b.cast(x, to="float16") * w
    y = b.gather(b.layer_norm(b.cast(h, to="float32")), i, axis=0)
    b.output(y, "y")
    b.output(b.reduce_max(x, axes=[-1], keepdims=False), "m")
    return b.build()


def test_json_round_trip_is_exact(tmp_path):
    g = _graph()
    p = tmp_path / "g.json"
    save_json(g, p)
    g2 = load_json(p)
    assert to_json(g2) == to_json(g)
    assert str(g2) == str(g)
    assert g2.input_ranges == {"x": (0.5, 2.0)}
    np.testing.assert_array_equal(g2.constants["w"], g.constants["w"])
    assert g2.constants["w"].dtype == np.float16


def test_random_inputs_honour_ranges_and_are_never_zero():
    ins = random_inputs(_graph(), seed=3)
    assert ins["x"].min() >= 0.5 and ins["x"].max() < 2.0
    assert np.count_nonzero(ins["x"]) == ins["x"].size


def test_origin_tags_and_printer():
    g = _graph()
    ln = [n for n in g.nodes if n.origin and n.origin.composite == "LayerNormalization"]
    assert len(ln) >= 6
    text = str(g)
    assert "reduce_mean" in text and "# LayerNormalization" in text
    assert text.startswith("graph g(x: float32[4, 6], i: int64[3])")


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["nodes"].append({"op": "exp", "inputs": ["nope"], "outputs": ["z"]}),
     "undefined value 'nope'"),
    (lambda d: d.update(outputs=["ghost"]), "never computed"),
    (lambda d: d["nodes"][0].update(op="warp_drive"), "unknown op"),
    (lambda d: d.update(format="something"), "not a workbench graph"),
    (lambda d: d.update(version=99), "newer than this"),
    (lambda d: d["inputs"]["x"].update(range=[2, 1]), "low < high"),
    (lambda d: d["constants"]["w"].update(shape=[7]), "base64 data has 6 elements"),
])
def test_malformed_json_names_the_fault(mutate, match):
    d = json.loads(json.dumps(to_json(_graph())))
    mutate(d)
    with pytest.raises(GraphError, match=match):
        from_json(d)


def test_verifier_catches_order_and_shape_lies():
    x = Value("x", (2, 3), wb.DType.float32)
    y = Value("y", (2, 3), wb.DType.float32)
    z = Value("z", (2, 4), wb.DType.float32)
    n1 = Node.make("n0", "exp", ["y"], ["z"])
    n0 = Node.make("n1", "exp", ["x"], ["y"])
    with pytest.raises(GraphError, match="before it is defined"):
        Graph("bad", (x, y, z), (n1, n0), ("x",), ("z",)).verify()
    with pytest.raises(GraphError, match=r"declared float32\[2, 4\] but its inputs give"):
        Graph("bad", (x, y, z), (n0, n1), ("x",), ("z",)).verify()


def test_builder_errors_are_clear():
    b = wb.GraphBuilder("e")
    x = b.input("x", (2, 3))
    with pytest.raises(GraphError, match="do not broadcast"):
        b.add(x, b.input("y", (4,)))
    with pytest.raises(GraphError, match="one dtype"):
        b.add(x, b.input("k", (2, 3), "int32"))
    with pytest.raises(GraphError, match="no outputs"):
        wb.GraphBuilder("empty").build()
    t = b.exp(x)
    b.output(t, "renamed")
    with pytest.raises(GraphError, match="was renamed"):
        b.neg(t)


def test_where_scalar_takes_the_data_dtype():
    b = wb.GraphBuilder("w")
    x = b.input("x", (3,))
    y = b.where(b.gt(x, 0.0), x, 0.0)
    assert y.dtype is wb.DType.float32
