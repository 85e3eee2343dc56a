"""Chunking a matmul and its AllReduce into k pipelined pieces (overlap): exact against
the single-process reference on 1, 2 and 4 ranks, refused with the reason where it
cannot be, considered by ``auto`` with every k not applied listed; and the per-rank
timeline whose overlap it is measured by."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.distributed.chunk import chunk_all_reduce
from workbench.distributed.samples import dp_adamw, tp_mlp
from workbench.distributed.timeline import Span, overlap
from workbench.errors import FusionRefused
from workbench.runtime.reference import random_inputs, run_reference
from workbench.session import Session


def _ar(d):
    return next(n for n in d.graph.nodes if n.op == "all_reduce")


def test_chunked_program_is_the_same_function():
    d = tp_mlp(16, 32, 64, 2)
    c = chunk_all_reduce(d, _ar(d).id, 4)
    assert [n.op for n in c.graph.nodes].count("all_reduce") == 4
    x = random_inputs(d.graph, 3)
    np.testing.assert_array_equal(run_reference(c.graph, x)["out"],
                                  run_reference(d.graph, x)["out"])


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_chunked_tp_mlp_on_ranks_matches_the_reference(ranks):
    s = Session(tp_mlp(16, 32, 64, ranks), ranks=ranks)
    s.chunk_all_reduce(_ar(s.program).id, k=2)
    assert s.step.action.startswith("chunk_all_reduce")
    run = s.run()
    assert run.ok, run.errors
    for t in run.times:        # the timeline: two pieces in flight, computed overlap
        comm = [sp for sp in t.spans if sp.kind == "comm"]
        assert len(comm) == 2 and all(sp.end_s >= sp.start_s for sp in comm)
        assert 0 <= t.overlap_s <= t.compute_s + 1e-9
    s.undo()
    assert [n.op for n in s.graph.nodes].count("all_reduce") == 1


@pytest.mark.parametrize("ref, k, reason", [
    ("n0", 2, "is matmul, not an all_reduce"),
    (None, 5, r"dim 0 of 't10' \(16\) does not split into 5 equal pieces"),
    (None, 1, "chunk into 2 or more pieces")])
def test_refused_with_the_reason(ref, k, reason):
    d = tp_mlp(16, 32, 64, 2)
    with pytest.raises(FusionRefused, match=reason):
        chunk_all_reduce(d, ref or _ar(d).id, k)


def test_an_all_reduce_of_no_matmul_is_refused():
    d = dp_adamw(8, 4, 2)
    with pytest.raises(FusionRefused, match="which no matmul makes"):
        chunk_all_reduce(d, _ar(d).id, 2)


def test_auto_lists_every_k_it_did_not_apply():
    s = Session(tp_mlp(64, 256, 1024, 2), ranks=2)     # gloo: latency dominates
    s.auto("stitch")
    chunks = [x for x in s.step.decisions if x.startswith("not applied: chunk")]
    assert len(chunks) == 3 and all("the model says slower" in x for x in chunks)


def test_overlap_is_compute_while_a_collective_is_in_flight():
    spans = [Span("compute", "a", 0.0, 1.0), Span("comm", "x", 0.5, 2.0),
             Span("comm", "y", 1.5, 2.5), Span("compute", "b", 2.0, 3.0),
             Span("wait", "x", 1.0, 2.0)]
    assert overlap(spans) == pytest.approx(0.5 + 0.5)
