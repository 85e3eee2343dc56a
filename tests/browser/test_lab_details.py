"""Issue 49 items 4 and 5 in a real JupyterLab and headless Chromium: a reopened
session file shows its saved step and view; a weight's statistics in the property
panel; the Assembly tab's compile command, CPU assembly and PTX; a 2,010-op graph
opening as its layers with the minimap beside the drawing, not over it."""
from __future__ import annotations

import json

import pytest
from lab_driver import REPO
from test_lab import lab_notebook, lab_run, open_app, shoot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

GRAPH = REPO / "sample_graphs" / "layernorm.json"


def test_weights_assembly_saved_session_and_large_graph_in_lab(lab_factory, page):
    server = lab_factory("light")
    saved = server.root / "details.wbsession.json"
    name = lab_notebook(server, "details.ipynb", [
        "import sys, workbench as wb\n"
        f"sys.path.insert(0, {json.dumps(str(REPO / 'tests' / 'ui'))})\n"
        f"s = wb.Session({json.dumps(str(GRAPH))}, backend='cpu')\n"
        "s.fuse(['n1', 'n2'])\n"
        f"s.save({json.dumps(str(saved))}, view={{'selected': ['n7']}})\n"
        f"app = wb.open(wb.open_session({json.dumps(str(saved))}))",
        "from test_large_graphs import layer_stack\n"
        "big = wb.open(layer_stack(134), backend='reference')"])
    with lab_run(page, server, "lab_details_FAILED.png"):
        open_app(page, server, name)
        first = page.locator(".wb-app").nth(0)
        graph = first.locator(".wb-graph")
        # the reopened session: its fused kernel drawn, its saved selection shown
        graph.locator("g.node.wb-selected[id='n7']").wait_for()
        assert "step 1" in first.locator(".wb-message").inner_text() or \
            first.locator("g.cluster").count() >= 1
        # the weight's statistics (n7 multiplies by gamma)
        props = first.locator(".wb-props")
        props.filter(has_text="constant gamma").wait_for()
        text = props.inner_text()
        assert "mean, std" in text and "first values" in text and "zeros" in text, text
        assert "does" in text                       # the op's one-line description
        # the Assembly tab: nothing compiled until opened; then cc's line and its -S text
        first.locator(".wb-code-panel .lm-TabBar-tab", has_text="Assembly").click()
        cmd = first.locator(".wb-asm-cmd")
        cmd.wait_for(timeout=60_000)
        assert "-O3" in cmd.inner_text() and "-march=native" in cmd.inner_text()
        first.locator(".wb-asm-target button", has_text="GPU").click()
        first.locator(".wb-asm-cmd", has_text="nvrtcCompileProgram").wait_for(timeout=60_000)
        # (the command line and the text are two updates: wait for the PTX itself)
        first.locator(".wb-asm .wb-code", has_text=".visible .entry").wait_for(timeout=60_000)
        shoot(page, "lab_details_small.png")
        # the 2,010-op graph: its 134 layers as boxes, the minimap beside the view
        second = page.locator(".wb-app").nth(1)
        view = second.locator(".wb-graph")
        view.locator("svg g.node").first.wait_for()
        assert view.locator("svg g.node").count() <= 136
        mini = second.locator(".wb-minimap")
        mini.scroll_into_view_if_needed()
        g_box, m_box = view.bounding_box(), mini.bounding_box()
        assert m_box["x"] >= g_box["x"] + g_box["width"] - 1, (g_box, m_box)   # not over it
        assert m_box["height"] > 100 and m_box["width"] >= 20, m_box
        assert not page.js_errors, page.js_errors
