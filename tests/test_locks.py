"""Locks in a session (issue 48): constraints as values, refused when stated with the
reason (the session unchanged), part of the history (undo restores them), taken from the
user's manual actions and the tuner's launches, kept by every manual action and by Auto."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.errors import FusionRefused, WorkbenchError
from workbench.fusion.constraints import (Constraints, Cut, FixedLaunch, FixedMapping,
                                          FixedScheme, MustFuse, Pinned)
from workbench.fusion import run_planner
from workbench.fusion.honour import violations
from workbench.session import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sample_graphs"))
import make_samples  # noqa: E402


def session():
    """LayerNorm (sample_graphs/layernorm.json's ops and ids at 64 x 100, quick to
    compile): n0 mean, n1 sub, n2 mul, n3 mean, n4 add, n5 rsqrt, n6 mul, n7 mul, n8 add."""
    return Session(make_samples.layernorm(64, 100), backend="cpu", calibrate=False)


ALL = [MustFuse(("n0", "n1")), Cut(("n3", "n4")), FixedScheme("n1->n2", "regional"),
       FixedMapping(("n0",), "warp"), FixedLaunch(("n5",), {"threads": 128}),
       Pinned(("n6", "n7"), (("t8", "local"),), "", (("threads", 64),))]


def test_constraints_are_frozen_printable_values_that_round_trip_json():
    cs = Constraints.of_items(ALL)
    assert str(cs) == ("must-fuse n0 n1; cut n3->n4; scheme n1->n2 regional; mapping n0 "
                       "warp; launch n5 threads=128; pinned n6 n7")
    assert Constraints.from_json(cs.to_json()) == cs
    assert hash(cs) == hash(Constraints.from_json(cs.to_json()))
    assert cs.add(Cut(("n3", "n4"))) == cs                 # a set: stated twice, kept once
    with pytest.raises(AttributeError):
        cs.items[1].edge = ("n0", "n1")
    for bad, what in [(lambda: MustFuse(("n0",)), "at least two"),
                      (lambda: Cut("n3"), "producer, consumer"),
                      (lambda: FixedScheme(("n1", "n2"), "shared"), "unknown stitch scheme"),
                      (lambda: FixedLaunch(("n5",), {}), "no launch parameter"),
                      (lambda: Constraints.from_json('[{"kind": "glue"}]'), "kinds are")]:
        with pytest.raises(WorkbenchError, match=what):
            bad()


@pytest.mark.parametrize("cs,why", [
    ([Cut(("n1", "n2")), MustFuse(("n1", "n2"))], "lies inside"),
    ([MustFuse(("n0", "n2"))], "cycle"),                 # n1 between them, outside
    ([FixedScheme(("n1", "n2"), "regional")], "elementwise kernel"),  # no row to share
    ([FixedLaunch(("n0",), {"threads": 4096})], "threads"),
    ([FixedMapping(("n4",), "warp")], "row-reduction"),
    ([Pinned(("n0", "n1")), FixedMapping(("n1", "n2"), "warp")], "overlapping"),
    ([Cut(("n0", "n5"))], "no edge"),
    ([MustFuse(("n0", "n99"))], "no node 'n99'"),
])
def test_a_constraint_that_cannot_be_met_is_refused_when_stated(cs, why):
    s = session()
    s.fuse(["n0", "n1"])
    before = (len(s.history), s.position, s.constraints, s.plan)
    with pytest.raises(FusionRefused, match=why):
        s.constrain(*cs)
    assert (len(s.history), s.position, s.constraints, s.plan) == before


def test_constraints_are_steps_undo_and_redo_restore_them():
    s = session()
    s.constrain(Cut(("n3", "n4")))
    s.auto("rules")
    assert s.step.action == "auto rules around 1 lock"
    s.constrain(MustFuse(("n5", "n6")))
    assert len(s.constraints) == 2
    s.undo()
    assert s.constraints == Constraints((Cut(("n3", "n4")),))
    s.undo(), s.undo()
    assert len(s.constraints) == 0 and s.position == 0
    s.redo()
    assert s.constraints == Constraints((Cut(("n3", "n4")),))
    s.goto(-1)
    s.unconstrain("cut n3->n4")
    assert s.constraints == Constraints((MustFuse(("n5", "n6")),))
    s.unconstrain()
    assert len(s.constraints) == 0
    with pytest.raises(WorkbenchError, match="no such constraint"):
        s.unconstrain(Cut(("n0", "n1")))


def test_auto_plans_around_the_locks_and_says_what_they_ruled_out():
    s = session()
    s.constrain(Cut(("n3", "n4")), FixedMapping(("n0", "n1", "n2"), "warp"))
    for planner in ("none", "xla", "rules", "stitch"):
        plan = s.auto(planner)
        assert violations(plan, s.constraints) == []
        assert s.plan.group("n0").forced_mapping == "warp"
        text = "\n".join(map(str, s.step.decisions))
        assert "planned around 2 locks" in text
        if planner != "none":
            assert "not fused n3 + n4: cut n3->n4 locked by user" in text, text
    m = s.measure(warmup=0, repeats=1)
    assert m.within_tolerance


def test_a_manual_action_that_breaks_a_kept_lock_is_refused():
    s = session()
    s.fuse(["n0", "n1", "n2"])
    s.lock("k0")                                          # pinned n0 n1 n2
    assert str(s.constraints) == "pinned n0 n1 n2"
    n = len(s.history)
    for act in (lambda: s.split("k0"), lambda: s.fuse(["n2", "n3"]),
                lambda: s.set_mapping("k0", "warp")):
        with pytest.raises(FusionRefused, match="would break the lock pinned n0 n1 n2"):
            act()
    assert len(s.history) == n
    s.fuse(["n3", "n4"])                                   # elsewhere: free


def test_lock_an_edge_keeps_it_fused_cut_or_with_its_scheme():
    s = session()
    s.fuse(["n0", "n1", "n2"])
    s.set_scheme("t2", "regional")
    s.lock("n1->n2")
    s.lock("n0->n1")
    s.lock(("n2", "n3"))
    assert str(s.constraints) == ("must-fuse n0 n1 n2; scheme n1->n2 regional; "
                                  "must-fuse n0 n1; cut n2->n3")
    s.auto("stitch")
    assert s.plan.group("n0").scheme("t2").value == "regional"
    assert s.plan.group("n2").id != s.plan.group("n3").id


@pytest.mark.parametrize("act,locks", [
    (lambda s: s.fuse(["n3", "n4", "n5"]), "must-fuse n3 n4 n5"),
    (lambda s: s.split("k0"), "cut n0->n1; cut n1->n2"),
    (lambda s: s.set_scheme("t2", "regional"), "must-fuse n0 n1 n2; scheme n1->n2 regional"),
    (lambda s: s.set_mapping("k0", "warp"), "mapping n0 n1 n2 warp"),
    (lambda s: s.set_launch("k0", threads=128), "launch n0 n1 n2 threads=128"),
])
def test_lock_step_keeps_what_a_manual_action_changed(act, locks):
    s = session()
    s.fuse(["n0", "n1", "n2"])
    act(s)
    s.lock_step()
    assert str(s.constraints) == locks
    kept = s.plan
    s.auto("stitch")
    assert violations(s.plan, s.constraints) == []
    assert s.cost_model.predict(s.plan).ms <= s.cost_model.predict(kept).ms * (1 + 1e-12)


def test_lock_tuned_keeps_launch_parameters_across_a_replan():
    s = session()
    with pytest.raises(WorkbenchError, match="tune first"):
        s.lock_tuned()
    s.auto("rules")
    s.set_launch("n0", threads=64)
    s.lock_tuned()
    assert str(s.constraints) == f"launch {' '.join(s.plan.group('n0').nodes)} threads=64"
    s.auto("stitch")
    assert dict(s.plan.group("n0").forced_launch) == {"threads": 64}


def test_tune_lock_keeps_the_measured_launch():
    s = Session("sample_graphs/softmax.json", backend="cpu", calibrate=False)
    s.auto("rules")
    s.tune(["n0"], repeats=1, lock=True)
    tuned = s.plan.group("n0")
    if tuned.forced_launch:            # the rule's launch may be the fastest
        assert FixedLaunch(tuned.nodes, tuned.forced_launch) in s.constraints
        s.auto("stitch")
        assert s.plan.group("n0").forced_launch == tuned.forced_launch
    else:
        assert len(s.constraints) == 0


def test_auto_keeps_the_users_plan_when_it_is_predicted_faster_than_the_planners():
    s = session()
    s.fuse([f"n{i}" for i in range(9)])                   # LayerNorm in one kernel by hand
    s.lock("n0->n1")                                      # must-fuse n0 n1
    hand = s.plan
    s.auto("xla")                                         # xla alone: a reduction ends a kernel
    assert s.plan == hand and s.plan.planner == "xla"
    assert "kept: the user's plan: predicted" in str(s.step.decisions[-1])
    s.unconstrain()
    s.auto("xla")                                         # without locks: xla's own plan
    assert s.plan == run_planner("xla", s.graph, s.cost_model)[0] != hand


def test_tune_leaves_a_kernel_whose_launch_is_locked_alone():
    s = session()
    s.auto("xla")                                         # several kernels
    s.set_launch("n0", threads=64)
    s.lock_tuned()
    locked = s.plan.group("n0")
    s.tune(repeats=1)                                     # every other kernel
    assert s.plan.group("n0") == locked
    assert locked.id not in {r.group for r in s.tuning} and s.tuning
