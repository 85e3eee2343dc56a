"""benchmarks/winograd_probe.py as its user runs it, on ResNet small's 16-channel 3 x 3:
a real subprocess that compiles the F(2 x 2, 3 x 3) probe, checks it and the
workbench's direct kernel against a float64 NumPy convolution, times both in
alternation and writes the JSON and markdown results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# slow: a compile and timing rounds in a subprocess
pytestmark = pytest.mark.slow


def test_winograd_probe_small(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "winograd_probe.py"), "--shapes",
         "resnet_small_16", "resnet_small_32", "--rounds", "1", "--inner", "2",
         "--out", str(out), "--tag=-test"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("winograd-probe-*-test.json")).read_text())
    assert [m["model"] for m in res["models"]] == ["resnet_small_16", "resnet_small_32"]
    for m in res["models"]:
        # float32 against float64: a few roundings per output, far below 1e-5
        assert 0 < m["rel_error"]["winograd"] < 1e-5
        assert 0 < m["rel_error"]["workbench"] < 1e-5
        assert "direct" in m["schedule"]
        assert len(m["us"]["workbench"]) == len(m["us"]["winograd probe"]) == 2
    md = next(out.glob("winograd-probe-*-test.md")).read_text()
    assert md.count("| resnet_small_") == 2
