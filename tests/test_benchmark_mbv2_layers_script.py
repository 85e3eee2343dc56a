"""benchmarks/mbv2_layers.py as its user runs it on the zoo's ResNet: a real subprocess
that pairs each convolution kernel with onnxruntime's node computing it and writes the
JSON and markdown results. onnxruntime runs ResNet's 1 x 1 shortcut before the block's
second 3 x 3, so pairing the k-th node with the k-th convolution paired those two the
wrong way round; the pairing by name must not."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# slow: a model exported by torch, then timed beside onnxruntime in a subprocess
pytestmark = pytest.mark.slow


def test_resnet_layers_paired_by_name(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "mbv2_layers.py"), "--model", "resnet",
         "--rounds", "1", "--inner", "1", "--out", str(out), "--tag=-test"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("mbv2-layers-*-test.json")).read_text())
    layers = res["layers"]
    assert [lay["kind"] for lay in layers] == [
        "stem", "3x3 s1", "3x3 s1", "3x3 s2", "3x3 s1", "shortcut"]
    for lay in layers:
        # each row's onnxruntime node is named after a value of its own convolution's
        # chain, and computes an output of the same shape
        assert lay["ort_node"].removesuffix("_nchwc") in lay["names"], lay
        assert lay["ours_us"] > 0 and lay["ort_us"] > 0
    assert len({lay["ort_node"] for lay in layers}) == len(layers)
    assert layers[-1]["weights"][2:] == [1, 1] and layers[-2]["weights"][2:] == [3, 3]
    # the peak the GFLOP/s are a share of: the probe's multiply-adds, > 1 GFLOP/s
    assert res["peak_gflops"] > 1
    md = next(out.glob("mbv2-layers-*-test.md")).read_text()
    assert "| 5 | shortcut | 16x16x16 -> 32x8x8 |" in md
