"""scripts/architectures.py as its user runs it, on two of its architectures (one text
model with a padding mask, one CNN): a real subprocess that imports each both ways,
runs it, writes the JSON and markdown results, and exits 0 only when both match
torch; an unknown name is refused with the list to choose from."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "architectures.py"
# slow: a subprocess importing torch per test
# (xdist group torch_scripts: these subprocesses, each holding torch and a model, run one
# at a time -- beside the zoo's worker (group model_zoo), not behind it on the same one)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch_scripts")]


def test_two_architectures_import_both_ways_and_match_torch(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "albert", "convnext", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(next(tmp_path.glob("architectures-*.json")).read_text())
    assert [x["architecture"] for x in res["results"]] == ["albert", "convnext"]
    for x in res["results"]:
        for path in ("from_torch", "onnx"):
            p = x[path]
            assert p["ok"] and p["kernels"] > 0 and 0 < p["error"] <= 1e-4, (x, path)
    md = next(tmp_path.glob("architectures-*.md")).read_text()
    assert "2 of 2 pass both ways" in md


def test_an_unknown_architecture_is_refused_with_the_choices(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "resnet9000", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2
    assert "unknown architecture(s) resnet9000" in r.stderr and "roberta" in r.stderr
    assert not list(tmp_path.iterdir())


def test_torchvision_models_are_refused_by_name_where_torchvision_does_not_import(tmp_path):
    """The project's CPU torch has no matching torchvision (PyPI's fails to import beside
    it): a ``tv_*`` model asked for by name is refused, saying why and where to look."""
    try:
        import torchvision  # noqa: F401
        pytest.skip("torchvision imports here: the tv_* models run")
    except Exception:       # noqa: BLE001 -- not installed, or built for another torch
        pass
    r = subprocess.run([sys.executable, str(SCRIPT), "tv_resnet18", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "tv_resnet18 need torchvision, which does not import here" in r.stderr
    assert "docstring" in r.stderr and not list(tmp_path.iterdir())
