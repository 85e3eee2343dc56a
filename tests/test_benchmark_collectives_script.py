"""benchmarks/collectives.py as its user runs it, tiny: 2 gloo ranks in subprocesses,
the AdamW methods timed in alternation, the alpha-beta fit and the simulated rows
written as JSON and markdown."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# slow: processes that import torch, every collective at 8 sizes
pytestmark = pytest.mark.slow


def test_collectives_benchmark_small(tmp_path):
    out = tmp_path / "collectives-test"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "collectives.py"), "--ranks", "2",
         "--rows", "64", "--cols", "64", "--rounds", "1", "--reps", "1", "--pause", "0",
         "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.with_suffix(".json").read_text())
    (run,) = res["runs"]
    assert run["sharded_vs_unsharded_error"] <= 1e-6
    assert set(run["adamw"]) >= {"torch fused", "wb unsharded", "wb sharded",
                                 "compute: wb 1/p"}
    # the three collectives (and gloo's own ReduceScatter/AllGather beside the rings)
    # at 8 sizes each; the model prices the three
    ours = [c for c in run["collectives"] if c["op"] in ("all_reduce", "reduce_scatter",
                                                          "all_gather")]
    assert len(ours) == 24 and all(c["model_s"] > 0 for c in ours)
    assert {s["kind"] for s in res["simulated"]} == {"simulated"}
    from workbench.distributed.links import DEFAULT_LINK     # (the planner's link drawn)
    assert [s["ranks"] for s in res["simulated"] if s["link"] == DEFAULT_LINK.name] == \
        [8, 16, 32, 64, 128, 256, 512, 1024]
    assert "Simulated scale-out (the model, not a measurement)" in \
        out.with_suffix(".md").read_text()
