"""Netron's details in the property panel: every op described once (its registry
definition), and each constant input's statistics computed on demand from the real
tensor, checked against NumPy on fresh random data."""
from __future__ import annotations

import numpy as np
import pytest

from workbench.fusion import Plan
from workbench.ir import GraphBuilder
from workbench.ir.graph import LazyConstants
from workbench.ir.serialize import from_json
from workbench.ops import all_ops
from workbench.ui.properties import node_properties, op_doc
from workbench.ui.tensor_stats import FIRST_VALUES, tensor_stats
from workbench.device import H100


def test_every_registered_op_has_a_one_line_description():
    missing = [name for name, op in all_ops().items() if not op.doc.strip()]
    assert not missing, f"ops without a doc: {missing}"
    multi = [name for name, op in all_ops().items() if "\n" in op.doc]
    assert not multi


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_tensor_stats_match_numpy_on_random_data(dtype):
    rng = np.random.default_rng()
    a = (rng.standard_normal((37, 53)) * 5).astype(dtype)
    a.reshape(-1)[rng.choice(a.size, 40, replace=False)] = 0
    s = tensor_stats({"w": a}, "w")
    ref = a.astype(np.float64)
    assert s.shape == (37, 53) and s.size == a.size and s.nbytes == a.nbytes
    assert s.min == ref.min() and s.max == ref.max()
    assert s.mean == pytest.approx(ref.mean(), rel=1e-9, abs=1e-9)
    assert s.std == pytest.approx(ref.std(), rel=1e-9)
    assert s.zeros == int((a == 0).sum()) >= 40
    assert s.nan == s.inf == 0
    assert s.first == tuple(a.reshape(-1)[:FIRST_VALUES].tolist())


def test_tensor_stats_count_nan_and_inf_and_use_finite_values_only():
    rng = np.random.default_rng()
    a = rng.standard_normal(1000).astype(np.float32)
    a[[3, 17, 400]] = np.nan
    a[[5, 9]] = [np.inf, -np.inf]
    s = tensor_stats({"w": a}, "w")
    fin = a[np.isfinite(a)].astype(np.float64)
    assert (s.nan, s.inf) == (3, 2)
    assert s.min == fin.min() and s.max == fin.max()
    assert s.mean == pytest.approx(fin.mean()) and s.std == pytest.approx(fin.std())
    assert "5 non-finite (3 NaN)" in s.line()
    assert dict(s.rows())["NaN, inf"] == "3, 2"


def test_a_large_weight_is_summarized_not_sent():
    """A BERT-embedding-sized weight: the panel carries a few hundred characters."""
    a = np.random.default_rng().standard_normal((30522, 64)).astype(np.float32)
    b = GraphBuilder("emb")
    x = b.input("x", (30522, 64))
    w = b.constant(a, name="word_embeddings")
    b.output(b.add(x, w), "y")
    g = b.build()
    p = node_properties(Plan.singletons(g, H100), "n0")
    assert len(p.to_html()) < 4000
    first = dict(p.section("constant word_embeddings"))["first values"]
    assert first.count(",") == FIRST_VALUES and first.endswith("…]")


def test_lazy_constants_are_made_only_when_their_node_is_shown():
    """A ``random`` constant of a JSON graph is made when its node is shown."""
    g = from_json({
        "format": "workbench.graph", "version": 1, "name": "lazy",
        "inputs": {"x": {"shape": [8, 4]}},
        "constants": {"c": {"shape": [8, 4], "init": {"random": {"seed": 3}}}},
        "nodes": [{"op": "exp", "inputs": ["x"], "outputs": ["e"]},
                  {"op": "mul", "inputs": ["e", "c"], "outputs": ["y"]}],
        "outputs": ["y"]})
    assert isinstance(g.constants, LazyConstants)
    plan = Plan.singletons(g, H100)
    node_properties(plan, "n0")
    assert "c" not in g.constants._arrays          # not made for a node not reading it
    p = node_properties(plan, "n1")
    a = np.asarray(g.constants["c"], np.float64)
    rows = dict(p.section("constant c"))
    assert rows["tensor"] == "float32[8, 4]"
    assert rows["range"] == f"min {a.min():.6g}  max {a.max():.6g}"
    assert rows["mean, std"] == f"{a.mean():.6g}, {a.std():.6g}"


def test_the_panel_shows_the_op_description_and_each_weight(small_graph):
    from workbench.fusion import run_planner
    plan, _ = run_planner("rules", small_graph)
    n = next(n for n in small_graph.nodes if any(i in small_graph.constants for i in n.inputs))
    p = node_properties(plan, n.id)
    assert dict(p.section("node"))["does"] == op_doc(n.op) != ""
    const = next(i for i in n.inputs if i in small_graph.constants)
    rows = dict(p.section(f"constant {const}"))
    a = np.asarray(small_graph.constants[const], np.float64)
    assert rows["tensor"].startswith("float32[")
    assert rows["mean, std"] == f"{a.mean():.6g}, {a.std():.6g}"
    html = p.to_html()
    assert f"constant {const}" in html and "first values" in html
