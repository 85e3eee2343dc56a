"""benchmarks/gpu.py as its user runs it, on the CPU at tiny sizes: a real subprocess
that writes the JSON and markdown results with workbench and torch rows per workload.
(The GPU run itself needs CuPy and a GPU; this checks the script's logic.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu.py"
# slow: the benchmark in a subprocess with torch (eager and torch.compile) beside it
# (xdist group torch_scripts: these subprocesses, each holding torch and a model, run one
# at a time -- beside the zoo's worker (group model_zoo), not behind it on the same one)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_scripts")]


def test_gpu_benchmark_quick_on_cpu(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "cpu", "--quick", "--workloads", "softmax",
         "layernorm", "--planners", "none", "rules", "--repeats", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]

    jsons = list(out.glob("gpu-cpu-*.json"))
    assert len(jsons) == 1, list(out.iterdir())
    md = (out / "gpu-cpu.md").read_text()
    res = json.loads(jsons[0].read_text())
    assert res["complete"] and res["backend"] == "cpu" and res["quick"]
    assert res["copy"]["GBps"] > 0

    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    by_name = {w["workload"]: w for w in res["workloads"]}
    assert set(by_name) == {"softmax", "layernorm"}
    for name, w in by_name.items():
        ms = w["methods"]
        assert set(ms) == {"none", "rules", "torch_eager", "torch_compile"}, name
        for p in ("none", "rules"):
            row = ms[p]
            assert row["status"] == "ok", (name, p, row.get("error"))
            assert row["latency_ms"] > 0 and row["bytes_counted"] > 0 and row["kernels"] >= 1
            assert row["within_tolerance"] is True
            assert row["pct_copy"] > 0
        assert ms["rules"]["kernels"] == 1 < ms["none"]["kernels"]
        assert ms["rules"]["bytes_counted"] == w["min_bytes"]
        eager, comp = ms["torch_eager"], ms["torch_compile"]
        if have_torch:
            assert eager["status"] == "ok", eager.get("error")
            assert eager["latency_ms"] > 0 and eager["within_tolerance"] is True
            assert eager["bytes_counted"] == w["min_bytes"]
            # torch.compile may fail on a machine without its toolchain: then it says why
            assert comp["status"] == "ok" or comp.get("error"), comp
        else:
            assert eager["status"] == "n/a" and "torch" in eager["error"]
        assert f"## {name}" in md
    for label in ("workbench none", "workbench rules", "torch eager", "torch.compile"):
        assert md.count(f"| {label} |") == 2, label
    assert "Copy bandwidth" in md
    # the compact summary comes last, then the written paths
    assert "== summary" in r.stdout and r.stdout.rstrip().splitlines()[-1].startswith("wrote ")


def test_gpu_benchmark_times_the_causal_skip_against_every_key(tmp_path):
    """The causal attention workloads (float32 and bfloat16) time stitch's plan again
    with every block of keys taken (skip=0) and say what the skip saved; on the CPU
    here, at the quick size (256 keys: the CPU's online form and skip)."""
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--backend", "cpu", "--quick", "--workloads",
         "causal_attention", "causal_attention_bf16", "--planners", "stitch", "--repeats",
         "2", "--no-compile", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(next(out.glob("gpu-cpu-*.json")).read_text())
    for w in res["workloads"]:
        st = w["methods"]["stitch"]
        assert st["within_tolerance"] and st["every_key_within_tolerance"], w["workload"]
        assert st["every_key_ms"] > 0
    assert (out / "gpu-cpu.md").read_text().count("The causal skip: stitch") == 2
