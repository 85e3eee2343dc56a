"""The per-kernel check catches a wrong or unwritten element and names the kernel."""
import numpy as np

import workbench as wb
from workbench.fusion import run_planner
from workbench.measure import max_rel_error, verify_kernels
from workbench.runtime import Program, get_backend, random_inputs


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
