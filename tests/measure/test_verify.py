"""The per-kernel check catches a wrong or unwritten element and names the kernel."""
import numpy as np

import workbench as wb
from workbench.fusion import run_planner
from workbench.tolerance import max_rel_error
from workbench.measure import verify_kernels
from workbench.runtime import Program, get_backend, random_inputs
from workbench.device import H100


def _program():
    b = wb.GraphBuilder("ln")
    x = b.input("x", (16, 64))
    y = b.exp(x)
    b.output(b.layer_norm(y), "y")
    g = b.build()
    return g, Program(run_planner("none", g)[0], get_backend("cpu"))


def test_all_kernels_pass_on_a_real_run():
    g, prog = _program()
    env = prog.run(random_inputs(g, 1), keep_all=True)
    checks = verify_kernels(prog, env)
    assert len(checks) == len(g.nodes) and all(c.within_tolerance for c in checks)


def test_unwritten_or_wrong_element_fails_that_kernel():
    g, prog = _program()
    env = prog.run(random_inputs(g, 2), keep_all=True)
    victim = prog.compiled[3].kernel
    name = victim.outputs[0].value
    env[name] = env[name].copy()
    env[name].reshape(-1)[-1] = np.nan            # as if the kernel never wrote it
    checks = {c.kernel: c for c in verify_kernels(prog, env)}
    assert not checks[victim.name].within_tolerance
    env[name].reshape(-1)[-1] = 0.5 + env[name].reshape(-1)[0]   # wrong, not NaN
    assert not {c.kernel: c for c in verify_kernels(prog, env)}[victim.name].within_tolerance


def test_reduction_error_measured_against_sum_of_magnitudes():
    ref = np.array([1e-6], np.float32)
    out = np.array([2e-6], np.float32)
    assert max_rel_error(out, ref) > 0.5                      # against its own tiny value
    assert max_rel_error(out, ref, scale=np.array([100.0])) < 1e-7


def test_nan_only_where_reference_is_nan():
    assert max_rel_error(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    assert max_rel_error(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == float("inf")
    assert max_rel_error(np.array([1, 2]), np.array([1, 3])) == float("inf")


def test_gemm_rounding_is_bounded_by_the_magnitudes_summed():
    """A GEMM whose elements cancel: another summation order (cuBLAS's, here a float64
    product rounded once) differs from NumPy's float32 BLAS by far more than 1e-4 of
    the tiny elements, but within eps x K of |A| @ |B| -- the check holds it to that,
    and still catches a real error."""
    rng = np.random.default_rng(7)
    k = 4096
    a = rng.uniform(-1, 1, (64, k)).astype(np.float32)
    b_half = rng.uniform(-1, 1, (k // 2, 48)).astype(np.float32)
    b = np.concatenate([b_half, b_half])                 # ...
    a[:, k // 2:] = -a[:, :k // 2]                       # rows cancel to ~0 exactly
    a[:, k // 2:] += rng.uniform(-1e-4, 1e-4, (64, k // 2)).astype(np.float32)
    g_b = wb.GraphBuilder("mm")
    g_b.output(g_b.matmul(g_b.input("a", a.shape), g_b.input("b", b.shape)), "y")
    g = g_b.build()
    prog = Program(run_planner("none", g)[0], get_backend("cpu"))
    env = prog.run({"a": a, "b": b}, keep_all=True)
    other_order = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert max_rel_error(other_order, env["y"]) > 1e-3        # unbounded: a false alarm
    env["y"] = other_order
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    magnitudes = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    env["y"] = (other_order + 1e-3 * magnitudes).astype(np.float32)   # a real error
    assert not any(c.within_tolerance for c in verify_kernels(prog, env))


def _sum_plus_max(planner):
    b = wb.GraphBuilder("summax")
    x = b.input("x", (2, 1023, 1024))
    s = b.op("reduce_sum", x, axes=[2], keepdims=False)
    m = b.op("reduce_max", b.op("mul", x, x), axes=[2], keepdims=False)
    b.output(b.op("add", s, m), "y")
    g = b.build()
    return g, Program(run_planner(planner, g)[0], get_backend("cpu"))


def test_a_sums_error_bound_follows_it_through_the_fused_kernel():
    """sum(x) + max(x*x) in one kernel (stitch): the sum's rounding (~eps * sum|x|)
    reaches the add, where |y| alone would call a correct kernel wrong (1.2e-4 before
    bounds were propagated). Held to sum|x| + max(x*x), it passes; a real error of
    1e-3 of that bound still fails."""
    g, prog = _sum_plus_max("stitch")
    assert len(prog.compiled) == 1
    x = random_inputs(g, 0)["x"]
    env = prog.run({"x": x}, keep_all=True)
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    x64 = x.astype(np.float64)
    exact = x64.sum(axis=2) + (x64 * x64).max(axis=2)
    bound = np.abs(x64).sum(axis=2) + (x64 * x64).max(axis=2)
    # another correct summation order (float64, rounded once) is also accepted ...
    env["y"] = exact.astype(np.float32)
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    # ... and a wrong element is not
    env["y"] = (exact + 1e-3 * bound).astype(np.float32)
    assert not any(c.within_tolerance for c in verify_kernels(prog, env))


def test_a_float16_kernel_is_checked_against_the_reference_rounded_to_float16():
    """x / y in float16 overflowing to inf (or flushing to 0) in half precision, as
    NumPy's float16 does: the float32 reference must be rounded as the kernel stores,
    or a bitwise-equal output reads as error inf (or 1.0)."""
    b = wb.GraphBuilder("h")
    x, y = b.input("x", (4,), "float16"), b.input("y", (4,), "float16")
    b.output(b.op("div", x, y), "q")
    g = b.build()
    prog = Program(run_planner("none", g)[0], get_backend("cpu"))
    xs = np.array([60000, 1e-5, 3, -60000], np.float16)
    ys = np.array([0.5, 6000, 7, 0.25], np.float16)
    env = prog.run({"x": xs, "y": ys}, keep_all=True)
    want = xs / ys                                      # NumPy in float16
    assert np.isinf(want[0]) and want[1] == 0
    np.testing.assert_array_equal(env["q"], want)
    assert all(c.within_tolerance and c.max_rel_error == 0
               for c in verify_kernels(prog, env))


def test_where_a_products_bound_passes_float32_any_non_finite_result_is_accepted():
    """Found by the fuzzer (seed 18618): a row (-1.04, 1e30, -1.76) times a column (-inf,
    -1e30, 1.42). The float64 reference is inf (-1e60 is finite there); float32 without
    an FMA overflows 1e30 * -1e30 to -inf and inf + -inf is NaN; with one (BLAS) it is
    inf. Which non-finite value float32 reaches is not determined, so where the bound
    passes float32's range any is accepted -- but not a finite one, and nowhere else a
    NaN (an element never written)."""
    from workbench.codegen import lower_group
    from workbench.fusion import Plan
    from workbench.measure.verify import check_kernel
    b = wb.GraphBuilder("overflow")
    b.output(b.matmul(b.input("a", (2, 3)), b.input("b", (3, 2))), "c")
    g = b.build()
    a = np.array([[-1.0390625, 1e30, -1.7578125], [1.0, 2.0, 3.0]], np.float32)
    bb = np.array([[-np.inf, 1.0], [-1e30, 1.0], [1.421875, 1.0]], np.float32)
    (gr,) = Plan.singletons(g, H100).groups
    k = lower_group(g, gr, H100)
    ref = a.astype(np.float64) @ bb.astype(np.float64)
    assert np.isinf(ref[0, 0]) and np.isfinite(ref[1, 1])

    def ok(c00, c11=None) -> bool:
        c = ref.astype(np.float32)
        c[0, 0] = c00
        if c11 is not None:
            c[1, 1] = c11
        return check_kernel(g, k, gr.nodes, {"a": a, "b": bb, "c": c}).within_tolerance

    assert ok(np.nan) and ok(np.inf) and ok(-np.inf)
    assert not ok(5.0)                              # (inf is not reached by a finite value)
    assert not ok(np.inf, c11=np.nan)               # (a bounded element never written)
    assert max_rel_error(np.array([np.nan]), np.array([np.inf]), np.array([1.0])) == np.inf
