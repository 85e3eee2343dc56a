"""The transformations offered for a selection (issue 14: DaCe-like optimizer view):
every action is what its Plan method makes (or refuses, with the same reason), priced
by the cost model, and trying them changes nothing; apply / goto / compare."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.errors import FusionRefused, WorkbenchError
from workbench.fusion.actions import effect, internal_edges
from workbench.session import Session
from workbench.step_table import COMPARE_ROWS, counted_bytes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


@pytest.fixture
def session():
    return Session(str(SAMPLES / "layernorm.json"), backend="reference")


def _call(plan, action):
    method, args = action.call
    return getattr(plan, method)(*args)


@pytest.mark.parametrize("sample, planner, pick", [
    ("layernorm.json", "none", ("n0", "n1")),
    ("layernorm.json", "rules", ("n3",)),
    ("softmax.json", "rules", ("n1",)),
    ("bert_chain.onnx", "stitch", ("n5", "n6")),
    ("cross_entropy.json", "xla", ("n2",)),
])
def test_every_action_is_what_its_plan_method_makes(sample, planner, pick):
    s = Session(str(SAMPLES / sample), backend="reference")
    if planner != "none":
        s.auto(planner)
    before, history = s.plan, list(s.history)
    picks = [p for p in pick if p in s.plan.group_of] or [s.plan.graph.nodes[0].id]
    acts = s.actions(picks)
    assert acts, "a selection always has some action (at least a neighbour or tune)"
    assert s.plan is before and s.history == history          # trying changed nothing
    for a in acts:
        if a.call[0] == "tune":
            assert a.legal and a.plan is None and a.effect is None
            continue
        if a.legal:
            made = _call(before, a)
            assert made == a.plan and made != before
            e = effect(made, s.cost_model)
            # priced by the model, its bytes counted as its step's will be (the kernel
            # IR's, what a measurement reports: workbench/step_table.py)
            assert (a.effect.kernels, a.effect.predicted_ms) == (e.kernels, e.predicted_ms)
            assert a.effect.bytes_moved == counted_bytes(s, made)
            assert e.kernels == len(made.groups)
            assert e.predicted_ms == pytest.approx(s.cost_model.predict(made).ms)
        else:
            with pytest.raises(FusionRefused) as err:
                if _call(before, a) == before:
                    raise FusionRefused("the plan would not change")
            assert a.reason == str(err.value)
    # legal first, cheapest predicted first
    priced = [a.effect.predicted_ms for a in acts if a.legal and a.effect]
    assert priced == sorted(priced)
    legal_flags = [a.legal for a in acts]
    assert legal_flags == sorted(legal_flags, reverse=True)


def test_layernorm_offers_every_scheme_and_mapping_with_reasons(session):
    session.auto("rules")
    k = session.plan.groups[0]
    edges = internal_edges(session.plan, k.id)
    acts = session.actions([k.nodes[0]])
    labels = [a.label for a in acts]
    # each internal edge by every scheme but its own, named as the drawing shows it
    for v in edges:
        assert sum(lab.startswith(f"scheme {v} (") for lab in labels) == 2
    maker = session.graph.producer[edges[0]]
    assert any(f"({maker.op} {maker.id} → " in lab for lab in labels)
    # the mappings other than the current one, and tuning
    current = k.schedule.mapping.value
    mapped = {lab.split(" -> ")[1] for lab in labels if lab.startswith("mapping ")}
    assert mapped == {"warp", "block", "split", "thread"} - {current}
    assert f"tune {k.id}" in labels and f"split {k.id}" in labels
    # refused ones carry the planner's reason (a per-row value cannot be thread-local)
    refused = [a for a in acts if not a.legal]
    assert refused and all(a.reason and a.plan is None for a in refused)
    assert any("per row" in a.reason for a in refused)


def test_fusing_a_selection_previews_fewer_kernels_and_bytes(session):
    before = session.effect()
    fuse = next(a for a in session.actions(["n0", "n1"]) if a.label == "fuse n0 n1")
    assert fuse.legal and fuse.effect.kernels == before.kernels - 1
    assert fuse.effect.bytes_moved < before.bytes_moved
    assert fuse.delta(before).startswith("-1 kernel, -")
    session.apply(fuse)
    assert session.plan == fuse.plan and session.step.action == "fuse n0 n1"
    # the action was made for the plan before: applying it again is refused
    with pytest.raises(WorkbenchError, match="another plan than the current one"):
        session.apply(fuse)
    session.undo()
    session.apply(fuse)                              # current again: fine
    assert len(session.history) == 2


def test_a_refused_action_cannot_be_applied_and_unknown_refs_are_refused(session):
    session.auto("rules")
    bad = next(a for a in session.actions(["n3"]) if not a.legal)
    with pytest.raises(FusionRefused, match=bad.reason[:30].replace("(", r"\(")):
        session.apply(bad)
    with pytest.raises(FusionRefused, match="no group or node 'n999'"):
        session.actions(["n999"])
    with pytest.raises(WorkbenchError, match="apply takes an action"):
        session.apply("fuse n0 n1")


def test_goto_and_compare(session):
    session.auto("xla")
    session.auto("rules")
    assert session.goto(0).planner == "none" and len(session.history) == 3
    assert session.goto(-1).planner == "rules" and session.position == 2
    with pytest.raises(WorkbenchError, match="no step 3: the history has steps 0..2"):
        session.goto(3)
    session.goto(1)
    df = session.compare(0, 2)
    assert list(df.index) == COMPARE_ROWS
    assert COMPARE_ROWS[:4] == ["kernels", "bytes_moved_MB", "predicted_ms", "latency_ms"]
    assert df.columns[0].startswith("step 0: load") and df.columns[1].startswith("step 2")
    assert df.loc["kernels"].iloc[1] == 1 and df.loc["kernels", "change"] < 0
    assert df.loc["bytes_moved_MB", "change"] < 0
    assert np.isnan(df.loc["latency_ms"].iloc[0])                 # not measured
    with pytest.raises(WorkbenchError, match="no step"):
        session.compare(0, 7)
