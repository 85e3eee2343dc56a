"""Measure's progress bar is one monotone bar across its phases, each named (issue 49:
it sat at 100% through the NumPy check, then restarted). Real session, real C
compiler: the bar's states are recorded as the app's Measure sets them."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.ui.progress_phases import MEASURE, SCALE, PhasedProgress


def record(app) -> list[tuple[int, str, str]]:
    seen = []
    app.progress.observe(lambda ch: seen.append(
        (app.progress.value, app.progress.description, app.progress.tooltip)),
        ["value", "description"])
    return seen


def test_measure_moves_one_bar_through_named_phases_to_100_percent_once():
    app = wb.open("sample_graphs/layernorm.json", backend="cpu", display=False)
    app.auto("rules")
    app.repeats = 3
    seen = record(app)
    m = app.measure()
    assert m is not None and m.within_tolerance
    values = [v for v, _, _ in seen]
    assert values == sorted(values), seen                          # never back
    assert values[-1] == app.progress.max == SCALE
    # full only at the last timed run
    assert [d for v, d, _ in seen if v == SCALE] == ["4/4 timed runs 3/3"], seen
    phases = [d.split(" ", 1)[1].rstrip("0123456789/ ") for _, d, _ in seen if "/4 " in d]
    order = list(dict.fromkeys(phases))
    assert order == ["compiling", "NumPy reference", "checking", "timed runs"], seen
    # the check is seen kernel by kernel, each on the bar short of full
    kernels = [ck.kernel.name for ck in app.session.program().compiled]
    checked = [t for _, d, t in seen if d.startswith("3/4 checking")]
    assert [f"checked {k} against NumPy" for k in kernels] == [
        t for t in dict.fromkeys(checked) if t.endswith("NumPy")]
    assert max(v for v, d, _ in seen if d.startswith("3/4")) < SCALE
    # a second Measure of the measured step: cached, no phase runs
    seen.clear()
    app.measure()
    assert all(not d.startswith(("1/4", "2/4", "3/4")) for _, d, _ in seen), seen


@pytest.mark.parametrize("events", [
    [(1, 3, "k0"), (3, 3, "k2")],
    [(0, 5, "checked run"), (1, 5, "checked run"), (2, 5, "checked k0 against NumPy"),
     (3, 5, "timed run"), (5, 5, "timed run")]])
def test_phase_events_never_move_the_bar_back(events):
    p = PhasedProgress(MEASURE)
    shown = [p.enter("compiling")]
    for e in events:
        shown.append(p.event(*e))
    shown += [p.enter("NumPy reference"), p.enter("checking"), p.event(0, 4, "checked run"),
              p.event(4, 4, "timed run")]
    values = [s.value for s in shown]
    assert values == sorted(values) and values[-1] == SCALE
