"""Graphviz on a collapsed box with many edge round trips (issue 49: 134 took ~470 s):
such a box is drawn open, and the view says so. Real Graphviz, real session."""
from __future__ import annotations

import time

import numpy as np

import workbench as wb
from workbench.ir.builder import GraphBuilder
from workbench.ui.graph_view import GraphView
from workbench.ui.namespaces import namespaces
from workbench.ui.round_trips import MAX_ROUND_TRIPS, drawable, round_trips


def shared_norm_stack(layers: int):
    """``layers`` identical layers calling one shared RMSNorm module: every norm is in
    one composite box, and each layer leaves it and comes back (x + norm(x)^2)."""
    b = GraphBuilder(f"shared_norm_{layers}")
    x = b.input("x", (4, 8))
    w = b.constant(np.ones(8, np.float32), "w")
    for _ in range(layers):
        h = b.rms_norm(x, w, eps=1e-6, source="norm")
        x = b.add(x, b.mul(h, h))
    b.output(x, "y")
    return b.build()


def test_134_layers_in_one_collapsed_box_are_drawn_open_in_seconds():
    g = shared_norm_stack(134)
    session = wb.Session(g, backend="cpu")
    ns = namespaces(g)
    (box,) = list(ns)                                    # the shared norm: one box
    assert round_trips(g, ns, frozenset({box})) == {box: 133}
    t = time.perf_counter()
    view = GraphView(session.plan, collapse=True)        # (was ~470 s in Graphviz)
    took = time.perf_counter() - t
    assert view.collapsed == frozenset() and view.opened == ((box, 133),)
    assert f"{box} · {ns[box].label} (133 round trips) drawn open" in view.note and 'id="n0"' in view.svg
    assert took < 10, took    # (2 s for 1,072 ops on a loaded 2-core machine)


def test_the_app_says_why_collapse_left_a_box_open():
    app = wb.open(shared_norm_stack(MAX_ROUND_TRIPS + 8), backend="cpu", display=False)
    app.collapse_toggle.value = True
    assert app.view.collapsed == frozenset() and app.view.opened
    assert "39 round trips" in app.message and "drawn open" in app.message
    app.collapse_toggle.value = False                   # nothing to say when expanding
    assert app.view.note == "" and "round trips" not in app.message


def test_boxes_with_few_round_trips_stay_collapsed():
    g = shared_norm_stack(MAX_ROUND_TRIPS)             # 31 round trips: laid out fast
    ns = namespaces(g)
    collapsed = frozenset(ns)
    assert round_trips(g, ns, collapsed) == {}
    assert drawable(g, ns, collapsed) == (collapsed, ())
    assert round_trips(g, ns, collapsed, limit=30) == {next(iter(ns)): 31}
