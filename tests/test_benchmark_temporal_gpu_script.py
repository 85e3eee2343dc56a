"""benchmarks/temporal_gpu.py as its user runs it, in the CUDA emulator at tiny sizes: a
real subprocess whose launches, ping-pong state buffers and checks (every F bit for bit
equal to one launch per step; F = 1 within the NumPy reference's bound) run as on a
GPU, writing results marked emulated. (The GPU run needs CuPy and a GPU:
scripts/gpu_check.sh runs it when a device is lent.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "temporal_gpu.py"
pytestmark = pytest.mark.slow        # (a subprocess building emulator kernels: ~10 s)


def test_temporal_gpu_benchmark_in_the_emulator(tmp_path):
    from workbench.runtime import cuda_emu
    if cuda_emu.find_cxx() is None:
        pytest.skip("no C++ compiler for the CUDA emulator")
    out = tmp_path / "tg"
    r = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cuda-emu", "--envs",
                        "300", "--steps", "8", "--fs", "1", "2", "8", "--rounds", "1",
                        "--check-steps", "4", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT / "benchmarks")
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["emulated"] and res["backend"] == "cuda-emu"
    c = res["cases"][0]
    assert [row["launches"] for row in c["rows"].values()] == [8, 4, 1]
    assert all(v is True for k, v in c["checks"].items() if "bitwise" in k)
    assert [v for k, v in c["checks"].items() if "NumPy" in k][0] <= 64
    assert "Emulated: no GPU ran this" in out.with_suffix(".md").read_text()
