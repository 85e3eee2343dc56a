"""Chunking the sharded optimizer's ReduceScatter / AllGather pair into k pieces: the
same function as the unchunked program and the single-process reference on 1, 2 and 4
ranks, each piece's collectives in flight while another piece computes, refused with
the reason."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed.chunk_pair import chunk_sharded
from workbench.distributed.placement import Shard
from workbench.distributed.samples import dp_lamb
from workbench.errors import FusionRefused
from workbench.runtime.reference import random_inputs, run_reference
from workbench.session import Session

from sharded_steps import first as _first, sharded as _sharded  # noqa: E402


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_chunked_sharded_adamw_matches_the_reference(ranks):
    s = _sharded(ranks)
    before = s.program
    s.chunk_sharded(_first(s, "reduce_scatter"), k=3)
    d = s.program
    ops = [n.op for n in d.graph.nodes]
    assert ops.count("reduce_scatter") == ops.count("all_gather") == 3
    assert d.placements["m_out"] == Shard(0)
    assert d.placements["param_out"] == before.placements["param_out"]
    x = random_inputs(before.graph, 4)
    for k, r in run_reference(before.graph, x).items():
        np.testing.assert_array_equal(run_reference(d.graph, x)[k], r)
    run = s.run()
    assert run.ok, run.errors
    for t in run.times:         # three pieces of each collective on the timeline
        assert len([sp for sp in t.spans if sp.kind == "comm"]) == 6
        assert 0 <= t.overlap_s <= t.compute_s + 1e-9
    s.undo()
    assert s.program is before


def test_refused_with_the_reason():
    s = _sharded(2)
    rs = _first(s, "reduce_scatter")
    with pytest.raises(FusionRefused, match="is all_gather, not a reduce_scatter"):
        s.chunk_sharded(_first(s, "all_gather"))
    with pytest.raises(FusionRefused, match=r"dim 1 \(6\) does not split into 4"):
        s.chunk_sharded(rs, k=4, dim=1)
    with pytest.raises(FusionRefused, match="dim 0 is the one the ReduceScatter shards"):
        s.chunk_sharded(rs, k=2, dim=0)
    with pytest.raises(FusionRefused, match="chunk into 2 or more"):
        s.chunk_sharded(rs, k=1)
    lamb = Session(dp_lamb(8, 6, 2), ranks=2)
    lamb.split_all_reduce("n0")     # (LAMB's norms reduce the whole tensor)
    with pytest.raises(FusionRefused, match="no compute follows|not elementwise"):
        lamb.chunk_sharded(_first(lamb, "reduce_scatter"))
    s.fuse_received(rs, segment=4)
    with pytest.raises(FusionRefused, match="fused into its arrival"):
        chunk_sharded(s.program, rs, 2)
