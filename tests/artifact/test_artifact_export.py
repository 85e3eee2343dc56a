"""Export: layout, manifest contents, constants outside the graph JSON, no model text in
generated source, atomic writes that refuse to overwrite, and the CLI."""
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import workbench as wb
from workbench.artifact.manifest import FORMAT, VERSION, canonical_json, sha256
from workbench.codegen import lower_plan
from workbench.errors import ArtifactError


@pytest.fixture(scope="module")
def session(art):
    s = wb.Session(art.small_graph(), backend="cpu")
    s.auto("rules")
    return s


def _manifest(root):
    return json.loads((root / "manifest.json").read_text())


def test_layout_and_manifest(session, tmp_path):
    root = session.export(tmp_path / "a")
    m = _manifest(root)
    assert (m["format"], m["version"]) == (FORMAT, VERSION)
    assert m["workbench_version"] == wb.__version__ and m["planner"] == "rules"
    g = session.graph
    assert [t["name"] for t in m["inputs"]] == list(g.inputs)
    assert [t["shape"] for t in m["outputs"]] == [list(g.value(o).shape) for o in g.outputs]
    # the plan and the kernels, in execution order, as the session runs them
    kernels = lower_plan(session.plan)
    assert [gr["nodes"] for gr in m["groups"]] == [list(gr.nodes) for gr in session.plan.groups]
    assert [k["name"] for k in m["kernels"]] == [k.name for k in kernels]
    for spec, k in zip(m["kernels"], kernels):
        assert spec["launch"] == k.launch.to_json()
        assert spec["shared_bytes"] == k.shared_bytes
        assert [p["value"] for p in spec["params"]] == [b.value for b in k.params]
        if k.blas or k.host_only:   # a GEMM kernel (host BLAS, micro-kernel): C only
            assert spec["library"] is None and set(spec["sources"]) == {"c"}
        elif k.library is None:
            assert spec["library"] is None and set(spec["sources"]) == {"c", "cuda"}
        else:
            assert spec["library"]["op"] == "matmul" and spec["sources"] == {}
    # every other file listed with its hash and size; nothing else on disk
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert on_disk == set(m["files"]) | {"manifest.json"}
    for rel, e in m["files"].items():
        data = (root / rel).read_bytes()
        assert (e["sha256"], e["size"]) == (sha256(data), len(data))
    body = {k: v for k, v in m.items() if k != "digest"}
    assert m["digest"] == sha256(canonical_json(body))
    assert m["device"]["backend"] == "cpu" and m["device"]["name"]


def test_measurement_recorded_only_when_taken(art, tmp_path):
    s = wb.Session(art.small_graph(), backend="cpu")
    s.auto("rules")
    assert _manifest(s.export(tmp_path / "unmeasured"))["measurement"] is None
    meas = _manifest(s.export(tmp_path / "measured", measure=True))["measurement"]
    m = s.measure()
    assert meas["latency_ms"] == m.latency_ms and meas["within_tolerance"] is True
    assert [r["kernel"] for r in meas["per_kernel"]] == list(m.per_kernel.kernel)
    # what the session already measured is reused without measure=True
    again = _manifest(s.export(tmp_path / "cached"))["measurement"]
    assert again["latency_ms"] == m.latency_ms


def test_constants_live_in_npz_not_in_graph_json(session, tmp_path):
    root = session.export(tmp_path / "a")
    d = json.loads((root / "graph.json").read_text())
    g = session.graph
    assert len(d["constants"]) == len(g.constants) > 0
    assert all(set(c["init"]) == {"npz"} for c in d["constants"].values())
    text = (root / "graph.json").read_text()
    assert "base64" not in text and '"data"' not in text
    with np.load(root / "constants.npz", allow_pickle=False) as npz:
        for name, spec in d["constants"].items():
            np.testing.assert_array_equal(npz[spec["init"]["npz"]], g.constants[name])


def test_generated_sources_hold_no_model_names(session, art, tmp_path):
    root = session.export(tmp_path / "a")
    sources = sorted((root / "kernels").iterdir())
    assert {p.suffix for p in sources} == {".c", ".cu"}
    for p in sources:
        assert art.mark not in p.read_text(), p.name
    # the names are there, as JSON data, where they belong
    assert art.mark in (root / "graph.json").read_text()


def test_zip_holds_the_same_files(session, tmp_path):
    d = session.export(tmp_path / "a")
    z = session.export(tmp_path / "a.zip")
    assert zipfile.is_zipfile(z)
    with zipfile.ZipFile(z) as zf:
        names = set(zf.namelist())
        assert names == {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()}
        for n in names - {"manifest.json"}:
            if n != "constants.npz":    # (npz entries carry their write time)
                assert zf.read(n) == (d / n).read_bytes()


def test_refuses_to_overwrite_unless_forced(session, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="already exists.*force"):
        session.export(taken)
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    zpath = tmp_path / "m.zip"
    zpath.write_bytes(b"not yours")
    with pytest.raises(ArtifactError, match="already exists and is a file"):
        session.export(zpath)
    assert zpath.read_bytes() == b"not yours"
    # an empty directory is free; force replaces an artifact, and nothing else
    (tmp_path / "empty").mkdir()
    session.export(tmp_path / "empty")
    with pytest.raises(ArtifactError, match="not a Fusion Workbench artifact"):
        session.export(taken, force=True)
    with pytest.raises(ArtifactError, match="not a Fusion Workbench artifact"):
        session.export(zpath, force=True)
    assert (taken / "keep.txt").exists() and zpath.read_bytes() == b"not yours"
    (taken / "keep.txt").unlink()
    zpath.unlink()
    session.export(taken)
    session.export(zpath)
    session.export(taken, force=True)
    assert (taken / "manifest.json").exists()
    session.export(zpath, force=True)
    assert zipfile.is_zipfile(zpath)
    # a zip over an existing artifact directory, and a directory over a zip
    session.export(taken, force=True)
    assert wb.load_artifact(zpath).manifest.kernels
    # no temporary directory left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "m.zip", "taken"]


def test_unwritable_target_fails_cleanly(session, tmp_path):
    with pytest.raises(ArtifactError, match="does not exist; create it first"):
        session.export(tmp_path / "no" / "such" / "dir" / "a.zip")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_writing_leaves_nothing(session, tmp_path, monkeypatch):
    import workbench.artifact.export as ex

    def boom(staged, target):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ex, "_replace", boom)
    with pytest.raises(ArtifactError, match="No space left"):
        session.export(tmp_path / "a.zip")
    assert list(tmp_path.iterdir()) == []


CLI = [sys.executable, "-m", "workbench.cli"]


@pytest.mark.slow   # (the CLI in subprocesses)
def test_cli_export_and_exit_codes(tmp_path):
    out = tmp_path / "ln.zip"
    args = ["export", "sample_graphs/layernorm.json", "--backend", "cpu", "-o", str(out)]
    r = subprocess.run(CLI + args + ["--measure"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}: 1 kernels (planner rules" in r.stdout
    model = wb.load_artifact(out)
    m = model.manifest
    assert m.planner == "rules" and len(m.kernels) == 1
    assert m.measurement["within_tolerance"] is True and m.device["backend"] == "cpu"
    before = out.read_bytes()
    r = subprocess.run(CLI + args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "already exists" in r.stderr and "--force" in r.stderr
    assert out.read_bytes() == before
    r = subprocess.run(CLI + args + ["--force", "--planner", "none", "-q"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout == ""
    assert wb.load_artifact(out).manifest.planner == "none"
    r = subprocess.run(CLI + ["export", str(tmp_path / "missing.json"), "-o",
                              str(tmp_path / "x")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.startswith("error: ")
    assert not (tmp_path / "x").exists()
