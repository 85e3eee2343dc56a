"""torch's all_to_all_single (equal splits) as an IR collective: its single-process
reference is what p ranks exchanging blocks do (checked against a NumPy simulation of
the ranks), its placement rule, its cost row, its drawing, and runs on 1, 2 and 4 gloo
ranks against that reference; imported from torch.export in test_from_export.py."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed import DistBuilder
from workbench.distributed.cost import Link
from workbench.distributed.placement import Shard
from workbench.distributed.propagate import PlacementError
from workbench.distributed.runner import run_ranks, sent_bytes
from workbench.errors import GraphError
from workbench.ops import get_op


def simulate_ranks(x: np.ndarray, p: int) -> np.ndarray:
    """What p ranks holding x's dim-0 shards get from all_to_all_single, put back
    together: rank r cuts its buffer into p blocks and sends block j to rank j; rank j
    stacks what it receives in rank order (torch's contract, written per rank)."""
    shards = np.split(x, p)
    received = [np.concatenate([np.split(shards[r], p)[j] for r in range(p)])
                for j in range(p)]
    return np.concatenate(received)


@pytest.mark.parametrize("p, shape", [(1, (3, 2)), (2, (8, 3)), (3, (18, 2, 2)),
                                      (4, (32, 5))])
def test_reference_is_the_ranks_exchanging_blocks(p, shape):
    x = np.random.default_rng(p).standard_normal(shape).astype(np.float32)
    (y,) = get_op("all_to_all_single").reference([x], {"group_size": p})
    np.testing.assert_array_equal(y, simulate_ranks(x, p))
    if p > 1:
        assert not np.array_equal(y, x)          # (it moves elements)
    (back,) = get_op("all_to_all_single").reference([y], {"group_size": p})
    np.testing.assert_array_equal(back, x)       # the expert round trip


def _experts(ranks: int, rows_per_block: int = 2, hidden: int = 4):
    """Sequence/expert parallel: each rank's tokens sent out in blocks, a matmul and
    GELU on what arrived, the results sent back, a residual."""
    b = DistBuilder("a2a_experts", ranks)
    x = b.input("x", (ranks * ranks * rows_per_block, hidden), placement="S(0)")
    w = b.input("w", (hidden, hidden))
    h = b.gelu(b.matmul(b.all_to_all_single(x), w))
    b.output(b.all_to_all_single(h) + x, "y")
    return b.build()


def test_placement_rule_and_refusals():
    d = _experts(2)
    starts = [n for n in d.graph.nodes if n.op == "all_to_all_single"]
    assert len(starts) == 2
    assert all(d.placements[n.outputs[0]] == Shard(0) for n in starts)
    assert d.local_shape("y") == (4, 4)
    for placement, why in (("R", "shard_local it first"),
                           ("P(sum)", "all_reduce or reduce_scatter it first"),
                           ("S(1)", "all_to_all it onto dim 0 first")):
        b = DistBuilder("bad", 2)
        b.output(b.all_to_all_single(b.input("x", (4, 4), placement=placement)), "y")
        with pytest.raises(PlacementError, match=rf"takes Shard\(0\) -- {why}"):
            b.build()
    b = DistBuilder("odd", 2)
    with pytest.raises(GraphError, match=r"must split into 2 x 2 equal blocks.*multiple "
                                         "of 4"):
        b.all_to_all_single(b.input("x", (6, 4), placement="S(0)"))


def test_cost_row_and_bytes_sent():
    link = Link("l", 1e-3, 1e-9)
    # (p-1) messages of n/p bytes: one block to each other rank
    assert link.time("all_to_all_single", 4e6, 4) == pytest.approx(3 * (1e-3 + 1e6 * 1e-9))
    assert link.time("all_to_all_single", 4e6, 1) == 0.0
    start = next(n for n in _experts(4).graph.nodes if n.op == "all_to_all_single")
    assert sent_bytes(start, 4096, 4) == 3072


def test_drawn_as_a_collective():
    from workbench.ui.dist_dot import dist_dot
    dot = dist_dot(_experts(2), rank=1).source
    assert "all_to_all_single() x2" in dot and "shape=hexagon" in dot


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_runs_on_gloo_ranks_against_the_reference(ranks):
    run = run_ranks(_experts(ranks), seed=5)
    assert run.ok, run.errors
    # each rank holds 2p rows of 4 float32 (32p bytes) and sends (p-1)/p of them, twice
    assert all(t.sent_bytes == 2 * (ranks - 1) * 32 for t in run.times)
