"""The notebook app in a real JupyterLab, driven by a real headless Chromium.

A user's path, end to end: open a notebook, Run All, click two connected nodes of the
drawn LayerNorm (click, then shift-click), press Fuse, press Measure. Checked in the
page: both nodes carry ``wb-selected``; Python received the selection (the status line
reports the fusion of exactly those two ops); the drawing changed (a new kernel cluster
whose box encloses both nodes); the plots changed (the per-step bars gained the new
step). A second test opens the same app under the JupyterLab Dark theme and checks
that the graph view follows it. Screenshots are saved for a person to look at.

The browser tests share one Lab server per xdist worker (``lab_factory``); run them
alone with ``pytest -m browser``.
"""
from __future__ import annotations

import json
import re
import struct

import nbformat
import pytest
from lab_driver import (
    REPO,
    artifacts_dir,
    error_outputs,
    open_notebook,
    run_all,
    wait_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

GRAPH = REPO / "sample_graphs" / "layernorm.json"
# two connected nodes that fuse legally: d = x - mean (n1) and d * d (n2)
FIRST, SECOND = "n1", "n2"


def app_notebook(server, name: str, measure: bool) -> str:
    """Write a small notebook opening the app on GRAPH into the server root."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    cells = [f"import workbench as wb\napp = wb.open({json.dumps(str(GRAPH))}, backend='cpu')"]
    if measure:
        cells.append("m = app.measure()\nprint(app.message)")
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, server.root / name)
    return name


def plot_data(page) -> list:
    """x/y of every trace of every plotly figure in the app (plotly keeps them on the
    plot element as ``.data``), once the step plots are drawn: the widget's view draws
    them after the cell's output appears, which on a loaded 2-core machine is later."""
    page.wait_for_function("""() => {
        const p = document.querySelectorAll('.wb-app .js-plotly-plot');
        return p.length > 0 && (p[0].data || []).length > 0; }""", timeout=60_000)
    return page.evaluate("""() => [...document.querySelectorAll('.wb-app .js-plotly-plot')]
        .map(gd => (gd.data || []).map(t => [t.name, Array.from(t.x || []).map(String),
                                              Array.from(t.y || []).map(String)]))""")


def cluster_holding(page, a: str, b: str) -> str | None:
    """Id of the kernel cluster whose drawn box encloses nodes a and b, or None."""
    return page.evaluate("""([a, b]) => {
        const root = document.querySelector('.wb-app .wb-graph svg');
        const box = (el) => el.getBoundingClientRect();
        const inside = (o, i) => i.left >= o.left - 1 && i.right <= o.right + 1
                                 && i.top >= o.top - 1 && i.bottom <= o.bottom + 1;
        const na = root.querySelector(`g.node[id="${a}"]`);
        const nb = root.querySelector(`g.node[id="${b}"]`);
        if (!na || !nb) return null;
        for (const c of root.querySelectorAll('g.cluster')) {
            const shape = c.querySelector('path, polygon');
            if (shape && inside(box(shape), box(na)) && inside(box(shape), box(nb)))
                return c.id;
        }
        return null;
    }""", [a, b])


def luminance(css_color: str) -> float:
    """Relative luminance (0 black .. 1 white) of a CSS rgb()/rgba() colour."""
    r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css_color)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def theme_colors(page) -> dict:
    """Lab's theme name, the graph view's background, a node's label fill and the status
    line's colour, as the browser computed them."""
    return page.evaluate("""() => {
        const s = (sel, prop) => getComputedStyle(document.querySelector(sel))[prop];
        return {background: s('.wb-app .wb-graph', 'backgroundColor'),
                node_text: s('.wb-app .wb-graph g.node:not(.wb-io) text', 'fill'),
                message: s('.wb-app .wb-message', 'color'),
                theme: document.body.dataset.jpThemeName};
    }""")


def shoot(page, name: str) -> str:
    """Screenshot of the whole app. Lab is a fixed-size page that clips what lies below
    the window, so the window first grows to the app's height."""
    path = artifacts_dir() / name
    app = page.locator(".wb-app").first
    height = page.evaluate("() => document.querySelector('.wb-app').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(4000, int(height) + 400)})
    app.scroll_into_view_if_needed()
    page.wait_for_timeout(500)   # plotly re-lays out on resize
    app.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return str(path)


def open_app(page, server, name: str) -> None:
    open_notebook(page, server, name)
    run_all(page)
    wait_idle(page)
    assert not error_outputs(page), error_outputs(page)
    page.locator(".wb-app .wb-graph svg g.node").first.wait_for()


def test_click_two_nodes_fuse_and_measure(lab_factory, page):
    server = lab_factory("light")
    name = app_notebook(server, "fuse_in_browser.ipynb", measure=True)
    try:
        open_app(page, server, name)
        message = page.locator(".wb-app .wb-message")
        assert "all kernels match NumPy" in message.inner_text(), message.inner_text()
        c = theme_colors(page)   # the light counterpart of the dark-theme test below
        assert c["theme"] == "JupyterLab Light", c
        assert luminance(c["background"]) > 0.7 and luminance(c["node_text"]) < 0.4, c
        graph = page.locator(".wb-app .wb-graph")
        clusters_before = graph.locator("g.cluster").count()
        assert cluster_holding(page, FIRST, SECOND) is None
        plots_before = plot_data(page)
        assert plots_before and any(len(t[1]) == 1 for fig in plots_before for t in fig), \
            f"step 0 should be plotted after the measure cell: {plots_before}"

        # click selects one node, shift-click adds the second
        graph.locator(f"g.node[id='{FIRST}']").click()
        graph.locator(f"g.node.wb-selected[id='{FIRST}']").wait_for()
        graph.locator(f"g.node[id='{SECOND}']").click(modifiers=["Shift"])
        graph.locator(f"g.node.wb-selected[id='{SECOND}']").wait_for()
        assert graph.locator(f"g.node.wb-selected[id='{FIRST}']").count() == 1

        page.locator(".wb-app button", has_text=re.compile(r"^\s*Fuse\s*$")).click()
        # Python fused exactly the two clicked nodes: the selection reached the kernel
        page.wait_for_function(
            "() => /fused 2 ops into k\\d+/.test("
            "document.querySelector('.wb-app .wb-message').textContent)", timeout=60_000)
        page.wait_for_function(
            "n => document.querySelectorAll('.wb-app .wb-graph g.cluster').length === n",
            arg=clusters_before + 1, timeout=30_000)
        gid = cluster_holding(page, FIRST, SECOND)
        assert gid is not None, "no kernel cluster encloses the two fused nodes"
        assert re.fullmatch(r"k\d+", gid), gid
        assert gid in message.inner_text()
        assert "8 kernels" in message.inner_text(), message.inner_text()

        page.locator(".wb-app button", has_text=re.compile(r"^\s*Measure\s*$")).click()
        page.wait_for_function(
            "() => /step 1: .* 8 kernels .*all kernels match NumPy/.test("
            "document.querySelector('.wb-app .wb-message').textContent)", timeout=120_000)
        page.wait_for_function(
            """(before) => JSON.stringify([...document.querySelectorAll(
                   '.wb-app .js-plotly-plot')].map(gd => (gd.data || []).map(t =>
                   [t.name, Array.from(t.x || []).map(String),
                    Array.from(t.y || []).map(String)]))) !== before""",
            # compact, non-ASCII kept: the string JSON.stringify gives for the same data
            arg=json.dumps(plots_before, separators=(",", ":"), ensure_ascii=False),
            timeout=30_000)
        plots_after = plot_data(page)
        steps_before = max(len(t[1]) for t in plots_before[0])
        steps_after = max(len(t[1]) for t in plots_after[0])
        assert steps_after == steps_before + 1, (plots_before[0], plots_after[0])
        assert any("fuse" in x for t in plots_after[0] for x in t[1]), plots_after[0]
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_fuse_light.png")
    except Exception:
        path = artifacts_dir() / "lab_fuse_light_FAILED.png"
        page.screenshot(path=str(path))
        print(f"failure screenshot: {path}\nlab log tail:\n{server.log_tail()}")
        raise
    finally:
        server.shutdown_kernels()


def test_dark_theme_is_followed(lab_factory, page):
    server = lab_factory("dark")
    name = app_notebook(server, "dark_theme.ipynb", measure=False)
    try:
        open_app(page, server, name)
        c = theme_colors(page)
        assert c["theme"] == "JupyterLab Dark", f"the dark theme did not apply: {c}"
        assert luminance(c["background"]) < 0.3, f"graph background stays light: {c}"
        assert luminance(c["node_text"]) > 0.6, f"node labels are not light on dark: {c}"
        assert luminance(c["message"]) > 0.6, f"status line is not light on dark: {c}"
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_app_dark.png")
    except Exception:
        path = artifacts_dir() / "lab_app_dark_FAILED.png"
        page.screenshot(path=str(path))
        print(f"failure screenshot: {path}\nlab log tail:\n{server.log_tail()}")
        raise
    finally:
        server.shutdown_kernels()


# -- navigation, property panel, source map (issue 14) -------------------------------------
def _notebook(server, name: str, cells: list[str]) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, server.root / name)
    return name


def _view_state(page) -> dict:
    """The graph view's zoom (data-scale), its rectangle and the minimap's view box."""
    return page.evaluate("""() => {
        const v = document.querySelector('.wb-app .wb-graph');
        const r = v.getBoundingClientRect();
        const m = v.querySelector('.wb-minimap-view');
        return {scale: parseFloat(v.dataset.scale), left: r.left, top: r.top,
                right: r.right, bottom: r.bottom,
                transform: v.querySelector('.wb-stage').style.transform,
                mini_top: m ? parseFloat(m.style.top) : null};
    }""")


def _centre_in_view(page, node: str) -> bool:
    return page.evaluate("""(id) => {
        const v = document.querySelector('.wb-app .wb-graph').getBoundingClientRect();
        const g = document.querySelector(`.wb-app .wb-graph g.node[id="${id}"]`);
        if (!g) return false;
        const r = g.getBoundingClientRect();
        const x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
        return x > v.left + v.width * 0.2 && x < v.right - v.width * 0.2
            && y > v.top + v.height * 0.2 && y < v.bottom - v.height * 0.2;
    }""", node)


def test_ids_properties_source_map_and_export_in_lab(lab_factory, page, tmp_path):
    """layernorm: boxes show their ids; clicking one fills the property panel with its
    shapes; hovering it highlights its kernel's source lines, hovering a line
    highlights its node; the SVG button downloads the drawing."""
    server = lab_factory("light")
    name = app_notebook(server, "navigate_small.ipynb", measure=False)
    try:
        open_app(page, server, name)
        graph = page.locator(".wb-app .wb-graph")
        # defect 2: the id messages use is on the box
        assert graph.locator("g.node[id='n1'] text").first.text_content().startswith("n1 ")
        graph.locator("g.node[id='n1']").click()
        props = page.locator(".wb-app .wb-props")
        props.filter(has_text="n1 · sub").wait_for()
        text = props.inner_text()
        assert "float32[" in text and "inputs" in text and "kernel" in text, text
        # node -> lines: hovering the node marks the lines computing it
        page.locator(".wb-app .wb-line[data-nodes='n1']").first.wait_for(state="attached")
        page.mouse.move(5, 5)            # (the click left the pointer on n1)
        graph.locator("g.node[id='n1']").hover()
        page.wait_for_function(
            "() => document.querySelectorAll('.wb-app .wb-line.wb-line-hot').length > 0")
        hot = page.evaluate("""() => [...document.querySelectorAll(
            '.wb-app .wb-line.wb-line-hot')].map(e => e.textContent)""")
        assert hot and all("/* n1 */" in t for t in hot), hot
        # a click on another node shows its kernel while the pointer stays on it: its
        # lines are marked as soon as the code panel shows them
        graph.locator("g.node[id='n2']").click()
        page.wait_for_function("""() => {
            const hot = [...document.querySelectorAll('.wb-app .wb-line.wb-line-hot')];
            return hot.length > 0 && hot.every(e => e.textContent.includes('/* n2 */')); }""")
        # line -> node
        graph.locator("g.node[id='n1']").click()
        line = page.locator(".wb-app .wb-line[data-nodes='n1']:visible").first
        line.hover()
        graph.locator("g.node.wb-source-hot[id='n1']").wait_for()
        # export: the SVG button downloads the drawing
        with page.expect_download() as dl:
            graph.locator(".wb-graph-tools button", has_text="SVG").click()
        path = tmp_path / "graph.svg"
        dl.value.save_as(str(path))
        svg = path.read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and 'id="n1"' in svg
        with page.expect_download() as dl:
            graph.locator(".wb-graph-tools button", has_text="PNG").click()
        png = tmp_path / "graph.png"
        dl.value.save_as(str(png))
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
        width, height = struct.unpack(">II", data[16:24])
        assert width > 100 and height > 300, (width, height)   # the drawing, twice its size
        # breadcrumb: n1 sits in the LayerNorm composite; a click on it closes the box
        crumb = graph.locator(".wb-crumbs button.wb-crumb", has_text="LayerNormalization")
        crumb.click()
        graph.locator("g.node[id='c0']").wait_for()
        assert graph.locator("g.node[id='n1']").count() == 0
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_navigate_small.png")
    except Exception:
        path = artifacts_dir() / "lab_navigate_small_FAILED.png"
        page.screenshot(path=str(path))
        print(f"failure screenshot: {path}\nlab log tail:\n{server.log_tail()}")
        raise
    finally:
        server.shutdown_kernels()


def test_large_graph_fit_minimap_and_search_in_lab(lab_factory, page):
    """The 1,020-op transformer_stack: the first view and "fit" are readable (not 3%),
    the minimap moves the view, and searching n1000 opens the collapsed box holding
    it and centres it."""
    server = lab_factory("light")
    name = _notebook(server, "navigate_large.ipynb", [
        f"import sys\nsys.path.insert(0, {json.dumps(str(REPO / 'sample_graphs'))})\n"
        "from make_samples import transformer_stack\nimport workbench as wb\n"
        "app = wb.open(transformer_stack(1020), backend='cpu')"])
    try:
        open_app(page, server, name)
        graph = page.locator(".wb-app .wb-graph")
        assert graph.locator("g.node[id='n1000']").count() == 0    # inside a collapsed box
        s = _view_state(page)
        assert s["scale"] >= 0.3, s
        graph.locator(".wb-graph-tools button", has_text="fit").click()
        s = _view_state(page)
        assert s["scale"] >= 0.3, f"fit zoomed to {s['scale']:.0%}"
        assert page.evaluate("""() => {
            const v = document.querySelector('.wb-app .wb-graph').getBoundingClientRect();
            return [...document.querySelectorAll('.wb-app .wb-graph g.node')].filter(g => {
                const r = g.getBoundingClientRect();
                return r.bottom > v.top && r.top < v.bottom && r.right > v.left
                       && r.left < v.right; }).length; }""") >= 5, "fit shows no boxes"
        # minimap: present; a click near its bottom moves the view to the graph's end
        mini = graph.locator(".wb-minimap")
        assert mini.is_visible()
        box = mini.bounding_box()
        before = _view_state(page)
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 3)
        after = _view_state(page)
        assert after["transform"] != before["transform"]
        assert after["mini_top"] > before["mini_top"] + box["height"] / 2, (before, after)
        assert graph.locator("g.node[id='out0']").count() == 1
        assert _centre_in_view(page, "out0") or page.evaluate("""() => {
            const v = document.querySelector('.wb-app .wb-graph').getBoundingClientRect();
            const r = document.querySelector('.wb-app .wb-graph g.node[id="out0"]')
                .getBoundingClientRect();
            return r.top < v.bottom && r.bottom > v.top; }""")
        # search: the match is revealed (its composite expanded) and centred
        search = page.locator(".wb-app input[placeholder='select by name or op']")
        search.fill("n1000")
        search.press("Enter")
        graph.locator("g.node.wb-selected[id='n1000']").wait_for(timeout=60_000)
        page.wait_for_function("""(id) => {
            const v = document.querySelector('.wb-app .wb-graph').getBoundingClientRect();
            const g = document.querySelector(`.wb-app .wb-graph g.node[id="${id}"]`);
            if (!g) return false;
            const r = g.getBoundingClientRect();
            const x = (r.left + r.right) / 2, y = (r.top + r.bottom) / 2;
            return x > v.left + v.width * 0.2 && x < v.right - v.width * 0.2
                && y > v.top + v.height * 0.2 && y < v.bottom - v.height * 0.2; }""",
            arg="n1000", timeout=30_000)
        assert _view_state(page)["scale"] >= 1.0
        assert "showing n1000" in page.locator(".wb-app .wb-message").inner_text()
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_navigate_large.png")
    except Exception:
        path = artifacts_dir() / "lab_navigate_large_FAILED.png"
        page.screenshot(path=str(path))
        print(f"failure screenshot: {path}\nlab log tail:\n{server.log_tail()}")
        raise
    finally:
        server.shutdown_kernels()


def test_quickstart_notebook_runs_in_lab(lab_factory, page):
    """notebooks/01_quickstart.ipynb as a user runs it: Run All in Lab, no error, one
    app showing the fused step, the history plotted."""
    server = lab_factory("light")
    (server.root / "notebooks").mkdir(exist_ok=True)
    (server.root / "notebooks" / "01_quickstart.ipynb").write_bytes(
        (REPO / "notebooks" / "01_quickstart.ipynb").read_bytes())
    if not (server.root / "sample_graphs").exists():   # the notebook reads ../sample_graphs
        (server.root / "sample_graphs").symlink_to(REPO / "sample_graphs")
    try:
        open_app(page, server, "notebooks/01_quickstart.ipynb")
        assert page.locator(".wb-app").count() == 1, "the app should be displayed once"
        page.locator(".wb-app").scroll_into_view_if_needed()
        message = page.locator(".wb-app .wb-message").inner_text()
        assert message.startswith("redo: step 1"), message
        # the last step is the rules plan: all 16 ops in one kernel, drawn as one cluster
        assert page.locator(".wb-app .wb-graph g.cluster").count() == 1
        steps = plot_data(page)[0]
        assert max(len(t[1]) for t in steps) == 2, steps   # load, auto rules
        assert not page.js_errors, page.js_errors
        shoot(page, "lab_quickstart.png")
    except Exception:
        path = artifacts_dir() / "lab_quickstart_FAILED.png"
        page.screenshot(path=str(path))
        print(f"failure screenshot: {path}\nlab log tail:\n{server.log_tail()}")
        raise
    finally:
        server.shutdown_kernels()
