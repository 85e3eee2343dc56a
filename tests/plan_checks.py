"""``check_plan``: the one correctness check of a session's plan that the GEMM kernel
tests share, and ``plan_variants``: a plan under every mapping and scheme, the matrix
the NVRTC check compiles and the CUDA emulator runs (imported by name: ``tests/`` is on
sys.path while pytest runs)."""
from __future__ import annotations

from workbench.errors import FusionRefused
from workbench.measure import verify_kernels
from workbench.tolerance import max_rel_error, output_error, tolerance
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session


def check_plan(s: Session, scale=None, seeds=(0, 1)) -> None:
    """Run the session's current plan on fresh random inputs (outputs poisoned by the
    program): every kernel within its bound (verify_kernels), every output within its
    dtype's tolerance of the reference (``compare.output_error``) -- measured against
    ``scale(inputs)[output]`` where given (attention: the product's signed terms
    cancel, so the magnitudes summed bound its rounding, not |output|)."""
    g = s.graph
    prog = s.program()
    for seed in seeds:
        ins = random_inputs(g, seed)
        env = prog.run(ins, keep_all=True)
        bad = [c for c in verify_kernels(prog, env) if not c.within_tolerance]
        assert not bad, bad
        ref = run_reference(g, ins)
        mags = scale(ins) if scale is not None else {}
        for o in g.outputs:
            dt = g.value(o).dtype    # (a half type against its largest magnitude)
            err = (max_rel_error(env[o], ref[o], mags[o]) if o in mags
                   else output_error(dt, env[o], ref[o]))
            assert err <= tolerance(g.value(o).dtype), (o, err)


MAPPINGS = ("warp", "block", "split", "thread", "auto")
SCHEMES = ("local", "regional", "global")


def plan_variants(plan):
    """The plan, each row kernel under each mapping, each internal edge under each
    scheme (the refused ones left out)."""
    yield plan
    for gr in plan.groups:
        if gr.schedule.kind == "row_reduce":
            for m in MAPPINGS:
                try:
                    yield plan.set_mapping(gr.id, m)
                except FusionRefused:
                    pass
        for v, _ in gr.schemes:
            for sc in SCHEMES:
                try:
                    yield plan.set_scheme(v, sc)
                except FusionRefused:
                    pass
