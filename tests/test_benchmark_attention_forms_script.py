"""benchmarks/attention_forms.py as its user runs it, at 256 keys: a real subprocess
that checks each form of the CPU's fused attention against the reference, times them
in alternation and writes the JSON and markdown results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# slow: the benchmark in a subprocess, timing each form in alternation
pytestmark = pytest.mark.slow


def test_attention_forms_benchmark_small(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "attention_forms.py"), "--keys", "256",
         "--rounds", "1", "--inner", "1", "--out", str(out), "--tag=-test"],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("attention-forms-*-test.json")).read_text())
    assert [(c["dtype"], c["causal"]) for c in res["cases"]] == [
        ("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)]
    for c in res["cases"]:
        forms = {"whole rows", "online, every key"} | ({"online, skip"} if c["causal"] else set())
        assert set(c["latency_ms"]) == forms and all(c["within_tolerance"].values())
        assert all(v > 0 for v in c["latency_ms"].values())
        if c["causal"]:
            assert "keys past row + 1 skipped" in c["schedule"]["online, skip"]
            assert "skipped" not in c["schedule"]["online, every key"]
        assert "online softmax" not in c["schedule"]["whole rows"]
    md = next(out.glob("attention-forms-*-test.md")).read_text()
    assert md.count("| 256 |") == 4
