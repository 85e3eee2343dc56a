"""The cupy backend against the reference, on every sample graph (needs a GPU)."""
from pathlib import Path

import pytest

from workbench.runtime import gpu_available
from workbench.session import Session

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")]

SAMPLES = sorted(Path("sample_graphs").glob("*.json")) + sorted(
    Path("sample_graphs").glob("*.onnx"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("planner", ["none", "rules"])
def test_cupy_matches_reference(path, planner):
    s = Session(str(path), backend="cupy")
    if planner != "none":
        s.auto(planner)
    m = s.measure(repeats=3)
    assert m.within_tolerance, (m.max_rel_error, m.per_kernel)
