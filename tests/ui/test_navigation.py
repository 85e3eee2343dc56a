"""Navigation like Model Explorer, a property panel like Netron's, source mapping like
Compiler Explorer -- the logic, without a browser (tests/browser/test_lab.py drives the
same in a real Lab): nested namespaces from real torch and ONNX imports, ids on the
boxes, search revealing and centring a node, the property panel's content and
escaping, the source map read back from generated C and CUDA, SVG/PNG export."""
from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from workbench.codegen import RENDERERS, lower_group
from workbench.errors import WorkbenchError
from workbench.fusion import Plan, run_planner
from workbench.ir import GraphBuilder
from workbench.session import Session
from workbench.ui import GraphView, WorkbenchApp
from workbench.ui.dot import render_svg, to_dot
from workbench.ui.namespaces import namespaces, scope_path
from workbench.ui.properties import constant_summary, node_properties
from workbench.ui.source_map import annotated_html, implemented_nodes, line_nodes, node_lines
from workbench.device import H100


# -- namespaces ------------------------------------------------------------------------
def _nested_torch_graph():
    torch = pytest.importorskip("torch")
    import workbench as wb

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(8, 8)
            self.ln = torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.ln(torch.softmax(self.q(x), -1) + x)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attn()
            self.act = torch.nn.GELU()

        def forward(self, x):
            return self.act(self.attention(x))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.ModuleList([Layer(), Layer()])

        def forward(self, x):
            for m in self.layer:
                x = m(x)
            return x

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()

        def forward(self, x):
            return self.encoder(x) * 2

    return wb.from_torch(Model(), (torch.randn(4, 8),))


def test_torch_module_paths_nest_to_any_depth():
    g = _nested_torch_graph()
    ns = namespaces(g)
    scopes = {ns[c].path: c for c in ns if ns[c].kind == "scope"}
    # ModuleList entries keep their index ("layer.0"); q, ln and act hold exactly one
    # composite each, so they add no box of their own
    assert set(scopes) == {"encoder", "encoder/layer.0", "encoder/layer.0/attention",
                           "encoder/layer.1", "encoder/layer.1/attention"}
    enc, l0, att0 = (scopes[p] for p in ("encoder", "encoder/layer.0",
                                         "encoder/layer.0/attention"))
    assert ns[l0].parent == enc and ns[att0].parent == l0 and ns[enc].parent is None
    assert ns.depth() == 4     # encoder > layer.0 > attention > the Linear's composite
    first_matmul = next(n.id for n in g.nodes if n.op == "matmul")
    chain = ns.ancestors(first_matmul)
    assert chain[:3] == (enc, l0, att0) and ns[chain[3]].kind == "composite"
    assert len(ns[enc].nodes) == len(g.nodes) - 1       # all but the final * 2
    # collapsing all draws the encoder as one box; expanding it shows its two layers
    # still collapsed: one level at a time
    view = GraphView(Plan.singletons(g, H100), collapse=True)
    assert set(view.members) == {enc}
    view.expand(enc)
    assert set(view.members) == {l0, scopes["encoder/layer.1"]}
    # double-click on the layer's box expands it; shift-double-click collapses it back
    view._handle_custom_msg({"type": "toggle", "id": l0}, [])
    assert att0 in view.members and l0 not in view.members
    view._handle_custom_msg({"type": "toggle", "id": att0, "outer": True}, [])
    assert l0 in view.members


def test_breadcrumb_names_the_containers_and_collapses_one():
    g = _nested_torch_graph()
    view = GraphView(Plan.singletons(g, H100))
    ns = view.namespaces
    matmul = next(n.id for n in g.nodes if n.op == "matmul")
    view.selected = [matmul]
    assert [label for _, label in view.crumbs][:3] == ["encoder", "layer.0", "attention"]
    layer = view.crumbs[1][0]
    view._handle_custom_msg({"type": "collapse", "id": layer}, [])   # a click on it
    assert layer in view.collapsed and view.box_of(matmul) == layer
    assert view.focus[0] == layer
    view._handle_custom_msg({"type": "collapse", "id": "s999"}, [])  # unknown: ignored
    assert ns[layer].label == "layer.0"
    view.selected = []
    assert view.crumbs == []


def test_a_real_bert_nests_six_deep():
    """transformers' BertModel through the torch importer: embeddings / encoder /
    layer.N / attention / self / query, as Model Explorer shows it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import workbench as wb
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=16)
    torch.manual_seed(0)
    g = wb.from_torch(transformers.BertModel(cfg).eval(), (torch.randint(0, 100, (1, 8)),))
    ns = namespaces(g)
    paths = {ns[c].path for c in ns if ns[c].kind == "scope"}
    assert {"embeddings", "encoder", "encoder/layer.0", "encoder/layer.1/attention/self",
            "pooler"} <= paths
    # the query projection is one composite (addmm: its matmul and bias add, done over
    # the tokens' leading axes), so its scope is that composite's box, in `self`
    (query,) = [c for c in ns if ns[c].path == "encoder.layer.1.attention.self.query"]
    assert ns[query].kind == "composite" and ns[query].label == "Gemm"
    assert ns[ns[query].parent].path == "encoder/layer.1/attention/self"
    assert ns.depth() >= 5
    view = GraphView(Plan.singletons(g, H100), collapse=True)
    top = {ns[b].label for b in view.members if ns[b].kind == "scope"}
    assert top == {"embeddings", "encoder", "pooler"}


def _onnx_scoped_model(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    nodes, prev = [], "x"
    for i in range(2):
        p = f"/encoder/layer.{i}"
        nodes += [helper.make_node("Relu", [prev], [f"r{i}"], name=f"{p}/attention/Relu"),
                  helper.make_node("Softmax", [f"r{i}"], [f"s{i}"], axis=-1,
                                   name=f"{p}/attention/Softmax"),
                  helper.make_node("Add", [f"s{i}", prev], [f"a{i}"], name=f"{p}/Add"),
                  helper.make_node("Exp", [f"a{i}"], [f"y{i}"], name=f"{p}/output/Exp"),
                  helper.make_node("Neg", [f"y{i}"], [f"z{i}"], name=f"{p}/output/Neg")]
        prev = f"z{i}"
    graph = helper.make_graph(nodes, "scoped",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_onnx_name_scopes_nest(tmp_path):
    from workbench.frontends.onnx import load_onnx
    g = load_onnx(str(_onnx_scoped_model(tmp_path / "scoped.onnx")))
    ns = namespaces(g)
    paths = {ns[c].path for c in ns if ns[c].kind == "scope"}
    assert {"encoder", "encoder/layer.0", "encoder/layer.0/attention",
            "encoder/layer.0/output", "encoder/layer.1"} <= paths
    relu = next(n for n in g.nodes if n.op == "relu")
    labels = [ns[c].label for c in ns.ancestors(relu.id)]
    assert labels[:3] == ["encoder", "layer.0", "attention"]


def test_scope_paths_from_sources():
    from workbench.ir import Origin
    assert scope_path(Origin("Softmax", "/encoder/layer.0/attention/Softmax")) == \
        ("encoder", "layer.0", "attention")
    assert scope_path(Origin("Attn", "encoder.layer.0.attention")) == \
        ("encoder", "layer.0", "attention")
    assert scope_path(Origin("LayerNormalization", "ln1")) == ()
    assert scope_path(None) == ()


# -- the drawing -------------------------------------------------------------------------
def test_boxes_show_the_ids_messages_use(small_graph):
    svg = render_svg(to_dot(small_graph, Plan.singletons(small_graph, H100)).source)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    for n in small_graph.nodes:
        assert any(t.startswith(f"{n.id} · {n.op}") or t.startswith(f"{n.id} &#183; ")
                   for t in texts), (n.id, texts[:5])
    collapsed = render_svg(to_dot(small_graph, Plan.singletons(small_graph, H100), {"c0"}).source)
    assert "c0 · LayerNormalization" in collapsed


def test_search_reveals_and_centres_a_node_inside_a_collapsed_box(big_graph):
    app = WorkbenchApp(Session(big_graph, backend="reference"))
    assert len(app.view.collapsed) > 0
    target = "n400"
    assert app.view.box_of(target) != target           # hidden in a collapsed box
    hits = app.select(target)
    assert hits == [target]
    assert app.view.box_of(target) == target           # its boxes were opened
    assert f'id="{target}" class="node' in app.view.svg
    assert app.view.focus[0] == target
    assert "showing n400" in app.message
    first = app.view.focus[1]
    app.select(target)                                  # again: centred again
    assert app.view.focus == [target, first + 1]
    # the rest of the graph stays collapsed
    assert len(app.view.collapsed) >= len(app.view.composites) - 3


# -- property panel ------------------------------------------------------------------------
def test_property_panel_shows_shapes_attributes_constants_and_schedule(small_graph):
    plan, _ = run_planner("rules", small_graph)
    gamma = next(n for n in small_graph.nodes
                 if any(i in small_graph.constants for i in n.inputs)
                 and small_graph.value(n.outputs[0]).shape == (32, 64))
    p = node_properties(plan, gamma.id, launch="grid=32 block=32")
    ins = dict(p.section("inputs"))
    const = next(i for i in gamma.inputs if i in small_graph.constants)
    assert ins[const].startswith("float32[64]") and "constant" in ins[const]
    other = next(i for i in gamma.inputs if i != const)
    assert ins[other].startswith("float32[32, 64]  from n")
    a = np.asarray(small_graph.constants[const])
    summary = dict(p.section("constants"))[const]
    assert f"min {a.min():.6g}" in summary and f"max {a.max():.6g}" in summary
    assert f"{a[0]:.6g}" in summary and "…" in summary
    kern = dict(p.section("kernel"))
    assert kern["kernel"].startswith(plan.group(gamma.id).id)
    assert kern["schedule"] == plan.group(gamma.id).schedule.describe()
    assert kern["launch"] == "grid=32 block=32" and kern["mapping"].endswith("/row")
    where = dict(p.section("namespace"))
    assert where["composite"] == "LayerNormalization" and where["source"] == "block0/ln"
    # attributes: a reduction's axes
    red = next(n for n in small_graph.nodes if n.op == "reduce_mean")
    attrs = dict(node_properties(plan, red.id).section("attributes"))
    assert attrs and any("1" in v for v in attrs.values())


def test_property_panel_escapes_model_text():
    evil = '<img src=x onerror=alert(1)>'
    b = GraphBuilder("evil")
    x = b.input(evil, (2, 3))
    c = b.constant(np.array([1.0, np.nan, -2.0], np.float32), name=f"{evil}c")
    b.output(b.mul(x, c), "y")
    g = b.build()
    p = node_properties(Plan.singletons(g, H100), "n0")
    page = p.to_html()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "1 non-finite" in dict(p.section("constants"))[f"{evil}c"]
    assert "min -2  max 1" in constant_summary(g, f"{evil}c")


def test_app_panel_follows_the_selection(app):
    assert "Select a node" in app.props.value
    app.selected = ["n3"]
    assert "n3 · " in app.props.value and "float32[32, 64]" in app.props.value
    app.selected = []
    assert "Select a node" in app.props.value


# -- source map ----------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["c", "cuda"])
def test_generated_source_names_the_nodes_it_computes(small_graph, target):
    plan, _ = run_planner("rules", small_graph)
    for gr in plan.groups:
        src = RENDERERS[target].kernel(lower_group(small_graph, gr, H100))
        assert implemented_nodes(src) == gr.nodes
        lines = node_lines(src)
        # every op that computes a value has a line; nothing outside the kernel
        assert set(lines) <= set(gr.nodes)
        assert set(lines) >= {n for n in gr.nodes
                              if small_graph.node(n).op not in ("reshape", "transpose")}
        text = src.splitlines()
        for n, idx in lines.items():
            assert all(text[i].rstrip().endswith(f"/* {n} */") for i in idx)
        # with the comments removed the code is what it was: only comments were added
        stripped = re.sub(r"  /\* n\d+ \*/$", "", src, flags=re.M)
        stripped = re.sub(r"^ \* nodes[ n\d]+\n", "", stripped, flags=re.M)
        assert "/* n" not in stripped and " * nodes" not in stripped


def test_source_map_reads_only_sanitized_ids():
    src = ("float t1 = x;  /* n1 */\n"
           "float t2 = y;  /* <script> */\n"
           "t3 = 1;  /* n1 n2 */\n")
    assert line_nodes(src) == {0: ("n1",)}
    from pygments.lexers import CLexer
    page = annotated_html(src, CLexer())
    assert page.count('class="wb-line"') == 3
    assert page.count('data-nodes="n1"') == 1 and "<script>" not in page


def test_code_panel_lines_carry_their_nodes(app):
    app.auto("rules")
    app.selected = ["n5"]
    cuda = app.code._cuda.value
    assert 'class="wb-line"' in cuda
    nodes = set(re.findall(r'data-nodes="([^"]+)"', cuda))
    assert "n5" in nodes and nodes <= set(app.session.plan.group("n5").nodes)


# -- export -----------------------------------------------------------------------------
def test_save_graph_writes_valid_svg_and_png(app, tmp_path):
    app.auto("rules")
    svg = app.save_graph(tmp_path / "g.svg")
    text = (tmp_path / "g.svg").read_text()
    assert svg == str(tmp_path / "g.svg") and "<svg" in text and 'id="n0"' in text
    import xml.dom.minidom
    xml.dom.minidom.parseString(text.encode())          # well-formed XML
    app.save_graph(tmp_path / "g.png")
    data = (tmp_path / "g.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    assert w > 100 and h > 100
    assert "saved the graph" in app.message
    assert app.save_graph(tmp_path / "g.gif") is None and ".svg or .png" in app.message
    assert app.save_graph(tmp_path / "nowhere" / "g.svg") is None
    assert "does not exist" in app.message


def test_unknown_container_is_refused(small_graph):
    view = GraphView(Plan.singletons(small_graph, H100))
    with pytest.raises(WorkbenchError, match="not a composite"):
        view.collapse("n14")
