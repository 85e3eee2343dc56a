"""The app over a distributed program (issue 45, item 6): collectives drawn as their
own node kind with placements on the edges, the rank selector, the session's
transformations listed, previewed, applied, undone and redone, the planner's decisions,
and the per-rank timeline (model and simulated rows; measured rows from gloo ranks)."""
from __future__ import annotations

import html
import multiprocessing

import pytest

import workbench as wb
from workbench.distributed import DistBuilder
from workbench.distributed.cost import GLOO_LOOPBACK
from workbench.distributed.samples import dp_adamw, dp_lamb
from workbench.distributed.timeline import modelled_bars, simulated_bars
from workbench.errors import WorkbenchError
from workbench.session import Session
from workbench.ui.app import WorkbenchApp
from workbench.ui.dist_app import DistApp
from workbench.ui.dist_dot import dist_dot


def _app(d) -> DistApp:
    app = wb.open(Session(d, ranks=d.ranks), display=False)
    assert isinstance(app, DistApp)
    return app


def _split_and_sharded(ranks=2):
    s = Session(dp_adamw(64, 8, ranks), ranks=ranks)
    s.split_all_reduce("n0")
    ag = next(n for n in s.graph.nodes if n.op == "all_gather")
    s.shard_after(ag.id, keep_sharded=["m_out", "v_out"])
    return s.program


def test_collectives_are_their_own_node_kind_with_placements_on_the_edges():
    d = _split_and_sharded()
    src = dist_dot(d, rank=1).source
    rs = next(line for line in src.splitlines() if line.startswith("  n0 "))
    assert "shape=hexagon" in rs and "wb-collective" in rs
    assert "reduce_scatter(avg, dim=0) x2" in rs and "async start" in rs
    wait = next(line for line in src.splitlines() if line.startswith("  n1 "))
    assert "shape=octagon" in wait and "wait n0" in wait
    # the collective in flight: a dashed start -> wait edge
    assert any(line.startswith("  n0 -> n1 ") and "dashed" in line for line in src.splitlines())
    # placements as DTensor writes them, on the edges
    assert 'label="P(avg)"' in src and 'label="S(0)"' in src and 'label="R"' in src
    # rank 1's shard: rows 32:64 of the 64; rank 0's rows 0:32; a partial is an addend
    assert "f32[32,8] [32:64, :]" in src
    assert "f32[32,8] [0:32, :]" in dist_dot(d, rank=0).source
    assert "[32:64" not in dist_dot(d, rank=0).source
    with pytest.raises(WorkbenchError, match="choose 0..1"):
        dist_dot(d, rank=2)


def test_open_routes_distributed_programs_to_the_distributed_app(tmp_path):
    from workbench.distributed import save_json
    d = dp_adamw(64, 8, 2)
    save_json(d, tmp_path / "dp.json")
    app = wb.open(str(tmp_path / "dp.json"), display=False)
    assert isinstance(app, DistApp) and app.session.ranks == 2
    assert isinstance(wb.open(d, display=False), DistApp)
    assert "1 collectives" in app.message and "2 ranks" in app.message
    svg = html.unescape(app.view.svg)
    assert 'id="n0"' in svg and "wb-collective" in svg and "all_reduce(avg) x2" in svg


def test_the_rank_selector_shows_that_ranks_shard():
    app = _app(_split_and_sharded())
    assert "[0:32, :]" in html.unescape(app.view.svg)
    app.rank_choice.value = 1              # the toggle buttons, as a click sets them
    assert app.rank == 1 and app.view.legend_title == "rank 1 of 2"
    assert "[32:64, :]" in html.unescape(app.view.svg)
    app.view.selected = ["n0"]
    assert "rank 1 holds" in app.props.value and "addend 2/2" in app.props.value
    assert "in flight until its wait n1" in app.props.value
    with pytest.raises(WorkbenchError, match="choose 0..1"):
        app.rank = 3


def test_transformations_listed_previewed_applied_undone_redone():
    app = _app(dp_adamw(64, 8, 2))
    offers = app.actions(keep_sharded=["m_out", "v_out"])
    assert [o.label for o in offers if o.legal] == ["split_all_reduce n0 dim 0",
                                                    "split_all_reduce n0 dim 1"]
    # chunking is listed too, refused with the session's reason (no matmul makes grad)
    assert [o.label for o in offers if not o.legal] == ["chunk_all_reduce n0 k 2",
                                                        "chunk_all_reduce n0 k 4"]
    assert "no matmul makes" in offers[-1].reason
    assert app.offer_list.options[-1][0].startswith("refused: chunk_all_reduce n0 k 4")
    assert "16 -> 18 nodes" in app.offer_list.options[0][0]
    app.preview(0)                          # drawn, not applied
    assert "reduce_scatter" in app.view.svg and "preview" in app.message
    assert app.session.step.action == "load" and len(app.session.graph.nodes) == 16
    app.cancel_preview()
    assert "reduce_scatter" not in app.view.svg
    app.preview(0)
    app.apply()
    assert app.session.step.action == "split_all_reduce n0 dim 0"
    assert "reduce_scatter" in app.view.svg
    # the next transformation the session offers on the new program: shard the optimizer
    offers = app.actions(keep_sharded=["m_out", "v_out"])
    assert offers[0].method == "shard_after" and "KB/rank" in app.offer_list.options[0][0]
    assert "14.34 -> 7.168 KB/rank" in app.offer_list.options[0][0]    # 1/2 per rank
    app.preview(0)
    assert any(x.startswith("moved onto the shard") for x in offers[0].notes)
    assert "moved onto the shard" in app.decisions_html.value
    app.apply()
    assert app.session.step.action.startswith("shard_after")
    assert "wb-current" in app.history_html.value
    app.undo()
    assert app.session.step.action == "split_all_reduce n0 dim 0"
    app.redo()
    assert app.session.step.action.startswith("shard_after")
    assert app.redo() is None and app.message == "nothing to redo"


def test_refusals_are_listed_with_their_reason():
    app = _app(dp_adamw(64, 6, 4))          # dim 1 (6) does not divide into 4 shards
    offers = app.actions()
    refused = [o for o in offers if not o.legal]
    assert refused and "divide" in refused[0].reason
    i = offers.index(refused[0])
    assert app.offer_list.options[i][0].startswith("refused: split_all_reduce n0 dim 1")
    assert app.preview(i) is None and "refused" in app.message
    assert app.session.step.action == "load"
    assert app.apply() is None and "nothing previewed" in app.message


def test_auto_shows_every_candidate_it_did_not_apply():
    app = _app(dp_lamb(64, 8, 2))
    app.auto("stitch")
    notes = app.session.step.decisions
    assert notes and all(("not applied" in x or "not moved" in x or "applied" in x)
                         for x in notes)
    shown = html.unescape(app.decisions_html.value)
    assert all(x in shown for x in notes)
    assert "the model says slower" in shown or "not applied" in shown


def _overlapped(ranks=2):
    """An AllReduce started, independent compute while it is in flight, its wait."""
    b = DistBuilder("overlap", ranks)
    g = b.input("grad", (64, 64), placement="P(sum)")
    x = b.input("x", (64, 64))
    started = b.op("all_reduce", g, group_size=ranks, reduce_op="sum")
    y = b.exp(b.tanh(x) * 2.0)
    r = b.op("wait_tensor", started)
    b.output(r + y, "out")
    return b.build()


def test_model_and_simulated_rows_are_labelled_and_show_overlap():
    d = _overlapped()
    bars = modelled_bars(d, GLOO_LOOPBACK, bandwidth=1e6)    # slow memory: compute shows
    assert {b.row for b in bars} == {"model: 2 ranks"}
    assert any(b.kind == "overlap" for b in bars)   # compute under the AllReduce
    sim, skipped = simulated_bars(d, GLOO_LOOPBACK, ranks=(8, 1024), bandwidth=1e6)
    assert {b.row for b in sim} == {"simulated: 8 ranks", "simulated: 1024 ranks"}
    assert {b.source for b in sim} == {"simulated"} and not skipped
    # the AllReduce's time grows with the ranks (alpha-beta ring): with fast memory
    # the wait is exposed, longer on 1024 ranks
    sim, _ = simulated_bars(d, GLOO_LOOPBACK, ranks=(8, 1024), bandwidth=1e12)
    comm = {b.row: b.end_s - b.start_s for b in sim if b.kind == "communication"}
    assert comm["simulated: 1024 ranks"] > comm["simulated: 8 ranks"]
    # a program whose shard does not divide into 1024 says so instead of a row
    sim, skipped = simulated_bars(_split_and_sharded(), GLOO_LOOPBACK, ranks=(8, 1024))
    assert {b.row for b in sim} == {"simulated: 8 ranks"}
    assert "1024 ranks" in skipped[0] and "divide" in skipped[0]
    app = _app(d)
    names = {t["name"] for t in app.timeline["data"]}
    assert any(n.endswith("(simulated)") for n in names)
    assert any(n.endswith("(model)") for n in names)
    assert "not measured yet" in app.timeline["layout"]["title"]["text"]
    rows = {y for t in app.timeline["data"] for y in t["y"]}
    assert "simulated: 8 ranks" in rows and not any(r.startswith("rank ") for r in rows)
    # the simulated rows on an axis of their own, the model's on the first
    axes = {t["name"]: t.get("xaxis", "x") for t in app.timeline["data"]}
    assert {a for n, a in axes.items() if n.endswith("(simulated)")} == {"x2"}
    assert {a for n, a in axes.items() if not n.endswith("(simulated)")} == {"x"}


@pytest.mark.slow
def test_measure_draws_each_ranks_measured_timeline():
    """Two gloo ranks, in the background as the Measure button runs it (8-10 s here:
    the forkserver's start and each rank's compile, so in the slow tier)."""
    app = _app(_overlapped())
    job = app.start_measure(repeats=1)
    assert app.buttons["Undo"].disabled
    assert app.undo() is None and "measuring is running" in app.message
    job.thread.join(300)
    assert not job.running and job.error is None, job.error
    assert "measured on 2 gloo ranks" in app.message and not app.buttons["Undo"].disabled
    run = job.result[1]
    data = app.timeline["data"]
    rows = {y for t in data if "(" not in t["name"] for y in t["y"]}
    assert rows == {"rank 0", "rank 1"}
    # the compute issued between the AllReduce's start and its wait ran under it
    assert {"overlap", "communication"} <= {t["name"] for t in data}
    for t in run.times:       # the bars cover the measured step, in order, once
        # (a rank's own time: its compute and its calls into collectives, one at a time)
        own = sorted((s for s in t.spans if s.kind != "comm"), key=lambda s: s.start_s)
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in zip(own, own[1:]))
        assert own[-1].end_s <= t.step_s + 1e-9
        mine = [(b, x) for tr in data if "(" not in tr["name"]
                for y, b, x in zip(tr["y"], tr["base"], tr["x"]) if y == f"rank {t.rank}"]
        total = sum(x for _, x in mine) / 1e3
        assert total == pytest.approx(t.compute_s + t.comm_s, rel=0.05, abs=2e-4)
    assert multiprocessing.active_children() == []


def test_the_tensor_parallel_block_offers_chunking_and_bucketing():
    from workbench.distributed.samples import SAMPLES
    make, sizes = SAMPLES["tp_mlp.json"]
    app = _app(make(**sizes))
    offers = {o.label: o for o in app.actions()}
    chunk = [o for label, o in offers.items() if label.startswith("chunk_all_reduce")]
    assert chunk and all(o.legal for o in chunk), [o.reason for o in chunk]
    chunk[0].apply(app.session)
    assert app.session.step.action.startswith("chunk_all_reduce")
    # two AllReduces now (one per piece): one bucket over both is offered, tried
    offers = app.actions()
    assert any(o.method == "bucket_all_reduces" and o.ref is None for o in offers)


def test_a_plain_graph_still_opens_the_plain_app(small_graph):
    assert isinstance(wb.open(small_graph, backend="cpu", display=False), WorkbenchApp)
