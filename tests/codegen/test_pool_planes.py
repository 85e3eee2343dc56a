"""2-D pooling on the CPU a plane at a time (``lower.convolution.pool_planes``): a window and its
max, sum or mean over the taps, nothing else in the kernel, lowered as the plane
copied into its stride phases bordered with the window's fill and each output's taps
read at a constant offset from its flat position (codegen/planes.py) -- against
torch's pooling on fresh random inputs (NaN poisoned outputs), every kernel within its
bound; other groups keep the row kernel."""
import numpy as np
import pytest

import workbench as wb
from workbench.ir import composites_nn
from workbench.session import Session

from plan_checks import check_plan

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [  # input, kernel, strides, pads (torch: symmetric), dilation, ceil_mode
    ((2, 16, 32, 32), 3, 2, 1, 1, False),      # ResNet's max pool
    ((1, 3, 11, 10), 3, 2, 0, 1, True),        # ceil mode: a last window past the end
    ((2, 4, 9, 13), (3, 2), (1, 2), (1, 1), (2, 1), False),   # dilated, uneven
    ((3, 5, 7, 7), 2, 2, 0, 1, False),    # its positions the output's (no row dropped)
    ((1, 2, 17, 19), 3, 3, 1, 1, True),   # nine stride phases, a window past the end
    ((2, 3, 15, 16), (5, 3), (2, 3), (2, 1), (1, 2), False),   # uneven phases, dilated
    ((1, 2, 147, 147), 3, 2, 1, 1, False),    # Xception's first: a plane past 126 x 126
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool(kind, case):
    shape, k, s, p, d, ceil = case
    pair = _pair
    b = wb.GraphBuilder(f"{kind}_pool")
    x = b.input("x", shape)
    if kind == "max":
        y = composites_nn.max_pool(b, x, pair(k), pair(s), pair(d),
                                   list(pair(p)) * 2, ceil_mode=ceil)
    else:
        y = composites_nn.avg_pool(b, x, pair(k), pair(s), None, list(pair(p)) * 2,
                                   ceil_mode=ceil, count_include_pad=True)
    b.output(y, "y")
    return b.build()


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_pooling_a_plane_at_a_time_matches_torch(kind, case):
    shape, k, s, p, d, ceil = case
    if kind == "avg" and (d != 1 or ceil):
        pytest.skip("torch's avg_pool2d has no dilation; its ceil mode divides otherwise")
    g = _pool(kind, case)
    sess = Session(g, backend="cpu")
    sess.auto("rules")
    (k0,) = sess.kernels()
    # (an average of equal divisors is a mean, else a sum times a divisor: a row kernel)
    pooled = kind == "max" or "reduce_mean" in k0.name
    assert ("pooled a plane at a time" in k0.schedule) == pooled, k0.schedule
    check_plan(sess)
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    y = sess.program().run({"x": x})["y"]
    t = torch.from_numpy(x)
    want = (F.max_pool2d(t, k, s, p, d, ceil_mode=ceil) if kind == "max" else
            F.avg_pool2d(t, k, s, p, ceil_mode=ceil, count_include_pad=True)).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_a_pool_with_more_in_its_kernel_keeps_the_row_kernel():
    """A ReLU after the max joins the kernel: the row kernel, not the planes."""
    b = wb.GraphBuilder("pool_relu")
    x = b.input("x", (2, 4, 9, 9))
    b.output(b.relu(composites_nn.max_pool(b, x, (3, 3), (2, 2), None, [1, 1, 1, 1])), "y")
    g = b.build()
    sess = Session(g, backend="cpu")
    sess.fuse([n.id for n in g.nodes])
    assert len(sess.plan.groups) == 1
    assert all("pooled" not in k.schedule for k in sess.kernels())
    check_plan(sess)


def test_a_pool_of_more_stride_phases_than_planes_take_keeps_the_row_kernel():
    """Strides of 5 x 5 would make 25 phases, a copy loop each (more than
    ``PLANE_PHASES_MAX``): the row kernel, matching torch."""
    case = ((1, 3, 23, 21), 5, 5, 1, 1, False)
    sess = Session(_pool("max", case), backend="cpu")
    sess.auto("rules")
    (k0,) = sess.kernels()
    assert "pooled a plane at a time" not in k0.schedule, k0.schedule
    check_plan(sess)
    x = np.random.default_rng(5).standard_normal(case[0]).astype(np.float32)
    y = sess.program().run({"x": x})["y"]
    want = F.max_pool2d(torch.from_numpy(x), 5, 5, 1).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[4]],
                         ids=lambda c: "x".join(map(str, c[0])))
def test_a_max_pool_is_nan_where_a_tap_is_and_keeps_the_later_of_equal_taps(case):
    """The planes' max chains maxps (which drops a NaN) and looks for a NaN once per
    window (``planes.any_nan``): NaN exactly where torch's is, whichever tap of the
    window holds it (an odd tap count leaves the last unpaired); infinities and signed
    zeros as the NaN-propagating ``wb_fmax`` chain gives them -- bit for bit, the later
    of equal taps (-0 beside +0)."""
    shape, k, s, p, d, ceil = case
    sess = Session(_pool("max", case), backend="cpu")
    sess.auto("rules")
    (k0,) = sess.kernels()
    assert "pooled a plane at a time" in k0.schedule
    rng = np.random.default_rng(11)
    x = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0], np.float32),
                   size=shape, p=[0.02, 0.02, 0.06, 0.2, 0.2, 0.2, 0.2, 0.1]).astype(np.float32)
    y = sess.program().run({"x": x})["y"]
    want = F.max_pool2d(torch.from_numpy(x), k, s, p, d, ceil_mode=ceil).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(y[ok], want[ok])
    # the later of equal taps, bit for bit: the reference's op by op
    ref = wb.runtime.run_reference(sess.graph, {"x": x})["y"]
    np.testing.assert_array_equal(np.signbit(y[ok]), np.signbit(ref[ok]))
