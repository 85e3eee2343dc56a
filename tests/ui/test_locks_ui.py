"""Locks in the app (issue 48), through its Python API: lock and unlock the selected
kernel or edge (the panel's Lock toggle), locks drawn on the graph, Auto's status line
counting the locks it planned around, refusals shown inline."""
from __future__ import annotations

from workbench.fusion.constraints import Constraints, Cut, MustFuse, Pinned
from workbench.fusion.honour import violations
from workbench.session import Session
from workbench.ui.dot import to_dot
from workbench.ui.lock_marks import LOCK_GLYPH


def test_lock_the_selected_kernel_then_auto_plans_around_it(app):
    s = app.session
    app.fuse(["n0", "n1", "n2"])
    app.selected = ["n1"]
    assert app.transforms.lock_button.description == "Lock"
    app.transforms.lock_button.value = True            # the toggle, as a click
    assert str(s.constraints) == "pinned n0 n1 n2"
    assert app.message.startswith("locked pinned n0 n1 n2; 1 lock in force")
    assert app.transforms.lock_button.value and app.transforms.lock_button.description == "Locked"
    assert f"{LOCK_GLYPH} k0" in app.view.svg           # the locked kernel's label
    app.auto("stitch")
    assert app.message.endswith("planned around 1 lock"), app.message
    assert set(s.plan.group("n0").nodes) == {"n0", "n1", "n2"}
    assert violations(s.plan, s.constraints) == []
    app.selected = ["n0"]
    app.transforms.lock_button.value = False            # unlock
    assert len(s.constraints) == 0 and app.message.startswith("unlocked pinned n0 n1 n2")
    app.undo()                                          # the unlock was a step
    assert str(s.constraints) == "pinned n0 n1 n2"


def test_lock_an_edge_between_two_selected_nodes_cuts_it(app):
    s = app.session
    app.selected = ["n1", "n0"]                         # either order
    app.lock()
    assert s.constraints == Constraints((Cut(("n0", "n1")),))
    assert 'class="wb-edge wb-cut"' in to_dot(s.graph, s.plan, locks=s.constraints).source
    app.auto("rules")
    assert s.plan.group("n0").id != s.plan.group("n1").id
    text = "\n".join(map(str, s.step.decisions))
    assert "cut n0->n1 locked by user" in text


def test_a_refused_lock_or_a_lock_breaking_action_changes_nothing(app):
    s = app.session
    assert app.lock() is None and "nothing selected" in app.message
    app.fuse(["n0", "n1"])
    app.lock("n0->n1")
    assert s.constraints == Constraints((MustFuse(("n0", "n1")),))
    n = len(s.history)
    assert app.split("n0") is None
    assert "would break the lock must-fuse n0 n1" in app.message
    assert app.lock("n3", how="launch") is None and "launches by the rule" in app.message
    assert app.unlock("n5") is None and "not locked" in app.message
    assert len(s.history) == n


def test_dot_marks_locked_kernels_and_edges(small_graph):
    s = Session(small_graph, backend="reference")
    s.fuse(["n0", "n1", "n2"])
    plain = to_dot(s.graph, s.plan).source
    assert to_dot(s.graph, s.plan, locks=Constraints()).source == plain
    cs = Constraints((Pinned(("n0", "n1", "n2")), Cut(("n2", "n3"))))
    d = to_dot(s.graph, s.plan, locks=cs).source
    assert 'class="wb-kernel wb-locked"' in d and LOCK_GLYPH in d
    assert d.count("wb-locked") >= 3                    # the kernel and its two edges
    assert d.count("wb-cut") == 1
