"""The distributed app in a real browser (issue 45, item 6): open a tiny data-parallel
AdamW step on 2 ranks, see the AllReduce drawn as a collective with placements on the
edges, apply "split AllReduce" from the Transformations list and see the graph change,
then Measure on 2 gloo ranks and see the per-rank timeline."""
from __future__ import annotations

import pytest
from test_lab import app_button, lab_notebook, lab_run, open_app, shoot, wait_message

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

CELL = ("import workbench as wb\n"
        "from workbench.session import Session\n"
        "from workbench.distributed.samples import dp_adamw\n"
        "app = wb.open(Session(dp_adamw(64, 8, ranks=2), ranks=2))")


def test_split_all_reduce_and_the_timeline_in_lab(lab_factory, page):
    server = lab_factory("light")
    name = lab_notebook(server, "dist.ipynb", [CELL])
    with lab_run(page, server, "lab_dist_FAILED.png", reveal=".wb-dist-app"):
        open_app(page, server, name)
        graph = page.locator(".wb-app .wb-graph")
        start = graph.locator("g.node.wb-collective[id='n0']")
        start.wait_for()
        assert "all_reduce(avg) x2" in start.text_content()
        edges = graph.locator("g.edge.wb-placement text").all_text_contents()
        assert "P(avg)" in edges and "R" in edges, edges
        app_button(page, "Transformations").click()
        wait_message(page, "2 of 4 transformations apply here")   # (chunking refused)
        offers = page.locator(".wb-dist-offers select")
        offers.locator("option").nth(1).wait_for(state="attached")
        # (ipywidgets writes the options' spaces as no-break spaces)
        texts = [t.replace("\xa0", " ") for t in offers.locator("option").all_text_contents()]
        assert texts[0].startswith("split_all_reduce n0 dim 0: 16 -> 18 nodes"), texts
        offers.select_option(index=0)
        app_button(page, "Preview").click()
        wait_message(page, "^preview: split_all_reduce n0 dim 0")
        app_button(page, "Apply").click()
        wait_message(page, "^applied split_all_reduce n0 dim 0")
        # the graph changed: a ReduceScatter then an AllGather, sharded between them
        graph.locator("g.node.wb-collective", has_text="reduce_scatter").wait_for()
        assert graph.locator("g.node.wb-collective", has_text="all_gather").count() == 1
        assert "S(0)" in graph.locator("g.edge.wb-placement text").all_text_contents()
        app_button(page, "Measure").click()
        wait_message(page, "^measured on 2 gloo ranks", timeout=120_000)
        plot = page.locator(".wb-dist-app .wb-plots .js-plotly-plot")
        plot.locator(".bars path").first.wait_for()
        ticks = plot.locator(".ytick text, .y2tick text").all_text_contents()
        assert "rank 0" in ticks and "rank 1" in ticks and "model: 2 ranks" in ticks, ticks
        assert any(t.startswith("simulated:") for t in ticks), ticks
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_dist.png")
