"""ONNX Loop and Scan as repeats (frontends/onnx_loop.py), checked against onnxruntime
running the same model, and the loops that cannot be taken, refused with the reason."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from workbench.errors import GraphError
from workbench.frontends.onnx_loop import load_onnx_repeat
from workbench.runtime.repeat_program import RepeatProgram

ort = pytest.importorskip("onnxruntime")
N = 40


def spring_body(cond_nodes, cond_out="cond_out", reads_counter=False):
    """x' = x + dt v, v' = v - dt k x (k from the outer graph); a stacked energy."""
    nodes = [
        helper.make_node("Mul", ["v", "dt"], ["dx"]),
        helper.make_node("Add", ["x", "dx"], ["x_next"]),
        helper.make_node("Mul", ["x", "k"], ["kx"]),
        helper.make_node("Mul", ["kx", "dt"], ["dv"]),
        helper.make_node("Sub", ["v", "dv"], ["v_next"]),
        helper.make_node("Mul", ["v_next", "v_next"], ["energy"]),
        *cond_nodes]
    if reads_counter:
        nodes += [helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
                  helper.make_node("Add", ["x_next", "fi"], ["x_out"])]
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "dt")]
    return helper.make_graph(
        nodes, "spring",
        [helper.make_tensor_value_info("i", T.INT64, []),
         helper.make_tensor_value_info("cond", T.BOOL, []),
         helper.make_tensor_value_info("x", T.FLOAT, [N]),
         helper.make_tensor_value_info("v", T.FLOAT, [N])],
        [helper.make_tensor_value_info(cond_out, T.BOOL, []),
         helper.make_tensor_value_info("x_out" if reads_counter else "x_next", T.FLOAT, [N]),
         helper.make_tensor_value_info("v_next", T.FLOAT, [N]),
         helper.make_tensor_value_info("energy", T.FLOAT, [N])], inits)


def loop_model(body, m=17, cond=True):
    outer = []
    ins = ["M" if m is not None else "", "C" if cond is not None else "", "x0", "v0"]
    if m is not None:
        outer.append(helper.make_node("Constant", [], ["M"],
                                      value=numpy_helper.from_array(np.array(m, np.int64))))
    if cond is not None:
        outer.append(helper.make_node("Constant", [], ["C"],
                                      value=numpy_helper.from_array(np.array(cond))))
    outer.append(helper.make_node("Loop", ins, ["xf", "vf", "energies"], body=body))
    g = helper.make_graph(
        outer, "rollout",
        [helper.make_tensor_value_info(n, T.FLOAT, [N]) for n in ("x0", "v0", "k")],
        [helper.make_tensor_value_info("xf", T.FLOAT, [N]),
         helper.make_tensor_value_info("vf", T.FLOAT, [N]),
         helper.make_tensor_value_info("energies", T.FLOAT, [None, N])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(0.5, 1.5, N).astype(np.float32) for n in ("x0", "v0", "k")}


def compare_with_onnxruntime(model, r):
    f = feeds()
    want = ort.InferenceSession(model.SerializeToString()).run(None, f)
    ins = {"x": f["x0"], "v": f["v0"], "k": f["k"]}
    for got in (r.reference(ins), RepeatProgram(r, 5).run(ins, checked=True)):
        for name, w in zip(("x_next", "v_next", "energy"), want):
            np.testing.assert_allclose(got[name], w, rtol=2e-6, atol=1e-6)


def test_loop_with_a_constant_trip_count():
    body = spring_body([helper.make_node("Identity", ["cond"], ["cond_out"])])
    m = loop_model(body, m=17)
    r = load_onnx_repeat(m)
    assert r.trips == 17 and r.carried == (("x", "x_next"), ("v", "v_next"))
    assert r.invariant_inputs == ("k",) and r.stacked_outputs == ("energy",)
    compare_with_onnxruntime(m, r)


def test_loop_over_a_counter_condition():
    # while i < 11 (a torch while_loop over a counter exports like this), M larger
    cond = [helper.make_node("Constant", [], ["lim"],
                             value=numpy_helper.from_array(np.array(10, np.int64))),
            helper.make_node("Less", ["i", "lim"], ["cond_out"])]
    m = loop_model(spring_body(cond), m=40)
    r = load_onnx_repeat(m)
    assert r.trips == 11
    compare_with_onnxruntime(m, r)


def test_scan():
    body = helper.make_graph(
        [helper.make_node("Mul", ["s", "a"], ["sa"]),
         helper.make_node("Add", ["sa", "u"], ["s_next"]),
         helper.make_node("Neg", ["s_next"], ["y"])], "ema",
        [helper.make_tensor_value_info("s", T.FLOAT, [N]),
         helper.make_tensor_value_info("u", T.FLOAT, [N])],
        [helper.make_tensor_value_info("s_next", T.FLOAT, [N]),
         helper.make_tensor_value_info("y", T.FLOAT, [N])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["s0", "us"], ["sf", "ys"], body=body, num_scan_inputs=1)],
        "scan", [helper.make_tensor_value_info("s0", T.FLOAT, [N]),
                 helper.make_tensor_value_info("us", T.FLOAT, [9, N]),
                 helper.make_tensor_value_info("a", T.FLOAT, [N])],
        [helper.make_tensor_value_info("sf", T.FLOAT, [N]),
         helper.make_tensor_value_info("ys", T.FLOAT, [9, N])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = load_onnx_repeat(m)
    assert r.trips == 9 and r.stacked_inputs == ("u",) and r.invariant_inputs == ("a",)
    rng = np.random.default_rng(1)
    f = {"s0": rng.uniform(-1, 1, N).astype(np.float32),
         "us": rng.uniform(-1, 1, (9, N)).astype(np.float32),
         "a": rng.uniform(0.5, 0.9, N).astype(np.float32)}
    sf, ys = ort.InferenceSession(m.SerializeToString()).run(None, f)
    got = RepeatProgram(r, 4).run({"s": f["s0"], "u": f["us"], "a": f["a"]}, checked=True)
    np.testing.assert_allclose(got["s_next"], sf, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got["y"], ys, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("make, words", [
    (lambda: loop_model(spring_body([helper.make_node("Identity", ["cond"], ["cond_out"])],
                                    reads_counter=True)), "reads the iteration counter"),
    (lambda: loop_model(spring_body([helper.make_node("Identity", ["cond"], ["cond_out"])]),
                        m=None), "never stops"),
    (lambda: loop_model(spring_body([
        helper.make_node("ReduceSum", ["x"], ["sx"], keepdims=0),
        helper.make_node("Constant", [], ["z"],
                         value=numpy_helper.from_array(np.array(0.0, np.float32))),
        helper.make_node("Greater", ["sx", "z"], ["cond_out"])])),
     "condition depends on the state"),
])
def test_loops_that_cannot_be_taken_are_refused(make, words):
    with pytest.raises(GraphError, match=words):
        load_onnx_repeat(make())


def test_a_model_with_more_than_the_loop_is_refused():
    m = loop_model(spring_body([helper.make_node("Identity", ["cond"], ["cond_out"])]))
    m.graph.node.append(helper.make_node("Relu", ["xf"], ["y"]))
    with pytest.raises(GraphError, match="one Loop or Scan"):
        load_onnx_repeat(m)
