"""Drive a real JupyterLab and a real headless Chromium (helpers for the browser tests).

``start_lab`` starts one ``jupyter lab`` serving a fresh temporary root directory on a
free port, with its own ``HOME`` (Lab, IPython and Chromium write there) and its own
user settings: no news toast, no autosave, and the theme asked for. Settings go into
the server's own user-settings directory rather than the venv's
``share/jupyter/lab/settings/overrides.json``: a shared venv stays untouched and servers
with different themes can run side by side. The kernel is a ``python3`` kernelspec on the
server's own ``JUPYTER_PATH`` that runs this interpreter (the venv's).

Chromium is Debian's ``/usr/bin/chromium`` driven by Playwright (never ``playwright
install``). Recipe and selectors: /work/shared/BROWSER_TESTING.md.

Example::

    >>> server = start_lab(tmp_path, theme="dark")            # doctest: +SKIP
    >>> open_notebook(page, server, "nb.ipynb"); run_all(page); wait_idle(page)  # doctest: +SKIP
    >>> stop_lab(server)                                      # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic"]
REPO = Path(__file__).resolve().parents[2]

# JupyterLab user settings (plugin id -> settings) every server gets
BASE_SETTINGS = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    # every cell stays rendered: a windowed notebook hides cells scrolled out of view,
    # and their text reads as empty
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return (f"{CHROMIUM} not found: install Debian's chromium "
                "(`apt-get install chromium`, done by `scripts/setup.sh test`)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ("playwright (Python) is not installed: `pip install -e .[test]` "
                "(done by `scripts/setup.sh test`)")
    return None


def artifacts_dir() -> Path:
    """Where screenshots go: $WB_TEST_ARTIFACTS or tests/browser/_artifacts/ (git-ignored)."""
    d = Path(os.environ.get("WB_TEST_ARTIFACTS") or REPO / "tests" / "browser" / "_artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_user_settings(settings_dir: Path, settings: dict) -> None:
    # one file per plugin: <dir>/@scope/pkg-extension/<plugin>.jupyterlab-settings
    for plugin_id, values in settings.items():
        pkg, plugin = plugin_id.split(":")
        f = settings_dir / pkg / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(values, indent=1))


def _kernelspec(jupyter_path: Path) -> None:
    """A python3 kernelspec that runs this interpreter (the venv's), first on JUPYTER_PATH."""
    d = jupyter_path / "kernels" / "python3"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))


LABEXTENSION = REPO / "workbench" / "labextension" / "fusion-workbench"


def _labextension(jupyter_path: Path) -> None:
    """The checkout's built JupyterLab extension (scripts/build_labextension.sh), first
    on JUPYTER_PATH: the server runs what this checkout built, not a venv's older copy."""
    if LABEXTENSION.is_dir():
        d = jupyter_path / "labextensions"
        d.mkdir(parents=True, exist_ok=True)
        link = d / LABEXTENSION.name
        if not link.exists():
            link.symlink_to(LABEXTENSION, target_is_directory=True)


@dataclass
class LabServer:
    """A running ``jupyter lab``: its URL, served root directory, process and log."""
    url: str
    root: Path
    home: Path
    proc: subprocess.Popen
    log: Path

    def api(self, method: str, path: str, body: dict | None = None):
        """Call the server's REST API (no token; the server runs with auth disabled)."""
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            data = r.read()
        return json.loads(data) if data else None

    def shutdown_kernels(self) -> None:
        """Delete every session (and its kernel): kernels outlive the page otherwise."""
        for s in self.api("GET", "/api/sessions") or []:
            try:
                self.api("DELETE", f"/api/sessions/{s['id']}")
            except urllib.error.HTTPError:
                pass

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def start_lab(base: Path, theme: str = "light", timeout: float = 60.0) -> LabServer:
    """Start ``jupyter lab`` serving ``base/root`` on a free port; wait until it answers."""
    home, root, jpath = base / "home", base / "root", base / "jupyter"
    for d in (home, root, jpath):
        d.mkdir(parents=True, exist_ok=True)
    _kernelspec(jpath)
    _labextension(jpath)
    settings_dir = home / ".jupyter" / "lab" / "user-settings"
    _write_user_settings(settings_dir, {
        **BASE_SETTINGS, "@jupyterlab/apputils-extension:themes": {"theme": THEMES[theme]}})
    port = _free_port()
    env = {**os.environ, "HOME": str(home), "JUPYTER_PATH": str(jpath),
           "JUPYTERLAB_SETTINGS_DIR": str(settings_dir),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
           "JUPYTER_DATA_DIR": str(home / ".local" / "share" / "jupyter"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "IPYTHONDIR": str(home / ".ipython"),
           # the kernel imports the workbench from the checkout and caches its .so files
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                         if p),
           "WORKBENCH_CACHE": os.environ.get("WORKBENCH_CACHE") or str(home / "wbcache"),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    log = base / "lab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
           "--ip=127.0.0.1", "--ServerApp.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", "--allow-root",
           f"--ServerApp.root_dir={root}", "--LabApp.news_url=None"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = LabServer(f"http://127.0.0.1:{port}", root, home, proc, log)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "/api/status")
            return server
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                stop_lab(server)
                raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f} s:\n"
                                   f"{server.log_tail()}")
            time.sleep(0.3)


def stop_lab(server: LabServer) -> None:
    """Shut kernels down, then the server (SIGTERM, SIGKILL after 15 s), by its own PID."""
    try:
        server.shutdown_kernels()
    except OSError:
        pass
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait(5)


def open_notebook(page, server: LabServer, name: str) -> None:
    """Open a notebook under the server root and wait until its kernel is idle."""
    page.goto(f"{server.url}/lab/tree/{name}?reset")
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    panel.locator(".jp-Notebook .jp-Cell").first.wait_for()
    # the toolbar indicator alone can read 'idle' before the session has a kernel; a
    # Run All then opens a "Select Kernel" dialog. The status bar names the live kernel.
    page.wait_for_function(
        """() => document.querySelector(
                ".jp-NotebookPanel:not(.lm-mod-hidden) "
                + ".jp-Notebook-ExecutionIndicator[data-status='idle']") !== null
             && [...document.querySelectorAll('.jp-StatusBar-TextItem')]
                .some(e => /\\| Idle$/.test(e.textContent.trim()))""", timeout=90_000)
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()


def run_all(page) -> None:
    """Run > Run All Cells (menu, as a user would)."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


# an error output as JupyterLab renders it: stderr text holding a traceback
_ERROR_RE = r"Traceback \(most recent call last\)|^\w+Error: "
_OUTPUTS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output"


def error_outputs(page) -> list[str]:
    """Text of every error (traceback) output of the visible notebook."""
    return page.evaluate(
        """([sel, re]) => [...document.querySelectorAll(sel)].map(e => e.textContent)
                          .filter(t => new RegExp(re, "m").test(t))""", [_OUTPUTS, _ERROR_RE])


def wait_idle(page, timeout: float = 180_000) -> None:
    """Wait until every code cell has run (each prompt shows a number, none '[*]' or
    '[ ]': right after Run All nothing may be busy yet), or a cell failed (Run All stops
    there), and the kernel is idle."""
    page.wait_for_function(
        """([sel, re]) => {
            const p = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
            if (!p) return false;
            const prompts = [...p.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            const done = prompts.length > 0
                && prompts.every(e => /\\[\\d+\\]/.test(e.textContent));
            const failed = [...document.querySelectorAll(sel)]
                .some(e => new RegExp(re, "m").test(e.textContent));
            const idle = p.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
            return (done || failed) && idle !== null;
        }""", arg=[_OUTPUTS, _ERROR_RE], timeout=timeout)
