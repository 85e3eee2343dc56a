"""The repeat IR (ir/repeat.py): verifier, printer, JSON round trip, NumPy reference."""
from __future__ import annotations

import json

import numpy as np
import pytest

import workbench as wb
from workbench.errors import GraphError
from workbench.ir.repeat import Repeat, repeat_from_json, repeat_to_json
from workbench.runtime import run_reference


def damped_spring(n=16, k=0.3, c=0.05, dt=0.1):
    """x'' = -k x - c v + force_t: state (x, v), a stacked force, stacked energy."""
    b = wb.GraphBuilder("spring")
    x, v = b.input("x", (n, 2)), b.input("v", (n, 2))
    f, k_ = b.input("force", (n, 2)), b.input("k", (2,))
    a = f - k_ * x - c * v
    v2 = b.output(v + dt * a, "v_next")
    b.output(x + dt * v2, "x_next")
    b.output(v2 * v2, "energy")
    return b.build()


def test_builder_roles_and_shapes():
    r = wb.repeat(damped_spring(), 9, {"x": "x_next", "v": "v_next"}, stacked=["force"])
    assert isinstance(r, Repeat)
    assert r.carried_inputs == ("x", "v") and r.invariant_inputs == ("k",)
    assert r.stacked_outputs == ("energy",) and r.outputs == ("x_next", "v_next", "energy")
    assert r.value("force").shape == (9, 16, 2) and r.value("energy").shape == (9, 16, 2)
    assert r.value("x").shape == (16, 2) and r.batch == 16


def test_reference_runs_the_body_step_by_step():
    r = wb.repeat(damped_spring(), 7, {"x": "x_next", "v": "v_next"}, stacked=["force"])
    rng = np.random.default_rng(1)
    ins = {n: rng.uniform(-1, 1, r.value(n).shape).astype(np.float32) for n in r.inputs}
    got = r.reference(ins)
    x, v = ins["x"], ins["v"]
    for t in range(7):                      # the same steps, one body graph at a time
        res = run_reference(r.body, {"x": x, "v": v, "force": ins["force"][t], "k": ins["k"]})
        np.testing.assert_array_equal(got["energy"][t], res["energy"])
        x, v = res["x_next"], res["v_next"]
    np.testing.assert_array_equal(got["x_next"], x)
    np.testing.assert_array_equal(got["v_next"], v)
    assert not np.array_equal(x, ins["x"])


def test_printer_and_json_round_trip():
    r = wb.repeat(damped_spring(), 5, {"x": "x_next", "v": "v_next"}, stacked=["force"],
                  batch_axis=0)
    text = str(r)
    assert text.startswith("repeat spring x5 (batch axis 0) {")
    assert "carry x -> x_next: float32[16, 2]" in text and "stacked in force: float32[5, 16, 2]" in text
    assert "invariant k: float32[2]" in text and "graph spring(" in text
    d = json.loads(json.dumps(repeat_to_json(r)))
    back = repeat_from_json(d)
    assert str(back) == text and back.carried == r.carried and back.trips == 5


@pytest.mark.parametrize("change, words", [
    (dict(trips=0), "trip count"),
    (dict(trips=2.5), "trip count"),
    (dict(carried=()), "nothing is carried"),
    (dict(carried=(("x", "energy"), ("v", "v_next"))), "keeps its shape"),
    (dict(carried=(("nope", "x_next"),)), "not a body input"),
    (dict(carried=(("x", "x_next"), ("x", "v_next"))), "carried twice"),
    (dict(stacked_inputs=("x",)), "not carried"),
    (dict(batch_axis=2), "batch axis 2 does not exist"),
])
def test_verifier_names_the_fault(change, words):
    g = damped_spring()
    if change.get("carried") == (("x", "energy"), ("v", "v_next")):
        b = wb.GraphBuilder("bad")
        x, v = b.input("x", (4, 2)), b.input("v", (4, 2))
        b.output(v + 1.0, "v_next")
        b.output(b.reduce_sum(x, axes=[1], keepdims=False), "energy")
        g = b.build()
    args = dict(name="r", body=g, trips=3, carried=(("x", "x_next"), ("v", "v_next")),
                stacked_inputs=("force",), batch_axis=0)
    args.update(change)
    with pytest.raises(GraphError, match=words):
        Repeat(**args).verify()


def test_batch_extents_must_agree():
    b = wb.GraphBuilder("mixed")
    x, y = b.input("x", (4,)), b.input("y", (5,))
    b.output(x + 1.0, "x_next")
    b.output(y * 2.0, "y_next")
    with pytest.raises(GraphError, match="different extents"):
        wb.repeat(b.build(), 3, {"x": "x_next", "y": "y_next"})


def test_bad_inputs_and_bad_json_are_named():
    r = wb.repeat(damped_spring(), 3, {"x": "x_next", "v": "v_next"}, stacked=["force"])
    ins = {n: np.ones(r.value(n).shape, np.float32) for n in r.inputs}
    ins["force"] = np.ones((16, 2), np.float32)
    with pytest.raises(GraphError, match="stacked: one slice per step first"):
        r.reference(ins)
    with pytest.raises(GraphError, match="not a workbench repeat"):
        repeat_from_json({"format": "workbench.graph"})
    d = repeat_to_json(r)
    with pytest.raises(GraphError, match="repeat format version 99 is newer.*upgrade"):
        repeat_from_json({**d, "version": 99})
    with pytest.raises(GraphError, match="version must be an integer, got str"):
        repeat_from_json({**d, "version": "1"})
    d["carried"] = [["x"]]
    with pytest.raises(GraphError, match="pairs of names"):
        repeat_from_json(d)


def test_junk_arguments_end_in_one_clear_error():
    """What a careless caller passes to wb.repeat and RepeatSession ends in a
    WorkbenchError (the API fuzzer's junk), never another exception."""
    from workbench.testing.fuzz.api import JUNK
    g = damped_spring()
    state = {"x": "x_next", "v": "v_next"}
    s = wb.RepeatSession(wb.repeat(g, 3, state, stacked=["force"]))
    calls = [lambda j: wb.repeat(g, j, state), lambda j: wb.repeat(g, 3, j),
             lambda j: wb.repeat(j, 3, state), lambda j: wb.repeat(g, 3, state, stacked=j),
             lambda j: wb.repeat(g, 3, state, batch_axis=j),
             lambda j: wb.repeat(g, 3, state, name=j), lambda j: wb.RepeatSession(j),
             lambda j: wb.RepeatSession(s.repeat, seed=j), s.fuse_steps, s.predict,
             s.source, s.apply, s.reference]
    for call in calls:
        for j in JUNK:
            try:
                call(j)
            except wb.WorkbenchError:
                pass


def _noisy(n=6, trips=4):
    """x_next = x + uniform(key, element, step): the counters the repeat supplies."""
    b = wb.GraphBuilder("walk")
    x = b.input("x", (n,))
    key = b.input("key", (), "uint32")
    u = b.op("random_uniform", key, b.input("env", (n,), "int32"), b.input("t", (), "int32"))
    b.output(x + u, "x_next")
    b.output(u, "u")
    return wb.repeat(b.build(), trips, {"x": "x_next"}, step_input="t", index_input="env")


def test_counters_are_supplied_by_the_repeat():
    from workbench.ops.random import uniform_reference
    r = _noisy()
    assert r.inputs == ("x", "key") and r.invariant_inputs == ("key",)
    assert r.counter_inputs == ("t", "env")
    ins = {"x": np.zeros(6, np.float32), "key": np.array(9, np.uint32)}
    out = r.reference(ins)
    for t in range(4):       # step t draws (key, environment, t)
        want = uniform_reference([np.uint32(9), np.arange(6, dtype=np.int32), np.int32(t)], {})
        assert np.array_equal(out["u"][t], want[0])
    assert len({out["u"][t].tobytes() for t in range(4)}) == 4
    assert "counters step index -> t, element index -> env" in str(r)
    back = repeat_from_json(json.loads(json.dumps(repeat_to_json(r))))
    assert (back.step_input, back.index_input) == ("t", "env")
    assert np.array_equal(back.reference(ins)["u"], out["u"])


@pytest.mark.parametrize("kw,words", [
    ({"step_input": "nope"}, "step_input 'nope' is not a body input"),
    ({"step_input": "x"}, "step_input 'x' is also carried"),
    ({"step_input": "env"}, "must be an integer of shape \\[\\]"),
    ({"index_input": "t"}, "must be an integer of shape \\[6\\]"),
    ({"index_input": "key"}, "must be an integer of shape \\[6\\]")])
def test_bad_counters_are_named(kw, words):
    r = _noisy()
    with pytest.raises(GraphError, match=words):
        wb.repeat(r.body, 3, {"x": "x_next"}, **kw)
