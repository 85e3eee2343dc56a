"""GraphBuilder.scope: a namespace (such as a module path) for the nodes made inside,
under which composites keep their own kind."""
from __future__ import annotations

from workbench.ir import GraphBuilder, Origin


def test_scope_tags_nodes_and_composites_keep_their_kind():
    b = GraphBuilder("scoped")
    x = b.input("x", (2, 8))
    with b.scope("BertSelfAttention", "attention.self"):
        y = b.exp(x)
        p = b.softmax(y)
        with b.scope("Linear", "attention.self.query"):  # an inner scope replaces the outer
            q = b.layer_norm(p) * 2.0
        z = q + y
    w = b.tanh(z)  # outside every scope: untagged
    b.output(w, "out")
    g = b.build()
    origins = [n.origin for n in g.nodes]
    assert origins[0] == Origin("BertSelfAttention", "attention.self")
    assert {n.origin for n in g.nodes if n.op == "reduce_max"} == {
        Origin("Softmax", "attention.self")}
    ln = [n for n in g.nodes if n.op == "rsqrt"]
    assert ln[0].origin == Origin("LayerNormalization", "attention.self.query")
    muls = [n for n in g.nodes if n.op == "mul" and n.origin.composite == "Linear"]
    assert len(muls) == 1 and muls[0].origin.source == "attention.self.query"
    assert g.nodes[-2].origin == Origin("BertSelfAttention", "attention.self")  # z
    assert g.nodes[-1].origin is None  # w


def test_composite_nested_in_a_composite_keeps_the_outer_tag():
    """Outside scopes, composite() behaves as before: the outermost composite wins."""
    b = GraphBuilder("nested")
    x = b.input("x", (4,))
    b.output(b.hard_swish(x, source="act"), "y")  # hard_swish calls hard_sigmoid
    assert {n.origin for n in b.build().nodes} == {Origin("HardSwish", "act")}
