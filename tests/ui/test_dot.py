"""DOT generation and Graphviz rendering: stable ids, clusters, composites, overlay
legend, escaping of model text, and a ~500-node graph."""
from __future__ import annotations

import re

import pytest

from workbench.errors import WorkbenchError
from workbench.fusion import Plan, run_planner
from workbench.ir import GraphBuilder
from workbench.ui.dot import HEAT, Overlay, composites, render_svg, to_dot
from workbench.device import H100


def svg_ids(svg: str, cls: str) -> set[str]:
    return set(re.findall(rf'<g id="([^"]+)" class="{cls}[ "]', svg))


def test_every_node_is_an_svg_group_with_its_id(small_graph):
    svg = render_svg(to_dot(small_graph, Plan.singletons(small_graph, H100)).source)
    assert svg.startswith("<svg")
    assert svg_ids(svg, "node") >= {n.id for n in small_graph.nodes}
    assert {"in0", "out0"} <= svg_ids(svg, "node")
    assert svg_ids(svg, "cluster") == set()        # one op per kernel: no clusters
    # a node shows its op, output shape and dtype
    assert "reduce_mean" in svg and "f32[32,1]" in svg and "f32[32,64]" in svg


def test_fused_groups_are_clusters_labelled_with_their_kernel(small_graph):
    plan = Plan.singletons(small_graph, H100).fuse(["n9", "n10", "n11", "n12", "n13"])
    d = to_dot(small_graph, plan)
    assert "subgraph cluster_k9 {" in d.source
    svg = render_svg(d.source)
    assert svg_ids(svg, "cluster") == {"k9"}
    assert "k9 · elementwise" in svg
    # the cluster holds exactly the group's nodes
    cluster = d.source.split("subgraph cluster_k9 {")[1].split("  }")[0]
    assert re.findall(r"^\s+(n\d+) \[", cluster, re.M) == ["n9", "n10", "n11", "n12", "n13"]


def test_regional_edges_are_marked(small_graph):
    plan, _ = run_planner("rules", small_graph)
    d = to_dot(small_graph, plan)
    regional = [g for g in plan.groups for v, s in g.schemes if s.value == "regional"]
    assert regional, "LayerNorm's per-row mean crosses threads: at least one regional edge"
    assert d.source.count("wb-regional") >= 1


def test_composites_collapse_to_one_box_and_expand(small_graph):
    comps = composites(small_graph)
    assert list(comps) == ["c0", "c1"]
    assert comps["c0"] == tuple(f"n{i}" for i in range(9))      # LayerNorm
    assert comps["c1"] == tuple(f"n{i}" for i in range(9, 14))  # GELU
    plan = Plan.singletons(small_graph, H100)
    d = to_dot(small_graph, plan, {"c0"})
    assert d.boxes == {"c0": comps["c0"]}
    svg = render_svg(d.source)
    ids = svg_ids(svg, "node")
    assert "c0" in ids and not ids & set(comps["c0"])
    assert set(comps["c1"]) <= ids
    assert "LayerNormalization" in svg and "9 ops" in svg
    # edges go in and out of the box: x -> c0 -> the GELU's first mul
    assert re.search(r"^\s+in0 -> c0 ", d.source, re.M)
    assert re.search(r"^\s+c0 -> n9 ", d.source, re.M)
    expanded = render_svg(to_dot(small_graph, plan, set()).source)
    assert "c0" not in svg_ids(expanded, "node")


def test_collapsed_composite_inside_its_kernel_cluster(small_graph):
    plan, _ = run_planner("rules", small_graph)
    ln_group = plan.group("n0")
    d = to_dot(small_graph, plan, {"c0"})
    cluster = d.source.split(f"subgraph cluster_{ln_group.id} {{")[1].split("  }")[0]
    assert re.search(r"^\s+c0 \[", cluster, re.M)


def test_unknown_composite_is_refused(small_graph):
    with pytest.raises(WorkbenchError, match="no composite 'c9'"):
        to_dot(small_graph, Plan.singletons(small_graph, H100), {"c9"})


def test_overlay_colors_and_legend(small_graph):
    plan = Plan.singletons(small_graph, H100)
    vals = {gr.id: float(i) for i, gr in enumerate(plan.groups)}   # 0 .. 14
    d = to_dot(small_graph, plan, overlay=Overlay("latency", vals))
    assert [e.color for e in d.legend] == list(HEAT)
    assert d.legend[0].label.startswith("0–") and d.legend[-1].label.endswith("14 ms")
    # the cheapest kernel takes the lightest colour, the costliest the darkest
    assert re.search(rf'^\s+n0 \[.*fillcolor="{HEAT[0]}"', d.source, re.M)
    assert re.search(rf'^\s+n14 \[.*fillcolor="{HEAT[-1]}"', d.source, re.M)
    # values spanning > 100x are binned on a log scale
    wide = {gr.id: 10.0 ** (i % 5) for i, gr in enumerate(plan.groups)}   # 1 .. 1e4
    d = to_dot(small_graph, plan, overlay=Overlay("bytes", wide))
    assert d.legend[0].label.startswith("1–4.64") and d.legend[-1].label.endswith("1e+04 MB")
    assert to_dot(small_graph, plan).legend == ()


def test_model_text_cannot_inject_dot_or_markup():
    evil = 'x"]; evil [label="pwn"]; //\\N <script>alert(1)</script>'
    b = GraphBuilder("evil")
    x = b.input(evil, (4, 8))
    b.output(b.exp(x), 'y\\" -> in0')
    g = b.build()
    d = to_dot(g, Plan.singletons(g, H100))
    svg = render_svg(d.source)
    assert svg_ids(svg, "node") == {"in0", "n0", "out0"}      # no injected node
    assert "<script" not in svg
    assert "&lt;script" in svg                              # shown as text (cut short)
    assert "\\N" in svg                                     # not expanded to a node name


@pytest.mark.slow   # (Graphviz on 500 nodes)
def test_a_500_node_graph_draws(big_graph):
    assert len(big_graph.nodes) == 510
    plan, _ = run_planner("rules", big_graph)
    for p in (Plan.singletons(big_graph, H100), plan):
        svg = render_svg(to_dot(big_graph, p).source)
        assert svg_ids(svg, "node") >= {n.id for n in big_graph.nodes}
    collapsed = render_svg(to_dot(big_graph, plan, set(composites(big_graph))).source)
    assert len(svg_ids(collapsed, "node")) == 34 * 3 + 2       # LN box, GELU box, add


@pytest.mark.parametrize("mapping", ["warp", "block", "split", "thread"])
def test_cluster_label_names_the_kernels_mapping(mapping):
    """The label comes from the mapping table: every mapping is named as it is (warp
    and split kernels were once labelled thread/row)."""
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", (64, 1024)), axis=-1), "y")
    g = b.build()
    plan = run_planner("rules", g)[0].set_mapping("k0", mapping)
    assert f'label="k0 · row_reduce ({mapping}/row)"' in to_dot(g, plan).source
