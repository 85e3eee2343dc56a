"""One set of numbers per step wherever the app shows one (workbench/step_table.py,
ui/step_numbers.py, ui/transform_panel.py): the step table, the Compare table, the
Transformations and Decisions panels and the charts give a step the same prediction
and the same counted bytes; its time is three (the step's, its kernels' own, the call
overhead); the per-kernel figures are the kernels' own, as ``Session.measure`` gives
them; Compare says "not measured", never NaN. The data of the panels, no browser."""
from pathlib import Path

import math

import pytest

import workbench as wb
from workbench.fusion.beam import time_text
from workbench.step_table import COMPARE_ROWS
from workbench.ui.charts import steps_figure
from workbench.ui.step_numbers import kernel_rows, plotted_history
from workbench.ui.transform_panel import compare_html, decision_html, step_line

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


@pytest.fixture(scope="module")
def measured():
    """bert_chain.onnx: step 0 measured, then ``stitch`` (its fused attention's packing
    is bytes the cost model's features do not count) measured after the model was
    refitted to step 0's kernels."""
    s = wb.Session(str(SAMPLES / "bert_chain.onnx"), backend="cpu")
    s.measure(warmup=1, repeats=2)
    s.auto("stitch")
    planned = s.predict().ms
    s.measure(warmup=1, repeats=2)
    return s, planned


def test_every_face_gives_a_step_one_prediction_and_one_count_of_bytes(measured):
    s, planned = measured
    e = s.effect()
    t = s.table(measure=False).iloc[-1]
    c = s.compare(0, 1)
    m = s.measured()
    # the prediction the planner's decision states is the step's, measured or not
    assert e.predicted_ms == planned == t.predicted_ms == c.iloc[2, 1] == m.predicted_ms
    assert f"stitch plan {time_text(planned / 1e3)}" in s.step.decisions[0].reason
    assert step_line(e) in decision_html(s.step.decisions, e)
    # the bytes: the kernel IR's, as the measurement reports them
    # (the tables show MB as bytes / 1e6: compared that way, since MB x 1e6 need not
    # give the integer back in floating point -- 130.197504 x 1e6 does not)
    assert e.bytes_moved == m.bytes_moved
    assert t.bytes_moved_MB == c.iloc[1, 1] == m.bytes_moved / 1e6
    rows = kernel_rows(s)
    assert sum(r.bytes_moved for r in rows) == m.bytes_moved
    assert sum(r.predicted_ms for r in rows) == pytest.approx(planned)
    assert plotted_history(s).bytes_moved_MB.iloc[-1] == t.bytes_moved_MB


def test_a_step_time_is_three_numbers_and_kernels_are_their_own(measured):
    s, _ = measured
    m = s.measured()
    # medians over the timed calls of each call's own split: a call's kernels run
    # inside it, so neither exceeds the step and the overhead is never negative
    assert 0 < m.kernels_ms <= m.latency_ms and m.overhead_ms >= 0
    assert m.kernels_ms + m.overhead_ms == pytest.approx(m.latency_ms, rel=0.5)
    t = s.table(measure=False).iloc[-1]
    assert (t.latency_ms, t.kernels_ms, t.overhead_ms) == (m.latency_ms, m.kernels_ms,
                                                           m.overhead_ms)
    # the app's kernel rows are the measurement's own per-kernel times, kernel by kernel
    per = dict(zip(m.per_kernel.group, m.per_kernel.latency_ms))
    rows = kernel_rows(s)
    assert {r.group: r.latency_ms for r in rows} == per
    # no kernel shows more than the whole step (the ResNet: kernel 0 9.9 ms
    # of a 6.8 ms step)
    assert max(per.values()) <= m.latency_ms
    # the steps chart: the step's bar and its kernels' own beside it
    fig = {t["name"]: t for t in steps_figure(plotted_history(s))["data"]}
    assert fig["kernels' own"]["y"][-1] == pytest.approx(m.kernels_ms)
    assert fig["measured"]["y"][-1] == pytest.approx(m.latency_ms)


def test_compare_says_not_measured_never_nan():
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    s.auto("stitch")
    df = s.compare(0, 1)
    assert list(df.index) == COMPARE_ROWS
    assert math.isnan(df.loc["latency_ms"].iloc[0])
    page = compare_html(df)
    assert "not measured" in page and "NaN" not in page and "nan" not in page
    assert df.loc["predicted_ms"].iloc[1] == s.predict().ms


def test_a_step_keeps_its_prediction_until_a_model_is_assigned():
    """Refits after measurements leave a step's prediction as it was made; a model
    the user assigns prices every step again."""
    from workbench.device import H100
    from workbench.fusion.cost import CostModel
    s = wb.Session(str(SAMPLES / "layernorm.json"), backend="cpu")
    before = s.predict().ms
    s.measure(warmup=1, repeats=2)           # refits the session's model
    assert s.predict().ms == before == s.table(measure=False).predicted_ms[0]
    s.cost_model = CostModel.for_device(H100)
    assert s.predict().ms == s.cost_model.predict(s.plan).ms != before
    assert s.table(measure=False).predicted_ms[0] == s.predict().ms


def test_a_previewed_action_shows_the_numbers_its_step_will_have():
    """The Transformations panel's "-1 kernel, -16.8 MB, 7.16 -> 6.57 ms": applied,
    the step has those numbers, in every table."""
    s = wb.Session(str(SAMPLES / "bert_chain.onnx"), backend="cpu")
    acts = [a for a in s.actions([n.id for n in s.graph.nodes[:12]])
            if a.legal and a.plan is not None]
    assert len(acts) >= 2
    for a in acts[:3]:
        s.apply(a)
        assert s.effect() == a.effect
        assert s.compare(0, s.position).iloc[1, 1] * 1e6 == a.effect.bytes_moved
        s.undo()
