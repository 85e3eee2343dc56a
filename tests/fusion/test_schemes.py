"""Stitch schemes: stitched (global / independent) kernels, user-set schemes, and
that codegen honours what a group records.

Every stitched or re-schemed plan runs on the CPU backend against the NumPy
reference on random inputs (odd sizes), each kernel checked on its own inputs too;
CUDA sources compile with nvcc.
"""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from workbench.cli import main as cli_main
from workbench.codegen import RENDERERS, lower_plan, render_kernel
from workbench.errors import FusionRefused
from workbench.fusion import Plan, StitchScheme, make_group, run_planner
from workbench.fusion.geometry import shared_bytes
from workbench.ir import GraphBuilder
from workbench.session import Session
from workbench.device import H100



def _samples():
    spec = importlib.util.spec_from_file_location(
        "make_samples", Path("sample_graphs/make_samples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(wb, plan: Plan, seed: int = 7) -> Session:
    """Run plan on the cpu backend: outputs against the reference, and every kernel
    against the reference on its own inputs."""
    s = Session(plan.graph, backend="cpu", seed=seed)
    s._push("test plan", plan)
    ins = wb.make_inputs(plan.graph, seed)
    wb.check_outputs(s, ins, wb.reference(plan.graph, ins), plan.describe())
    m = s.measure(repeats=1, warmup=1)
    assert m.within_tolerance, m.per_kernel
    return s


def _two_domains(rows=33, cols=17):
    b = GraphBuilder("two_domains")
    x = b.input("x", (rows, cols))
    b.output(b.reduce_sum(x, axes=[1]), "row_sums")
    b.output(b.reduce_sum(x, axes=[0], keepdims=True), "col_sums")
    return b.build()


def _softmax_then_column_sum(rows=37, cols=45):
    b = GraphBuilder("softmax_colsum")
    x = b.input("x", (rows, cols))
    y = b.softmax(x, axis=-1)
    b.output(b.reduce_sum(y, axes=[0]), "colsum")
    return b.build()


def _ln(rows=37, cols=45):
    b = GraphBuilder("ln")
    x = b.input("x", (rows, cols))
    b.output(b.layer_norm(x, b.input("gamma", (cols,)), b.input("beta", (cols,))), "y")
    return b.build()


def _softmax(rows=37, cols=45):
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", (rows, cols)), axis=-1), "y")
    return b.build()


def _value(g, op):
    return next(n.outputs[0] for n in g.nodes if n.op == op)


# -- stitched groups -------------------------------------------------------------
def test_unrelated_reductions_stitch_independent(wb):
    g = _two_domains()
    with pytest.raises(FusionRefused, match="one reduction domain"):
        make_group(g, ["n0", "n1"], device=H100)                    # stitch=False: as before
    plan = Plan.singletons(g, H100).fuse(["n0", "n1"])
    gr = plan.groups[0]
    assert gr.stitched and len(gr.schedule.phases) == 2
    assert not gr.schedule.phases[1].barrier          # no path between them
    assert gr.schedule.grid_barriers == 0 and not gr.schedule.cooperative
    assert "independent" in plan.describe()
    k = lower_plan(plan)[0]
    assert not k.launch.cooperative and k.workspace == () and k.phases == 2
    assert "wb_grid_sync();" not in RENDERERS["cuda"].kernel(k)
    _run(wb, plan)


def test_row_then_column_reduction_stitch_global(wb):
    g = _softmax_then_column_sum()
    rules, _ = run_planner("rules", g)
    assert len(rules.groups) == 2                     # rules cannot join them
    plan = rules.fuse([gr.id for gr in rules.groups])
    gr = plan.groups[0]
    assert gr.stitched and [p.barrier for p in gr.schedule.phases] == [False, True]
    y = _value(g, "div")
    assert gr.scheme(y) is StitchScheme.global_
    assert gr.schedule.through_global == (y,)
    k = lower_plan(plan)[0]
    # the softmax output goes through the kernel's own global buffer: written once,
    # read once, counted in its bytes
    (ws,) = k.workspace
    assert ws.value == y and k.scratch_bytes == 2 * ws.nbytes
    assert k.bytes_read == 37 * 45 * 4 + ws.nbytes
    assert k.bytes_written == 45 * 4 + ws.nbytes
    assert k.launch.cooperative and k.grid_barriers == 1
    cuda = render_kernel(k, "cuda")
    assert RENDERERS["cuda"].kernel(k).count("wb_grid_sync();") == 1
    assert "cooperative_groups" not in cuda      # (our own barrier: include/grid_sync.cuh)
    c = render_kernel(k, "c")
    # one parallel loop per phase (in the kernel's team form, worksharing loops of
    # one region, each ending in its barrier: codegen/render/c.py)
    assert c.count("#pragma omp parallel for") + c.count("#pragma omp for") >= 2
    _run(wb, plan)


def test_layout_op_and_reduction_stitch(wb):
    b = GraphBuilder("t")
    x = b.input("x", (9, 70))
    t = b.transpose(b.exp(x), perm=[1, 0])
    b.output(b.reduce_sum(t, axes=[1]), "y")
    b.output(t, "t")
    g = b.build()
    with pytest.raises(FusionRefused, match="moves elements"):
        Plan.singletons(g, H100).fuse(["n1", "n2"], stitch=False)
    plan = Plan.singletons(g, H100).fuse(["n0", "n1", "n2"])
    kinds = [p.schedule.kind for p in plan.groups[0].schedule.phases]
    assert kinds == ["elementwise", "row_reduce"]
    _run(wb, plan)


def test_stitch_refuses_library_calls_and_cycles():
    b = GraphBuilder("mm")
    x = b.input("x", (4, 8))
    w = b.input("w", (8, 3))
    b.output(b.reduce_sum(b.matmul(x, w), axes=[1]), "y")
    p = Plan.singletons(b.build(), H100)
    with pytest.raises(FusionRefused, match="library call"):
        p.fuse(["n0", "n1"])
    b = GraphBuilder("diamond")
    x = b.input("x", (4, 4))
    a = b.reduce_sum(x, axes=[1], keepdims=True)
    m = b.neg(a)
    b.output(b.add(a, m), "y")
    with pytest.raises(FusionRefused, match="cycle through n1"):
        Plan.singletons(b.build(), H100).fuse(["n0", "n2"])


@pytest.mark.parametrize("name, kwargs", [
    ("cross_entropy", dict(rows=67, classes=300)),
    ("layernorm_param_grad", dict(rows=50, cols=70)),
    ("bias_gelu_residual_layernorm", dict(rows=40, cols=90)),
    ("adam", dict(rows=33, cols=20)),
])
def test_whole_sample_graphs_stitch_into_one_kernel(wb, name, kwargs):
    g = getattr(_samples(), name)(**kwargs)
    plan = Plan.singletons(g, H100)
    plan = plan.fuse([n.id for n in g.nodes]) if len(g.nodes) > 1 else plan
    assert len(plan.groups) == 1
    _run(wb, plan)


def test_rules_never_stitches():
    for path in sorted(Path("sample_graphs").glob("*.json")):
        from workbench.frontends import load
        plan, _ = run_planner("rules", load(path))
        assert all(not gr.stitched for gr in plan.groups)


# -- user-set schemes ------------------------------------------------------------
def test_global_splits_a_row_kernel_into_two_phases(wb):
    g = _ln(37, 45)
    plan, _ = run_planner("rules", g)
    mean = g.node("n0").outputs[0]
    assert plan.groups[0].scheme(mean) is StitchScheme.regional
    p2 = plan.set_scheme(mean, "global")
    gr = p2.groups[0]
    assert gr.stitched and [len(p.nodes) for p in gr.schedule.phases] == [1, 8]
    assert gr.scheme(mean) is StitchScheme.global_ and gr.forced == ((mean, StitchScheme.global_),)
    assert p2 != plan and len(plan.groups[0].nodes) == 9    # old plan untouched
    assert f"{mean}: n0 -> n1 global (set by user)" in p2.describe()
    k = lower_plan(p2)[0]
    assert k.launch.cooperative and k.workspace[0].numel == 37
    _run(wb, p2)


def test_regional_keeps_a_cheap_value_on_chip(wb):
    g = _ln(37, 45)
    plan, _ = run_planner("rules", g)
    diff = g.node("n1").outputs[0]                          # x - mean, cheap
    assert plan.groups[0].schedule.row_cached == ()
    p2 = plan.set_scheme(diff, StitchScheme.regional)
    assert p2.groups[0].schedule.row_cached == (diff,)
    assert p2.groups[0].scheme(diff) is StitchScheme.regional
    k = lower_plan(p2)[0]
    assert [x.value for x in k.scratch if x.space == "shared"] == [diff]
    _run(wb, p2)


def test_local_recomputes_a_costly_value(wb):
    g = _softmax(37, 45)
    plan, _ = run_planner("rules", g)
    e = _value(g, "exp")
    assert e in plan.groups[0].schedule.row_registers          # kept: computed once
    p2 = plan.set_scheme(e, "local")
    s2 = p2.groups[0].schedule
    assert e not in s2.row_registers and s2.row_cached == ()
    k = lower_plan(p2)[0]
    assert [x.value for x in k.scratch] == ["x"]             # (x is still kept)
    body = render_kernel(k, "c").split(f"void {k.name}(")[1]
    assert len(re.findall(r"expf(?:_n|_shift_n)?\(", body)) == 2    # (c_exp_rows.py)
    _run(wb, p2)


def test_illegal_schemes_are_refused_with_reasons():
    g = _ln(37, 45)
    plan, _ = run_planner("rules", g)
    mean = g.node("n0").outputs[0]
    with pytest.raises(FusionRefused, match="local .*one value per row"):
        plan.set_scheme(mean, "local")
    # one thread per row: the mean never leaves the thread, local is right
    assert plan.set_mapping("k0", "thread").groups[0].scheme(mean) is StitchScheme.local
    with pytest.raises(FusionRefused, match="independent is how unrelated ops"):
        plan.set_scheme(mean, "independent")
    with pytest.raises(FusionRefused, match="unknown stitch scheme 'shared'"):
        plan.set_scheme(mean, "shared")
    with pytest.raises(FusionRefused, match="graph input"):
        plan.set_scheme("x", "local")
    with pytest.raises(FusionRefused, match="leaves kernel"):
        Plan.singletons(g, H100).set_scheme(mean, "local")
    with pytest.raises(FusionRefused, match="no value 'nope'"):
        plan.set_scheme("nope", "local")
    # regional in an elementwise kernel: nothing is shared by a block
    b = GraphBuilder("ew")
    x = b.input("x", (4, 4))
    b.output(b.neg(b.exp(x)), "y")
    ew, _ = run_planner("rules", b.build())
    with pytest.raises(FusionRefused, match="elementwise kernel has no row"):
        ew.set_scheme(ew.graph.node("n0").outputs[0], "regional")
    # regional beyond the shared-memory budget: a 9000-column row is 36 KB
    sm, _ = run_planner("rules", _softmax(4, 9000))
    diff = sm.graph.node("n1").outputs[0]
    with pytest.raises(FusionRefused, match="shared memory 35 KB > 32 KB"):
        sm.set_scheme(diff, "regional")
    # regional needs the row in one block
    with pytest.raises(FusionRefused, match="split mapping does not keep a row"):
        _softmax(37, 45) and run_planner("rules", _softmax(37, 45))[0].set_mapping(
            "k0", "split").set_scheme(_value(_softmax(37, 45), "exp"), "regional")


def test_session_set_scheme_and_mapping_are_undoable_steps():
    s = Session(_ln(37, 45), backend="reference")
    s.auto("rules")
    mean = s.graph.node("n0").outputs[0]
    before = s.plan
    with pytest.raises(FusionRefused):
        s.set_scheme(mean, "local")
    assert s.plan is before and s.step.action == "auto rules"
    s.set_scheme(mean, "global")
    assert s.step.action == f"set_scheme {mean} global" and s.plan.groups[0].stitched
    s.undo()
    assert s.plan is before
    s.redo()
    assert s.plan.groups[0].stitched
    s.undo()
    s.set_mapping("k0", "warp")
    assert s.plan.groups[0].schedule.mapping == "warp" and s.plan != before
    assert s.step.action == "set_mapping k0 warp"


def test_show_plan_lists_edges_with_schemes(capsys):
    assert cli_main(["show", "sample_graphs/softmax.json", "plan"]) == 0
    out = capsys.readouterr().out
    assert "k0: row_reduce" in out
    # exp(x - max) stays in each thread's registers (local); the row's max and sum
    # reach every thread of the block through shared memory (regional)
    assert "n2 -> n3,n4 local" in out and "n0 -> n1 regional" in out


def test_stitched_sources_compile_with_nvrtc(compile_cuda):
    kernels = []
    ln = _ln(1057, 2500)
    rules, _ = run_planner("rules", ln)
    plans = {
        "independent": Plan.singletons(_two_domains(), H100).fuse(["n0", "n1"]),
        "global": (lambda p: p.fuse([gr.id for gr in p.groups]))(
            run_planner("rules", _softmax_then_column_sum(1000, 3000))[0]),
        "split_mean": rules.set_scheme(ln.node("n0").outputs[0], "global"),
        "xent": (lambda g: Plan.singletons(g, H100).fuse([n.id for n in g.nodes]))(
            _samples().cross_entropy(rows=67, classes=300)),
    }
    for name, plan in plans.items():
        k = lower_plan(plan)[0]
        kernels.append(k.__class__(**{**k.__dict__, "name": f"stitched_{name}"}))
    compile_cuda(RENDERERS["cuda"].module(kernels), [k.name for k in kernels], "stitched")
    assert np.any(["wb_grid_sync();" in RENDERERS["cuda"].kernel(k) for k in kernels])


def test_phases_share_one_blocks_shared_memory(wb):
    # two softmaxes over 6000 columns, one after the other through a column sum: each
    # phase keeps its rows in registers (no shared memory but the reduction slots);
    # asked to keep both exps in shared memory instead (24 KB each), the phases would
    # pass 48 KB together, which is refused with the numbers
    b = GraphBuilder("two_softmax")
    x = b.input("x", (5, 6000))
    y = b.softmax(x, axis=-1)
    c = b.reduce_sum(y, axes=[0], keepdims=True)
    z = b.softmax(y + c, axis=-1)
    b.output(z, "z")
    g = b.build()
    plan = Plan.singletons(g, H100).fuse([n.id for n in g.nodes])
    gr = plan.groups[0]
    assert gr.stitched
    assert shared_bytes(gr.schedule) <= 48 * 1024
    assert lower_plan(plan)[0].shared_bytes == shared_bytes(gr.schedule)
    rows = [p.schedule for p in gr.schedule.phases if p.schedule.mapping == "block"]
    assert len(rows) == 2 and all(s.row_registers and not s.row_cached for s in rows)
    assert shared_bytes(gr.schedule) == 33 * 8 * 2
    _run(wb, plan)
    exps = [n.outputs[0] for n in g.nodes if n.op == "exp"]
    one = plan.set_scheme(exps[0], "regional")
    assert [s.row_cached for s in (p.schedule for p in one.groups[0].schedule.phases)
            if s.row_cached] == [(exps[0],)]
    with pytest.raises(FusionRefused, match="row caches do not fit together"):
        one.set_scheme(exps[1], "regional")
