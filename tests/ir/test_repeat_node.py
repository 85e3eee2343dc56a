"""A repeat as a node of an ordinary graph (ops/repeat_node.py): ops before and after
a CartPole rollout, verified, printed, saved and loaded as JSON, run by the reference
and by the graph session (the node a library op on the host), planned around."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.errors import GraphError
from workbench.ir.serialize import from_json, to_json
from workbench.runtime import run_reference
from workbench.testing.simulators import cartpole


def _rollout_graph(n=64, trips=8):
    """Observations scaled before the repeat, rewards summed and a state doubled after."""
    r = cartpole(n, trips)
    b = wb.GraphBuilder("rollout")
    xs = [b.input(f"{i}_in", r.value(i).shape, r.value(i).dtype.value) for i in r.inputs]
    xs[0] = xs[0] * 0.5                            # an op before the repeat
    outs = b.op("repeat", *xs, repeat=r)
    b.output(b.reduce_sum(outs[r.outputs.index("reward")], axes=[0], keepdims=False),
             "ret")
    b.output(outs[0] * 2.0, "x_twice")             # and after it
    return r, b.build()


def _inputs(r, g, seed=1):
    ins = wb.RepeatSession(r, seed=seed).inputs()
    return {f"{i}_in": ins[i] for i in r.inputs}


def test_reference_is_the_ops_around_the_repeat():
    r, g = _rollout_graph()
    ins = _inputs(r, g)
    got = run_reference(g, ins)
    direct = r.reference({**{i: ins[f"{i}_in"] for i in r.inputs},
                          "x": ins["x_in"] * np.float32(0.5)})
    assert np.array_equal(got["ret"], direct["reward"].sum(axis=0))
    assert np.array_equal(got["x_twice"], direct["x_next"] * np.float32(2.0))
    assert "repeat(" in str(g) and "Repeat('cartpole_x8', x8" in str(g)


def test_json_round_trip_keeps_the_repeat():
    r, g = _rollout_graph()
    back = from_json(to_json(g))
    node = [n for n in back.nodes if n.op == "repeat"][0]
    r2 = node.attr("repeat")
    assert (r2.trips, r2.carried, r2.stacked_inputs) == (r.trips, r.carried, r.stacked_inputs)
    ins = _inputs(r, g)
    a, b = run_reference(g, ins), run_reference(back, ins)
    assert all(np.array_equal(a[o], b[o]) for o in g.outputs)


def test_graph_session_runs_and_plans_around_the_repeat():
    r, g = _rollout_graph()
    ins = _inputs(r, g)
    want = run_reference(g, ins)
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    got = s.run(ins)
    for o in g.outputs:
        assert np.allclose(got[o], want[o], rtol=1e-5, atol=1e-5), o
    groups = [gr for gr in s.plan.groups if "repeat" in {g.node(n).op for n in gr.nodes}]
    assert len(groups) == 1 and len(groups[0].nodes) == 1     # the repeat on its own


def test_a_wrong_input_is_named():
    r = cartpole(16, 4)
    b = wb.GraphBuilder("bad")
    xs = [b.input(i, r.value(i).shape, r.value(i).dtype.value) for i in r.inputs]
    xs[4] = b.input("short_actions", (3, 16), "int32")
    with pytest.raises(GraphError, match="input 'action' is given int32\\[3, 16\\].*"
                                         "stacked: one slice per step first"):
        b.op("repeat", *xs, repeat=r)
    with pytest.raises(GraphError, match="takes 9 inputs"):
        b.op("repeat", *xs[:3], repeat=r)
    with pytest.raises(GraphError, match="needs attr repeat: a Repeat"):
        b.op("repeat", *xs, repeat="cartpole")


def test_repeats_nested_in_json_are_bounded():
    b = wb.GraphBuilder("count")
    b.output(b.input("x", (4,)) + 1.0, "y")
    r = wb.repeat(b.build(), 2, {"x": "y"})
    for _ in range(5):             # a repeat whose body is one repeat node, five deep
        b = wb.GraphBuilder("outer")
        b.output(b.op("repeat", b.input("x", (4,)), repeat=r), "y")
        r = wb.repeat(b.build(), 2, {"x": "y"})
    assert r.reference({"x": np.zeros(4, np.float32)})["y"][0] == 2 ** 6
    with pytest.raises(GraphError, match="nested more than 4 deep"):
        from_json(to_json(r.body))
