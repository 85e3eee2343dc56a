"""scripts/vectorization.py as its user runs it: a real subprocess that exports a zoo
model with torch, imports the ONNX file, plans it, compiles every kernel with GCC's
vectorization report and writes the JSON and markdown lists of the SIMD loops left
scalar. MobileNetV2's ReLU6 epilogues (two NaN-propagating selects in a row, the loss
the script was written to find) are all vectorized."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "vectorization.py"
# slow: a subprocess exporting a zoo model with torch
# (xdist group torch_scripts: these subprocesses, each holding torch and a model, run one
# at a time -- beside the zoo's worker (group model_zoo), not behind it on the same one)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_scripts")]


def test_the_report_lists_mobilenet_loops_and_no_select_left_scalar(tmp_path):
    from workbench.runtime.vectorization import supported
    if not supported():
        pytest.skip("the C compiler is not GCC")
    r = subprocess.run([sys.executable, str(SCRIPT), "--models", "mobilenet_v2", "--size",
                        "tiny", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(next(tmp_path.glob("vectorization-*.json")).read_text())
    (m,) = res["models"]
    assert m["model"] == "mobilenet_v2" and m["kernels"] > 40 and m["simd_loops"] > m["kernels"]
    # (tiny planes leave loops of a few iterations scalar, without a reason; none for
    # want of if-converting a select)
    assert not [s for s in m["scalar"] if any("control flow" in x for x in s["reasons"])], m
    md = next(tmp_path.glob("vectorization-*.md")).read_text()
    assert "| mobilenet_v2 | " in md and "SIMD loops GCC left scalar" in md
