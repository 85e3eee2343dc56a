"""The notebook app driven from Python, as a notebook replaying a session would: real
session, real C compiler, real measurements; no browser."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.fusion import PLANNERS
from workbench.session import Session

GELU = ["n9", "n10", "n11", "n12", "n13"]


def test_open_accepts_a_path_a_graph_and_a_session(small_graph):
    from workbench.ui import GraphView, WorkbenchApp
    app = wb.open("sample_graphs/layernorm.json", backend="cpu", display=False)
    assert isinstance(app, WorkbenchApp) and isinstance(app.view, GraphView)
    assert len(app.session.graph.nodes) == 9
    assert isinstance(wb.open(small_graph, backend="cpu", display=False).session, Session)
    onnx_app = wb.open("sample_graphs/layernorm_gelu.onnx", backend="cpu", display=False)
    assert 'id="n0" class="node' in onnx_app.view.svg
    s = Session(small_graph, backend="cpu")
    assert wb.open(s, display=False).session is s
    with pytest.raises(WorkbenchError, match="file not found"):
        wb.open("no/such/graph.json", display=False)


def test_open_takes_the_matmul_precision_and_says_when_matmuls_run_in_tf32():
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable():
        pytest.skip(CudaEmuBackend.unavailable())
    app = wb.open("sample_graphs/bert_chain.json", backend="cuda-emu", display=False,
                  matmul_precision="tf32")
    assert app.session.tf32 and "float32 matmuls in TF32" in app.message
    exact = wb.open("sample_graphs/bert_chain.json", backend="cuda-emu", display=False)
    assert not exact.session.tf32 and "TF32" not in exact.message
    # the matmuls drop-down starts at the session's precision
    assert app.matmuls.value == "tf32" and exact.matmuls.value == "float32"


def _emulated_gpu_app():
    """The app over a session whose device has TF32 tensor cores (the H100's plans in
    the CUDA emulator)."""
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable():
        pytest.skip(CudaEmuBackend.unavailable())
    return wb.open("sample_graphs/bert_chain.json", backend="cuda-emu", display=False)


def test_picking_tf32_in_the_drop_down_is_a_step_and_undo_goes_back():
    app = _emulated_gpu_app()
    s = app.session
    mm = next(n.id for n in s.graph.nodes if n.op == "matmul")
    app.fuse([mm, s.graph.consumers[s.graph.node(mm).outputs[0]][0].id])   # a GEMM kernel
    assert "wmma::" not in app.code.cuda
    app.matmuls.value = "tf32"               # what a pick in the browser does
    assert s.matmul_precision == "tf32" and s.kernel(mm).tf32
    assert app.message.startswith("step 2: matmul precision tf32, float32 matmuls in "
                                  "TF32 (2 matmuls on tensor cores"), app.message
    assert "wb-refused" not in app._message._dom_classes
    h = app.history
    assert list(h.action)[1:] == ["fuse " + " ".join(s.plan.group(mm).nodes),
                                  "matmul precision tf32"]
    assert list(h.matmul_precision) == ["float32", "float32", "tf32"]
    assert "wb-matmuls" in app.matmuls._dom_classes
    # the code panel shows the fused GEMM again, now on tensor cores, and the
    # roofline draws their ceiling above the CUDA cores'
    assert app.code.group.id == s.plan.group(mm).id and "wmma::" in app.code.cuda
    roofs = lambda: [t["name"] for t in app.plots.figure("roofline")["data"]
                     if t["mode"] == "lines"]
    assert roofs()[1] == "TF32 tensor cores: 495 TFLOP/s", roofs()
    app.undo()
    assert app.matmuls.value == "float32" and s.matmul_precision == "float32"
    assert "undo: step 1" in app.message and len(s.history) == 3   # (no new step)
    assert "wmma::" not in app.code.cuda and len(roofs()) == 1
    app.redo()
    assert app.matmuls.value == "tf32" and len(s.history) == 3


def test_the_same_precision_again_and_a_bad_one_change_nothing():
    app = _emulated_gpu_app()
    s = app.session
    assert app.set_matmul_precision("float32") is s.plan
    assert "unchanged, already float32; no new step" in app.message
    assert len(s.history) == 1
    assert app.set_matmul_precision("fp16") is None
    assert app.message.startswith("matmul_precision must be one of float32, tf32")
    assert "wb-refused" in app._message._dom_classes
    assert len(s.history) == 1 and app.matmuls.value == "float32"


def test_on_a_cpu_the_app_says_matmuls_stay_float32(small_graph):
    import warnings
    app = wb.open("sample_graphs/bert_chain.json", backend="cpu", display=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # said in the status line, not as a warning
        app.matmuls.value = "tf32"
    assert "has no TF32 tensor cores: matmuls stay float32" in app.message, app.message
    assert app.message.startswith("step 1: matmul precision tf32; this CPU")
    assert list(app.history.matmul_precision) == ["float32", "float32"]
    assert app.matmuls.value == "tf32"       # what was asked, as the step says


def test_the_matmuls_drop_down_is_locked_while_a_job_runs(app):
    app._lock_controls(True)
    assert app.matmuls.disabled
    app._lock_controls(False)
    assert not app.matmuls.disabled


def test_buttons_are_named_as_the_browser_test_expects(app):
    assert {"Fuse", "Split", "Undo", "Redo", "Auto", "Measure", "Export"} <= set(app.buttons)
    assert all(app.buttons[k].description == k for k in app.buttons)
    assert "wb-message" in app._message._dom_classes and "wb-app" in app._dom_classes


def test_fuse_the_selection_redraws_and_adds_a_step(app):
    app.selected = GELU
    svg = app.view.svg
    plan = app.fuse()
    assert plan is app.session.plan and plan.group("n9").nodes == tuple(GELU)
    assert app.view.svg != svg and 'id="k9" class="cluster' in app.view.svg
    assert list(app.history.action) == ["load", "fuse " + " ".join(GELU)]
    assert list(app.history.kernels) == [15, 11]
    assert "fused 5 ops into k9" in app.message
    assert "wb-refused" not in app._message._dom_classes
    # the code panel shows the new kernel, and its diff against the five it replaced
    assert app.code.group.id == "k9"
    assert "__global__" in app.code.cuda and "erff(" in app.code.c
    assert "previous/k9+k10+k11+k12+k13.cu" in app.code.diff
    assert "+++ current/k9.cu" in app.code.diff and "+++ current/k9.c" in app.code.diff
    # the IR tab, between C and Diff: the same kernel as target-neutral text
    assert app.code.tabs.titles == ("CUDA", "C", "IR", "Diff", "Assembly")
    k = app.code.kernel(plan, plan.group("k9"))
    assert app.code.ir.startswith(f"kernel {k.name}  group k9  elementwise\n")
    assert "loop" in app.code.ir and "erff(" in app.code.ir and "__global__" not in app.code.ir
    assert app.code.tabs.children[2].value.startswith('<div class="wb-code">')
    app.code.clear()
    assert app.code.ir == "" and app.code.tabs.children[2].value == ""


def test_a_refused_fusion_changes_nothing_and_says_why(app):
    app.selected = ["n0", "n3"]      # the two means of LayerNorm: n1, n2 lie between
    plan, svg, steps = app.session.plan, app.view.svg, len(app.history)
    assert app.fuse() is None
    assert "would create a cycle through n1" in app.message
    assert "wb-refused" in app._message._dom_classes
    assert app.session.plan is plan and app.view.svg == svg and len(app.history) == steps
    assert app.fuse([]) is None and "nothing selected" in app.message
    assert app.undo() is None and "nothing to undo" in app.message
    assert app.split("n14") is None and "nothing to split" in app.message
    assert app.session.plan is plan and app.view.svg == svg


def test_select_by_name_op_or_composite(app):
    assert app.select("erf") == ["n11"]
    assert app.view.selected == ["n11"]
    assert app.select("gelu") == GELU                 # the composite's name
    assert app.select("block0/ln") == [f"n{i}" for i in range(9)]
    assert app.select("n14") == ["n14"]
    assert app.select("nothing-like-this") == [] and "no node matches" in app.message
    app.search.value = "rsqrt"                         # the search box does the same
    assert app.selected == ["n5"]
    with pytest.raises(WorkbenchError, match="no node 'n99'"):
        app.selected = ["n99"]


def test_front_end_selection_reaches_python(app):
    app.view.set_state({"selected": ["n11"]})    # a click in the browser
    assert app.selected == ["n11"] and app.code.group.id == "k11"
    app.view.set_state({"selected": ["n11", "bogus"]})   # unknown ids are dropped
    assert app.selected == ["n11"]


def test_split_undo_redo_and_every_planner(app):
    app.fuse(GELU)
    assert app.split("n10") is app.session.plan and len(app.session.plan.groups) == 15
    assert app.undo() is not None and len(app.session.plan.groups) == 11
    assert app.redo() is not None and len(app.session.plan.groups) == 15
    assert app.redo() is None and "nothing to redo" in app.message
    for name in PLANNERS:
        plan = app.auto(name)
        assert plan is app.session.plan and plan.planner == name
        assert app.planner.value == name
    assert app.auto("no-such-planner") is None and "unknown planner" in app.message


def test_measure_fills_history_plots_code_and_overlay(app):
    app.auto("rules")
    app.selected = ["n0"]
    m = app.measure()
    assert m is not None and m.within_tolerance
    # compile, reference, check and every timed run (10 by default): the bar full
    # after the last (tests/ui/test_progress_phases.py checks the way there)
    assert app.progress.value == app.progress.max
    assert app.progress.tooltip == "timed run"
    assert app.progress.description == "4/4 timed runs 10/10"
    h = app.history
    assert math.isnan(h.latency_ms[0]) and h.latency_ms[1] == pytest.approx(m.latency_ms)
    steps = {t["name"]: t for t in app.plots.figure("steps")["data"]}
    assert steps["measured"]["y"][1] == pytest.approx(m.latency_ms)
    assert steps["kernels"]["y"] == [15, len(app.session.plan.groups)]
    assert steps["bytes counted"]["y"][1] == pytest.approx(m.bytes_moved / 1e6)
    # step 0 is not measured, yet its bytes are counted (the same count as measured)
    assert steps["bytes counted"]["y"][0] == pytest.approx(
        sum(k.bytes_read + k.bytes_written for k in app.session.kernels(
            app.session.history[0].plan)) / 1e6)
    measured = app.plots.trace("kernels", "measured")
    assert measured["x"] == list(m.per_kernel.group)
    assert measured["y"] == pytest.approx(list(m.per_kernel.latency_ms))
    achieved = app.plots.trace("kernels", "achieved", "x2")
    assert achieved["y"] == pytest.approx(list(m.per_kernel.bandwidth_GBps))
    assert steps["predicted"]["y"][1] == pytest.approx(h.predicted_ms[1])
    dev = app.session.device
    line = app.plots.figure("kernels")["layout"]["shapes"][0]
    assert line["y0"] == pytest.approx(dev.dram_bandwidth / 1e9)
    assert "ms measured" in app.code.header.value
    app.overlay.value = "latency"
    assert len(app.view.legend) >= 1 and app.view.legend[0]["label"].endswith("ms")
    assert "wb-heat" in app.view.svg.replace("&#45;", "-")


def test_bytes_overlay_needs_no_measurement(app):
    app.overlay.value = "bytes"
    assert app.view.legend and app.view.legend_title == "kernel bytes"
    app.overlay.value = "none"
    assert app.view.legend == []


def test_collapse_toggle(app):
    app.collapse_toggle.value = True
    assert app.view.collapsed == {"c0", "c1", "s0"}
    app.collapse_toggle.value = False
    assert app.view.collapsed == frozenset()


def test_export_delegates_to_the_session(app, tmp_path):
    if not hasattr(Session, "export"):
        pytest.skip("Session.export is not in this version")
    app.auto("rules")
    out = app.export(tmp_path / "art")
    assert out is not None and (tmp_path / "art").exists()
    assert "exported step 1" in app.message


def test_set_scheme_delegates_or_refuses(app):
    app.auto("rules")
    app.selected = ["n0"]
    group = app.session.plan.group("n0")
    assert not app.edge.disabled
    assert [v for _, v in app.edge.options] == [v for v, _ in group.schemes]
    # t1, LayerNorm's mean, is read by every thread of the row: local is refused
    plan, svg = app.session.plan, app.view.svg
    assert group.scheme("t1").value == "regional"
    assert app.set_scheme("t1", "local") is None and "shared memory" in app.message
    assert app.session.plan is plan and app.view.svg == svg
    assert app.set_scheme("t1", "global") is app.session.plan
    assert app.history.action.iloc[-1] == "set_scheme t1 global"
    assert app.view.svg != svg


def test_set_mapping_shows_the_launch_configuration(app):
    app.auto("rules")
    app.selected = ["n0"]
    assert not app.mapping.disabled
    plan = app.set_mapping(None, "warp")
    assert plan is app.session.plan and plan.group("n0").schedule.mapping == "warp"
    assert "warp/row" in app.message
    assert app.history.action.iloc[-1] == "set_mapping n0 warp"
    # an unknown mapping is refused with the reason and changes nothing
    before = app.session.plan
    assert app.set_mapping("n0", "diagonal") is None
    assert app.session.plan is before and "diagonal" in app.message
    app.selected = []
    assert app.set_mapping(None, "block") is None and "select a node" in app.message


def test_import_workbench_does_not_import_widget_libraries():
    code = ("import sys, workbench\n"
            "print(sorted(m for m in ('ipywidgets', 'plotly', 'anywidget', 'graphviz', "
            "'pygments') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_tune_button_searches_launches_and_shows_the_tuned_step(app, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))     # no earlier answers
    app.auto("rules")
    before = len(app.history)
    plan = app.tune()
    assert plan is app.session.plan and app.session.tuning
    n = len(app.session.tuning)
    assert app.message.startswith(f"tuned {n} kernel{'s' * (n != 1)};")
    assert "wb-refused" not in app._message._dom_classes
    assert len(app.history) in (before, before + 1)        # a step only if one changed
    table = app.session.tuning[0].table
    assert table.chosen.sum() == 1 and (table.ms > 0).all()
    app.measure()
    assert app.history.ok.iloc[-1]


def test_steps_plot_shows_measured_dram_only_where_counters_were_read(app):
    app.measure()
    dram = app.plots.trace("steps", "DRAM measured", "x2")
    assert not dram["visible"]    # cpu: no counters
    hist = app.history.copy()
    hist["dram_MB"] = [1.5] * len(hist)
    app.plots.update(hist, [])
    dram = app.plots.trace("steps", "DRAM measured", "x2")
    assert dram["visible"] and dram["y"] == [1.5]


def test_measure_reads_dram_counters_where_asked_and_says_why_not(small_graph):
    """On a GPU backend Measure reads the hardware counters (issue 14 item 8); here
    (CPU, no ncu) asking for them gives the measurement with the reason, in the
    message, and the step's DRAM column stays NaN -- never a failure."""
    from workbench.ui import WorkbenchApp
    app = WorkbenchApp(Session(small_graph, backend="cpu"))
    assert app.counters is False                   # the CPU backend: not by default
    app.repeats = 2
    app.counters = True
    m = app.measure()
    assert m is not None and m.dram_source.startswith("unavailable")
    assert "DRAM counters unavailable" in app.message and "MB moved" in app.message
    assert math.isnan(app.history["dram_MB"].iloc[-1])
