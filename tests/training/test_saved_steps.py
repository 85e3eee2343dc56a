"""Saved activations as session steps (session_saved.py): recompute / store change the
graph the plan partitions, as undoable steps of the history; every step's program
computes the loss and gradients of the graph as loaded (the cpu backend's generated
kernels against the reference, on the test's random inputs); refusals name the
reason."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F

import workbench as wb
from workbench.errors import FusionRefused, WorkbenchError
from workbench.runtime import run_reference
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest

from test_training_import import NormGelu, feeds


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(2)
    m, x, y = NormGelu(16), torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    g = wb.from_torch(m, (x,), training=True, loss=F.mse_loss, targets=(y,))
    return g, feeds(g, m, (x,), (y,))


def _same(s, g, fed):
    want, got = run_reference(g, fed), s.run(fed)
    for k in g.outputs:
        assert relative_to_largest(got[k], want[k]) <= FRAMEWORK_TOLERANCE, k


def test_recompute_and_store_are_undoable_steps(block, tmp_path):
    g, fed = block
    s = wb.Session(g, backend="cpu")
    s.auto("rules")
    table = s.saved()
    assert set(table["choice"]) == {"store"}
    value = table.loc[table["suggestion"] == "recompute", "value"].iloc[0]
    before = s.plan
    s.recompute(value)
    assert s.step.action == f"recompute {value}" and s.recomputed == {value}
    assert s.graph is not g and s.plan.planner == "rules"
    assert any(n.origin.source == "backward.recompute" for n in s.graph.nodes)
    assert s.saved().set_index("value").loc[value, "choice"] == "recompute"
    _same(s, g, fed)
    # the history holds both graphs' plans: numbers of either step, undo, redo
    assert s.effect(before).kernels == len(before.groups)
    s.undo()
    assert s.graph is g and s.plan == before and s.recomputed == frozenset()
    _same(s, g, fed)
    s.redo()
    assert s.recomputed == {value}
    with pytest.raises(FusionRefused, match="recomputed already"):
        s.recompute(value)
    s.store(value)
    assert s.graph is g and len(s.history) == 4 and s.step.action == f"store {value}"
    with pytest.raises(FusionRefused, match="stored already"):
        s.store(value)
    s.goto(2)
    assert s.recomputed == {value}     # (session files: test_saved_steps_file.py)


def test_refusals_name_the_reason():
    # GELU's backward reads the bias-free projection's product: a GEMM's result
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.GELU(),
                            torch.nn.Linear(8, 4))
    x, y = torch.randn(3, 8), torch.randn(3, 4)
    s = wb.Session(wb.from_torch(m, (x,), training=True, loss=F.mse_loss, targets=(y,)),
                   backend="cpu")
    refused = s.saved().query("refused != ''")
    assert len(refused)
    v, why = refused["value"].iloc[0], refused["refused"].iloc[0]
    assert "compute-bound" in why
    with pytest.raises(FusionRefused, match="cannot be recomputed") as e:
        s.recompute(v)
    assert why in str(e.value)
    with pytest.raises(FusionRefused, match="not a forward value the backward reads"):
        s.recompute("loss_that_is_not_there")
    with pytest.raises(WorkbenchError, match="one or more"):
        s.recompute()
    assert len(s.history) == 1
