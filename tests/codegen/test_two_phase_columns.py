"""Two-phase column reductions (mapping ``two_phase``): a parameter gradient's sum over
the rows of a [tokens, hidden] tensor cut into blocks of rows whose partial sums meet
after one grid barrier. Checked against the NumPy reference on fresh random inputs with
poisoned outputs on the CPU backend and in the CUDA emulator; the planner offers it to
the cost model for column reductions only, and refuses it with a reason where one pass
cannot make every partial."""

import pytest

from workbench.device import H100, assumed_cpu
from workbench.errors import FusionRefused
from workbench.frontends import load
from workbench.fusion import Mapping, candidate_mappings, run_planner
from workbench.fusion.geometry import geometry, two_phase_splits
from workbench.ir import GraphBuilder
from workbench.session import Session

SAMPLES = "sample_graphs"


def _param_grads(tokens: int, hidden: int):
    """dgamma = sum(dy * xhat), dbeta = sum(dy) and a mean over the tokens (a bias
    gradient's scaled form): three column reductions sharing an input."""
    b = GraphBuilder(f"param_grad_{tokens}x{hidden}")
    dy, xhat = b.input("dy", (tokens, hidden)), b.input("xhat", (tokens, hidden))
    b.output(b.reduce_sum(b.mul(dy, xhat), axes=[0]), "dgamma")
    b.output(b.reduce_sum(dy, axes=[0]), "dbeta")
    b.output(b.reduce_mean(dy, axes=[0]), "mean")
    return b.build()


def _one_kernel(wb, g, backend: str, splits: int | None = None) -> Session:
    s = Session(g, backend=backend, seed=3)
    s.fuse([n.id for n in g.nodes])
    launch = {} if splits is None else {"splits": splits}
    s.set_mapping("k0", "two_phase")
    if launch:
        s.set_launch("k0", **launch)
    assert s.plan.groups[0].schedule.mapping is Mapping.two_phase
    return s


@pytest.mark.parametrize("tokens, hidden, splits", [(256, 40, 4), (320, 33, 5), (128, 7, 2)],
                         ids=str)
def test_two_phase_matches_reference_on_the_cpu(wb, tokens, hidden, splits):
    g = _param_grads(tokens, hidden)
    s = _one_kernel(wb, g, "cpu", splits)
    assert s.plan.groups[0].schedule.splits == splits
    for seed in (1, 2):                 # fresh inputs; a checked run poisons the outputs
        ins = wb.make_inputs(g, seed=seed)
        wb.check_outputs(s, ins, wb.reference(g, ins), f"two_phase x{splits}")
    m = s.measure(repeats=1, warmup=0)
    assert m.within_tolerance, m.per_kernel


def test_two_phase_runs_in_the_cuda_emulator(wb):
    g = _param_grads(192, 70)
    s = _one_kernel(wb, g, "cuda-emu", 3)
    k = s.kernels()[0]
    assert k.launch.cooperative and k.launch.mapping == "two_phase"
    assert "wb_grid_sync()" in s.source("k0", target="cuda")
    ins = wb.make_inputs(g, seed=4)
    wb.check_outputs(s, ins, wb.reference(g, ins), "two_phase in the emulator")


@pytest.mark.parametrize("name", ["layernorm_param_grad", "bias_grad"])
def test_samples_take_two_phase_with_the_h100s_split(wb, name):
    g = load(f"{SAMPLES}/{name}.json")
    plan, _ = run_planner("none", g)
    red = [gr for gr in plan.groups if gr.schedule.kind == "row_reduce"]
    assert red and all(not gr.schedule.innermost for gr in red)
    assert candidate_mappings(red[0].schedule, H100) == (Mapping.thread, Mapping.two_phase)
    assert candidate_mappings(red[0].schedule, assumed_cpu("cpu", 8)) == (Mapping.thread,)
    # 77 outputs: a warp's threads would straddle two blocks of rows (uncoalesced)
    odd = run_planner("none", _param_grads(256, 77))[0].groups[1].schedule
    assert candidate_mappings(odd, H100) == (Mapping.thread,)
    mapped = plan.set_mapping(red[0].id, "two_phase")
    gr = next(x for x in mapped.groups if x.nodes == red[0].nodes)
    # on the H100 the rule gives every SM two blocks: 1024 outputs x 4096 rows -> 64
    # blocks of 64 rows (256 blocks where thread per row launches 4)
    s = gr.schedule
    assert s.splits == two_phase_splits(s.rows, s.cols, H100.units) >= 16
    assert geometry(s, H100).blocks == -(-s.rows // 256) * s.splits


def test_refused_with_the_reason():
    b = GraphBuilder("centered")
    x = b.input("x", (256, 8))
    m = b.reduce_mean(x, axes=[0], keepdims=True)
    b.output(b.reduce_sum(b.mul(b.sub(x, m), b.sub(x, m)), axes=[0]), "var")
    plan, _ = run_planner("none", b.build())
    plan = plan.fuse([n.id for n in plan.graph.nodes])
    with pytest.raises(FusionRefused, match="one pass makes every partial"):
        plan.set_mapping("k0", "two_phase")
    g = _param_grads(256, 8)
    plan = run_planner("none", g)[0].fuse([n.id for n in g.nodes])
    with pytest.raises(FusionRefused, match="does not divide the reduced length 256"):
        plan.set_mapping("k0", "two_phase").set_launch("k0", splits=3)
    with pytest.raises(FusionRefused, match="no divisor from 2"):
        run_planner("none", _param_grads(97, 8))[0].fuse(
            [n.id for n in _param_grads(97, 8).nodes]).set_mapping("k0", "two_phase")


def test_the_stitch_planner_takes_it_where_predicted_faster():
    # bias_grad on the H100: 1024 outputs are 4 blocks of thread per row; the model
    # predicts the two-phase kernel's 256 blocks faster, and the planner says so
    g = load(f"{SAMPLES}/bias_grad.json")
    plan, decisions = run_planner("stitch", g, device=H100)
    assert plan.groups[0].schedule.mapping is Mapping.two_phase
    assert any(d.action == "mapped" and "instead of thread" in d.reason for d in decisions)
    # ... and on a CPU it is not offered: the plan keeps thread per row
    cpu, _ = run_planner("stitch", g, device=assumed_cpu("cpu", 8))
    assert cpu.groups[0].schedule.mapping is Mapping.thread
