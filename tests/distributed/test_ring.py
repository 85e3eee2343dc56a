"""The ring ReduceScatter and AllGather on gloo ranks (``workbench/distributed/ring.py``):
a buffer cut into several segments, every reduction, a dim other than 0, and two
collectives in flight at once (their messages must not cross), against the
single-process reference."""
from __future__ import annotations

import pytest

from workbench.distributed import DistBuilder
from workbench.distributed.ring import SEGMENT
from workbench.distributed.runner import run_ranks

ROWS, COLS = 6, 524_300     # a rank's chunk (2 or 3 ranks) spans two segments


def _two_in_flight(ranks):
    b = DistBuilder("ring", ranks)
    g = b.input("g", (ROWS, COLS), placement="P(avg)")
    x = b.input("x", (4, 6), placement="P(max)")     # (6 and 12: 2 or 3 ranks)
    s = b.input("s", (12, 5), placement="P(sum)")
    # both reductions started before either is waited for
    gs = b.op("reduce_scatter", g, group_size=ranks, reduce_op="avg", dim=0)
    xs = b.op("reduce_scatter", x, group_size=ranks, reduce_op="max", dim=1)
    ss = b.reduce_scatter(s, 0, "sum")
    g_shard, x_shard = b.op("wait_tensor", gs), b.op("wait_tensor", xs)
    b.output(b.all_gather(g_shard * 2.0, 0), "g2")
    b.output(b.all_gather(x_shard, 1), "xm")
    b.output(b.all_gather(ss, 0), "ss")
    return b.build()


@pytest.mark.parametrize("ranks", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_ring_collectives_match_the_reference(ranks):
    assert ROWS // ranks * COLS > SEGMENT    # (else the segments go untested)
    run = run_ranks(_two_in_flight(ranks), seed=5)
    assert run.ok, run.errors
