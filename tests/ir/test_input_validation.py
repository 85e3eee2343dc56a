"""Bad input is refused with one GraphError naming the cause and the fix -- never a
traceback, never accepted silently and computed wrongly.

Every node passes its op's shape rule (``OpDef.infer``) when the JSON loader reads it,
when the builder makes it and when ``Graph.verify`` checks it, so each op's shape rule
validates its attributes: one table below (op x bad attribute) goes through all three
routes. The rest are the cases a hostile-input review found.
"""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from workbench.errors import GraphError, WorkbenchError
from workbench.dtypes import DType
from workbench.ir import Graph, GraphBuilder, Node, Value, from_json, load_json, to_json
from workbench.shapes import MAX_ELEMENTS
from workbench.ops import get_op
from workbench.runtime import run_reference


def doc(nodes, outputs, inputs=None, constants=None, **extra):
    d = {"format": "workbench.graph", "version": 1, "name": "t",
         "inputs": {"x": {"shape": [4, 8]}} if inputs is None else inputs,
         "constants": constants or {}, "nodes": nodes, "outputs": outputs}
    d.update(extra)
    return d


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and "Traceback" not in text and text.strip() == text, text
    return text


# -- the reviewed cases, through the JSON loader ----------------------------------------

EXP = [{"op": "exp", "inputs": ["x"], "outputs": ["y"]}]

JSON_CASES = {
    "no nodes": (doc([], ["x"]), "no nodes"),
    "no outputs": (doc(EXP, []), "no outputs"),
    "output is an input": (doc(EXP, ["y", "x"]), "output 'x' is an input"),
    "output is a constant": (doc(EXP, ["y", "c"], constants={"c": {"shape": [2]}}),
                             "output 'c' is a constant"),
    "output listed twice": (doc(EXP, ["y", "y"]), "listed twice"),
    "negative dimension": (doc(EXP, ["y"], inputs={"x": {"shape": [-4, 8]}}),
                           "negative"),
    "fractional dimension": (doc(EXP, ["y"], inputs={"x": {"shape": [4.5, 8]}}),
                             "4.5"),
    "boolean dimension": (doc(EXP, ["y"], inputs={"x": {"shape": [True, 8]}}),
                          "True"),
    "string dimension": (doc(EXP, ["y"], inputs={"x": {"shape": ["4", 8]}}), "'4'"),
    "shape not a list": (doc(EXP, ["y"], inputs={"x": {"shape": 4}}), "list"),
    "huge input": (doc(EXP, ["y"], inputs={"x": {"shape": [2 ** 40]}}), "elements"),
    "huge constant": (doc([{"op": "exp", "inputs": ["c"], "outputs": ["y"]}], ["y"], inputs={},
                          constants={"c": {"shape": [2 ** 40], "init": {"fill": 1.0}}}),
                      "elements"),
    "huge random constant": (doc([{"op": "exp", "inputs": ["c"], "outputs": ["y"]}], ["y"],
                                 inputs={}, constants={"c": {"shape": [1024, 2 ** 30]}}),
                             "elements"),
    "bad dtype": (doc(EXP, ["y"], inputs={"x": {"shape": [4], "dtype": "complex64"}}),
                  "unsupported dtype"),
    "add with one input": (doc([{"op": "add", "inputs": ["x"], "outputs": ["y"]}], ["y"]),
                           "takes 2 inputs"),
    "keepdims a string": (doc([{"op": "reduce_sum", "inputs": ["x"], "outputs": ["y"],
                                "attrs": {"axes": [1], "keepdims": "no"}}], ["y"]),
                          "keepdims"),
    "concat axis 7": (doc([{"op": "concat", "inputs": ["x", "x"], "outputs": ["y"],
                            "attrs": {"axis": 7}}], ["y"]), "axis 7 is out of range"),
    "gather axis 9": (doc([{"op": "gather", "inputs": ["x", "i"], "outputs": ["y"],
                            "attrs": {"axis": 9}}], ["y"],
                          inputs={"x": {"shape": [4, 8]},
                                  "i": {"shape": [2], "dtype": "int64"}}),
                      "axis 9 is out of range"),
    "split out of bounds": (doc([{"op": "split", "inputs": ["x"], "outputs": ["y", "z"],
                                  "attrs": {"axis": 1, "sizes": [4194304, -4194296]}}],
                                ["y", "z"]), "split sizes"),
    "reduce_max over an empty axis": (
        doc([{"op": "reduce_max", "inputs": ["x"], "outputs": ["y"], "attrs": {"axes": [1]}}],
            ["y"], inputs={"x": {"shape": [4, 0]}}), "empty"),
    "version not a number": (doc(EXP, ["y"], version="one"), "version"),
    "nodes not a list": (doc(5, ["y"]), "nodes"),
    "inputs a list": (doc(EXP, ["y"], inputs=[["x", [4]]]), "inputs"),
    "outputs a string": (doc(EXP, "y"), "outputs"),
    "node not an object": (doc(["exp"], ["y"]), "node 0"),
    "node inputs a string": (doc([{"op": "exp", "inputs": "x", "outputs": ["y"]}], ["y"]),
                             "inputs"),
    "node attrs a list": (doc([{"op": "exp", "inputs": ["x"], "outputs": ["y"],
                                "attrs": [1]}], ["y"]), "attrs"),
    "attr value an object": (doc([{"op": "reduce_sum", "inputs": ["x"], "outputs": ["y"],
                                   "attrs": {"axes": {"a": 1}}}], ["y"]), "axes"),
    "value name a number": (doc([{"op": "exp", "inputs": ["x"], "outputs": [3]}], [3]),
                            "name"),
    "range not two numbers": (doc(EXP, ["y"], inputs={"x": {"shape": [4], "range": "ab"}}),
                              "range"),
    "origin not an object": (doc([{"op": "exp", "inputs": ["x"], "outputs": ["y"],
                                   "origin": "LayerNorm"}], ["y"]), "origin"),
    "init not an object": (doc(EXP, ["y"], constants={"c": {"shape": [2], "init": 3}}),
                           "init"),
    "base64 garbage": (doc(EXP, ["y"], constants={"c": {"shape": [2],
                                                       "init": {"base64": "%%%"}}}),
                       "base64"),
}


@pytest.mark.parametrize("name", list(JSON_CASES))
def test_json_case_is_one_graph_error(name):
    d, match = JSON_CASES[name]
    with pytest.raises(GraphError, match=match) as e:
        from_json(d)
    one_line(e.value)


def test_dimensions_must_be_integers_in_the_builder_too():
    b = GraphBuilder("b")
    for shape, match in [((4.5, 8), "4.5"), ((True, 8), "True"), ((-1,), "negative"),
                         ((2 ** 40,), "elements"), ("48", "list")]:
        with pytest.raises(GraphError, match=match):
            b.input(f"x{len(b._values)}", shape)
    x = b.input("ok", (np.int64(4), 8))            # NumPy integers are integers
    assert x.shape == (4, 8)
    with pytest.raises(GraphError, match="unsupported dtype"):
        b.input("z", (4,), "complex64")
    with pytest.raises(GraphError, match="tensor"):
        b.output("ok")


def test_output_that_is_an_input_is_refused_by_the_builder():
    b = GraphBuilder("b")
    x = b.input("x", (4,))
    b.output(b.exp(x), "y")
    b.output(x)
    with pytest.raises(GraphError, match="output 'x' is an input"):
        b.build()


def test_non_utf8_json(tmp_path):
    p = tmp_path / "latin1.json"
    p.write_bytes(json.dumps(doc(EXP, ["y"], name="caf\u00e9"),
                            ensure_ascii=False).encode("latin-1"))
    with pytest.raises(GraphError, match="UTF-8") as e:
        load_json(p)
    one_line(e.value)


def test_deeply_nested_json(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GraphError, match="nested") as e:
        load_json(p)
    one_line(e.value)
    # deep, but parseable: nesting inside an attribute
    deep = doc([{"op": "reduce_sum", "inputs": ["x"], "outputs": ["y"],
                 "attrs": {"axes": json.loads("[" * 500 + "]" * 500)}}], ["y"])
    with pytest.raises(GraphError, match="axes"):
        from_json(deep)


def test_a_directory_and_an_empty_file(tmp_path):
    with pytest.raises(WorkbenchError, match="directory") as e:
        load_json(tmp_path)
    one_line(e.value)
    p = tmp_path / "empty.json"
    p.write_text("")
    with pytest.raises(GraphError, match="not valid JSON"):
        load_json(p)


def test_constants_are_not_made_to_print_a_graph():
    # 512 MB of random float32: loading, verifying and printing the graph allocate none
    # of it; the data is made when something reads it
    d = doc([{"op": "exp", "inputs": ["c"], "outputs": ["y"]}], ["y"], inputs={},
            constants={"c": {"shape": [2 ** 27], "init": {"random": {"seed": 1}}},
                       "f": {"shape": [2 ** 27], "dtype": "int32", "init": {"fill": 3}}})
    tracemalloc.start()
    try:
        g = from_json(d)
        text = str(g)
        assert "c: float32[134217728] = const" in text
        assert "c" in g.constants and len(g.constants) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2 ** 20, f"{peak / 2 ** 20:.0f} MB allocated to print a graph"
    small = from_json(doc([{"op": "add", "inputs": ["c", "f"], "outputs": ["y"]}], ["y"],
                          inputs={}, constants={"c": {"shape": [3], "dtype": "int32",
                                                      "init": {"random": {"seed": 1}}},
                                                "f": {"shape": [3], "dtype": "int32",
                                                      "init": {"fill": 3}}}))
    np.testing.assert_array_equal(small.constants["f"], [3, 3, 3])
    assert small.constants["c"] is small.constants["c"]      # made once
    assert to_json(from_json(to_json(small))) == to_json(small)


def test_3000_op_chain_verifies_serializes_prints_and_plans():
    b = GraphBuilder("chain")
    x = b.input("x", (4,))
    for _ in range(3000):
        x = b.neg(x)
    b.output(x, "y")
    g = b.build()
    g2 = from_json(json.loads(json.dumps(to_json(g))))
    assert len(g2.verify().nodes) == 3000 and str(g2).count("neg(") == 3000
    from workbench.fusion import run_planner
    plan, _ = run_planner("rules", g2)
    assert len(plan.groups) == 1
    ins = {"x": np.arange(4, dtype=np.float32)}
    np.testing.assert_array_equal(run_reference(g2, ins)["y"], ins["x"])


# -- integer pow with negative exponents: the kernels' wb_ipow, and the reference ------

def test_integer_pow_with_negative_exponents_is_defined(check_graph):
    b = GraphBuilder("ipow")
    base = b.input("a", (12,), "int32")
    e = b.input("e", (12,), "int32")
    b.output(b.pow(base, e), "y")
    g = b.build()
    ins = {"a": np.array([1, 1, -1, -1, -1, 2, -2, 0, 5, 3, 1, -1], np.int32),
           "e": np.array([-1, -4, -1, -2, -3, -1, -3, -2, -1, 2, 0, 0], np.int32)}
    want = np.array([1, 1, -1, 1, -1, 0, 0, 0, 0, 9, 1, 1], np.int32)
    np.testing.assert_array_equal(run_reference(g, ins)["y"], want)
    check_graph(g, "none", inputs=ins)
    assert "negative" in get_op("pow").doc


# -- every op x bad attributes: JSON loader, builder and verifier alike ----------------

F, I64 = "float32", "int64"
# (op, [(shape, dtype) of inputs], attrs, message fragment)
BAD_ATTRS = [
    ("reshape", [((4, 8), F)], {"shape": [-1, 32]}, "negative"),
    ("reshape", [((4, 8), F)], {"shape": [4.5, 8]}, "integer"),
    ("reshape", [((4, 8), F)], {"shape": [True, 32]}, "integer"),
    ("reshape", [((4, 8), F)], {"shape": "ab"}, "shape"),
    ("reshape", [((4, 8), F)], {}, "shape"),
    ("reshape", [((4, 8), F)], {"shape": [3, 8]}, "cannot reshape"),
    ("squeeze", [((1, 8), F)], {"axes": [5]}, "out of range"),
    ("squeeze", [((1, 8), F)], {"axes": [0.5]}, "integer"),
    ("squeeze", [((1, 8), F)], {"axes": [False]}, "integer"),
    ("squeeze", [((1, 8), F)], {"axes": 0}, "list"),
    ("squeeze", [((1, 8), F)], {"axes": [1]}, "not all 1"),
    ("squeeze", [((1, 8), F)], {}, "axes"),
    ("unsqueeze", [((4, 8), F)], {"axes": [9]}, "out of range"),
    ("unsqueeze", [((4, 8), F)], {"axes": [-9]}, "out of range"),
    ("unsqueeze", [((4, 8), F)], {"axes": [1.5]}, "integer"),
    ("unsqueeze", [((4, 8), F)], {"axes": [0, 0]}, "repeated"),
    ("unsqueeze", [((4, 8), F)], {}, "axes"),
    ("transpose", [((4, 8), F)], {"perm": [0, 0]}, "not a permutation"),
    ("transpose", [((4, 8), F)], {"perm": [0, 1, 2]}, "not a permutation"),
    ("transpose", [((4, 8), F)], {"perm": [0.0, 1.0]}, "integer"),
    ("transpose", [((4, 8), F)], {"perm": [True, False]}, "integer"),
    ("expand", [((4, 1), F)], {"shape": [4, -8]}, "negative"),
    ("expand", [((4, 1), F)], {"shape": [4, 8.5]}, "integer"),
    ("expand", [((4, 1), F)], {"shape": [3, 8]}, "broadcast"),
    ("expand", [((4, 1), F)], {"shape": [4, 2 ** 40]}, "elements"),
    ("expand", [((4, 1), F)], {}, "shape"),
    ("slice", [((4, 8), F)], {"starts": [0], "ends": [2], "axes": [7]}, "out of range"),
    ("slice", [((4, 8), F)], {"starts": [0], "ends": [2], "axes": [-3]}, "out of range"),
    ("slice", [((4, 8), F)], {"starts": [0], "ends": [2], "steps": [0]}, "step 0"),
    ("slice", [((4, 8), F)], {"starts": [0.5], "ends": [2]}, "integer"),
    ("slice", [((4, 8), F)], {"starts": [0], "ends": ["a"]}, "integer"),
    ("slice", [((4, 8), F)], {"starts": [0, 0], "ends": [1]}, "one entry per"),
    ("slice", [((4, 8), F)], {"starts": [0], "ends": [1], "axes": [1, 0]}, "one entry per"),
    ("slice", [((4, 8), F)], {"starts": [0, 0], "ends": [1, 1], "axes": [1, 1]}, "repeated"),
    ("slice", [((4, 8), F)], {"ends": [1]}, "starts"),
    ("slice", [((), F)], {"starts": [0], "ends": [1]}, "out of range"),
    ("concat", [((4, 8), F), ((4, 8), F)], {"axis": 7}, "out of range"),
    ("concat", [((4, 8), F), ((4, 8), F)], {"axis": -3}, "out of range"),
    ("concat", [((4, 8), F), ((4, 8), F)], {"axis": 1.5}, "integer"),
    ("concat", [((4, 8), F), ((4, 8), F)], {"axis": True}, "integer"),
    ("concat", [((4, 8), F), ((4, 8), F)], {}, "axis"),
    ("concat", [((4, 8), F), ((5, 8), F)], {"axis": 1}, "differ"),
    ("concat", [((4, 0), F), ((4, 8), F)], {"axis": 1}, "length 0"),
    ("concat", [((), F), ((), F)], {"axis": 0}, "out of range"),
    ("split", [((4, 8), F)], {"axis": 1, "sizes": [4194304, -4194296]}, "split sizes"),
    ("split", [((4, 8), F)], {"axis": 1, "sizes": [-1, 9]}, "split sizes"),
    ("split", [((4, 8), F)], {"axis": 1, "sizes": [4.5, 3.5]}, "integer"),
    ("split", [((4, 8), F)], {"axis": 1, "sizes": []}, "at least one"),
    ("split", [((4, 8), F)], {"axis": 5, "sizes": [2, 2]}, "out of range"),
    ("split", [((4, 8), F)], {"axis": 1.0, "sizes": [4, 4]}, "integer"),
    ("split", [((4, 8), F)], {"axis": 1}, "sizes"),
    ("split", [((4, 8), F)], {"axis": 1, "sizes": [4, 3]}, "add up"),
    ("gather", [((4, 8), F), ((2,), I64)], {"axis": 9}, "out of range"),
    ("gather", [((4, 8), F), ((2,), I64)], {"axis": -3}, "out of range"),
    ("gather", [((4, 8), F), ((2,), I64)], {"axis": 0.5}, "integer"),
    ("gather", [((4, 8), F), ((2,), F)], {"axis": 0}, "int32 or int64"),
    ("gather", [((0, 8), F), ((2,), I64)], {"axis": 0}, "length 0"),
    ("gather", [((), F), ((2,), I64)], {"axis": 0}, "out of range"),
    ("cast", [((4, 8), F)], {"to": "float64"}, "unsupported dtype"),
    ("cast", [((4, 8), F)], {"to": 5}, "unsupported dtype"),
    ("cast", [((4, 8), F)], {"to": True}, "unsupported dtype"),
    ("cast", [((4, 8), F)], {}, "to"),
    ("reduce_sum", [((4, 8), F)], {"axes": [2]}, "out of range"),
    ("reduce_sum", [((4, 8), F)], {"axes": [0, 0]}, "repeated"),
    ("reduce_sum", [((4, 8), F)], {"axes": [0.5]}, "integer"),
    ("reduce_sum", [((4, 8), F)], {"axes": 1}, "list"),
    ("reduce_sum", [((4, 8), F)], {"axes": [1], "keepdims": "no"}, "keepdims"),
    ("reduce_sum", [((4, 8), F)], {"axes": [1], "keepdims": 2}, "keepdims"),
    ("reduce_max", [((4, 0), F)], {"axes": [1]}, "empty"),
    ("reduce_min", [((0, 3), I64)], {"axes": [0, 1]}, "empty"),
    ("add", [((4, 8), F)], {}, "takes 2 inputs"),
    ("where", [((4, 8), "bool"), ((4, 8), F)], {}, "takes 3 inputs"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"strides": [0, 1]}, "strides"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"strides": [1.5, 1]}, "integer"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"pads": [-1, 0, 0, 0]}, "pads"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"pads": [1, 1]}, "pads"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"dilations": [1]}, "dilations"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), F)], {"group": 0}, "group"),
    ("conv2d", [((1, 2, 5, 5), F), ((3, 2, 3, 3), "int32")], {}, "float"),
]
IDS = [f"{op}-{'-'.join(f'{k}={v}' for k, v in a.items()) or 'missing'}-{i}"
       for i, (op, _, a, _) in enumerate(BAD_ATTRS)]


def _names(ins):
    return [f"x{i}" for i in range(len(ins))]


def _n_outputs(op, attrs):
    return len(attrs.get("sizes") or [0, 0]) if op == "split" else 1


@pytest.mark.parametrize("op, ins, attrs, match", BAD_ATTRS, ids=IDS)
def test_bad_attribute_json(op, ins, attrs, match):
    names = _names(ins)
    outs = [f"y{k}" for k in range(_n_outputs(op, attrs))] if isinstance(
        attrs.get("sizes", []), list) else ["y0"]
    d = doc([{"op": op, "inputs": names, "outputs": outs, "attrs": attrs}], outs,
            inputs={n: {"shape": list(s), "dtype": dt} for n, (s, dt) in zip(names, ins)})
    with pytest.raises(GraphError, match=match) as e:
        from_json(d)
    assert f"({op})" in one_line(e.value)


@pytest.mark.parametrize("op, ins, attrs, match", BAD_ATTRS, ids=IDS)
def test_bad_attribute_builder(op, ins, attrs, match):
    b = GraphBuilder("b")
    xs = [b.input(n, s, dt) for n, (s, dt) in zip(_names(ins), ins)]
    with pytest.raises(GraphError, match=match) as e:
        b.op(op, *xs, **attrs)
    one_line(e.value)
    assert not b._nodes                    # nothing was added


@pytest.mark.parametrize("op, ins, attrs, match", BAD_ATTRS, ids=IDS)
def test_bad_attribute_verifier(op, ins, attrs, match):
    # a node made by hand, past the builder: the verifier is the one place every node
    # passes, so it must refuse it too
    names = _names(ins)
    values = [Value(n, s, DType.of(dt)) for n, (s, dt) in zip(names, ins)]
    y = Value("y", (4, 8), DType.float32)
    node = Node.make("n0", op, names, ["y"], attrs)
    with pytest.raises(GraphError, match=match) as e:
        Graph("g", tuple(values) + (y,), (node,), tuple(names), ("y",)).verify()
    assert f"({op})" in one_line(e.value)


def test_good_attributes_still_pass():
    # the boundaries of the rules above, accepted
    b = GraphBuilder("ok")
    x = b.input("x", (4, 8))
    z = b.input("z", (4, 0))
    i = b.input("i", (2,), "int32")
    outs = [b.reshape(x, shape=[8, 4]), b.squeeze(b.unsqueeze(x, axes=[-1]), axes=[2]),
            b.transpose(x, perm=[1, 0]), b.expand(b.reduce_sum(x, axes=[1]), shape=[2, 4, 8]),
            b.slice(x, starts=[-100], ends=[100], axes=[-1], steps=[-3]),
            b.concat(x, x, axis=-1), b.gather(x, i, axis=-1),
            b.reduce_sum(z, axes=[1], keepdims=0), b.reduce_prod(z, axes=[1]),
            b.reduce_max(x, axes=[-1], keepdims=np.True_), b.cast(x, to=np.int32)]
    outs += b.split(x, axis=-1, sizes=[0, 8])
    for k, t in enumerate(outs):
        b.output(t, f"y{k}")
    g = b.build()
    assert g.value("y7").shape == (4,) and g.value("y8").shape == (4, 1)
    assert to_json(from_json(to_json(g))) == to_json(g)


def test_max_elements_is_sane():
    assert 2 ** 31 < MAX_ELEMENTS < 2 ** 40
