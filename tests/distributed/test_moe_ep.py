"""The expert-parallel MoE sample (``samples.moe_ep``): its reference is the layer
written per rank in NumPy; it runs on 1, 2 and 4 gloo ranks; the residual and gate
after the combine's all_to_all_single fuse into its arrival (each block's kernel as it
lands, the own block first), refused with the reason where they cannot; the app draws
it and lists its transformations."""
from __future__ import annotations

import html

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.distributed.local import local_steps
from workbench.distributed.received import fuse_received
from workbench.distributed.samples import moe_ep
from workbench.errors import FusionRefused
from workbench.runtime.reference import run_reference
from workbench.session import Session

C, H, F = 2, 4, 8       # capacity, hidden, ffn: tiny (a block is C rows of H)


def _inputs(d, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(0, 1, d.graph.value(k).shape).astype(np.float32)
            if k == "gate" else rng.standard_normal(d.graph.value(k).shape).astype(np.float32)
            for k in d.graph.inputs}


def _layer(x, gate, w1, w2, p):
    """The layer as p ranks run it: rank s sends its block j to expert j's rank, each
    expert runs its MLP on what it got, the results go back the same way."""
    gelu = lambda v: torch.nn.functional.gelu(torch.from_numpy(v)).numpy()
    blocks = x.reshape(p, p, C, H)                  # [source rank, expert, slot, h]
    got = blocks.swapaxes(0, 1)                     # [expert, source rank, slot, h]
    y = np.stack([gelu(got[e].reshape(-1, H) @ w1[e]) @ w2[e] for e in range(p)])
    back = y.reshape(p, p, C, H).swapaxes(0, 1).reshape(-1, H)
    return x + back * gate


def _combine(s):
    return [n.id for n in s.graph.nodes if n.op == "all_to_all_single"][1]


@pytest.mark.parametrize("ranks", [1, 2, pytest.param(4, marks=pytest.mark.slow)])
def test_runs_on_ranks_and_the_residual_fuses_into_the_combine(ranks):
    d = moe_ep(C, H, F, ranks)
    x = _inputs(d, ranks)
    (ref,) = run_reference(d.graph, x).values()
    np.testing.assert_allclose(ref, _layer(x["x"], x["gate"], x["w1"], x["w2"], ranks),
                               rtol=1e-5, atol=1e-6)
    s = Session(d, ranks=ranks)
    run = s.run()
    assert run.ok, run.errors
    # a segment of one row: each block (C rows) in C pieces, the own block first
    s.fuse_received(_combine(s), segment=H)
    assert s.step.decisions[0].endswith("t17, out"), s.step.decisions
    (fused,) = run_reference(s.graph, x).values()
    np.testing.assert_array_equal(fused, ref)
    run = s.run()
    assert run.ok, run.errors
    local = ranks * C * H
    for t in run.times:
        pieces = [sp for sp in t.spans if sp.kind == "compute" and "[" in sp.name]
        assert len(pieces) == local // H, [sp.name for sp in pieces]
        own = t.rank * C * H
        assert pieces[0].name.endswith(f"[{own}:{own + H}]")
        wait = [sp for sp in t.spans if sp.kind == "wait"][-1]
        assert all(wait.start_s <= sp.start_s <= wait.end_s for sp in pieces)


def test_refused_with_the_reason_where_it_is_not_legal():
    s = Session(moe_ep(C, H, F, 2), ranks=2)
    dispatch = next(n.id for n in s.graph.nodes if n.op == "all_to_all_single")
    with pytest.raises(FusionRefused, match="reshape is not elementwise"):
        s.fuse_received(dispatch)
    with pytest.raises(FusionRefused, match="rows of 4 elements.*multiple of 4"):
        s.fuse_received(_combine(s), segment=6)
    before = s.program      # (the gate as a constant: one value per row, not sliceable)
    c = moe_ep(C, H, F, 2)
    g = c.graph
    consts = {**g.constants, "gate": np.full((2 * 2 * C, 1), 0.5, np.float32)}
    import dataclasses
    c = dataclasses.replace(c, graph=dataclasses.replace(
        g, inputs=tuple(i for i in g.inputs if i != "gate"), constants=consts,
        input_ranges={k: r for k, r in g.input_ranges.items() if k != "gate"}))
    with pytest.raises(FusionRefused, match="constant 'gate' one value per row"):
        fuse_received(c.verify(), _combine(Session(c, ranks=2)), H)
    assert s.program is before


def test_the_app_draws_it_and_offers_the_fusion():
    app = wb.open(Session(moe_ep(C, H, F, 2), ranks=2), display=False)
    svg = html.unescape(app.view.svg)
    assert svg.count("all_to_all_single() x2") == 2 and "wb-collective" in svg
    from workbench.ui.dist_actions import candidates, effect_line
    s = app.session
    offers = [o for o in candidates(s) if o.method == "fuse_received"]
    assert [o.legal for o in offers] == [True, False], offers
    assert "nodes; model" in effect_line(s, offers[0])
    assert "reshape is not elementwise" in effect_line(s, offers[1])
    offers[0].apply(s)
    assert any(getattr(t, "on_arrival", "") for t in local_steps(s.program))


def test_a_bias_and_a_gate_broadcast_along_the_rows_are_cut_with_them():
    from workbench.distributed import DistBuilder
    b = DistBuilder("combine", 2)
    x = b.input("x", (8, H), placement="S(0)")
    gate = b.input("gate", (8, 1), placement="S(0)")
    bias = b.input("bias", (H,))
    y = b.all_to_all_single(x)
    b.output((y + bias) * gate + x, "out")
    d = b.build()
    s = Session(d, ranks=2)
    s.fuse_received(s.graph.nodes[0].id, segment=H)     # (one row a piece)
    assert s.step.decisions == ("fused into n0's arrival: t3, t4, out",), s.step.decisions
    run = s.run()
    assert run.ok, run.errors


def test_the_sample_file_opens_in_the_distributed_app():
    from pathlib import Path

    from workbench.ui.dist_app import DistApp
    path = Path(__file__).resolve().parents[2] / "sample_graphs/distributed/moe_ep.json"
    app = wb.open(str(path), display=False)
    assert isinstance(app, DistApp) and app.session.ranks == 2
