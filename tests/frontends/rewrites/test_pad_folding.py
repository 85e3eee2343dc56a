"""ir/pad_folding.py: a zero pad of a convolution's spatial axes taken into the
convolution's pads -- the same values on fresh random inputs -- and left where it is
not a zero spatial pad; both frontends apply it, so a BatchNorm + ReLU6 + pad before
a depthwise convolution (MobileNetV2's TensorFlow padding) joins the previous
convolution's epilogue."""
import numpy as np
import pytest

import workbench as wb
from workbench.frontends.rewrites.pad_folding import fold_pads_into_convs
from rewrite_checks import same_outputs


def _padded_conv(pads, mode="constant", value=0.0, conv_pads=(1, 0, 1, 2), also=False,
                 rank=2):
    g = wb.GraphBuilder("padded")
    spatial = (9, 8)[:rank]
    x = g.input("x", (2, 4 - pads[1] - pads[rank + 3], *spatial))
    w = g.input("w", (6, 2, *(3,) * rank))       # grouped: 2 groups
    p = g.op("pad", x, pads=list(pads), mode=mode, value=value)
    op = "conv2d" if rank == 2 else "conv"
    y = g.op(op, p, w, group=2, strides=[2] * rank, pads=list(conv_pads[:2 * rank]))
    g.output(y, "y")
    if also:
        g.output(g.exp(p), "e")
    return g.build()


@pytest.mark.parametrize("rank,pads,also", [
    (2, (0, 0, 2, 1, 0, 0, 1, 3), False),     # NCHW: begins (N, C, H, W), then ends
    (2, (0, 0, 0, 1, 0, 0, 1, 0), True),      # the pad also read elsewhere: it stays
    (1, (0, 0, 3, 0, 0, 2), False)])
def test_zero_spatial_pad_joins_the_convolution(rank, pads, also):
    g = _padded_conv(pads, also=also, rank=rank)
    f = fold_pads_into_convs(g)
    (conv,) = [n for n in f.nodes if n.op in ("conv", "conv2d")]
    assert conv.inputs[0] == "x"
    own = (1, 0, 1, 2)[:2 * rank]
    r = rank + 2
    want = [own[i] + pads[2 + i] for i in range(rank)] + \
        [own[rank + i] + pads[r + 2 + i] for i in range(rank)]
    assert list(conv.attr("pads")) == want
    assert sum(n.op == "pad" for n in f.nodes) == int(also)
    same_outputs(g, f, exact=False)


@pytest.mark.parametrize("pads,mode,value", [
    ((0, 0, 1, 1, 0, 0, 1, 1), "constant", 1.0),     # not zeros
    ((0, 0, 1, 1, 0, 0, 1, 1), "reflect", 0.0),
    ((0, 1, 1, 1, 0, 0, 1, 1), "constant", 0.0),     # the channels padded (3 -> 4)
    ((0, 0, -1, 1, 0, 0, 1, 1), "constant", 0.0)])   # a crop
def test_other_pads_are_left(pads, mode, value):
    g = _padded_conv(pads, mode, value)
    assert fold_pads_into_convs(g) is g


def test_mobilenet_style_block_from_torch_plans_to_two_kernels():
    torch = pytest.importorskip("torch")
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = nn.Conv2d(8, 16, 1, bias=False)
            self.bn = nn.BatchNorm2d(16)
            self.depthwise = nn.Conv2d(16, 16, 3, stride=2, groups=16, bias=False)

        def forward(self, x):
            h = nn.functional.relu6(self.bn(self.expand(x)))
            return self.depthwise(nn.functional.pad(h, (0, 1, 0, 1)))   # TF "same"

    torch.manual_seed(0)
    block = Block().eval()
    with torch.no_grad():
        block.bn.running_mean.uniform_(-1, 1)
        block.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 10, 10)
    g = wb.from_torch(block, (x,))
    assert "pad" not in {n.op for n in g.nodes}
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    assert len(s.plan.groups) == 2, s.plan.describe()
    y = s.program().run({g.inputs[0]: x.numpy()})
    with torch.no_grad():
        want = block(x).numpy()
    (out,) = g.outputs
    assert np.abs(y[out] - want).max() <= 1e-5 * np.abs(want).max()


def _padded_pool(pads, reduce="reduce_max", fill=None, pool_pads=(0, 0, 0, 0)):
    g = wb.GraphBuilder("padded_pool")
    x = g.input("x", (2, 3, 9, 8))
    p = g.op("pad", g.relu(x) if reduce == "reduce_max" else x, pads=list(pads),
             mode="constant", value=0.0)
    attrs = {"kernel": [3, 3], "strides": [2, 2], "pads": list(pool_pads)}
    if fill:
        attrs["fill"] = fill
    w = g.op("window", p, **attrs)
    g.output(g.op(reduce, w, axes=[4, 5], keepdims=False), "y")
    return g.build()


@pytest.mark.parametrize("reduce,fill,pool_pads", [
    ("reduce_max", "lowest", (0, 0, 0, 0)),      # Keras' ZeroPadding2D then MaxPool
    ("reduce_mean", "zero", (1, 0, 0, 1)),       # an average pool with zero pads of its own
    ("reduce_max", None, (0, 0, 0, 0))])
def test_zero_pad_joins_a_pooling_window_with_zeros_for_its_border(reduce, fill, pool_pads):
    pads = (0, 0, 1, 2, 0, 0, 1, 0)
    g = _padded_pool(pads, reduce, fill, pool_pads)
    f = fold_pads_into_convs(g)
    assert "pad" not in {n.op for n in f.nodes}
    (win,) = [n for n in f.nodes if n.op == "window"]
    assert win.attr("fill") == "zero"
    assert list(win.attr("pads")) == [pool_pads[0] + 1, pool_pads[1] + 2, pool_pads[2] + 1,
                                      pool_pads[3] + 0]
    same_outputs(g, f, exact=True)


def test_a_pool_with_a_border_of_the_lowest_value_keeps_the_pad():
    """A max pool's own pads hold the lowest value; a zero pad before it cannot join
    them (the window has one fill)."""
    g = _padded_pool((0, 0, 1, 1, 0, 0, 1, 1), "reduce_max", "lowest", (1, 1, 1, 1))
    assert fold_pads_into_convs(g) is g


def test_keras_resnet_stem_pool_as_tf2onnx_writes_it(tmp_path):
    """tf2onnx's ResNet50 stem: Relu, Pad (ZeroPadding2D, 1 each side), MaxPool 3 x 3
    stride 2 -- one pooling kernel, a plane at a time, equal to onnxruntime's output."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Pad", ["r", "pads"], ["p"], mode="constant"),
         helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
        "stem_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])])
    path = tmp_path / "stem_pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(path))
    g = wb.load(path)
    assert "pad" not in {n.op for n in g.nodes}
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    assert any("pooled a plane at a time" in k.schedule for k in s.kernels())
    x = np.random.default_rng(0).standard_normal((1, 8, 20, 20)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_array_equal(s.program().run({"x": x})["y"], want)


def test_a_pad_between_transposes_moves_after_them_and_joins_the_convolution(tmp_path):
    """tf2onnx's MobileNetV3 (Keras): NCHW to NHWC, a ReLU, ZeroPadding2D as a Pad of
    the NHWC axes, back to NCHW, a strided depthwise convolution. The pad moves after
    the second transpose (its pads permuted) and joins the convolution; the output
    equals onnxruntime's."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
         helper.make_node("Relu", ["t"], ["r"]),
         helper.make_node("Pad", ["r", "pads"], ["p"], mode="constant"),
         helper.make_node("Transpose", ["p"], ["back"], perm=[0, 3, 1, 2]),
         helper.make_node("Conv", ["back", "w"], ["y"], group=6, strides=[2, 2],
                          kernel_shape=[3, 3])],
        "nhwc_pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 7, 7])],
        [numpy_helper.from_array(w, "w"),
         helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 0, 0, 0, 1, 1, 0])])
    path = tmp_path / "nhwc_pad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(path))
    g = wb.load(path)
    assert "pad" not in {n.op for n in g.nodes}
    (conv,) = [n for n in g.nodes if n.op in ("conv", "conv2d")]
    assert list(conv.attr("pads")) == [0, 0, 1, 1]
    x = rng.standard_normal((1, 6, 14, 14)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    np.testing.assert_allclose(s.program().run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_a_pad_read_by_more_than_the_transpose_stays():
    g = wb.GraphBuilder("pad_twice_read")
    x = g.input("x", (1, 5, 6, 3))
    p = g.op("pad", x, pads=[0, 1, 0, 0, 0, 0, 2, 0], mode="constant", value=0.0)
    g.output(g.op("transpose", p, perm=[0, 3, 1, 2]), "t")
    g.output(g.exp(p), "e")
    g = g.build()
    assert fold_pads_into_convs(g) is g
