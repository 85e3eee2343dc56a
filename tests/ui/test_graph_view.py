"""The graph view widget without a browser: traits and front-end messages."""
from __future__ import annotations

import html

from workbench.fusion import Plan
from workbench.ui import GraphView
from workbench.ui.dot import Overlay
from workbench.device import H100


def test_selection_syncs_from_python_and_from_the_front_end(small_graph):
    view = GraphView(Plan.singletons(small_graph, H100))
    seen = []
    view.observe(lambda ch: seen.append(ch["new"]), "selected")
    view.selected = ["n1"]
    # what the comm does with a state update sent by graph_view.js
    view.set_state({"selected": ["n1", "n2"]})
    assert view.selected == ["n1", "n2"]
    assert seen == [["n1"], ["n1", "n2"]]
    assert view.get_state("selected") == {"selected": ["n1", "n2"]}


def test_svg_trait_holds_the_drawing(small_graph):
    view = GraphView(Plan.singletons(small_graph, H100))
    assert view.svg.startswith("<svg") and 'id="n14"' in view.svg
    before = view.svg
    view.redraw(Plan.singletons(small_graph, H100).fuse(["n13", "n14"]))
    assert view.svg != before and 'id="k13" class="cluster' in view.svg


def test_double_click_message_toggles_a_composite(small_graph):
    view = GraphView(Plan.singletons(small_graph, H100))
    assert view.collapsed == frozenset()       # small graphs start expanded
    view._handle_custom_msg({"type": "toggle", "id": "n4"}, [])   # a LayerNorm node
    assert view.collapsed == {"c0"}
    assert view.members == {"c0": [f"n{i}" for i in range(9)]}
    assert 'id="c0" class="node' in view.svg and 'id="n4" class' not in view.svg
    view._handle_custom_msg({"type": "toggle", "id": "c0"}, [])   # the box
    assert view.collapsed == frozenset() and view.members == {}
    view._handle_custom_msg({"type": "toggle", "id": "n14"}, [])  # not in a composite
    assert view.collapsed == frozenset()


def test_collapse_and_expand_from_python(small_graph):
    view = GraphView(Plan.singletons(small_graph, H100))
    view.collapse()
    # the LayerNorm, the GELU and the namespace "block0" of "block0/ln", "block0/gelu"
    assert view.collapsed == {"c0", "c1", "s0"}
    view.expand("n10")                         # by a member node: it shows again
    assert view.collapsed == {"c0"}


def test_large_graphs_start_collapsed(big_graph):
    view = GraphView(Plan.singletons(big_graph, H100))
    assert len(view.collapsed) == 34 * 3      # per block: LN, GELU and the block scope
    assert view.svg.count('class="node') == 34 * 2 + 2     # block box, residual add


def test_overlay_sets_the_legend(small_graph):
    plan = Plan.singletons(small_graph, H100)
    view = GraphView(plan)
    assert view.legend == [] and view.legend_title == ""
    view.overlay = Overlay("bytes", {gr.id: i + 1.0 for i, gr in enumerate(plan.groups)})
    assert len(view.legend) == 6 and view.legend_title == "kernel bytes"
    assert view.legend[-1]["label"].endswith("MB")
    assert "wb-heat" in html.unescape(view.svg)     # (Graphviz writes '-' as &#45;)
    view.overlay = None
    assert view.legend == [] and "wb-heat" not in html.unescape(view.svg)
