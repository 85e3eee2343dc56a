"""Fusing the compute that consumes a received tensor into the collective (the ring's
last reduction of each segment, or each AllGather segment as it arrives): the same
function as the single-process reference on 1, 2 and 4 ranks, the fused kernels run
per segment inside the wait, refused with the reason, listed by ``auto``, offered by
the app."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed.received import chunk_graph, fuse_received
from workbench.distributed.local import local_steps
from workbench.distributed.samples import dp_adamw, dp_lamb, tp_mlp
from workbench.errors import FusionRefused
from workbench.runtime.reference import random_inputs, run_reference
from workbench.session import Session
from workbench.ui.dist_actions import candidates

from sharded_steps import KEEP, first as _first, sharded as _sharded  # noqa: E402


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_optimizer_fused_into_the_reduce_scatter_matches_the_reference(ranks):
    s = _sharded(ranks)
    before = s.program
    # 5 elements a segment: several segments per rank and a shorter last one
    s.fuse_received(_first(s, "reduce_scatter"), segment=5)
    assert s.step.action.startswith("fuse_received")
    assert "param_out.shard" in s.step.decisions[0]
    x = random_inputs(before.graph, 1)
    for k, r in run_reference(before.graph, x).items():
        np.testing.assert_array_equal(run_reference(s.graph, x)[k], r)
    (seg,) = [t for t in local_steps(s.program) if getattr(t, "on_arrival", "")]
    run = s.run()
    assert run.ok, run.errors
    local = 8 // ranks * 6
    for t in run.times:         # the kernels ran per segment, inside the wait
        pieces = [sp for sp in t.spans if sp.kind == "compute" and "[" in sp.name]
        assert [sp.name.split("[")[1] for sp in pieces][-1] == f"{local // 5 * 5}:{local}]"
        assert len(pieces) == -(-local // 5)
        wait = next(sp for sp in t.spans if sp.kind == "wait" and sp.name.endswith(".rs"))
        assert all(wait.start_s <= sp.start_s <= wait.end_s for sp in pieces)
    s.undo()
    assert s.program is before


def test_work_after_an_all_gather_runs_on_each_arriving_shard():
    s = Session(dp_adamw(8, 6, 2), ranks=2)
    s.split_all_reduce("n0")      # (AdamW on the gathered, replicated gradient)
    with pytest.raises(FusionRefused, match="no compute reads its result"):
        s.fuse_received(_first(s, "reduce_scatter"))
    s.fuse_received(_first(s, "all_gather"), segment=4)
    run = s.run()
    assert run.ok, run.errors
    for t in run.times:         # own shard (24 elements) first, then the other's
        pieces = [sp.name.split("[")[1] for sp in t.spans if "[" in sp.name]
        own = ["0:4]", "4:8]", "8:12]", "12:16]", "16:20]", "20:24]"]
        assert len(pieces) == 12 and (pieces[:6] == own) == (t.rank == 0)


def test_refused_with_the_reason():
    s = _sharded(2)
    with pytest.raises(FusionRefused, match="is all_gather|no compute reads"):
        s.fuse_received(_first(s, "all_gather"))
    d = tp_mlp(16, 32, 64, 2)
    with pytest.raises(FusionRefused, match="is all_reduce"):
        fuse_received(d, _first(Session(d, ranks=2), "all_reduce"))
    cols = Session(dp_adamw(8, 6, 2), ranks=2)
    cols.split_all_reduce("n0", dim=1)
    with pytest.raises(FusionRefused, match="splits dim 1.*split along dim 0"):
        cols.fuse_received(_first(cols, "reduce_scatter"))
    s.fuse_received(_first(s, "reduce_scatter"), segment=5)
    with pytest.raises(FusionRefused, match="already fused"):
        s.fuse_received(_first(s, "reduce_scatter"))
    with pytest.raises(FusionRefused, match="segment=0"):
        fuse_received(_sharded(2).program, _first(s, "reduce_scatter"), 0)


def test_a_reduction_after_the_wait_stays_with_the_reason():
    s = Session(dp_lamb(8, 6, 2), ranks=2)
    s.split_all_reduce("n0")
    s.fuse_received(_first(s, "all_gather"), segment=8)
    notes = "\n".join(s.step.decisions)
    assert "not fused" in notes and "is not elementwise" in notes
    run = s.run()
    assert run.ok, run.errors


def test_chunk_graph_is_the_segment_on_a_piece():
    s = _sharded(2)
    s.fuse_received(_first(s, "reduce_scatter"), segment=5)
    (seg,) = [t for t in local_steps(s.program) if getattr(t, "on_arrival", "")]
    g = chunk_graph(seg.graph, 24, 5)
    x = random_inputs(seg.graph, 2)
    whole = run_reference(seg.graph, x)
    piece = run_reference(g, {k: v.reshape(-1)[5:10] if v.size == 24 else v.reshape(())
                              for k, v in x.items()})
    for k in seg.graph.outputs:
        np.testing.assert_allclose(piece[k], whole[k].reshape(-1)[5:10], rtol=1e-6)


def test_auto_considers_it_and_the_app_offers_it():
    s = Session(dp_adamw(8, 6, 2), ranks=2)
    s.auto(keep_sharded=KEEP)       # (gloo here: the split is modelled slower)
    assert any("fuse compute into a received tensor: no ReduceScatter" in n
               for n in s.step.decisions)
    t = Session(dp_adamw(8, 6, 2), ranks=2, link="nvlink")
    t.auto(keep_sharded=KEEP)
    assert any(n.startswith("not applied: fuse the compute after") and "one segment" in n
               for n in t.step.decisions), t.step.decisions
    offers = [o for o in candidates(_sharded(2), KEEP) if o.method == "fuse_received"]
    assert [o.legal for o in offers] == [True, False]


def test_auto_applies_it_where_the_result_is_several_segments():
    # (planned only, never run: 2M elements per rank's shard, two 1M-element segments)
    s = Session(dp_adamw(4096, 1024, 2), ranks=2, link="nvlink")
    s.auto(keep_sharded=KEEP)
    applied = [n for n in s.step.decisions if n.startswith("applied: fuse the compute")]
    assert len(applied) == 1 and "2 segments" in applied[0], s.step.decisions
    assert any(getattr(t, "on_arrival", "") for t in local_steps(s.program))
