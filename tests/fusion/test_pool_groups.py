"""A pooling window and the reduction of its taps stay one kernel, never split: what
Keras' InceptionV3 (through tf2onnx) found. Its blocks concatenate four ReLU'd
branches and average-pool the concat (count_include_pad=0: a window, a sum and a
divisor per position). The planners had (a) joined the ReLUs, the concat and the
*window* into one kernel, writing its taps out -- 9 floats per pooled one -- for the
sum to read in another (``rules``), or (b) stitched the window and its sum as a phase
after the concat's (``stitch``), gathering each tap from the phase before: 2.9 ms
against 0.05 + 0.13 ms as two kernels. Now ``analyze`` refuses a window whose taps
leave its kernel, ``analyze_stitched`` a window of a value made in the kernel (on the
CPU), and ``rules`` checks a merge into a window; the block runs as onnxruntime runs
it."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused
from workbench.fusion.analysis import analyze
from workbench.fusion.phases import analyze_stitched
from workbench.device import assumed_cpu

CPU = assumed_cpu("cores", 2)
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _inception_pool(path):
    """Two ReLU'd branches concatenated, then a 3 x 3 average pool of stride 1 with
    pads of 1 that does not count them, and a max pool of stride 2 beside it."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Relu", ["a"], ["ra"]), helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Concat", ["ra", "rb"], ["c"], axis=1),
             helper.make_node("AveragePool", ["c"], ["avg"], kernel_shape=[3, 3],
                              strides=[1, 1], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["mx"], kernel_shape=[3, 3], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "inception_pool",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 17, 17]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 16, 17, 17]),
         helper.make_tensor_value_info("avg", TensorProto.FLOAT, [1, 16, 17, 17]),
         helper.make_tensor_value_info("mx", TensorProto.FLOAT, [1, 16, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(path))
    return path


@pytest.mark.parametrize("planner", ["rules", "stitch", "xla"])
def test_a_window_stays_with_its_reduction(tmp_path, planner):
    path = _inception_pool(tmp_path / "inception_pool.onnx")
    g = wb.load(path)
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    for gr in s.plan.groups:
        ops = [g.node(n).op for n in gr.nodes]
        if "window" in ops:
            (win,) = [n for n in gr.nodes if g.node(n).op == "window"]
            assert g.node(gr.nodes[0]).op == "window", (ops, s.plan.describe())
            assert all(c.id in gr.nodes for c in g.consumers[g.node(win).outputs[0]]), ops
    # the max pool alone: a plane at a time
    assert any("pooled a plane at a time" in k.schedule for k in s.kernels())
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((1, 8, 17, 17)).astype(np.float32) for n in "ab"}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = s.program().run(feeds)
    for name, w in zip(("c", "avg", "mx"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-6)


def test_the_refusals_name_their_rule(tmp_path):
    g = wb.load(_inception_pool(tmp_path / "inception_pool.onnx"))
    relus = [n.id for n in g.nodes if n.op == "relu"]
    concat = next(n.id for n in g.nodes if n.op == "concat")
    # the average pool's window and sum (the max pool's reduction is a reduce_max)
    reduce_sum = next(n for n in g.nodes if n.op == "reduce_sum")
    window = g.producer[reduce_sum.inputs[0]].id
    with pytest.raises(FusionRefused, match="its taps .* would be written out"):
        analyze(g, (*relus, concat, window), device=CPU)
    with pytest.raises(FusionRefused, match="gathers each tap from the phase before it"):
        analyze_stitched(g, (*relus, concat, window, reduce_sum.id), device=CPU)
