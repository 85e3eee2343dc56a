"""Integrity: a changed, truncated, incomplete, padded, foreign or newer artifact is
refused with one clear message, before anything is compiled (the compile cache of a
fresh WORKBENCH_CACHE stays empty)."""
import json
import shutil
import zipfile

import pytest

from workbench import Session, load_artifact
from workbench.artifact.manifest import canonical_json, sha256
from workbench.errors import ArtifactError, WorkbenchError


@pytest.fixture(scope="module")
def pristine(art, tmp_path_factory):
    s = Session(art.small_graph(), backend="cpu")
    s.auto("rules")
    return s.export(tmp_path_factory.mktemp("pristine") / "a")


@pytest.fixture
def copy(pristine, tmp_path):
    root = tmp_path / "a"
    shutil.copytree(pristine, root)
    return root


def _zip(root, dest):
    with zipfile.ZipFile(dest, "w") as z:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(root).as_posix())
    return dest


def refused(path, match, cache):
    with pytest.raises(ArtifactError, match=match) as e:
        load_artifact(path, backend="cpu")
    assert isinstance(e.value, WorkbenchError)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    assert not cache.exists() or not list(cache.rglob("*.so")), "something was compiled"
    return msg


def _source(root):
    return sorted((root / "kernels").glob("*.c"))[0]


def test_pristine_copy_loads_and_compiles(copy, fresh_cache):
    model = load_artifact(copy, backend="cpu")
    assert len(list(fresh_cache.glob("*.so"))) == sum(
        k.library is None for k in model.kernels)


def test_changed_kernel_source_byte(copy, fresh_cache):
    src = _source(copy)
    data = bytearray(src.read_bytes())
    i = data.index(b"+")
    data[i:i + 1] = b"-"                     # same size, one byte different
    src.write_bytes(bytes(data))
    msg = refused(copy, "SHA-256 mismatch", fresh_cache)
    assert f"kernels/{src.name} has changed since export" in msg and "re-export" in msg


def test_truncated_constants(copy, fresh_cache):
    f = copy / "constants.npz"
    f.write_bytes(f.read_bytes()[:-40])
    refused(copy, r"constants.npz has \d+ bytes, the manifest records \d+ \(truncated",
            fresh_cache)


def test_missing_file(copy, fresh_cache):
    src = _source(copy)
    src.unlink()
    refused(copy, f"kernels/{src.name} is missing.*restore the file", fresh_cache)


def test_extra_file(copy, fresh_cache):
    (copy / "kernels" / "k99_evil.c").write_text("int x;\n")
    refused(copy, "kernels/k99_evil.c is not listed in its manifest; remove it", fresh_cache)


def test_foreign_directory_and_zip_and_file(tmp_path, fresh_cache):
    d = tmp_path / "foreign"
    d.mkdir()
    (d / "model.onnx").write_bytes(b"\x08\x07")
    refused(d, "is not a Fusion Workbench artifact: it has no manifest.json", fresh_cache)
    z = _zip(d, tmp_path / "foreign.zip")
    refused(z, "is not a Fusion Workbench artifact: it has no manifest.json", fresh_cache)
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    refused(f, "neither a directory nor a .zip", fresh_cache)
    refused(tmp_path / "nowhere", "does not exist", fresh_cache)


def test_foreign_manifest(copy, fresh_cache):
    (copy / "manifest.json").write_text(json.dumps({"format": "something.else", "version": 1}))
    refused(copy, "not a Fusion Workbench artifact manifest", fresh_cache)
    (copy / "manifest.json").write_text("{not json")
    refused(copy, "manifest.json is not valid JSON", fresh_cache)


def test_newer_format_version(copy, art, fresh_cache):
    def bump(m):
        m["version"] += 1
    art.resign(copy, bump)
    msg = refused(copy, "made by a newer workbench", fresh_cache)
    assert "upgrade fusion-workbench" in msg


def test_edited_manifest(copy, fresh_cache):
    m = json.loads((copy / "manifest.json").read_text())
    m["kernels"][1]["launch"]["grid"] += 1
    (copy / "manifest.json").write_text(json.dumps(m))
    refused(copy, "manifest.json has changed since export", fresh_cache)


def test_kernel_field_this_workbench_does_not_know(copy, art, fresh_cache):
    def add_field(m):
        m["kernels"][1]["launch"]["clusters"] = 2
    art.resign(copy, add_field)
    refused(copy, "fields this workbench cannot read.*upgrade fusion-workbench", fresh_cache)


def test_graph_that_does_not_match_its_hash(copy, art, fresh_cache):
    g = json.loads((copy / "graph.json").read_text())
    g["description"] = "changed"
    (copy / "graph.json").write_text(json.dumps(g))
    art.resign(copy)          # the file list agrees, the graph hash does not
    refused(copy, "does not match the recorded graph hash", fresh_cache)


def test_unsafe_path_in_manifest(copy, fresh_cache):
    m = json.loads((copy / "manifest.json").read_text())
    m["files"]["../outside.c"] = m["files"].pop("graph.json")
    m.pop("digest")
    m["digest"] = sha256(canonical_json(m))     # a consistent manifest, a bad path
    (copy / "manifest.json").write_text(json.dumps(m))
    refused(copy, "unsafe file path '../outside.c'", fresh_cache)


def test_changed_byte_inside_a_zip(copy, tmp_path, fresh_cache):
    src = _source(copy)
    src.write_bytes(src.read_bytes().replace(b"+", b"-", 1))
    z = _zip(copy, tmp_path / "tampered.zip")
    refused(z, "SHA-256 mismatch", fresh_cache)
