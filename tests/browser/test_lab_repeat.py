"""A repeat in a real browser (issue 46): open CartPole x256 with ``wb.open`` (its box,
its body drawn), choose "fuse steps x16" in the transformations list and Apply -- the
box's label changes from unfused to 16 calls -- then Measure: the plot of speedup
against F shows the predicted curve and the measured point."""
from __future__ import annotations

import re

import pytest
from test_lab import lab_notebook, lab_run
from lab_driver import error_outputs, open_notebook, run_all, wait_idle

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

APP = ".wb-repeat-app"


def _traces(page) -> list:
    """[name, x, y] of every trace of the app's plot once it is drawn."""
    page.wait_for_function(f"""() => {{
        const p = document.querySelector('{APP} .js-plotly-plot');
        return p !== null && (p.data || []).length > 0; }}""", timeout=60_000)
    return page.evaluate(f"""() => (document.querySelector('{APP} .js-plotly-plot').data)
        .map(t => [t.name, Array.from(t.x || []).map(String),
                   Array.from(t.y || []).map(v => v === null ? null : Number(v))])""")


def test_open_cartpole_fuse_steps_x16_and_see_the_plot(lab_factory, page):
    server = lab_factory("light")
    name = lab_notebook(server, "repeat.ipynb", [
        "import workbench as wb\nfrom workbench.testing.simulators import cartpole\n"
        "app = wb.open(cartpole(4096, 256))"])
    with lab_run(page, server, "lab_repeat_FAILED.png", reveal=APP):
        open_notebook(page, server, name)
        run_all(page)
        wait_idle(page)
        assert not error_outputs(page), error_outputs(page)
        label = page.locator(f"{APP} .wb-repeat-label")
        label.wait_for()
        assert label.inner_text() == "repeat cartpole_x256 \u00d7256 \u00b7 unfused: 256 calls"
        page.locator(f"{APP} details.wb-repeat summary").click()     # the box opens
        assert "cartpole(" in page.locator(f"{APP} details.wb-repeat pre").inner_text()
        # the body drawn by the graph view, folded until its title is clicked
        page.get_by_text("unfused: 256 calls: the body drawn").click()
        page.locator(f"{APP} .wb-repeat-body .wb-graph svg g.node").first.wait_for()
        traces = _traces(page)
        assert [t[0] for t in traces] == ["predicted"]
        assert traces[0][1] == ["1", "2", "4", "8", "16", "32", "64", "128", "256"]
        select = page.locator(f"{APP} .wb-repeat-actions select")
        texts = select.locator("option").all_inner_texts()
        # (ipywidgets shows spaces as no-break spaces)
        pick = [i for i, t in enumerate(texts)
                if t.replace("\xa0", " ").startswith("fuse steps x16 ")]
        assert len(pick) == 1, texts
        select.select_option(index=pick[0])
        page.locator(f"{APP} button", has_text=re.compile(r"^\s*Apply\s*$")).click()
        page.wait_for_function(f"""() => document.querySelector('{APP} .wb-repeat-label')
            .textContent.endsWith('fuse steps \u00d716: 16 calls')""", timeout=60_000)
        page.locator(f"{APP} button", has_text=re.compile(r"^\s*Measure\s*$")).click()
        page.wait_for_function(f"""() => /^measured fuse steps x16: /.test(
            document.querySelector('{APP} .wb-repeat-message').textContent)""",
                               timeout=120_000)
        page.wait_for_function(f"""() => (document.querySelector('{APP} .js-plotly-plot')
            .data || []).some(t => t.name === 'measured')""", timeout=60_000)
        measured = dict((t[0], t) for t in _traces(page))["measured"]
        assert measured[2][4] is not None and measured[2][4] > 0     # at F=16
        assert measured[2][0] is None                                # F=1: not measured
        assert not page.js_errors, page.js_errors
        page.locator(APP).screenshot(path=str(__import__("lab_driver").artifacts_dir()
                                              / "lab_repeat.png"))
