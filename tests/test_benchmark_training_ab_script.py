"""benchmarks/training_ab.py as its user runs it, on a short sequence: a real subprocess
whose two children build the BERT layer's training step (here both from this checkout,
so their outputs agree bit for bit and every kernel is matched by name), writing the
JSON and markdown results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
# slow: two children each importing a BERT layer's training graph with torch
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_scripts")]


def test_training_ab_benchmark_short(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "training_ab.py"), "--base", str(ROOT),
         "--seq", "16", "--rounds", "2", "--inner", "2", "--kernels", "k9",
         "--out", str(tmp_path), "--tag=-test"],
        capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(tmp_path.glob("training-ab-*-test.json")).read_text())
    md = next(tmp_path.glob("training-ab-*-test.md")).read_text()
    got = res["result"]
    assert res["seq"] == 16 and res["machine"]["cores"] > 0
    assert got["outputs_max_rel_difference"] == 0.0
    assert got["kernels"]["base"] == got["kernels"]["this"] > 0
    assert got["only_in"] == {"base": [], "this": []}
    for side in ("base", "this"):
        s = got["steps"][side]
        assert len(s["samples_ms"]) == 4 and 0 < s["kernels_median_ms"] <= s["median_ms"]
    asked = [k for k in got["per_kernel"] if k["asked"]]
    assert asked and all(k["kernel"].startswith("k9") for k in asked)
    assert "| median of all calls |" in md and "largest difference 0.00e+00" in md


def test_training_ab_refuses_a_base_that_is_no_checkout(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "training_ab.py"),
                        "--base", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "is no workbench checkout" in r.stderr
