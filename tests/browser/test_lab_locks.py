"""Locks in a real browser (issue 48): select the two nodes of an edge, press the Lock
toggle in the Transformations panel -- the edge is cut, drawn dashed -- then Auto plans
around it and the status line says so."""
from __future__ import annotations

import json

import pytest
from test_lab import (FIRST, GRAPH, SECOND, app_button, lab_notebook, lab_run, open_app,
                      shoot, wait_message)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]


def test_lock_an_edge_then_auto_plans_around_it_in_lab(lab_factory, page):
    server = lab_factory("light")
    name = lab_notebook(server, "locks.ipynb", [
        f"import workbench as wb\napp = wb.open({json.dumps(str(GRAPH))}, backend='cpu')"])
    with lab_run(page, server, "lab_locks_FAILED.png", reveal=".wb-app .wb-transforms"):
        open_app(page, server, name)
        page.get_by_text("Transformations · History · Decisions").click()
        graph = page.locator(".wb-app .wb-graph")
        graph.locator(f"g.node[id='{FIRST}']").click()
        graph.locator(f"g.node[id='{SECOND}']").click(modifiers=["Shift"])
        graph.locator(f"g.node.wb-selected[id='{SECOND}']").wait_for()
        app_button(page, "Lock").click()
        wait_message(page, f"locked cut {FIRST}->{SECOND}; 1 lock in force")
        graph.locator("g.edge.wb-cut").first.wait_for()        # drawn dashed and bold
        app_button(page, "Locked").wait_for()                  # the toggle shows it
        app_button(page, "Auto").click()
        wait_message(page, "planned around 1 lock$")
        assert graph.locator("g.edge.wb-cut").count() == 1
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_locks.png")
