"""The CNN and audio ops (convolution 1-3-D, transposed too, pooling,
group/instance/mean-variance norm, Mod, Round, Einsum, Resize, Pad) through both
frontends: ONNX models made with onnx.helper compared with onnxruntime, torch modules
compared with torch, on fresh random inputs, under the planners none, rules and stitch
on the cpu backend; and every kernel they make compiled by NVRTC as the GPU runtime
compiles it."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import workbench as wb  # noqa: E402
from workbench.codegen import lower_plan, render_kernel  # noqa: E402
from workbench.errors import GraphError, UnsupportedOpError  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402
from workbench.fusion import run_planner  # noqa: E402
from workbench.ir import GraphBuilder, composites_nn  # noqa: E402
from workbench.tolerance import relative_to_largest

PLANNERS = ("none", "rules", "stitch")
F32 = TensorProto.FLOAT


def _close(got, want, what, tol=1e-5):
    """Error relative to the largest output (a float32 sum over a window or a filter
    rounds relative to its terms, not to a result that cancels to near zero)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    err = relative_to_largest(got, want)
    assert err <= tol, f"{what}: error {err:.3g} relative to the largest output"


def _run_planners(g, feeds, want: list, what: str, planners=PLANNERS, tol=1e-5):
    for planner in planners:
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run(feeds)
        for name, w in zip(g.outputs, want):
            _close(got[name], w, f"{what} [{planner}, {len(s.plan.groups)} kernels] {name}",
                   tol)


# -- ONNX ------------------------------------------------------------------------------

def _model(node, inputs, inits=(), opset=18, out_shape=None, out_types=(F32,),
           check=True):
    """A one-node model: inputs (name, shape) float32; the outputs' shapes inferred
    (or out_shape for the first)."""
    g = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
        [helper.make_value_info(o, helper.make_tensor_type_proto(t, out_shape if k == 0
                                                                 else None))
         for k, (o, t) in enumerate(zip(node.output, out_types))],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # the output's shape as ONNX infers it (outputs must declare one)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=check)
    if check:
        onnx.checker.check_model(m)
    return m


def _check_onnx(model, rng, planners=PLANNERS, tol=1e-5):
    g = load_onnx(model)
    feeds = {i: rng.standard_normal(g.value(i).shape).astype(np.float32) for i in g.inputs}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    _run_planners(g, feeds, want, model.graph.node[0].op_type, planners, tol)
    return g


ONNX_CASES = [
    ("MaxPool", [("x", (2, 3, 11, 10))], {"kernel_shape": [3, 3], "strides": [2, 2],
                                          "pads": [1, 1, 1, 1]}),
    ("MaxPool", [("x", (2, 3, 11, 10))], {"kernel_shape": [3, 2], "strides": [2, 2],
                                          "ceil_mode": 1, "dilations": [2, 1]}),
    ("MaxPool", [("x", (2, 3, 17))], {"kernel_shape": [4], "auto_pad": "SAME_UPPER",
                                      "strides": [3]}),
    ("MaxPool", [("x", (1, 2, 5, 6, 7))], {"kernel_shape": [2, 3, 2]}),
    ("AveragePool", [("x", (2, 3, 11, 10))], {"kernel_shape": [3, 3], "strides": [2, 2],
                                              "pads": [1, 0, 1, 2], "ceil_mode": 1}),
    ("AveragePool", [("x", (2, 3, 11, 10))], {"kernel_shape": [3, 3], "strides": [2, 2],
                                              "pads": [1, 1, 1, 1],
                                              "count_include_pad": 1}),
    ("AveragePool", [("x", (2, 4, 15))], {"kernel_shape": [5], "strides": [2],
                                          "auto_pad": "SAME_LOWER"}),
    ("LpPool", [("x", (2, 3, 8, 8))], {"kernel_shape": [2, 2], "strides": [2, 2], "p": 2}),
    ("GlobalAveragePool", [("x", (2, 3, 5, 4))], {}),
    ("GlobalMaxPool", [("x", (2, 3, 9))], {}),
    ("Round", [("x", (4, 17))], {}),
    ("MeanVarianceNormalization", [("x", (2, 3, 4, 5))], {"axes": [0, 2, 3]}),
    ("MeanVarianceNormalization", [("x", (2, 3, 4, 5))], {"axes": [1, 3]}),
    ("Einsum", [("a", (2, 3, 4)), ("b", (2, 4, 5))], {"equation": "bij,bjk->bik"}),
    ("Einsum", [("a", (2, 3, 4, 5)), ("b", (2, 3, 6, 5))],
     {"equation": "bhqd,bhkd->bhqk"}),
    ("Einsum", [("a", (3, 4, 4))], {"equation": "bii->b"}),
    ("Einsum", [("a", (3, 4)), ("b", (4, 5)), ("c", (5,))], {"equation": "ij,jk,k->i"}),
]


@pytest.mark.parametrize("op,inputs,attrs", ONNX_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ONNX_CASES)])
def test_onnx_op_matches_onnxruntime(op, inputs, attrs, rng):
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)
    # (MeanVarianceNormalization's function body infers only at its own opset)
    _check_onnx(_model(node, inputs, opset=13 if op == "MeanVarianceNormalization" else 18),
                rng)


@pytest.mark.parametrize("shape,wshape,attrs", [
    ((2, 4, 17), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2]}),
    ((1, 6, 9, 8), (6, 1, 3, 3), {"group": 6, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((1, 3, 10, 9), (4, 3, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"strides": [1, 2, 1], "pads": [1, 0, 0, 0, 1, 1]}),
], ids=["1d-groups", "2d-depthwise-dilated", "2d-same", "3d"])
def test_onnx_conv(shape, wshape, attrs, rng):
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    g = _check_onnx(_model(node, [("x", shape)], [("w", w), ("b", b)]), rng, tol=2e-5)
    assert {n.op for n in g.nodes} == {"conv2d" if len(shape) == 4 else "conv"}


@pytest.mark.parametrize("shape,wshape,attrs", [
    ((2, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                  "output_padding": [1, 1]}),
    ((1, 4, 5, 5), (4, 2, 4, 4), {"strides": [2, 2], "pads": [1, 0, 2, 1], "group": 2}),
    ((2, 3, 7), (3, 5, 5), {"strides": [3], "pads": [2, 2], "dilations": [2]}),
    ((1, 2, 3, 4, 3), (2, 4, 2, 2, 2), {"strides": [2, 2, 2]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 9]}),
    ((1, 3, 4, 5), (3, 2, 3, 2), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 5), (3, 2, 3, 2), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 9), (3, 4, 7), {"strides": [3], "pads": [2, 1], "output_padding": [1]}),
], ids=["2d-output-padding", "2d-groups-uneven-pads", "1d-dilated", "3d", "output-shape",
        "same-upper", "same-lower", "1d-phases-of-unequal-taps"])
def test_onnx_conv_transpose(shape, wshape, attrs, rng):
    """ConvTranspose: a convolution over the input spread with zeros (``conv_transpose``)
    against onnxruntime, auto_pad and output_shape resolved as the operator defines them."""
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[1] * attrs.get("group", 1)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    g = _check_onnx(_model(node, [("x", shape)], [("w", w), ("b", b)]), rng, tol=2e-5)
    assert "conv2d" in {n.op for n in g.nodes} or "conv" in {n.op for n in g.nodes}


def test_a_strided_transposed_convolution_is_one_convolution_per_phase():
    """Undilated, each kernel axis at least its stride: s^d convolutions of the input
    with the taps that meet each output phase (no zeros multiplied), interleaved; a
    dilated one spreads its input with zeros and makes one convolution."""
    def convs(m, shape):
        g = wb.from_torch(m, (torch.randn(*shape),))
        return [n for n in g.nodes if n.op in ("conv", "conv2d")]
    phased = convs(torch.nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1), (1, 4, 5, 5))
    assert len(phased) == 4
    assert all(n.attr("strides") == (1, 1) for n in phased)
    spread = convs(torch.nn.ConvTranspose1d(3, 5, 5, stride=3, dilation=2), (2, 3, 7))
    assert len(spread) == 1


@pytest.mark.parametrize("groups", [2, 6, 1])
def test_onnx_group_norm(groups, rng):
    c = 6
    scale, bias = (rng.standard_normal(c).astype(np.float32) for _ in range(2))
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups,
                            epsilon=1e-5)
    _check_onnx(_model(node, [("x", (2, c, 5, 3))], [("s", scale), ("b", bias)], 21,
                       out_shape=(2, c, 5, 3)), rng)


def test_onnx_group_norm_opset18_per_group_scale(rng):
    """Opset 18's GroupNormalization (scale and bias per group; the ONNX checker calls it
    deprecated, exporters wrote it and onnxruntime runs it)."""
    s, t = (rng.standard_normal(3).astype(np.float32) for _ in range(2))
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    _check_onnx(_model(node, [("x", (2, 6, 5))], [("s", s), ("b", t)], 18,
                       out_shape=(2, 6, 5), check=False), rng)


def test_group_norm_per_group_scale(rng):
    """Opset 18's GroupNormalization: scale and bias per group (the ONNX checker calls
    that opset's op deprecated, so it is checked here against its definition)."""
    b = GraphBuilder()
    x = b.input("x", (2, 6, 5))
    s = rng.standard_normal(3).astype(np.float32)
    t = rng.standard_normal(3).astype(np.float32)
    b.output(composites_nn.group_norm(b, x, 3, b.constant(s), b.constant(t)), "y")
    g = b.build()
    xv = rng.standard_normal((2, 6, 5)).astype(np.float32)
    xg = xv.reshape(2, 3, 10).astype(np.float64)
    norm = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    want = (norm * s[:, None] + t[:, None]).reshape(2, 6, 5).astype(np.float32)
    _run_planners(g, {"x": xv}, [want], "GroupNormalization per group")


def test_onnx_instance_norm(rng):
    s, b = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)
    _check_onnx(_model(node, [("x", (2, 4, 7, 3))], [("s", s), ("b", b)],
                       out_shape=(2, 4, 7, 3)), rng)


@pytest.mark.parametrize("fmod", [0, 1])
def test_onnx_mod_int_and_float(fmod, rng):
    a = rng.integers(-50, 50, (4, 9)).astype(np.int32)
    b = rng.integers(-7, 8, (9,)).astype(np.int32)
    b[b == 0] = 3
    g = helper.make_graph([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], "m",
                          [helper.make_tensor_value_info("a", TensorProto.INT32, a.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, a.shape)],
                          [numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    gr = load_onnx(m)
    for planner in PLANNERS:
        s = wb.Session(gr, backend="cpu")
        if planner != "none":
            s.auto(planner)
        np.testing.assert_array_equal(s.run({"a": a})["y"], want)
    if fmod:
        node = helper.make_node("Mod", ["x", "d"], ["y"], fmod=1)
        d = rng.uniform(0.5, 2.0, (17,)).astype(np.float32)
        _check_onnx(_model(node, [("x", (4, 17))], [("d", d)]), rng)


@pytest.mark.parametrize("mode,pads,value", [
    ("constant", [0, 1, 2, 0, 0, 2, -1, 3], 1.5), ("reflect", [0, 0, 2, 1, 0, 0, 1, 2], 0.0),
    ("edge", [1, 0, 3, 0, 0, 2, 0, 1], 0.0)])
def test_onnx_pad(mode, pads, value, rng):
    node = helper.make_node("Pad", ["x", "p", "v"], ["y"], mode=mode)
    m = _model(node, [("x", (2, 3, 5, 4))],
               [("p", np.array(pads, np.int64)), ("v", np.array(value, np.float32))])
    _check_onnx(m, rng)


@pytest.mark.parametrize("mode,coord,nearest,scales,sizes", [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 3], None),
    ("nearest", "half_pixel", "round_prefer_floor", None, [2, 3, 7, 5]),
    ("linear", "half_pixel", None, [1, 1, 2, 1.5], None),
    ("linear", "align_corners", None, None, [2, 3, 9, 2]),
    ("linear", "pytorch_half_pixel", None, None, [2, 3, 1, 8]),
    ("linear", "asymmetric", None, [1, 1, 0.5, 2], None),
])
def test_onnx_resize(mode, coord, nearest, scales, sizes, rng):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    inits = [("roi", np.zeros(0, np.float32))]
    if scales is not None:
        inits.append(("scales", np.array(scales, np.float32)))
        ins = ["x", "roi", "scales"]
    else:
        inits += [("scales", np.zeros(0, np.float32)), ("sizes", np.array(sizes, np.int64))]
        ins = ["x", "roi", "scales", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    _check_onnx(_model(node, [("x", (2, 3, 4, 6))], inits), rng)


@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2], "strides": [2, 2]},
                                   {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                    "strides": [2, 1]}])
def test_onnx_max_pool_indices(attrs, rng):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    m = _model(node, [("x", (2, 3, 6, 5))], out_types=(F32, TensorProto.INT64))
    g = load_onnx(m)
    feeds = {"x": rng.standard_normal((2, 3, 6, 5)).astype(np.float32)}
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for planner in PLANNERS:
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run(feeds)
        np.testing.assert_array_equal(got["y"], want[0])
        np.testing.assert_array_equal(got["i"], want[1])


def test_onnx_pool_refusals(rng):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2],
                            storage_order=1)
    with pytest.raises(UnsupportedOpError, match="storage_order"):
        load_onnx(_model(node, [("x", (1, 2, 4, 4))], out_types=(F32, TensorProto.INT64)))
    b = GraphBuilder()
    with pytest.raises(GraphError, match="does not fit"):
        composites_nn.max_pool(b, b.input("x", (1, 2, 4, 4)), (5, 5))


# -- torch --------------------------------------------------------------------------------

class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _check_torch(module, shape, tol=1e-5):
    x = torch.randn(*shape)
    g = wb.from_torch(module, (x,))
    with torch.no_grad():
        want = module.eval()(x)
    want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
    _run_planners(g, {g.inputs[0]: x.numpy()}, want, type(module).__name__, tol=tol)
    return g


TORCH_CASES = {
    "max_pool2d_relu": (lambda x: F.relu(F.max_pool2d(x, 3, 2, 1)), (2, 4, 9, 9)),
    "max_pool2d_ceil_dilated": (lambda x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
                                (2, 4, 12, 11)),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, 2), (2, 4, 9)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2), (1, 2, 4, 6, 4)),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, 2, 1), (2, 4, 9)),
    "avg_pool2d_exclude_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                      count_include_pad=False), (2, 4, 9, 9)),
    "avg_pool2d_include_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True) + 1.0,
                               (2, 4, 10, 10)),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 1), (2, 4, 9)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (2, 4, 8, 9)),
    # windows of unequal size and overlapping, and more outputs than inputs (VGG's 7 x 7
    # from a small image)
    "adaptive_avg_pool2d_unequal": (lambda x: F.adaptive_avg_pool2d(x, (3, 7)), (2, 4, 8, 2)),
    "adaptive_avg_pool3d_unequal": (lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)),
                                    (1, 2, 3, 5, 6)),
    "conv1d_groups": (torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 11)),
    "conv2d_depthwise": (torch.nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4),
                         (1, 4, 9, 9)),
    "conv3d": (torch.nn.Conv3d(2, 3, 2, stride=(1, 2, 1)), (1, 2, 4, 5, 4)),
    "conv_transpose2d": (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                  output_padding=1), (2, 4, 5, 6)),
    "conv_transpose2d_groups_dilated": (
        torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(2, 0),
                                 output_padding=(1, 2), dilation=(1, 2), groups=2),
        (2, 4, 5, 6)),
    "conv_transpose1d": (torch.nn.ConvTranspose1d(3, 5, 5, stride=3, padding=2, dilation=2,
                                                  bias=False), (2, 3, 7)),
    "conv_transpose3d": (torch.nn.ConvTranspose3d(2, 4, 2, stride=2), (1, 2, 3, 4, 3)),
    "conv_transpose1d_phases": (torch.nn.ConvTranspose1d(3, 4, 7, stride=3, padding=2,
                                                         output_padding=1), (2, 3, 9)),
    "conv_transpose2d_phases_groups": (
        torch.nn.ConvTranspose2d(4, 6, (5, 3), stride=(2, 3), padding=(1, 0), groups=2),
        (1, 4, 5, 4)),
    "group_norm": (torch.nn.GroupNorm(2, 6), (2, 6, 9)),
    "group_norm_per_channel": (torch.nn.GroupNorm(4, 4), (2, 4, 5, 3)),
    "instance_norm": (lambda x: F.instance_norm(x), (2, 4, 9)),
    "instance_norm_affine": (torch.nn.InstanceNorm2d(4, affine=True), (2, 4, 5, 3)),
    "fmod": (lambda x: torch.fmod(x * 3, 0.7), (3, 17)),
    "remainder": (lambda x: torch.remainder(x * 3, -0.7), (3, 17)),
    "round": (lambda x: torch.round(x * 3), (3, 17)),
    "einsum": (lambda x: torch.einsum("bij,bkj->bik", x, x), (2, 3, 5)),
    "upsample_nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
                         (1, 2, 3, 4)),
    "upsample_nearest_size": (lambda x: F.interpolate(x, size=(5, 7), mode="nearest"),
                              (1, 2, 3, 4)),
    "upsample_bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
                          (1, 2, 3, 4)),
    "upsample_bilinear_align": (lambda x: F.interpolate(x, size=(5, 7), mode="bilinear",
                                                        align_corners=True), (1, 2, 3, 4)),
    "constant_pad": (lambda x: F.pad(x, (1, 2, 0, -1), value=0.5), (1, 2, 3, 4)),
}


@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_torch_op_matches_torch(name):
    torch.manual_seed(0)
    fn, shape = TORCH_CASES[name]
    module = fn if isinstance(fn, torch.nn.Module) else _Fn(fn)
    _check_torch(module, shape, tol=2e-5)


def test_max_pool_and_relu_share_one_kernel_under_stitch():
    """Pooling is a window reduction, not a library call: a following ReLU fuses."""
    g = wb.from_torch(_Fn(lambda x: F.relu(F.max_pool2d(x, 3, 2, 1))), (torch.randn(1, 4, 9, 9),))
    assert {n.op for n in g.nodes} == {"window", "reduce_max", "relu"}
    plan, _ = run_planner("stitch", g)
    assert len(plan.groups) == 1


class _PoolWithIndices(torch.nn.Module):
    def forward(self, x):
        y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        return y, i


def test_max_pool_indices_match_torch():
    x = torch.randn(2, 3, 9, 8)
    g = wb.from_torch(_PoolWithIndices(), (x,))
    y, i = _PoolWithIndices()(x)
    for planner in PLANNERS:
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run({g.inputs[0]: x.numpy()})
        np.testing.assert_array_equal(got[g.outputs[0]], y.numpy())
        np.testing.assert_array_equal(got[g.outputs[1]], i.numpy())


def test_conv_flops_are_the_cost_models():
    """One count of a convolution's arithmetic: the kernel IR's is the op's."""
    from workbench.ops import get_op
    g = wb.from_torch(torch.nn.Conv1d(4, 6, 3, groups=2), (torch.randn(2, 4, 11),))
    k, = lower_plan(run_planner("none", g)[0])
    assert k.flops == 2 * 2 * 6 * 9 * (2 * 3)
    assert k.flops == get_op("conv").library_flops([(2, 4, 11), (6, 2, 3)], (2, 6, 9), {
        "group": 2})


def test_window_and_pad_shape_rules_refuse_bad_attrs():
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    with pytest.raises(GraphError, match="kernel"):
        b.window(x, kernel=[0, 2])
    with pytest.raises(GraphError, match="fill"):
        b.window(x, kernel=[2, 2], fill="nan")
    with pytest.raises(GraphError, match="reflect pads"):
        b.pad(x, pads=[0, 0, 4, 0, 0, 0, 0, 0], mode="reflect")
    with pytest.raises(GraphError, match="8 entries"):
        b.pad(x, pads=[1, 1])


# -- CUDA: every kernel these ops make compiles with NVRTC -----------------------------

@pytest.mark.slow   # (every kernel of every nn op through NVRTC: tens of seconds)
def test_nn_kernels_compile_with_nvrtc(nvrtc_toolchain):
    from workbench.runtime import nvrtc
    graphs = [wb.from_torch(_Fn(fn) if not isinstance(fn, torch.nn.Module) else fn,
                            (torch.randn(*shape),))
              for fn, shape in TORCH_CASES.values()]
    graphs.append(wb.from_torch(_PoolWithIndices(), (torch.randn(2, 3, 9, 8),)))
    b = GraphBuilder("pads")
    x = b.input("x", (2, 3, 5, 4))
    for mode in ("constant", "reflect", "edge"):
        b.output(b.exp(b.pad(x, pads=[0, 1, 2, -1, 0, 0, 1, 2], mode=mode, value=-2.5)))
    xi = b.input("xi", (3, 8), "int32")
    b.output(b.op("mod", xi, b.constant(np.array(3, np.int32)), fmod=False))
    graphs.append(b.build())
    sources = {}
    for g in graphs:
        for planner in PLANNERS:
            for k in lower_plan(run_planner(planner, g)[0]):
                if k.library is None:
                    sources.setdefault(render_kernel(k, "cuda"), k.name)
    assert len(sources) > 40
    for src, name in sources.items():
        assert nvrtc.compile_cuda(src, name, "90")[:4] == b"\x7fELF"
