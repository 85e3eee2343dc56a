"""Rows past 2^31 - 1 elements: a one-element input expanded to 2^31 + 64 elements and
summed (nothing large is allocated: the expand is never stored). Its kernels count in
64 bits (before: stitch summed to 2^30, thread per row never returned, rules did not
compile) and sum with compensation, so every planner and mapping gets float32's
nearest value of the exact sum."""
import numpy as np
import pytest

import workbench as wb
from workbench.codegen import lower_plan, render_kernel

N = 2 ** 31 + 64


def _graph():
    b = wb.GraphBuilder("wide_row")
    x = b.input("x", (1,))
    b.output(b.reduce_sum(b.expand(x, shape=[N]), axes=[0], keepdims=False), "y")
    return b.build()


CASES = [("stitch", None), ("rules", None), ("xla", None), ("stitch", "thread"),
         ("stitch", "warp"), ("stitch", "block"), ("stitch", "split")]


@pytest.mark.slow
@pytest.mark.parametrize("planner, mapping", CASES)
def test_a_row_past_2_31_sums_right_on_the_cpu(planner, mapping):
    s = wb.Session(_graph(), backend="cpu")
    s.auto(planner)
    if mapping:
        s.set_mapping(s.plan.groups[-1].id, mapping)
    x = np.array([1.0 + 2.0 ** -10], np.float32)        # (not a power of two)
    want = float(np.float32(float(x[0]) * N))
    got = float(s.run({"x": x})["y"])
    assert abs(got - want) <= 1e-6 * want, (planner, mapping, got, want)


@pytest.mark.parametrize("planner, mapping", CASES)
def test_a_row_past_2_31_renders_64_bit_counting_and_compiles(planner, mapping,
                                                              nvrtc_toolchain):
    """Both renderings count the row in 64 bits; NVRTC compiles the CUDA with the
    runtime's options (the GPU's plans: H100)."""
    from workbench.fusion import run_planner
    from workbench.runtime import nvrtc
    plan = run_planner(planner, _graph())[0]
    if mapping:
        plan = plan.set_mapping(plan.groups[-1].id, mapping)
    (k,) = [k for k in lower_plan(plan) if k.library is None][-1:]
    for target in ("c", "cuda"):
        src = render_kernel(k, target)
        assert str(N) in src and "long long" in src, target
    nvrtc.compile_cuda(render_kernel(k, "cuda"), k.name, "90")
