"""Fixtures of the browser tests: a JupyterLab server per theme and a Chromium page.

``lab_factory(theme)`` starts one ``jupyter lab`` per theme per test session -- per
xdist worker, so workers never share a port or a server -- and stops it (kernels first)
at the end. ``page`` is a fresh Playwright page of ``/usr/bin/chromium``. The tests skip,
naming the cause and the fix, only when Chromium or Playwright is missing (and fail
instead where ``WB_REQUIRE_BROWSER`` is set: ``.ci/run`` sets it); ``scripts/setup.sh
test`` installs both. The helpers live in ``lab_driver.py``.
"""
from __future__ import annotations

import os

import pytest
from lab_driver import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LabServer,
    missing_browser,
    start_lab,
    stop_lab,
)


@pytest.fixture(scope="session")
def browser_available():
    """Skip (fail where WB_REQUIRE_BROWSER is set, as .ci/run does) without a browser."""
    why = missing_browser()
    if why and os.environ.get("WB_REQUIRE_BROWSER"):
        pytest.fail(f"WB_REQUIRE_BROWSER is set but {why}")
    if why:
        pytest.skip(why)


@pytest.fixture(scope="session")
def lab_factory(browser_available, tmp_path_factory):
    """``lab_factory(theme)``: a JupyterLab server with that theme ('light' or 'dark'),
    started once per test session (per xdist worker) and stopped at the end."""
    servers: dict[str, LabServer] = {}

    def get(theme: str = "light") -> LabServer:
        if theme not in servers:
            servers[theme] = start_lab(tmp_path_factory.mktemp(f"lab-{theme}"), theme)
        return servers[theme]

    yield get
    for s in servers.values():
        stop_lab(s)


@pytest.fixture(scope="session")
def chromium(browser_available):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    """A fresh page (own context, 1400x1000) that fails the test on uncaught JS errors."""
    ctx = chromium.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    pg.js_errors = []
    pg.on("pageerror", lambda e: pg.js_errors.append(str(e)))
    yield pg
    ctx.close()


