"""Bucketing small AllReduces into one flat-buffer message: the same function, run on
1, 2 and 4 ranks against the reference, refused with the reason where the messages
cannot be joined, and chosen by ``auto`` where the model says one message is faster."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed import DistBuilder
from workbench.distributed.bucket import bucket_all_reduces
from workbench.errors import FusionRefused
from workbench.runtime.reference import random_inputs, run_reference
from workbench.session import Session

SHAPES = [(4, 6), (8,), (2, 3, 4)]


def _sgd(ranks, shapes=SHAPES):
    """A data-parallel SGD step over several small parameters: one AllReduce each."""
    b = DistBuilder("sgd", ranks)
    for i, shp in enumerate(shapes):
        g = b.input(f"g{i}", shp, placement="P(avg)")
        w = b.input(f"w{i}", shp)
        b.output(w - b.all_reduce(g, "avg") * 0.1, f"w{i}_out")
    return b.build()


def test_bucketed_program_is_the_same_function():
    d = _sgd(2)
    c = bucket_all_reduces(d)
    assert [n.op for n in c.graph.nodes].count("all_reduce") == 1
    x = random_inputs(d.graph, 1)
    a, r = run_reference(d.graph, x), run_reference(c.graph, x)
    for k in a:
        np.testing.assert_array_equal(a[k], r[k])


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_auto_buckets_small_all_reduces_and_runs_on_ranks(ranks):
    s = Session(_sgd(ranks), ranks=ranks)
    s.auto("stitch")
    ops = [n.op for n in s.graph.nodes]
    assert ops.count("all_reduce") == (3 if ranks == 1 else 1), s.step.decisions
    assert ranks == 1 or any(x.startswith("applied: bucket") for x in s.step.decisions)
    run = s.run()
    assert run.ok, run.errors
    assert all(t.sent_bytes == (0 if ranks == 1 else
                                2 * (ranks - 1) * 56 * 4 // ranks) for t in run.times)


def test_large_all_reduces_are_not_bucketed_and_the_reason_is_listed():
    # (the model only; 4 MB each on 4 ranks, where the default link -- gloo's forms --
    # keeps the AllReduces unsplit: measured faster there than ReduceScatter +
    # AllGather, tests/distributed/test_default_link.py. At 64 MB on 2 ranks it splits
    # both, also measured faster, and no AllReduce is left to bucket.)
    s = Session(_sgd(4, [(1024, 1024), (1024, 1024)]), ranks=4)
    s.auto("stitch")
    assert [n.op for n in s.graph.nodes].count("all_reduce") == 2
    assert any("not applied: bucket" in x and "the model says slower" in x
               for x in s.step.decisions), s.step.decisions


def test_dependent_or_mixed_all_reduces_are_refused():
    b = DistBuilder("chain", 2)      # the second AllReduce's input needs the first's result
    g = b.input("g", (4, 8), placement="P(sum)")
    w = b.input("w", (8, 4), placement="S(0)")
    r = b.all_reduce(g)
    mine = b.op("shard_local", r, group_size=2, dim=1)     # (no communication)
    b.output(b.all_reduce(b.matmul(mine, w)), "s")
    with pytest.raises(FusionRefused, match="depends on .* they cannot go in one message"):
        bucket_all_reduces(b.build())
    b = DistBuilder("mixed", 2)
    g = b.input("g", (4,), placement="P(avg)")
    h = b.input("h", (4,), placement="P(sum)")
    b.output(b.all_reduce(g, "avg"), "a")
    b.output(b.all_reduce(h, "sum"), "s")
    d = b.build()
    with pytest.raises(FusionRefused, match="reduce by avg, sum: one message reduces"):
        bucket_all_reduces(d)
    with pytest.raises(FusionRefused, match="bucketing joins two or more"):
        bucket_all_reduces(d, ["n0"])
