"""Issue 14's app defects, plots and background Measure, driven from Python (real
session, real C compiler; no browser): the browser tests in tests/browser/test_lab.py
check what the user sees of the same fixes."""
from __future__ import annotations

import html
import math
import subprocess
import sys
import time

import pytest

import workbench as wb
from workbench.errors import GraphError, WorkbenchError
from workbench.fusion import MAPPINGS
from workbench.session import Session
from workbench.ui.charts import (
    LONG_LABELS_UP_TO,
    TOP_KERNELS,
    KernelRow,
    kernels_figure,
    roofline_figure,
    step_labels,
    steps_figure,
    top_kernels,
)
from workbench.ui.describe import planner_summary, plural

LAYERNORM = "sample_graphs/layernorm.json"


@pytest.fixture
def ln_app():
    return wb.open(LAYERNORM, backend="cpu", display=False)


def svg_text(app) -> str:
    return html.unescape(app.view.svg)


# -- (1) Set scheme on the default path ---------------------------------------------
def test_set_scheme_default_path_offers_drawn_edges_preselected(ln_app):
    app = ln_app
    app.auto("stitch")
    app.selected = ["n5"]                      # click n5, as the issue did
    labels = [label for label, _ in app.edge.options]
    assert app.edge.value is not None and not app.edge.disabled
    # named by what the drawing shows: producer op and id -> consumer op and id
    assert all("→" in label for label in labels), labels
    assert "add n4 → rsqrt n5 (local)" in labels
    assert not any(label.startswith("t") for label in labels)   # no internal names
    # the preselected edge touches the clicked node, and the scheme box shows its scheme
    assert "n5" in dict((v, k) for k, v in app.edge.options)[app.edge.value]
    assert app.scheme.value == app.session.plan.group("n5").scheme(app.edge.value).value
    steps = len(app.history)
    plan = app.set_scheme(app.edge.value, "global")      # what the button sends
    assert plan is app.session.plan and len(app.history) == steps + 1, app.message
    assert "global stitching" in app.message and "None" not in app.message
    assert app.session.plan.group("n5").schedule.kind.value == "stitched"
    # the same scheme again: no identical step, and it says so
    assert app.set_scheme(app.edge.value, "global") is app.session.plan
    assert len(app.history) == steps + 1 and "unchanged" in app.message


def test_set_scheme_refuses_clearly_without_an_internal_edge(ln_app):
    app = ln_app
    app.selected = ["n5"]                      # one op per kernel: no edge inside
    assert app.edge.disabled and app.edge.value is None
    assert app.edge.label == "no edge inside this kernel"     # said, not a blank box
    assert not app.buttons["Set scheme"].disabled
    plan = app.session.plan
    assert app.set_scheme(app.edge.value, app.scheme.value) is None
    assert "has no edge inside it" in app.message and "None" not in app.message
    assert "wb-refused" in app._message._dom_classes and app.session.plan is plan
    app.selected = []
    assert app.edge.label == "select a kernel"
    assert app.set_scheme(None, "global") is None and "select a kernel" in app.message


# -- (3) the cluster label says the real mapping, for every mapping ------------------
def test_cluster_label_and_rows_dropdown_follow_every_mapping(ln_app):
    app = ln_app
    app.auto("rules")
    app.selected = ["n0"]
    rule = app.session.plan.group("n0").schedule.mapping
    assert app.mapping.value == "auto"
    assert dict((v, k) for k, v in app.mapping.options)["auto"] == f"auto ({rule.value})"
    # (two_phase, a column reduction's form, is refused on this row's layer norm)
    for m in [x.value for x in MAPPINGS if not x.info.partials_by_rows] + ["auto"]:
        plan = app.set_mapping(None, m)
        assert plan is not None, app.message
        gr = plan.group("n0")
        shown = gr.schedule.mapping
        assert m == "auto" or shown.value == m
        # the drawing's cluster label and the drop-down say the mapping now in force
        assert f"{gr.id} · row_reduce ({shown.info.label})" in svg_text(app), m
        assert app.mapping.value == m, (m, app.mapping.value)
    # the same mapping twice: no identical step
    steps = len(app.history)
    app.set_mapping(None, "warp")
    app.set_mapping(None, "warp")
    assert len(app.history) == steps + 1 and "unchanged" in app.message


# -- (4) latency colouring, planner status, plurals, repeated Auto -------------------
def test_latency_colouring_before_measure_says_it_is_predicted(ln_app):
    app = ln_app
    app.auto("rules")
    app.overlay.value = "latency"
    assert "predicted latency" in app.message and "Measure" in app.message
    assert app.view.legend and app.view.legend_title == "kernel predicted latency"
    assert "wb-heat" in svg_text(app)
    app.overlay.value = "none"
    app.measure()
    app.overlay.value = "latency"
    assert app.view.legend_title == "kernel latency"


def test_auto_status_counts_the_planners_work_and_repeats_add_no_step(ln_app):
    app = ln_app
    app.auto("stitch")
    # the stitch planner fused 9 ops into 1 kernel: said so, in the singular
    assert app.message.startswith("auto stitch: 9 ops in 1 kernel (9 ops fused into "
                                  "1 kernel)"), app.message
    assert "0 fusion decisions" not in app.message and "1 kernels" not in app.message
    steps = len(app.history)
    app.auto("stitch")
    assert len(app.history) == steps and "unchanged" in app.message
    assert "kernels>" not in repr(app) and "1 kernel>" in repr(app)


def test_planner_summary_counts_every_decision_kind(small_graph):
    s = Session(small_graph, backend="cpu")
    plan = s.auto("stitch")
    text = planner_summary("stitch", s.graph, plan, s.step.decisions)
    assert f"{len(s.graph.nodes)} ops in {plural(len(plan.groups), 'kernel')}" in text
    assert f"{plural(len(s.step.decisions), 'planner decision')}" in text
    assert plural(1, "kernel") == "1 kernel" and plural(1020, "op") == "1,020 ops"


def test_a_session_adds_no_identical_step(small_graph):
    s = Session(small_graph, backend="cpu")
    p = s.auto("rules")
    assert s.auto("rules") is p and len(s.history) == 2
    s.set_mapping("n0", "warp")
    s.set_mapping("n0", "warp")
    assert len(s.history) == 3
    # the same kernels from another planner are a step: notebook 02 compares them
    ln = Session(LAYERNORM, backend="cpu")
    manual = ln.fuse([f"n{i}" for i in range(9)])
    assert ln.auto("rules") == manual and len(ln.history) == 3
    assert ln.auto("rules") is ln.plan and len(ln.history) == 3


# -- (5) wb.open on a bad file: one line ------------------------------------------------
def test_malformed_json_message_names_line_and_column(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "nodes": "unterminated')
    with pytest.raises(GraphError) as e:
        wb.load(bad)
    assert "at at" not in str(e.value)
    assert "Unterminated string starting at line 1, column 24" in str(e.value)


def test_wb_open_on_a_bad_file_shows_one_line_in_ipython(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "ip = InteractiveShell.instance()\n"
            f"r = ip.run_cell({'import workbench as wb; wb.open(%r)' % str(bad)!r})\n"
            "print('ERROR-TYPE', type(r.error_in_exec).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    text = out.stdout + out.stderr
    assert "ERROR-TYPE GraphError" in text, text
    shown = [ln for ln in text.splitlines() if ln.strip() and "ERROR-TYPE" not in ln]
    assert len(shown) == 1, text
    assert shown[0].startswith("GraphError: ") and "not valid JSON" in shown[0]
    assert "Traceback" not in text


# -- plots from the first step ----------------------------------------------------------
def test_plots_are_useful_before_anything_is_measured(small_graph):
    app = wb.open(small_graph, backend="cpu", display=False)
    steps = {t["name"]: t for t in app.plots.figure("steps")["data"]}
    counted = sum(k.bytes_read + k.bytes_written for k in app.session.kernels()) / 1e6
    assert steps["bytes counted"]["y"] == [pytest.approx(counted)]
    assert steps["predicted"]["visible"] and steps["predicted"]["y"][0] > 0
    assert steps["measured"]["y"] == [None]
    kernels = app.plots.trace("kernels", "predicted")
    assert len(app.session.plan.groups) == 15 and len(kernels["x"]) == TOP_KERNELS
    assert kernels["x"][-1] == f"+{15 - TOP_KERNELS + 1} others"
    assert all(v is not None and v > 0 for v in kernels["y"])
    roof = app.plots.figure("roofline")["data"]
    assert roof[1]["name"] == "predicted" and roof[1]["visible"] and roof[1]["x"]
    assert "roof" in roof[2]["name"]
    # one kernel: the device's DRAM line is a shape across the subplot, so it is drawn
    app.auto("rules")
    assert len(app.session.plan.groups) == 1
    shapes = app.plots.figure("kernels")["layout"]["shapes"]
    assert len(shapes) == 1 and shapes[0]["x0"] == 0 and shapes[0]["x1"] == 1
    assert shapes[0]["y0"] == pytest.approx(app.session.device.dram_bandwidth / 1e9)


def test_steps_legend_sits_above_and_every_step_keeps_a_label():
    import pandas as pd
    for n in (1, 3, 16, LONG_LABELS_UP_TO + 6):
        h = pd.DataFrame({"step": range(n), "action": [f"fuse n{i} n{i + 1}" for i in range(n)],
                          "kernels": range(n, 0, -1), "bytes_moved_MB": [1.0] * n,
                          "latency_ms": [math.nan] * n, "predicted_ms": [0.5] * n,
                          "dram_MB": [math.nan] * n})
        fig = steps_figure(h)
        legend = fig["layout"]["legend"]
        assert legend["yanchor"] == "bottom" and legend["y"] >= 1   # above the plots
        for ax in ("xaxis", "xaxis2", "xaxis3"):
            a = fig["layout"][ax]
            assert a["tickvals"] == a["ticktext"] == fig["data"][0]["x"]
            assert len(set(a["ticktext"])) == n
            assert all(a["ticktext"]), a["ticktext"]
    assert step_labels([0, 1], ["load", "fuse n1 n2 n3 n4 n5"]) == ["0 load", "1 fuse n1 n2 n3…"]


def test_per_kernel_chart_shows_the_top_kernels_and_sums_the_rest():
    rows = [KernelRow(f"k{i}", 1e6 * (i + 1), 1e5, 0.01 * (i + 1), 0.02 * (i + 1))
            for i in range(121)]
    shown = top_kernels(rows)
    assert len(shown) == TOP_KERNELS
    assert {r.group for r in shown[:-1]} == {f"k{i}" for i in range(121 - TOP_KERNELS + 1, 121)}
    rest = rows[:121 - TOP_KERNELS + 1]
    assert shown[-1].group == f"+{len(rest)} others"
    assert shown[-1].latency_ms == pytest.approx(sum(r.latency_ms for r in rest))
    assert shown[-1].bytes_moved == pytest.approx(sum(r.bytes_moved for r in rest))
    fig = kernels_figure(rows, 900.0, "H100")
    assert len(fig["data"][0]["x"]) == TOP_KERNELS and "top 11 of 121" in fig["layout"]["title"]["text"]


def test_roofline_places_kernels_under_the_device_roofs():
    rows = [KernelRow("k0", 4e6, 1e6, 0.01, 0.02), KernelRow("k1", 1e6, 0.0, 0.01)]
    fig = roofline_figure(rows, peak_flops=60e12, dram_bandwidth=3e12, device_name="H100")
    measured, predicted, roof = fig["data"]
    assert measured["x"] == [pytest.approx(0.25)] and measured["text"] == ["k0"]
    assert measured["y"] == [pytest.approx(1e6 / 0.02e-3 / 1e9)]
    assert predicted["y"] == [pytest.approx(1e6 / 0.01e-3 / 1e9)]
    assert roof["y"][1] == pytest.approx(60e3) and roof["x"][1] == pytest.approx(20.0)
    assert fig["layout"]["xaxis"]["type"] == "log"


def test_first_open_imports_no_plotly_python_nor_nbformat():
    code = ("import sys, workbench as wb\n"
            "app = wb.open('sample_graphs/layernorm.json', backend='cpu', display=False)\n"
            "print(sorted(m for m in ('plotly', 'nbformat', 'jsonschema') if m in sys.modules))\n"
            "print(len(app.plots.figures), 'module.exports' in app.plots._esm)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["[]", "3 True"], out.stdout


# -- Measure and Tune on a worker thread, with Cancel -------------------------------------
def wait_for(cond, timeout=60.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_measure_runs_in_the_background_and_cancel_changes_nothing(ln_app):
    app = ln_app
    app.auto("rules")
    app.repeats = 1_000_000          # runs until cancelled
    steps = len(app.history)
    job = app.start("measure")
    assert job is not None
    wait_for(lambda: app.progress.value >= 3 and app.progress.tooltip == "timed run")
    # while it runs: controls locked and saying so, the Cancel button shown
    assert app.buttons["Fuse"].disabled and app.buttons["Measure"].disabled
    assert app.planner.disabled and "wb-busy" in app._dom_classes
    assert not app.buttons["Cancel"].disabled and app.buttons["Cancel"].layout.display == ""
    # the kernel answers: a selection reaches Python, the code panel follows
    app.view.set_state({"selected": ["n3"]})
    assert app.code.group.id == app.session.plan.group("n3").id
    # a session-changing call from elsewhere is refused, and a second job too
    assert app.fuse(["n0", "n1"]) is None and "busy measuring" in app.message
    assert app.start("tune") is None and "busy measuring" in app.message
    app.cancel()
    job.join(60)
    assert not job.running
    assert "measuring cancelled" in app.message and "wb-refused" in app._message._dom_classes
    assert app.session.measured() is None and len(app.history) == steps
    assert not app.buttons["Fuse"].disabled and not app.planner.disabled
    assert app.buttons["Cancel"].layout.display == "none"
    assert "wb-busy" not in app._dom_classes
    assert not app.buttons["Set mapping"].disabled      # n3's kernel is a row kernel
    # and a measurement afterwards runs to the end
    app.repeats = 3
    app.start("measure").join(120)
    m = app.session.measured()
    assert m is not None and m.within_tolerance and "all kernels match NumPy" in app.message


def test_an_unexpected_error_in_a_job_reenables_the_controls(ln_app, monkeypatch):
    app = ln_app

    def broken(*a, **k):     # a fault injected into the real session
        raise RuntimeError("disk full")
    monkeypatch.setattr(app.session, "measure", broken)
    app.start("measure").join(60)
    assert "measuring failed: RuntimeError: disk full" in app.message
    assert not app.buttons["Measure"].disabled and not app.buttons["Fuse"].disabled


def test_tune_runs_in_the_background(ln_app, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    app = ln_app
    app.auto("rules")
    app.start("tune").join(300)
    assert app.message.startswith("tuned 1 kernel;"), app.message
    assert not app.buttons["Tune"].disabled
    with pytest.raises(WorkbenchError, match="measure or tune"):
        app.start("export")


def test_planner_status_on_a_1020_op_graph():
    """The issue's case: the stitch planner fused 1,020 ops into ~121 kernels and the
    status said "0 fusion decisions"."""
    sys.path.insert(0, "sample_graphs")
    from make_samples import transformer_stack
    app = wb.open(transformer_stack(1020), backend="cpu", display=False)
    plan = app.auto("stitch")
    assert plan is not None, app.message
    fused = [gr for gr in plan.groups if len(gr.nodes) > 1]
    assert app.message.startswith(
        f"auto stitch: 1,020 ops in {plural(len(plan.groups), 'kernel')} "
        f"({plural(sum(len(gr.nodes) for gr in fused), 'op')} fused into "
        f"{plural(len(fused), 'kernel')}); "
        f"{plural(len(app.session.step.decisions), 'planner decision')}: "), app.message
    assert "0 fusion decisions" not in app.message
    # its per-kernel chart: the top kernels and the rest as one bar
    x = app.plots.trace("kernels", "predicted")["x"]
    assert len(x) == TOP_KERNELS and x[-1] == f"+{len(plan.groups) - TOP_KERNELS + 1} others"
