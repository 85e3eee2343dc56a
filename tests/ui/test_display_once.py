"""Every app (graph, distributed, repeat) is shown once per notebook cell however often
the cell displays it (``app = wb.open(p); app``), and again in the next cell: one rule
(ui/display_once.py), run here in a real IPython shell."""
from __future__ import annotations

import pytest

import workbench as wb
from workbench.distributed.samples import dp_adamw
from workbench.session import Session
from workbench.testing.simulators import cartpole


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell
    return InteractiveShell.instance()


def _outputs(shell, code: str, ns: dict) -> int:
    """How many displays one executed cell made."""
    from IPython.utils.capture import capture_output
    shell.user_ns.update(ns)
    with capture_output() as cap:
        result = shell.run_cell(code, store_history=True)   # (a new execution count)
    assert result.success, result.error_in_exec
    return len(cap.outputs)


@pytest.mark.parametrize("make", [
    lambda: wb.open("sample_graphs/layernorm.json", backend="cpu", display=False),
    lambda: wb.open(Session(dp_adamw(64, 8, 2), ranks=2), display=False),
    lambda: wb.open(cartpole(64, 8), backend="cpu", display=False),
], ids=["graph", "distributed", "repeat"])
def test_an_app_is_shown_once_per_cell(shell, make):
    app = make()
    assert _outputs(shell, "display(app); display(app); app", {"app": app}) == 1
    assert _outputs(shell, "app", {"app": app}) == 1        # the next cell: shown again
