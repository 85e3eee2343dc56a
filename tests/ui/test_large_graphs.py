"""Large graphs (issue 49 item 5): over a few hundred ops a graph opens with its layers
collapsed and the wrappers around them open; search steps through its matches with
next / previous, each revealed and centred. At 2,010 ops (a synthetic stack with
module-path scopes) and, in the slow tier, a 12-layer BERT from torch (797 ops)."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.ir import GraphBuilder
from workbench.session import Session
from workbench.ui import WorkbenchApp
from workbench.ui.large_graph import MAX_BOXES, drawn_boxes


def layer_stack(layers: int, rows: int = 8, cols: int = 16):
    """``layers`` x (LayerNorm -> GELU -> residual) under torch-style module paths
    ``encoder.layer.<i>``: 15 ops a layer, one ``encoder`` wrapper."""
    b = GraphBuilder(f"stack{layers}")
    x = b.input("x", (rows, cols))
    rng = np.random.default_rng(0)
    for i in range(layers):
        gamma = b.constant(rng.uniform(0.5, 1.5, cols).astype(np.float32), f"gamma{i}")
        beta = b.constant(rng.uniform(-0.5, 0.5, cols).astype(np.float32), f"beta{i}")
        # (the residual add inside the layer, as torch's modules hold it: an add outside
        # made each collapsed box a round trip, which Graphviz lays out very slowly)
        with b.scope("Layer", f"encoder.layer.{i}"):
            x = b.gelu(b.layer_norm(x, gamma, beta)) + x
    b.output(x, "y")
    return b.build()


@pytest.fixture(scope="module")
def stack_app():
    g = layer_stack(134)
    assert len(g.nodes) == 2010
    return WorkbenchApp(Session(g, backend="reference"))


def _layer_boxes(app):
    ns = app.view.namespaces
    return sorted((c for c in app.view.members if c in ns and ns[c].label.startswith("layer.")),
                  key=lambda c: int(ns[c].label.split(".")[1]))


def test_a_2000_op_stack_opens_as_its_layers(stack_app):
    app = stack_app
    ns = app.view.namespaces
    layers = _layer_boxes(app)
    assert len(layers) == 134                      # every layer one box ...
    assert all(len(ns[c].nodes) == 15 for c in layers)
    # ... and nothing else: the encoder wrapper around them is open
    assert set(app.view.members) == set(layers)
    assert drawn_boxes(ns, app.session.graph.position, app.view.collapsed) <= MAX_BOXES
    assert app.view.svg.count('class="node') <= 134 + 2     # (+ input and output)
    # double-clicking a layer opens it, one level: its LayerNorm and GELU boxes
    app.view.expand(layers[5])
    inner = [c for c in app.view.members if ns[c].parent == layers[5]]
    assert len(inner) == 2 and {ns[c].kind for c in inner} == {"composite"}
    app.view.collapse(layers[5])


def test_search_next_and_previous_reveal_and_centre_each_match(stack_app):
    app = stack_app
    hits = app.select("encoder.layer.77")
    assert len(hits) == 15 and app.selected == hits
    nav = app.search_nav
    assert nav.label.value == "1 of 15" and not nav.next_button.disabled
    assert app.view.focus[0] == app.view.box_of(hits[0])
    second = nav.next()
    assert second == hits[1] and nav.label.value == "2 of 15"
    assert app.view.box_of(second) == second              # revealed: drawn as itself
    assert app.view.focus[0] == second and f'id="{second}"' in app.view.svg
    assert "match 2 of 15" in app._message.value
    assert nav.previous() == hits[0] and nav.previous() == hits[-1]   # wraps around
    assert nav.label.value == "15 of 15"
    # other layers stay collapsed
    assert sum(1 for c in _layer_boxes(app)) == 133
    app.select("no such op anywhere")
    assert nav.label.value == "" and nav.next_button.disabled and nav.next() is None


def test_graphs_under_the_threshold_open_expanded_and_chains_stay_boxes(big_graph):
    small = WorkbenchApp(Session(layer_stack(10), backend="reference"))
    assert small.view.collapsed == frozenset()            # 150 ops: drawn whole
    # a chain of equal blocks has no wrapper: every block stays one box
    chain = WorkbenchApp(Session(big_graph, backend="reference"))
    ns = chain.view.namespaces
    assert all(ns[c].kind == "scope" for c in chain.view.members)
    assert len(chain.view.members) == 34


@pytest.mark.slow
def test_bert_with_twelve_layers_opens_as_embeddings_layers_and_pooler():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import workbench as wb
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=12,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=64)
    torch.manual_seed(0)
    g = wb.from_torch(transformers.BertModel(cfg).eval(), (torch.randint(0, 128, (1, 16)),))
    assert len(g.nodes) > 600
    app = WorkbenchApp(Session(g, backend="reference"))
    ns = app.view.namespaces
    labels = [ns[c].label for c in app.view.members if c in ns and ns[c].kind == "scope"]
    assert [lb for lb in labels if lb.startswith("layer.")] == [f"layer.{i}" for i in range(12)]
    assert "embeddings" in labels and "pooler" in labels
    assert app.view.svg.count('class="node') < 40
    hits = app.select("attention")
    assert len(hits) > 12 and app.search_nav.next() == hits[1]
