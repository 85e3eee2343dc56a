"""Issue 49's defects in a real JupyterLab and headless Chromium, one notebook session
(tests/ui/test_current_step.py drives the same fixes from Python):

- the mouse wheel over the graph scrolls the notebook; ctrl+wheel (a pinch) zooms, and
  so does the wheel after a click inside the view;
- a refusal shown in red is cleared by a later successful click;
- a refusal names only what the drawing shows: its node ids are drawn, and a kernel
  of one op (drawn as its node, no cluster label) is named with that node -- "k0 (n0)
  has no edge inside it", not "k0 has no edge inside it" (workbench/ui/drawn_names.py);
- the scheme list offers no scheme the plan refuses ("independent");
- after Undo the planner drop-down names the current plan's planner;
- a second Export to the same path offers Overwrite, which works;
- after a kernel restart the app says it is dead and how to reopen it.
"""
from __future__ import annotations

import json
import re

import pytest
from lab_driver import REPO
from test_lab import lab_notebook, lab_run, open_app, shoot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

GRAPH = REPO / "sample_graphs" / "layernorm.json"
APP = ".wb-app"
SCROLLER = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer"


def scale(page) -> float:
    return float(page.locator(f"{APP} .wb-graph").first.get_attribute("data-scale"))


def scroll_top(page) -> float:
    return page.evaluate(f"() => document.querySelector({SCROLLER!r}).scrollTop")


def message(page) -> tuple[str, bool]:
    """The status line's text and whether it is shown as a refusal."""
    return page.evaluate(f"""() => {{
        const m = document.querySelector('{APP} .wb-message');
        return [m.textContent.trim(), m.classList.contains('wb-refused')]; }}""")


def wait_message(page, pattern: str, timeout: float = 60_000) -> None:
    page.wait_for_function(
        f"re => new RegExp(re).test(document.querySelector('{APP} .wb-message')"
        ".textContent)", arg=pattern, timeout=timeout)


def undrawn_ids(page, text: str) -> list[str]:
    """The node, value and kernel ids ``text`` names that the drawing's visible text
    does not show (the rule of tests/ui/test_drawn_names.py); a kernel id followed by
    its drawn node -- ``k0 (n0`` -- counts as shown: it is drawn as that node."""
    drawn = set(page.evaluate(f"""() => [...document.querySelectorAll(
        '{APP} .wb-graph svg text')].flatMap(t => t.textContent.split(/[\\s·()]+/))"""))
    named = []
    for m in re.finditer(r"\b[tnck]\d+\b", text):
        node = re.match(r" \((n\d+)\b", text[m.end():])
        if m.group(0) not in drawn and not (node and node.group(1) in drawn):
            named.append(m.group(0))
    return named


def press(page, label: str) -> None:
    page.locator(f"{APP} button", has_text=re.compile(rf"^\s*{label}\s*$")).first.click()


def test_wheel_controls_export_and_a_dead_kernel(lab_factory, page):
    server = lab_factory("light")
    name = lab_notebook(server, "defects.ipynb", [
        "print('\\n' * 60)   # room to scroll above the app",
        f"import workbench as wb\napp = wb.open({json.dumps(str(GRAPH))}, backend='cpu')",
        "print('\\n' * 60)   # and below it"])
    with lab_run(page, server, "lab_defects_FAILED.png"):
        open_app(page, server, name)
        graph = page.locator(f"{APP} .wb-graph").first
        graph.scroll_into_view_if_needed()
        box = graph.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_timeout(300)

        # (1) a plain wheel scrolls the notebook and leaves the zoom alone
        zoom, top = scale(page), scroll_top(page)
        page.mouse.wheel(0, 200)
        page.wait_for_timeout(400)
        assert scale(page) == zoom and scroll_top(page) > top, (zoom, top, scroll_top(page))
        assert page.locator(f"{APP} .wb-wheel-hint.wb-shown").count() == 1
        # ctrl+wheel (what a trackpad pinch sends) zooms
        box = graph.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        top = scroll_top(page)
        page.keyboard.down("Control")
        page.mouse.wheel(0, -200)
        page.keyboard.up("Control")
        page.wait_for_timeout(300)
        assert scale(page) > zoom and scroll_top(page) == top
        # after a click inside the view, the plain wheel zooms too (until it leaves)
        zoom = scale(page)
        page.mouse.click(box["x"] + 8, box["y"] + box["height"] - 8)
        page.mouse.wheel(0, 200)
        page.wait_for_timeout(300)
        assert scale(page) < zoom and scroll_top(page) == top

        # (2) a refusal, then a successful click clears it
        graph.locator("g.node[id='n0']").click()
        graph.locator("g.node.wb-selected[id='n0']").wait_for()
        press(page, "Set scheme")
        wait_message(page, "no edge inside")
        text, refused = message(page)
        assert refused and "k0 (n0)" in text and not undrawn_ids(page, text), text
        # Split on the same one-op kernel: refused, in the drawing's words too
        press(page, "Split")
        wait_message(page, "nothing to split")
        text, refused = message(page)
        assert refused and "k0 (n0)" in text and not undrawn_ids(page, text), text
        graph.locator("g.node[id='n1']").click()
        page.wait_for_function(f"() => !document.querySelector('{APP} .wb-message')"
                               ".classList.contains('wb-refused')", timeout=30_000)
        assert message(page)[0].startswith("step 0"), message(page)

        # (3) Auto stitch, then the scheme list of an edge: nothing it would refuse
        page.locator(f"{APP} .wb-planner select").select_option("stitch")
        press(page, "Auto")
        wait_message(page, "^auto stitch")
        graph.locator("g.node[id='n2']").click()     # (n1, selected, would unselect)
        graph.locator("g.node.wb-selected[id='n2']").wait_for()
        page.wait_for_function(f"() => !document.querySelector('{APP} .wb-scheme select')"
                               ".disabled", timeout=30_000)
        offered = page.locator(f"{APP} .wb-scheme select option").all_inner_texts()
        assert offered and "independent" not in offered, offered

        # (4) Undo: the planner drop-down names the plan now shown
        press(page, "Undo")
        wait_message(page, "^undo: step 0")
        page.wait_for_function(f"() => document.querySelector('{APP} .wb-planner select')"
                               ".value === 'none'", timeout=30_000)

        # (5) Export twice to the same path: the second offers Overwrite, which works
        export_box = page.locator(f"{APP} input[type='text']").nth(1)
        assert export_box.input_value() == "layernorm_artifact"
        press(page, "Export")
        wait_message(page, "^exported step 0 to layernorm_artifact")
        overwrite = page.locator(f"{APP} button", has_text=re.compile(r"^\s*Overwrite\s*$"))
        assert not overwrite.is_visible()
        press(page, "Export")
        wait_message(page, "already exists: press Overwrite")
        overwrite.wait_for(state="visible")
        overwrite.click()
        wait_message(page, "^exported step 0 to layernorm_artifact")
        assert not message(page)[1] and not overwrite.is_visible()
        assert (server.root / "layernorm_artifact").is_dir()
        shoot(page, "lab_defects.png")

        # (6) the kernel restarts (Kernel > Restart Kernel...): the app says it is
        # dead and how to reopen it
        page.locator(".lm-MenuBar-itemLabel", has_text="Kernel").first.click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Restart Kernel…$")
                     ).first.click()
        page.locator(".jp-Dialog button.jp-mod-accept").click()
        banner = page.locator(f"{APP} .wb-dead-banner")
        banner.wait_for(timeout=60_000)
        assert "Run the cell again" in banner.inner_text()
        assert page.locator(f"{APP}.wb-dead").count() == 1
        assert not page.js_errors, page.js_errors
