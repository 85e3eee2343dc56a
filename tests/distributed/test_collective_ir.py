"""Collectives and placements in the IR, without processes: the verifier's rules and
reasons, the printer, the JSON form and builder, the single-process reference (and a
plain session running a graph that holds collectives, on one rank)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.distributed import (DistBuilder, DistProgram, Partial, PlacementError,
                                   Replicate, Shard, from_json, parse_placement, to_json)
from workbench.distributed.placement import assemble, piece
from workbench.distributed.samples import SAMPLES, dp_adamw, tp_mlp
from workbench.errors import GraphError
from workbench.ir import GraphBuilder
from workbench.runtime import random_inputs, run_reference
from workbench.session import Session

ROOT = Path(__file__).resolve().parents[2]


def test_placement_text_round_trip_and_bad_text():
    for pl in (Replicate(), Shard(1), Partial("sum"), Partial("avg"), Partial("max")):
        assert parse_placement(str(pl)) == pl
    with pytest.raises(GraphError, match="is not R, S\\(dim\\) or P"):
        parse_placement("Sharded")
    with pytest.raises(GraphError, match="pending one of sum, avg, max"):
        Partial("prod")


@pytest.mark.parametrize("pl", [Shard(0), Shard(1), Partial("sum"), Partial("avg"),
                                Partial("max"), Replicate()])
def test_pieces_put_back_together_give_the_global_array(pl):
    a = np.random.default_rng(3).uniform(-1, 1, (8, 6)).astype(np.float32)
    pieces = [piece(a, pl, 2, r, "a") for r in range(2)]
    np.testing.assert_allclose(assemble(pieces, pl), a, rtol=1e-6, atol=1e-6)
    if isinstance(pl, Partial):     # every rank holds an addend unlike the value
        assert all(not np.allclose(x, a) for x in pieces)


def _mlp(ranks=2, **kw):
    b = DistBuilder("mlp", ranks)
    x = b.input("x", (8, 16))
    w1 = b.input("w1", (16, 32), placement=kw.get("w1", "S(1)"))
    w2 = b.input("w2", (32, 16), placement=kw.get("w2", "S(0)"))
    y = b.matmul(b.relu(b.matmul(x, w1)), w2)
    return b, x, y


def test_megatron_placements_propagate():
    d = tp_mlp(16, 32, 64, 2)
    pl = d.placements
    mm = [n for n in d.graph.nodes if n.op == "matmul"]
    assert pl[mm[0].outputs[0]] == Shard(1)           # column-parallel
    assert pl[mm[1].outputs[0]] == Partial("sum")     # row-parallel: partial sums
    assert pl["out"] == Replicate()
    text = str(d)
    assert "@P(sum)" in text and "@S(1) local[16, 32]" in text and "all_reduce(" in text


def test_partial_times_replicated_is_refused_with_the_reason():
    b, x, y = _mlp()
    b.output(y * x, "out")
    with pytest.raises(PlacementError, match="not linear|all_reduce it first"):
        b.build()
    b, x, y = _mlp()
    b.output(y + x, "out")          # adding a replicated value once per rank: p times
    with pytest.raises(PlacementError, match="Partial value is one addend per rank"):
        b.build()


def test_row_reduction_over_a_sharded_dim_is_partial_and_refused_where_not_linear():
    b = DistBuilder("rows", 2)        # each rank sums its slice: one addend of the sum
    x = b.input("x", (8, 16), placement="S(1)")
    b.output(b.all_reduce(b.reduce_sum(x, axes=[1])), "y")
    assert str(b.build().placements["t1"]) == "P(sum)"
    b = DistBuilder("rows", 2)        # a LayerNorm's centring of a split row
    x = b.input("x", (8, 16), placement="S(1)")
    b.output(x - b.reduce_mean(x, axes=[1]), "y")
    with pytest.raises(PlacementError, match="Partial value is one addend per rank"):
        b.build()
    b = DistBuilder("rows", 2)        # over the other dim: each rank's rows are whole
    x = b.input("x", (8, 16), placement="S(1)")
    b.output(b.reduce_sum(x, axes=[0]), "y")
    assert b.build().placements["y"] == Shard(1)


def test_collectives_are_checked():
    b = DistBuilder("c", 2)
    x = b.input("x", (8, 4))             # replicated: an all_reduce would count it twice
    b.output(b.all_reduce(x), "y")
    with pytest.raises(PlacementError, match="counted p times"):
        b.build()
    b = DistBuilder("c", 2)
    x = b.input("x", (8, 4), placement="P(sum)")
    started = b.op("all_reduce", x, reduce_op="sum", group_size=2)
    b.output(b.exp(started), "y")
    with pytest.raises(PlacementError, match="before its wait_tensor"):
        b.build()
    b = DistBuilder("c", 3)
    x = b.input("x", (8, 4), placement="S(0)")
    with pytest.raises(GraphError, match="does not divide"):
        b.all_gather(x)
    with pytest.raises(GraphError, match="placement given for 'nope'"):
        DistProgram(dp_adamw(4, 4, 2).graph, 2, {"nope": "R"})


def test_group_size_must_match_the_ranks():
    d = dp_adamw(8, 4, 2)
    with pytest.raises(PlacementError, match="group_size 2 but the program runs on 4"):
        DistProgram(d.graph, 4, d.leaves).verify()
    assert d.with_ranks(4).verify().ranks == 4


def test_every_collective_in_the_builder_and_the_reference():
    b = DistBuilder("all", 2)
    x = b.input("x", (4, 6), placement="P(max)")
    r = b.all_reduce(x, "max")
    s = b.all_to_all(b.reduce_scatter(b.input("g", (4, 6), placement="P(avg)"), 0, "avg"),
                     split_dim=1, concat_dim=0)
    t = b.send_recv(s, dim=1, shift=1)
    b.output(r + b.all_gather(t, 1), "y")
    d = b.build()
    assert d.placements[t.name] == Shard(1)
    i = random_inputs(d.graph, 1)
    ref = run_reference(d.graph, i)["y"]
    # the logical meaning: identity but for send_recv, a roll by one shard along dim 1
    np.testing.assert_allclose(ref, i["x"] + np.roll(i["g"], 3, axis=1), rtol=1e-6)


def test_json_round_trip_and_the_sample_files_are_current(tmp_path):
    for fname, (make, sizes) in SAMPLES.items():
        d = make(**sizes)
        back = from_json(json.loads(json.dumps(to_json(d))))
        assert str(back) == str(d)
        on_disk = json.loads((ROOT / "sample_graphs" / "distributed" / fname).read_text())
        assert on_disk == json.loads(json.dumps(to_json(d))), \
            "run `python sample_graphs/make_distributed_samples.py`"
    with pytest.raises(GraphError, match="not a distributed program"):
        from_json({"format": "workbench.graph"})


def test_a_plain_session_runs_collectives_as_one_rank():
    """One rank: every collective moves nothing; the plain session compiles the rest and
    matches the reference (a graph with collectives is an ordinary graph)."""
    d = tp_mlp(16, 32, 64, 2)
    s = Session(d.graph, backend="cpu")
    s.auto("stitch")
    out = s.run(s.inputs)["out"]
    np.testing.assert_allclose(out, s.reference["out"], rtol=1e-4, atol=1e-4)
    b = GraphBuilder("roll")
    x = b.input("x", (4, 6))
    w = b.op("wait_tensor", b.op("send_recv", x, dim=1, shift=1, group_size=3))
    b.output(w * 2.0, "y")
    s = Session(b.build(), backend="cpu")
    x_ = s.inputs["x"]
    np.testing.assert_allclose(s.run(s.inputs)["y"], 2 * np.roll(x_, 2, axis=1))
