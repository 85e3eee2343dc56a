"""The CoCoNet transformations as session steps (no processes: the programs are
checked against the single-process reference; tests/distributed/test_ranks.py runs
them on gloo ranks)."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed import Replicate, Shard
from workbench.distributed.cost import INFINIBAND, NVLINK, Link, fit, scale_out
from workbench.distributed.samples import dp_adamw, dp_lamb, tp_mlp
from workbench.distributed.transforms import shard_after, split_all_reduce
from workbench.errors import FusionRefused, WorkbenchError
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session


def _same_reference(a, b, seed=5):
    i = random_inputs(a.graph, seed)
    ra, rb = run_reference(a.graph, i), run_reference(b.graph, i)
    for k in a.graph.outputs:
        np.testing.assert_array_equal(ra[k], rb[k])


@pytest.mark.parametrize("ranks", [2, 4])
def test_sharded_adamw_counts_one_pth_of_the_bytes(ranks):
    s = Session(dp_adamw(64, 32, ranks), ranks=ranks)
    unsharded = s.counted()["compute_bytes"]
    s.split_all_reduce("n0")
    s.shard_after(next(n.id for n in s.graph.nodes if n.op == "all_gather"),
                  keep_sharded=["m_out", "v_out"])
    d = s.program
    assert s.counted()["compute_bytes"] * ranks == unsharded
    assert {d.leaves[k] for k in ("param", "m", "v")} == {Shard(0)}
    assert d.placements["param_out"] == Replicate() and d.placements["m_out"] == Shard(0)
    # one compute segment between the ReduceScatter's wait and the AllGather: one kernel
    assert [n.op for n in d.graph.nodes].count("all_gather") == 1
    _same_reference(dp_adamw(64, 32, ranks), d)
    s.undo(), s.undo()
    assert s.counted()["compute_bytes"] == unsharded
    s.redo()
    assert any(n.op == "reduce_scatter" for n in s.graph.nodes)


def test_row_work_moves_only_where_the_row_is_whole():
    d = tp_mlp(16, 32, 64, 2)
    ar = next(n.id for n in d.graph.nodes if n.op == "all_reduce")
    rows = split_all_reduce(d, ar, dim=0)
    ag = next(n.id for n in rows.graph.nodes if n.op == "all_gather")
    moved, mv = shard_after(rows, ag)
    assert not mv.left and len(mv.nodes) == 11      # bias, residual, the whole LayerNorm
    _same_reference(d, moved)
    cols = split_all_reduce(d, ar, dim=1)
    ag = next(n.id for n in cols.graph.nodes if n.op == "all_gather")
    part, mv = shard_after(cols, ag)
    reasons = dict(mv.left)
    assert any("a row would be split across ranks" in r for r in reasons.values())
    assert len(mv.nodes) == 2                       # the bias and the residual only
    _same_reference(d, part)


def test_refusals_name_the_reason():
    d = dp_adamw(8, 4, 2)
    with pytest.raises(FusionRefused, match="not an all_reduce"):
        split_all_reduce(d, "param_out")
    with pytest.raises(FusionRefused, match="does not divide into 2 shards"):
        split_all_reduce(tp_mlp(3, 32, 64, 2), "n8", dim=0)    # 3 tokens
    with pytest.raises(FusionRefused, match="not an all_gather"):
        shard_after(d, "n0")
    s = Session(d, ranks=2)
    with pytest.raises(FusionRefused):
        s.split_all_reduce("nope")
    assert len(s.history) == 1                      # a refused step changes nothing
    with pytest.raises(WorkbenchError, match="nothing to undo"):
        s.undo()
    with pytest.raises(WorkbenchError, match="pass backend='cpu' or 'cupy'"):
        Session(d, ranks=2, backend="rocm")     # (cupy: test_nccl_handoff.py)
    with pytest.raises(WorkbenchError, match="matmul_precision is not supported"):
        Session(d, ranks=2, matmul_precision="tf32")


def test_the_planner_lists_what_it_did_not_apply():
    s = Session(dp_adamw(64, 32, 2), ranks=2)
    s.auto("stitch")            # m and v gathered too: twice the communication
    assert all(x.startswith("not applied") for x in s.step.decisions)
    assert any("the model says slower" in x for x in s.step.decisions)
    s.undo()
    # m and v kept sharded: on this machine's gloo a ReduceScatter and an AllGather cost
    # more than its AllReduce (two messages' latency, and the rings' bandwidth, fitted),
    # so still slower; on NVLink they cost the same
    s.auto("stitch", keep_sharded=["m_out", "v_out"])
    assert s.step.decisions[0].startswith("not applied") and "slower" in s.step.decisions[0]
    s = Session(dp_adamw(64, 32, 2), ranks=2, link="nvlink")
    s.auto("stitch", keep_sharded=["m_out", "v_out"])
    assert s.step.decisions[0].startswith("applied: split n0")
    with pytest.raises(WorkbenchError, match="unknown link 'ethernet'"):
        Session(dp_adamw(64, 32, 2), ranks=2, link="ethernet")
    t = Session(tp_mlp(16, 32, 64, 2), ranks=2, link="nvlink")
    t.auto("stitch")
    assert t.step.decisions and all(d.startswith(("applied", "not applied", "  not moved"))
                                    for d in t.step.decisions)


def test_alpha_beta_model_forms_fit_and_scale_out():
    link = Link("l", 1e-5, 1e-9)
    n = 1 << 20
    assert link.time("all_reduce", n, 4) == pytest.approx(
        link.time("reduce_scatter", n, 4) + link.time("all_gather", n, 4))
    assert link.time("all_reduce", 8, 1024, "tree") < link.time("all_reduce", 8, 1024)
    samples = [(op, p, m, link.time(op, m, p)) for op in ("all_reduce", "all_gather")
               for p in (2, 4) for m in (1 << 10, 1 << 16, 1 << 22)]
    got = fit(samples)
    assert got.alpha == pytest.approx(1e-5, rel=1e-6) and got.beta == pytest.approx(1e-9)
    rows = scale_out(NVLINK, "all_reduce", n)
    assert [r["ranks"] for r in rows] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert {r["kind"] for r in rows} == {"simulated"}
    assert INFINIBAND.time("all_reduce", n, 8) > NVLINK.time("all_reduce", n, 8)


def test_lamb_norms_stop_the_move_and_say_why():
    d = dp_lamb(64, 32, 2)
    s = split_all_reduce(d, "n0")
    moved, mv = shard_after(s, next(n.id for n in s.graph.nodes if n.op == "all_gather"),
                            keep_sharded=["m_out", "v_out"])
    reasons = dict(mv.left)
    assert any("reduces dim 0, which the shard splits" in r for r in reasons.values())
    norms = [n for n in moved.graph.nodes if n.op == "reduce_sum"]
    assert len(norms) == 2 and all(moved.placements[n.inputs[0]] == Replicate()
                                   for n in norms)      # on whole tensors, after the gather
    _same_reference(d, moved)
    t = Session(d, ranks=2, link="nvlink")
    t.auto("stitch", keep_sharded=["m_out", "v_out"])
    assert any("a row would be split across ranks" in x for x in t.step.decisions)
