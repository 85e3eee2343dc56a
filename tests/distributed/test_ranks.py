"""Programs on p gloo ranks (spawned processes): outputs gathered and compared with the
single-process reference; a failing and a hanging rank reported with rank and step,
and no process left behind. Each run spawns p Python processes that import torch and
compile their kernels (~10-15 s on 2 cores), so the fast tier holds three runs."""
from __future__ import annotations

import multiprocessing

import pytest

from workbench.distributed import DistBuilder
from workbench.distributed.runner import TOLERANCE, run_ranks
from workbench.distributed.samples import dp_adamw, pp_stage, tp_mlp
from workbench.errors import RankFailure
from workbench.session import Session


def _every_collective(ranks):
    b = DistBuilder("every_collective", ranks)
    x = b.input("x", (4, 8), placement="P(max)")
    g = b.input("g", (4, 8), placement="P(avg)")
    w = b.input("w", (8, 4), placement="S(0)")
    s = b.all_to_all(b.reduce_scatter(g, 0, "avg"), split_dim=1, concat_dim=0)
    t = b.send_recv(s, dim=1, shift=1)
    b.output(b.all_reduce(x, "max") * 2.0, "y")
    b.output(b.all_reduce(b.matmul(b.exp(t), w), "sum"), "z")    # row-parallel
    b.output(b.all_gather(t, 1), "u")
    return b.build()


def _no_children_left():
    return [p for p in multiprocessing.active_children() if p.is_alive()]


def test_every_collective_on_two_ranks():
    run = run_ranks(_every_collective(2), seed=3)
    assert run.ok, run.errors
    assert all(t.sent_bytes > 0 for t in run.times)
    assert not _no_children_left()


def test_sharded_adamw_on_two_ranks_matches_the_reference():
    s = Session(dp_adamw(64, 32, 2), ranks=2, link="nvlink")
    s.auto("stitch", keep_sharded=["m_out", "v_out"])
    assert s.step.decisions[0].startswith("applied")
    run = s.run()
    assert run.ok and max(run.errors.values()) <= TOLERANCE, run.errors


def test_a_failing_rank_is_named_and_every_process_stopped():
    with pytest.raises(RankFailure, match=r"rank 1 of 2 failed at step 2 \(compute"):
        run_ranks(dp_adamw(8, 4, 2), fault=(1, 2, "raise"))
    assert not _no_children_left()


@pytest.mark.slow
def test_a_hanging_rank_is_named_and_every_process_stopped():
    with pytest.raises(RankFailure, match=r"rank 1 at step 1 \(wait_tensor.*rank 1 hangs"):
        run_ranks(dp_adamw(8, 4, 2), fault=(1, 1, "hang"), timeout=4)
    assert not _no_children_left()


@pytest.mark.parametrize("ranks", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_samples_transformed_on_one_and_four_ranks(ranks):
    for make, keep in ((dp_adamw, ["m_out", "v_out"]), (tp_mlp, [])):
        d = make(**({"rows": 64, "cols": 32} if make is dp_adamw else
                    {"tokens": 16, "hidden": 32, "ffn": 64}), ranks=ranks)
        s = Session(d, ranks=ranks, link="nvlink")
        s.auto("stitch", keep_sharded=keep)
        assert ranks == 1 or s.step.decisions[0].startswith("applied"), s.step.decisions
        run = s.run()
        assert run.ok, (make.__name__, run.errors)


def test_pipeline_stage_boundary_on_two_ranks():
    run = run_ranks(pp_stage(tokens=8, hidden=16, ranks=2))
    assert run.ok, run.errors
    assert all(t.sent_bytes == 8 * 16 * 4 for t in run.times)     # one stage's output


def test_tensor_parallel_mlp_on_two_ranks():
    s = Session(tp_mlp(16, 32, 64, 2), ranks=2)
    s.split_all_reduce("n8", dim=0)
    s.shard_after(next(n.id for n in s.graph.nodes if n.op == "all_gather"))
    run = s.run()
    assert run.ok, run.errors


def test_cli_optimize_on_two_ranks(tmp_path, capsys):
    import json
    from workbench.cli import main
    from workbench.distributed import save_json
    path = tmp_path / "dp.json"
    save_json(dp_adamw(64, 32, 2), path)
    assert main(["optimize", str(path), "--ranks", "2", "--repeats", "1", "--planner",
                 "stitch", "--keep-sharded", "m_out,v_out", "--link", "nvlink",
                 "--json", str(tmp_path / "rows.json")]) == 0
    assert "compute KB/rank" in capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [r["step"] for r in rows] == ["load", "auto stitch"]
    assert rows[1]["compute KB/rank"] * 2 == rows[0]["compute KB/rank"]    # 1/p
    assert all(r["max err"] <= 1e-4 for r in rows)
