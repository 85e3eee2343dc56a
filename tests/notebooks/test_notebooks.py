"""Every notebook in notebooks/ runs top to bottom, headless, on the CPU.

Each notebook executes with nbclient in a real ``python3`` kernel of this interpreter
(a kernelspec written to a temporary ``JUPYTER_PATH``, so a user's own ``python3``
kernelspec cannot shadow the venv), with ``notebooks/`` as its working directory, the
way a user opens it. No output is written back to the repository's notebooks.

After the last cell a probe cell runs in the same kernel and reports the app's state
as JSON (the history table, the status line, the interpreter), so the checks below read
real values instead of parsing rendered tables. Notebooks without a specific check
(e.g. a new one) still must run without error, and every step they measured must match
NumPy.
"""
from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

# slow: every notebook run top to bottom in a real Jupyter kernel
pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 600    # the first run compiles every kernel (cached afterwards)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

PROBE = r"""
import json as _json, sys as _sys
_state = {"prefix": _sys.prefix, "apps": {}}
for _name, _obj in list(globals().items()):
    if type(_obj).__name__ == "WorkbenchApp":
        _h = _obj.history
        _state["apps"][_name] = {
            "message": _obj.message, "selected": _obj.selected,
            "history": _json.loads(_h.to_json(orient="records"))}
print("WB-PROBE" + _json.dumps(_state))
"""


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory, monkeypatch_module):
    """A python3 kernelspec running sys.executable, first on JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    # a headless kernel: no GUI backends, plotly renders to JSON anyway
    monkeypatch_module.setenv("MPLBACKEND", "Agg")
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def execute(path: Path) -> tuple[object, dict]:
    """Run the notebook and the probe; returns (executed notebook, probe state)."""
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: metadata.kernelspec must name python3 (else Lab asks for a kernel)")
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name} is committed with outputs: clear them (Edit > Clear Outputs of All "
        "Cells) before committing")
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)   # raises CellExecutionError on an error
        probe = nbformat.v4.new_code_cell(PROBE)
        nb.cells.append(probe)
        client.execute_cell(probe, len(nb.cells) - 1)
    text = "".join(o.get("text", "") for o in probe.outputs if o.output_type == "stream")
    return nb, json.loads(text.split("WB-PROBE", 1)[1])


def outputs_text(nb) -> str:
    """All stream and text/plain output of the notebook, concatenated."""
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.output_type == "stream":
                parts.append(o.text)
            elif "data" in o:
                parts.append(o.data.get("text/plain", ""))
    return "\n".join(parts)


def widget_views(nb) -> int:
    return sum(1 for c in nb.cells for o in c.get("outputs", [])
               if WIDGET_MIME in o.get("data", {}))


# -- what each notebook must show ------------------------------------------------------
def check_quickstart(nb, state):
    app = state["apps"]["app"]
    h = app["history"]
    assert [r["action"] for r in h] == ["load", "auto rules"]
    assert h[0]["kernels"] == 16 and h[1]["kernels"] == 1, h
    assert h[1]["bytes_moved_MB"] < h[0]["bytes_moved_MB"] / 4, h
    assert widget_views(nb) >= 1, "the app was not displayed as a widget"
    text = outputs_text(nb)
    assert "__global__" in text, "the fused kernel's CUDA source was not printed"
    assert "redo: step 1" in app["message"]


def check_step_by_step(nb, state):
    h = state["apps"]["app"]["history"]
    assert [r["action"] for r in h] == ["load", "fuse n6 n7 n8", "fuse n1 n2 n3",
                                         "fuse n0 n1", "fuse n0 n4 n5 n6", "auto rules"]
    assert [r["kernels"] for r in h] == [9, 7, 5, 4, 1, 1]
    mb = [r["bytes_moved_MB"] for r in h]
    assert all(a > b for a, b in pairwise(mb[:5])), f"bytes must fall at each fusion: {mb}"
    assert mb[4] == pytest.approx(mb[5]), "manual and rules plans should move the same bytes"
    text = outputs_text(nb)
    assert "would create a cycle" in text, "the refused fusion's reason was not shown"
    assert "returned: None" in text
    assert text.count("/* kernel ") >= 4, "each step should print its kernel's source"
    assert "__global__" in text


def check_bert(nb, state):
    h = state["apps"]["app"]["history"]
    assert h[0]["action"] == "load" and h[-1]["action"].startswith("auto ")
    assert h[-1]["kernels"] < h[0]["kernels"] / 2, h
    assert h[-1]["bytes_moved_MB"] < h[0]["bytes_moved_MB"], h
    # the softmax's kernel in the backend's language: on the CPU C with OpenMP -- the
    # scores' GEMM (the micro-kernel against the packed keys, or sgemm on narrower
    # vectors) with the scale, mask and softmax as its epilogue, or, where stitch's
    # cost model (the CPU as measured on this machine: a loaded host measures
    # otherwise) keeps them apart, a row kernel of their own; on a GPU the stitched
    # CUDA kernel
    text = outputs_text(nb)
    source = text[text.find("/* kernel "):]
    assert "__global__" in source or ("reduce_max" in source and "#pragma omp" in source
                                      and "void k" in source), text[-3000:]
    # planned for the H100 with TF32 allowed: the attention on tensor cores
    assert "tf32: " in text and " on tensor cores, predicted " in text, text[-3000:]
    assert "wb_gemm_tile_tc<" in text, text[-3000:]


CHECKS = {"01_quickstart.ipynb": check_quickstart,
          "02_step_by_step.ipynb": check_step_by_step,
          "03_bert_onnx.ipynb": check_bert}


def test_the_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    assert set(CHECKS) <= names, f"missing notebooks: {sorted(set(CHECKS) - names)}"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_runs(path, kernel_path):
    nb, state = execute(path)
    assert state["prefix"] == sys.prefix, "the kernel did not run this venv's Python"
    for name, app in state["apps"].items():
        for row in app["history"]:   # ok is None where a step was not measured
            assert row["ok"] is not False, (
                f"{path.name}: {name} step {row['step']} differs from NumPy")
    check = CHECKS.get(path.name)
    if check is not None:
        check(nb, state)
