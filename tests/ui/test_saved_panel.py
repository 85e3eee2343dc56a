"""The app's saved-activations panel (ui/saved_panel.py) and the saved values in
Session.actions: a toggle applies recompute / store as a step, undo brings the panel
back, a refused value shows why with its toggle disabled; a graph without a backward
says so."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F
from torch import nn

import workbench as wb
from workbench.session import Session
from workbench.ui import WorkbenchApp


class Block(nn.Module):
    """Linear (no bias) -> square -> LayerNorm -> GELU: the GEMM's result, which the
    square's gradient reads (refused: compute-bound), and cheap values (recomputable)
    among the saved ones."""

    def __init__(self):
        super().__init__()
        self.fc, self.ln = nn.Linear(8, 8, bias=False), nn.LayerNorm(8)

    def forward(self, x):
        h = self.fc(x)
        return F.gelu(self.ln(h * h))


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(0)
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    return wb.from_torch(Block(), (x,), training=True, loss=F.mse_loss, targets=(y,))


def test_actions_offer_recompute_and_store(graph):
    s = Session(graph, backend="cpu")
    table = s.saved()
    ok = table.loc[table["refused"].fillna("") == "", "value"].iloc[0]
    bad = table.loc[table["refused"].fillna("") != "", "value"].iloc[0]
    acts = {a.label: a for a in s.actions([n.id for n in graph.nodes])}
    assert acts[f"recompute {ok}"].legal
    assert not acts[f"recompute {bad}"].legal and "cannot be recomputed" in \
        acts[f"recompute {bad}"].reason
    s.apply(acts[f"recompute {ok}"])
    assert s.recomputed == {ok} and s.step.action == f"recompute {ok}"
    again = {a.label: a for a in s.actions([n.id for n in s.graph.nodes])}
    assert f"store {ok}" in again and f"recompute {ok}" not in again
    s.apply(again[f"store {ok}"])
    assert s.recomputed == frozenset()
    # a selection offers only the values its ops make
    maker = next(n.id for n in graph.nodes if ok in n.outputs)
    assert [a.label for a in s.saved_actions([maker])] == [f"recompute {ok}"]


def test_panel_toggle_applies_the_step_and_undo_follows(graph):
    app = WorkbenchApp(Session(graph, backend="cpu"))
    panel = app.saved_panel
    table = app.session.saved()
    assert set(panel.toggles) == set(table["value"])
    ok = table.loc[table["refused"].fillna("") == "", "value"].iloc[0]
    bad = table.loc[table["refused"].fillna("") != "", "value"].iloc[0]
    assert panel.toggles[bad].disabled and "cannot be recomputed" in str(
        [c.children[0].value for c in panel.children if bad in c.children[0].value])
    panel.toggles[ok].value = "recompute"
    assert app.session.recomputed == {ok} and f"recompute {ok}" in app._status.widget.value
    app.undo()
    assert app.session.recomputed == frozenset()
    assert panel.toggles[ok].value == "store"          # the panel follows the step


def test_panel_says_when_there_is_no_backward(app):
    assert not app.saved_panel.toggles
    assert "training=True" in app.saved_panel.children[0].value
