"""``%load_ext workbench`` / ``%workbench PATH`` in a real IPython shell, and the app
displayed once per cell."""
from __future__ import annotations

import pytest

WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def shell(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    shown = []
    # record what the display machinery publishes (a kernel sends it to the browser)
    monkeypatch.setattr(ip.display_pub, "publish",
                        lambda data, metadata=None, **kw: shown.append(data))
    ip.shown = shown
    yield ip
    ip.user_ns.pop("app", None)


def run(ip, code):
    # store_history, as a kernel does: each cell gets its own execution count
    return ip.run_cell(code, store_history=True)


def test_magic_opens_and_displays_the_app_once(shell):
    assert run(shell, "%load_ext workbench").success
    r = run(shell, "app = %workbench sample_graphs/layernorm.json --backend cpu\napp")
    assert r.success, r.error_in_exec
    from workbench.ui import WorkbenchApp
    app = shell.user_ns["app"]
    assert isinstance(app, WorkbenchApp) and app.session.backend.name == "cpu"
    widgets = [d for d in shell.shown if WIDGET in d]
    assert len(widgets) == 1 and widgets[0][WIDGET]["model_id"] == app.model_id
    run(shell, "app")                  # a later cell shows it again
    assert len([d for d in shell.shown if WIDGET in d]) == 2


def test_wb_open_displays_once(shell):
    r = run(shell, "import workbench as wb\n"
                   "wb.open('sample_graphs/layernorm.json', backend='cpu')")
    assert r.success, r.error_in_exec
    assert len([d for d in shell.shown if WIDGET in d]) == 1


def test_magic_errors_are_one_line(shell):
    from IPython.core.error import UsageError
    run(shell, "%load_ext workbench")
    r = run(shell, "%workbench no/such.json")
    assert isinstance(r.error_in_exec, UsageError)
    assert "file not found" in str(r.error_in_exec)
    r = run(shell, "%workbench")
    assert isinstance(r.error_in_exec, UsageError) and "usage" in str(r.error_in_exec)
