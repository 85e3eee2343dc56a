"""Refusals and status lines name things as the drawing labels them (issue 49: a
refusal said "regional t4" with nothing named t4 on screen). Real session, real
Graphviz drawing: every internal id a message names must be in the drawing's text."""
from __future__ import annotations

import html
import re

import pytest

import workbench as wb
from workbench.ui.drawn_names import drawn_text

LAYERNORM = "sample_graphs/layernorm.json"


def drawn_words(app) -> set[str]:
    """The words of the drawing's visible labels (not its tooltips)."""
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", app.view.svg)
    return {w for t in texts for w in re.split(r"[\s·()]+", html.unescape(t)) if w}


def hidden_ids(app, message: str) -> list[str]:
    """The value, node and kernel ids ``message`` names that the drawing does not show."""
    g, plan = app.session.graph, app.session.plan
    ids = set(g.value_map) | set(g.node_map) | {gr.id for gr in plan.groups}
    words = set(re.findall(r"[\w./\-]+", message))   # ("t4:" names t4)
    shown = drawn_words(app)
    return sorted(w for w in words & ids if w not in shown)


@pytest.fixture
def stitched():
    app = wb.open(LAYERNORM, backend="cpu", display=False)
    app.auto("stitch")
    return app


def test_the_issues_refusal_names_the_edge_as_drawn(stitched):
    app = stitched
    assert app.set_scheme("t4", "regional") is None            # the review's refusal
    assert "wb-refused" in app._message._dom_classes
    assert "t4" not in app.message and app.message.startswith("regional reduce_mean n3 → add n4")
    assert hidden_ids(app, app.message) == []


def test_every_scheme_refusal_and_status_names_only_drawn_things(stitched):
    app = stitched
    said = []
    for v, _ in app.session.plan.groups[0].schemes:
        for scheme in ("local", "regional", "global", "independent"):
            app.set_scheme(v, scheme)
            said.append((app.message, "wb-refused" in app._message._dom_classes))
            app.undo() if app.session.position > 1 else None
    assert len(said) == 32 and 0 < sum(r for _, r in said) < 32   # refusals and not
    for m, _ in said:
        assert hidden_ids(app, m) == [], m


def test_refusals_between_kernels_name_single_op_kernels_by_their_node():
    app = wb.open(LAYERNORM, backend="cpu", display=False)
    app.set_scheme("t7", "local")        # leaves one single-op kernel for another
    assert "k5 (n5)" in app.message and "rsqrt n5 → mul n6" in app.message
    app.set_scheme("c5", "local")        # a constant: not drawn
    assert app.message.startswith("constant → add n4")
    app.fuse(["n0", "n2"])               # a cycle through n1
    for m in (app.message,):
        assert "n1" in m and hidden_ids(app, m) == []


def test_nodes_inside_a_collapsed_box_are_named_with_the_box(small_graph):
    from workbench.session import Session
    from workbench.ui import WorkbenchApp
    app = WorkbenchApp(Session(small_graph, backend="cpu"))
    app.view.collapse()
    box = app.view.box_of("n5")
    assert box != "n5"
    app.set_scheme("t7", "local")
    # the hidden nodes (and their kernels) are named beside the box that is drawn
    assert f"(in {box})" in app.message and f"k5 (n5, in {box})" in app.message
    assert box in drawn_words(app) and set(hidden_ids(app, app.message)) <= {
        "n5", "n6", "k5", "k6"}


def test_quoted_words_and_plain_word_names_are_left_alone():
    app = wb.open("sample_graphs/bert_chain.onnx", backend="cpu", display=False)
    plan = app.session.plan
    # "one" is a value of this graph and a word of the sentence
    text = "applies inside one kernel; no node 't2' here"
    assert drawn_text(text, plan, lambda n: n) == text
    assert drawn_text("query_mm.", plan, lambda n: n).startswith("matmul ")


def test_the_transformations_panel_names_refusals_as_drawn(stitched):
    """The same rule for the Transformations list and its detail (a refused row used
    to carry the raw reason, e.g. 'regional t4: ...')."""
    app = stitched
    app.selected = [app.session.graph.nodes[3].id]
    app.transforms.refresh_actions()
    refused = [(text, i) for text, i in app.transforms.choices.options
               if text.startswith("refused")]
    assert refused, app.transforms.choices.options
    raw = [app.transforms.actions[i].reason for _, i in refused]
    for (text, i), reason in zip(refused, raw):
        # (the label names the edge's value with its drawn form beside it; the reason
        # is the refusal's own text)
        said = text[len(f"refused: {app.transforms.actions[i].label} ("):]
        assert hidden_ids(app, said) == [], (text, reason)
        app.transforms.preview(app.transforms.actions[i])
        detail = html.unescape(app.transforms.detail.value).split("<br>", 1)[1]
        assert hidden_ids(app, detail) == [], reason
    # (and the test can fail: the raw reasons name ids the drawing does not show)
    assert any(hidden_ids(app, r) for r in raw), raw
