"""Safety: a hostile artifact -- its file hashes and digest recomputed, which needs no
secret -- is refused with one ArtifactError line before anything is written outside the
compile cache or compiled: names that would become paths or symbols, TensorSpecs and
buffers that do not match the graph, out-of-range launches and workspaces, NaN, deep
nesting, huge headers, FIFOs, device files and symlinks, duplicate zip entries. And
``--force`` replaces only an existing artifact."""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from budget import sample
from workbench import Session, load_artifact
from workbench.artifact import export_plan
from workbench.artifact.manifest import canonical_json, sha256
from workbench.errors import ArtifactError, WorkbenchError
from workbench.fusion.planners import run_planner
from workbench.runtime import get_backend


# -- artifacts to attack --------------------------------------------------------------
@pytest.fixture(scope="module")
def pristine(art, tmp_path_factory):
    s = Session(art.small_graph(), backend="cpu")
    s.auto("rules")
    return s.export(tmp_path_factory.mktemp("pristine") / "a")


def _layernorm_plan(how: str):
    plan, _ = run_planner("rules", wb.load("sample_graphs/layernorm.json"))
    if how == "split":       # split rows: partial sums in a workspace (not a graph value)
        return plan.set_mapping("k0", "split")
    mean = plan.graph.node("n0").outputs[0]
    return plan.set_scheme(mean, "global")   # stitched: the mean crosses in a workspace


@pytest.fixture(scope="module")
def with_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    return {how: export_plan(_layernorm_plan(how), root / how, backend=get_backend("cpu"))
            for how in ("split", "stitched")}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """tmp/sandbox/deep/er/cache is WORKBENCH_CACHE: a name that climbs out of the cache
    lands in the sandbox, where the test can see it."""
    box = tmp_path / "sandbox"
    cache = box / "deep" / "er" / "cache"
    cache.mkdir(parents=True)
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    return box, cache


def _snapshot(root: Path, skip: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if d == skip or skip in d.parents:
            dirnames[:] = []
            continue
        for n in dirnames + filenames:
            if d / n == skip:
                continue
            st = os.lstat(d / n)
            out[(d / n).relative_to(root).as_posix()] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _write_manifest(root: Path, m: dict, redigest: bool = True) -> None:
    if redigest:
        m.pop("digest", None)
        m["digest"] = sha256(canonical_json(m))
    (root / "manifest.json").write_text(json.dumps(m, indent=1))


def _generated(m: dict) -> int:
    """Index of the first generated (non-library) kernel."""
    return next(i for i, k in enumerate(m["kernels"]) if k["library"] is None)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def refused(path, match, cache, **kw):
    with pytest.raises(ArtifactError, match=match) as e:
        load_artifact(path, backend="cpu", **kw)
    msg = str(e.value)
    assert isinstance(e.value, WorkbenchError)
    assert "\n" not in msg and str(path) in msg, msg
    assert not list(cache.rglob("*.so")), "something was compiled"
    return msg


# -- 9: names that become paths or symbols ----------------------------------------------
def test_kernel_name_that_climbs_out_of_the_cache(pristine, sandbox, art):
    box, cache = sandbox
    root = _copy(pristine, box / "a")
    m = _manifest(root)
    m["kernels"][_generated(m)]["name"] = "../../../x"   # sources untouched, digest redone
    _write_manifest(root, m)
    before = _snapshot(box, cache)
    msg = refused(root, r"kernel name '\.\./\.\./\.\./x' is not a C identifier", cache)
    assert "re-export" in msg
    assert _snapshot(box, cache) == before, "the loader wrote outside its cache"
    assert not list(box.rglob("x*")), "a file named after the kernel escaped the cache"
    assert not list(cache.rglob("*.c"))


@pytest.mark.parametrize("name", ["k1 x", "1k", "k-1", "a" * 200, "", "k\u00e9", "k.so"])
def test_kernel_names_must_be_bounded_identifiers(pristine, tmp_path, fresh_cache, name):
    root = _copy(pristine, tmp_path / "a")
    m = _manifest(root)
    m["kernels"][_generated(m)]["name"] = name
    _write_manifest(root, m)
    refused(root, "is not a C identifier", fresh_cache)


def test_source_paths_are_exactly_what_the_exporter_writes(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    m = _manifest(root)
    gen = [i for i, k in enumerate(m["kernels"]) if k["library"] is None]
    a, b = m["kernels"][gen[0]], m["kernels"][gen[1]]
    a["sources"]["c"] = b["sources"]["c"]   # a listed, hashed file -- of another kernel
    _write_manifest(root, m)
    refused(root, f"kernel {a['name']} source 'c' is {b['sources']['c']!r}, not "
                  f"'kernels/{a['name']}.c'", fresh_cache)
    m = _manifest(pristine)
    m["kernels"][gen[0]]["sources"]["asm"] = "kernels/x.s"
    root = _copy(pristine, tmp_path / "b")
    _write_manifest(root, m)
    refused(root, "source", fresh_cache)


def test_duplicate_kernel_names(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    m = _manifest(root)
    gen = [i for i, k in enumerate(m["kernels"]) if k["library"] is None]
    # two generated kernels with sources for the same targets (a GEMM kernel has no CUDA)
    gen = next([i, j] for i in gen for j in gen if i < j
               and set(m["kernels"][i]["sources"]) == set(m["kernels"][j]["sources"]))
    m["kernels"][gen[1]]["name"] = m["kernels"][gen[0]]["name"]
    m["kernels"][gen[1]]["sources"] = dict(m["kernels"][gen[0]]["sources"])
    _write_manifest(root, m)
    refused(root, "kernel name .* appears twice", fresh_cache)


def test_build_library_refuses_a_name_that_is_not_an_identifier(sandbox):
    from workbench.runtime.cc import build_library
    box, cache = sandbox
    before = _snapshot(box, cache)
    for name in ("../../../x", "a/b", "", "x y", "1x"):
        with pytest.raises(WorkbenchError, match="not a C identifier"):
            build_library(name, "void f(void) {}\n")
    assert _snapshot(box, cache) == before
    assert not list(cache.rglob("*.so")) and not list(cache.rglob("*.c"))


# -- 10: what the manifest claims is checked against the graph ------------------------------
def _edit(root, fn):
    m = _manifest(root)
    fn(m)
    _write_manifest(root, m)


@pytest.mark.parametrize("field,edit,match", [
    ("input shape", lambda m: m["inputs"][0].__setitem__("shape", [2, 2]),
     r"input .* is float16\[2, 2\] in manifest.json, float16\[48, 160\] in the graph"),
    ("input dtype", lambda m: m["inputs"][0].__setitem__("dtype", "float32"),
     "input .* float32.* in the graph"),
    ("input name", lambda m: m["inputs"][0].__setitem__("name", "other"),
     "inputs .* do not match the graph"),
    ("inputs dropped", lambda m: m["inputs"].pop(), "inputs .* do not match the graph"),
    ("output shape", lambda m: m["outputs"][1].__setitem__("shape", [1]),
     r"output .* is float32\[1\] in manifest.json"),
    ("outputs swapped", lambda m: m["outputs"].reverse(), "outputs .* do not match the graph"),
])
def test_tensor_specs_match_the_graph(pristine, tmp_path, fresh_cache, field, edit, match):
    root = _copy(pristine, tmp_path / "a")
    _edit(root, edit)
    refused(root, match, fresh_cache)


def _param(m, kind):
    k = m["kernels"][_generated(m)]
    return k, next(p for p in k["params"] if (p["is_output"] if kind == "out"
                                               else not p["is_output"]))


@pytest.mark.parametrize("edit,match", [
    (lambda m: _param(m, "in")[1].__setitem__("numel", 4), "does not match the graph"),
    (lambda m: _param(m, "in")[1].__setitem__("dtype", "int8"), "does not match the graph"),
    (lambda m: _param(m, "in")[1].__setitem__("value", "nope"), "does not match the graph"),
    (lambda m: _param(m, "out")[1].__setitem__("is_output", False), "reads .* before"),
    (lambda m: _param(m, "in")[1].__setitem__("is_output", True), "writes"),
    (lambda m: _param(m, "in")[1].__setitem__("name", "a;b"), "is not a C identifier"),
])
def test_kernel_parameters_match_the_graph(pristine, tmp_path, fresh_cache, edit, match):
    root = _copy(pristine, tmp_path / "a")
    _edit(root, edit)
    refused(root, match, fresh_cache)


def _ws(m):
    k = next(k for k in m["kernels"] if any(p["workspace"] for p in k["params"]))
    return next(p for p in k["params"] if p["workspace"])


@pytest.mark.parametrize("how", ["split", "stitched"])
@pytest.mark.parametrize("numel", [2 ** 40, -1, 2 ** 70])
def test_workspace_sizes_within_limits(with_workspace, tmp_path, fresh_cache, how, numel):
    root = _copy(with_workspace[how], tmp_path / "a")
    _edit(root, lambda m: _ws(m).__setitem__("numel", numel))
    refused(root, "workspace", fresh_cache)


def test_stitched_workspace_holds_its_graph_value(with_workspace, tmp_path, fresh_cache):
    root = _copy(with_workspace["stitched"], tmp_path / "a")
    _edit(root, lambda m: _ws(m).__setitem__("numel", 1))
    refused(root, "workspace .* does not match the graph", fresh_cache)


def test_workspace_artifacts_load_and_run(with_workspace, fresh_cache):
    from workbench.runtime import random_inputs, run_reference
    g = wb.load("sample_graphs/layernorm.json")
    ins = random_inputs(g, 0)
    want = run_reference(g, ins)
    for path in with_workspace.values():
        out = load_artifact(path, backend="cpu")(**ins)
        for o in g.outputs:
            np.testing.assert_allclose(out[o], want[o], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("key,value", [
    ("grid", 0), ("grid", -4), ("grid", 2 ** 31), ("block", 0), ("block", 2048),
    ("block", -1), ("splits", 0), ("rows_per_block", -1), ("shared_bytes", 2 ** 40),
    ("shared_bytes", -1), ("mapping", "sideways"), ("grid", 1.5), ("cooperative", 1),
])
def test_launch_fields_within_cuda_limits(pristine, tmp_path, fresh_cache, key, value):
    root = _copy(pristine, tmp_path / "a")
    _edit(root, lambda m: m["kernels"][_generated(m)]["launch"].__setitem__(key, value))
    refused(root, f"launch {key}|launch.*{key}", fresh_cache)


def test_empty_kernel_list(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    _edit(root, lambda m: m.__setitem__("kernels", []))
    refused(root, "kernel", fresh_cache)

    def no_plan(m):          # no kernels, no groups, no sources: nothing computes y
        m["kernels"], m["groups"] = [], []
        for rel in [r for r in m["files"] if r.startswith("kernels/")]:
            del m["files"][rel]
    root = _copy(pristine, tmp_path / "b")
    shutil.rmtree(root / "kernels")
    _edit(root, no_plan)
    refused(root, "plan", fresh_cache)


# -- 12: hostile files -----------------------------------------------------------------------
class _FifoWatch:
    """Opens the FIFO's write end whenever a reader is waiting (so a reader that opens
    it cannot hang the test) and records that one did."""

    def __init__(self, path):
        self.path, self.opened, self.stop = path, False, threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.02)
                continue
            self.opened = True
            os.close(fd)
            time.sleep(0.02)

    def close(self):
        self.stop.set()
        self.t.join(5)


def _replace_with(root: Path, rel: str, make) -> None:
    """Replace a listed file with what make(path) creates; list it as empty."""
    f = root / rel
    f.unlink()
    make(f)
    m = _manifest(root)
    m["files"][rel] = {"sha256": sha256(b""), "size": os.lstat(f).st_size}
    _write_manifest(root, m)


def _first_source(root):
    m = _manifest(root)
    return m["kernels"][_generated(m)]["sources"]["c"]


def test_fifo_listed_in_the_manifest(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    rel = _first_source(root)
    _replace_with(root, rel, os.mkfifo)
    watch = _FifoWatch(root / rel)
    try:
        refused(root, f"{rel} is not a regular file", fresh_cache)
    finally:
        watch.close()
    assert not watch.opened, "the loader opened the FIFO"


def test_fifo_as_the_manifest_or_the_artifact(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    (root / "manifest.json").unlink()
    os.mkfifo(root / "manifest.json")
    w1 = _FifoWatch(root / "manifest.json")
    fifo = tmp_path / "b.zip"
    os.mkfifo(fifo)
    w2 = _FifoWatch(fifo)
    try:
        refused(root, "manifest.json is not a regular file", fresh_cache)
        refused(fifo, "not a regular file", fresh_cache)
    finally:
        w1.close()
        w2.close()
    assert not w1.opened and not w2.opened


def test_symlink_listed_in_the_manifest(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    rel = _first_source(root)
    outside = tmp_path / "outside.c"
    shutil.copy(root / rel, outside)       # the same bytes, outside the artifact
    (root / rel).unlink()
    (root / rel).symlink_to(outside)
    refused(root, f"{rel} is not a regular file", fresh_cache)
    # a symlinked directory: its files are not the artifact's
    root = _copy(pristine, tmp_path / "b")
    shutil.move(root / "kernels", tmp_path / "kernels_elsewhere")
    (root / "kernels").symlink_to(tmp_path / "kernels_elsewhere")
    refused(root, "kernels is not a regular file", fresh_cache)


def test_symlinked_manifest(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    shutil.move(root / "manifest.json", tmp_path / "m.json")
    (root / "manifest.json").symlink_to(tmp_path / "m.json")
    refused(root, "manifest.json is not a regular file", fresh_cache)


def test_device_file_listed_in_the_manifest(pristine, tmp_path, fresh_cache):
    root = _copy(pristine, tmp_path / "a")
    rel = _first_source(root)
    try:
        _replace_with(root, rel, lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3)))
    except PermissionError:
        pytest.skip("making a device file needs root")
    refused(root, f"{rel} is not a regular file", fresh_cache)


def _npy(header: bytes, data: bytes = b"", version=(2, 0)) -> bytes:
    import struct
    pad = (-(10 + len(header) + 1)) % 64
    header = header + b" " * pad + b"\n"
    size = struct.pack("<I", len(header)) if version[0] >= 2 else struct.pack("<H", len(header))
    return b"\x93NUMPY" + bytes(version) + size + header + data


def _with_npz(root: Path, entries: dict[str, bytes], compression=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for n, data in entries.items():
            z.writestr(n, data)
    (root / "constants.npz").write_bytes(buf.getvalue())


def _npz_entries(root: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(root / "constants.npz") as z:
        return {n: z.read(n) for n in z.namelist()}


def _huge_header(root):
    e = _npz_entries(root)
    e["c0.npy"] = _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (96,), "
                       + b" " * 1_000_000 + b"}", b"\0" * 384)
    _with_npz(root, e)


def _huge_shape(root):
    e = _npz_entries(root)
    e["c0.npy"] = _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }",
                       b"\0" * 384, (1, 0))
    _with_npz(root, e)


def _object_npz(root):
    e = _npz_entries(root)
    e["c0.npy"] = _npy(b"{'descr': '|O', 'fortran_order': False, 'shape': (96,), }",
                       b"\0" * 768, (1, 0))
    _with_npz(root, e)


def _npz_bomb(root):
    e = _npz_entries(root)
    e["c9.npy"] = _npy(b"{'descr': '<f4', 'fortran_order': False, 'shape': (4194304,), }",
                       b"\0" * (16 << 20), (1, 0))
    _with_npz(root, e, zipfile.ZIP_DEFLATED)


def _not_an_npz(root):
    (root / "constants.npz").write_bytes(b"PK\x03\x04 not really")


# -- the hostile collection ------------------------------------------------------------------
def _raw_manifest(text):
    def make(root):
        (root / "manifest.json").write_text(text)
    return make


def _manifest_edit(fn, redigest=True):
    def make(root):
        m = _manifest(root)
        fn(m)
        _write_manifest(root, m, redigest)
    return make


def _manifest_text_edit(fn):
    def make(root):
        (root / "manifest.json").write_text(fn((root / "manifest.json").read_text()))
    return make


def _files_then_redigest(fn):
    def make(root):
        fn(root)
        m = _manifest(root)
        for rel in m["files"]:
            p = root / rel
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                m["files"][rel] = {"sha256": sha256(data), "size": len(data)}
        _write_manifest(root, m)
    return make


def _nested(depth):
    return json.loads("[" * depth + "]" * depth) if depth < 500 else None


def _deep_text(m_text, depth=200_000):
    return m_text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"


def _set(path, value):
    """An edit setting the manifest field at path (keys and indices) to value."""
    def fn(m):
        d = m
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value
    return fn


def _nan_manifest(root):
    m = _manifest(root)
    m["kernels"][_generated(m)]["shared_bytes"] = float("nan")
    (root / "manifest.json").write_text(json.dumps(m))       # NaN, digest as it was


def _nan_digested(root):
    m = _manifest(root)
    m.pop("digest")
    m["measurement"] = {"latency_ms": 1.0}
    body = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    body = body.replace('"latency_ms":1.0', '"latency_ms":NaN')
    digest = sha256(body.encode())         # what a NaN-tolerant digest would be
    (root / "manifest.json").write_text(body[:-1] + f',"digest":"{digest}"}}')


def _listed_extra_file(root):
    (root / "notes.txt").write_text("hi")
    m = _manifest(root)
    m["files"]["notes.txt"] = {}
    _write_manifest(root, m)


def _leaves(d, path=()):
    """Every field of a manifest (the first element of each list) with its path."""
    if isinstance(d, dict):
        for k, v in d.items():
            if path == () and k in ("digest",):
                continue
            yield from _leaves(v, path + (k,))
        if path:
            yield path, d
    elif isinstance(d, list):
        # every kernel (a library call and generated ones); the first of other lists
        for i, x in enumerate(d if path == ("kernels",) else d[:1]):
            yield from _leaves(x, path + (i,))
        yield path, d
    else:
        yield path, d


def _wrong_type(v):
    if isinstance(v, bool):
        return "true"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return [v]
    if isinstance(v, str):
        return 7
    if v is None:
        return [1]
    if isinstance(v, list):
        return {"0": 1}
    return ["x"]


def _zip_dup(entry):
    def make(root, tmp):
        z = tmp / "dup.zip"
        with zipfile.ZipFile(z, "w") as zf:
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    zf.writestr(p.relative_to(root).as_posix(), p.read_bytes())
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zf.writestr(entry, b'{"format": "other"}' if entry == "manifest.json"
                            else b"int evil;\n")
        return z
    return make


def _zip_of(fn):
    def make(root, tmp):
        fn(root)
        z = tmp / "a.zip"
        with zipfile.ZipFile(z, "w") as zf:
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    zf.writestr(p.relative_to(root).as_posix(), p.read_bytes())
        return z
    return make


def hostile_cases(pristine_manifest: dict) -> dict:
    """name -> make(root) (edits the copy in place) or make(root, tmp) -> path to load."""
    m0 = pristine_manifest
    gen = _generated(m0)
    cases = {
        "manifest not JSON": _raw_manifest("{not json"),
        "manifest empty": _raw_manifest(""),
        "manifest a JSON list": _raw_manifest("[1, 2, 3]"),
        "manifest a JSON string": _raw_manifest('"fusion-workbench.artifact"'),
        "manifest not UTF-8": lambda root: (root / "manifest.json").write_bytes(b"\xff\xfe{"),
        "NaN in manifest": _nan_manifest,
        "NaN with a NaN-tolerant digest": _nan_digested,
        "Infinity in manifest": _manifest_text_edit(
            lambda t: t.replace('"shared_bytes": ', '"shared_bytes": Infinity, "x": ', 1)),
        "1e999 in manifest": _manifest_text_edit(
            lambda t: t.replace('"shared_bytes": ', '"shared_bytes": 1e999, "x": ', 1)),
        "a 100000-digit number": _manifest_text_edit(
            lambda t: t.replace('"shared_bytes": ', '"shared_bytes": ' + "9" * 100000
                                + ', "x": ', 1)),
        "deeply nested manifest": _manifest_text_edit(_deep_text),
        "nested 300 deep, digested": _manifest_edit(_set(("measurement",),
                                                         {"x": _nested(300)})),
        "duplicate keys in manifest": _manifest_text_edit(
            lambda t: t.replace('"planner": ', '"planner": "x", "planner": ', 1)),
        "format only": _raw_manifest(json.dumps({"format": "fusion-workbench.artifact",
                                                 "version": 1})),
        "version as string": _manifest_edit(_set(("version",), "1")),
        "version 0": _manifest_edit(_set(("version",), 0)),
        "version huge": _manifest_edit(_set(("version",), 2 ** 70)),
        "version true": _manifest_edit(_set(("version",), True)),
        "digest missing": _manifest_edit(lambda m: m.pop("digest"), redigest=False),
        "digest wrong": _manifest_edit(_set(("digest",), "0" * 64), redigest=False),
        "extra top-level key": _manifest_edit(_set(("extra",), 1)),
        "extra kernel key": _manifest_edit(_set(("kernels", gen, "extra"), 1)),
        "extra param key": _manifest_edit(_set(("kernels", gen, "params", 0, "extra"), 1)),
        "extra file-entry key": _manifest_edit(_set(("files", "graph.json", "extra"), 1)),
        "extra input key": _manifest_edit(_set(("inputs", 0, "extra"), 1)),
        "unlisted file": _files_then_redigest(
            lambda root: (root / "kernels" / "k99_evil.c").write_text("int x;\n")),
        "listed extra file": _files_then_redigest(_listed_extra_file),
        "missing graph.json": lambda root: (root / "graph.json").unlink(),
        "missing constants.npz": lambda root: (root / "constants.npz").unlink(),
        "missing kernel source": lambda root: (root / _first_source(root)).unlink(),
        "missing kernels dir": lambda root: shutil.rmtree(root / "kernels"),
        "kernel name traversal": _manifest_edit(_set(("kernels", gen, "name"),
                                                     "../../../../x")),
        "kernel name absolute": _manifest_edit(_set(("kernels", gen, "name"), "/tmp/x")),
        "source path of another kernel": _manifest_edit(
            lambda m: m["kernels"][gen]["sources"].__setitem__(
                "c", next(k["sources"]["c"] for k in m["kernels"][gen + 1:]
                          if k["library"] is None))),
        "source path traversal": _manifest_edit(
            _set(("kernels", gen, "sources", "c"), "../../x.c")),
        "library kernel with sources": _manifest_edit(
            lambda m: m["kernels"][0].__setitem__("sources", dict(m["kernels"][gen]["sources"]))),
        "library op swapped": _manifest_edit(_set(("kernels", 0, "library", "op"), "exp")),
        "library op unknown": _manifest_edit(_set(("kernels", 0, "library", "op"), "evil")),
        "library attrs changed": _manifest_edit(
            _set(("kernels", 0, "library", "attrs"), {"transpose_a": True})),
        "library inputs swapped": _manifest_edit(
            lambda m: m["kernels"][0]["library"]["inputs"].reverse()),
        "input shape [2, 2]": _manifest_edit(_set(("inputs", 0, "shape"), [2, 2])),
        "input shape negative": _manifest_edit(_set(("inputs", 0, "shape"), [-48, -160])),
        "output dtype": _manifest_edit(_set(("outputs", 0, "dtype"), "int8")),
        "dtype unknown": _manifest_edit(_set(("inputs", 0, "dtype"), "float128")),
        "param numel huge": _manifest_edit(_set(("kernels", gen, "params", 0, "numel"), 2 ** 70)),
        "param numel negative": _manifest_edit(_set(("kernels", gen, "params", 0, "numel"), -1)),
        "param dtype unknown": _manifest_edit(_set(("kernels", gen, "params", 0, "dtype"), "q")),
        "param workspace 2^40": _manifest_edit(
            lambda m: m["kernels"][gen]["params"][0].update(workspace=True, numel=2 ** 40)),
        "grid 2^40": _manifest_edit(_set(("kernels", gen, "launch", "grid"), 2 ** 40)),
        "block 0": _manifest_edit(_set(("kernels", gen, "launch", "block"), 0)),
        "shared bytes huge": _manifest_edit(_set(("kernels", gen, "shared_bytes"), 2 ** 40)),
        "scratch huge": _manifest_edit(
            lambda m: [x.__setitem__("numel", 2 ** 50) for x in m["kernels"][gen]["scratch"]]
            or m["kernels"][gen]["scratch"].append(
                {"name": "s", "value": "v", "dtype": "float32", "numel": 2 ** 50, "rows": 1,
                 "space": "shared", "slots": 0, "source": None})),
        "fields unknown": _manifest_edit(_set(("kernels", gen, "fields", "evil"), 1)),
        "fields huge": _manifest_edit(_set(("kernels", gen, "fields", "flops"), 2 ** 70)),
        "empty kernel list": _manifest_edit(_set(("kernels",), [])),
        "empty kernel and group lists": _manifest_edit(
            lambda m: (m.__setitem__("kernels", []), m.__setitem__("groups", []))),
        "kernels out of order": _manifest_edit(lambda m: m["kernels"].reverse()),
        "groups out of order": _manifest_edit(lambda m: m["groups"].reverse()),
        "group names an unknown node": _manifest_edit(
            lambda m: m["groups"][0]["nodes"].append("n999")),
        "node in two groups": _manifest_edit(
            lambda m: m["groups"][1]["nodes"].append(m["groups"][0]["nodes"][0])),
        "kernel of an unknown group": _manifest_edit(_set(("kernels", gen, "group"), "zz")),
        "files a list": _manifest_edit(_set(("files",), [])),
        "file size huge": _manifest_edit(_set(("files", "graph.json", "size"), 2 ** 70)),
        "file size negative": _manifest_edit(_set(("files", "graph.json", "size"), -1)),
        "file sha256 not hex": _manifest_edit(_set(("files", "graph.json", "sha256"), "zz")),
        "huge npz header": _files_then_redigest(_huge_header),
        "npz header claims 2^40 elements": _files_then_redigest(_huge_shape),
        "npz object array": _files_then_redigest(_object_npz),
        "npz deflate bomb": _files_then_redigest(_npz_bomb),
        "npz not a zip": _files_then_redigest(_not_an_npz),
        "graph.json a list": _files_then_redigest(
            lambda root: (root / "graph.json").write_text("[]")),
        "graph.json deeply nested": _files_then_redigest(
            lambda root: (root / "graph.json").write_text("[" * 100000 + "]" * 100000)),
        "graph.json NaN": _files_then_redigest(
            lambda root: (root / "graph.json").write_text(
                (root / "graph.json").read_text().replace('"name": ', '"nan": NaN, "name": ',
                                                          1))),
        "graph.json wrong types": _files_then_redigest(
            lambda root: (root / "graph.json").write_text(json.dumps(
                {**json.loads((root / "graph.json").read_text()), "nodes": {"a": 1}}))),
        "graph.json node attrs wrong": _files_then_redigest(
            lambda root: (root / "graph.json").write_text(json.dumps(_bad_attrs(
                json.loads((root / "graph.json").read_text()))))),
        "kernel source does not compile": _files_then_redigest(
            lambda root: (root / _first_source(root)).write_text("this is not C\n")),
        "zip with a duplicate manifest": _zip_dup("manifest.json"),
        "zip with a duplicate kernel": lambda root, tmp: _zip_dup(_first_source(root))(root, tmp),
        "zip of a tampered tree": _zip_of(_manifest_edit(
            _set(("kernels", gen, "name"), "../../x"))),
        "zip truncated": lambda root, tmp: _truncated_zip(root, tmp),
    }
    # wrong types in every field, huge and negative numbers
    for path, v in _leaves(m0):
        if path and path[0] == "digest":
            continue
        cases[f"wrong type at {path}"] = _manifest_edit(_set(path, _wrong_type(v)))
        if isinstance(v, int) and not isinstance(v, bool):
            cases[f"2^70 at {path}"] = _manifest_edit(_set(path, 2 ** 70))
            if v != 0:      # a 0 is a legal value where -1 would also be refused
                cases[f"-1 at {path}"] = _manifest_edit(_set(path, -1))
    return cases


def _bad_attrs(d):
    for n in d["nodes"]:
        if n.get("attrs"):
            n["attrs"] = {k: {"bad": [None]} for k in n["attrs"]}
            break
    return d


def _truncated_zip(root, tmp):
    z = tmp / "t.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                zf.writestr(p.relative_to(root).as_posix(), p.read_bytes())
    data = z.read_bytes()
    z.write_bytes(data[: len(data) // 2] + data[-200:])
    return z


@pytest.mark.slow   # (every hostile artifact built and loaded: tens of seconds)
def test_every_hostile_artifact_raises_one_artifact_error(pristine, tmp_path, monkeypatch):
    """Each hostile artifact raises ArtifactError (one line) from load_artifact, and
    nothing is written anywhere but the temporary compile cache."""
    box = tmp_path / "box"
    cache = box / "l1" / "l2" / "l3" / "cache"
    cache.mkdir(parents=True)
    monkeypatch.setenv("WORKBENCH_CACHE", str(cache))
    every = hostile_cases(_manifest(pristine))
    assert len(every) > 150
    # a seeded half in CI (tests/budget.py; WB_FULL_TESTS=1: every one)
    cases = {n: every[n] for n in sample(every, 80, "hostile-artifacts")}
    failures = []
    for i, (name, make) in enumerate(cases.items()):
        case_dir = box / f"c{i}"
        case_dir.mkdir()
        root = _copy(pristine, case_dir / "a")
        try:
            made = make(root, case_dir) if make.__code__.co_argcount == 2 else make(root)
            path = made if isinstance(made, Path) else root
        except Exception as e:        # a broken case is a broken test
            raise AssertionError(f"case {name!r} could not be built: {e!r}") from e
        before = _snapshot(tmp_path, cache)
        try:
            load_artifact(path, backend="cpu")
        except ArtifactError as e:
            msg = str(e)
            if "\n" in msg or not msg.strip():
                failures.append(f"{name}: message is not one line: {msg[:300]!r}")
        except BaseException as e:   # noqa: B036 -- anything else is the bug
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        else:
            failures.append(f"{name}: loaded")
        after = _snapshot(tmp_path, cache)
        if after != before:
            changed = sorted(set(after.items()) ^ set(before.items()))[:3]
            failures.append(f"{name}: wrote outside the cache: {changed}")
    assert not failures, f"{len(failures)} of {len(cases)} hostile artifacts:\n" + "\n".join(
        failures)


def test_hostile_collection_loads_when_pristine(pristine, fresh_cache):
    """(the collection's control: the unedited copy loads)"""
    load_artifact(pristine, backend="cpu")


# -- --force replaces only an artifact ----------------------------------------------------------
@pytest.fixture(scope="module")
def session(art):
    s = Session(art.small_graph(), backend="cpu")
    s.auto("rules")
    return s


def test_force_replaces_only_an_artifact(session, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(ArtifactError, match=f"{home} .*not a Fusion Workbench artifact"):
        session.export(home, force=True)
    assert (home / "thesis.tex").read_text() == "years of work"
    # a directory with a manifest of another format
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text('{"format": "something.else"}')
    with pytest.raises(ArtifactError, match=f"{other} .*not a Fusion Workbench artifact"):
        session.export(other, force=True)
    assert (other / "manifest.json").exists()
    # an artifact directory someone added a file to
    a = session.export(tmp_path / "a")
    (a / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactError, match=f"{a} is not a .*artifact .*holds notes.txt"):
        session.export(a, force=True)
    assert (a / "notes.txt").read_text() == "mine"
    (a / "notes.txt").unlink()
    session.export(a, force=True)              # an artifact: replaced
    assert (a / "manifest.json").exists()
    # files: only a zip artifact is replaced
    for name, data in [("notes.zip", b"not yours"), ("notes.txt", b"not yours")]:
        f = tmp_path / name
        f.write_bytes(data)
        with pytest.raises(ArtifactError, match=f"{f} .*not a Fusion Workbench artifact"):
            session.export(f, force=True)
        assert f.read_bytes() == data
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("photo.jpg", b"\xff\xd8")
    with pytest.raises(ArtifactError, match=f"{foreign} .*not a Fusion Workbench artifact"):
        session.export(foreign, force=True)
    z = session.export(tmp_path / "m.zip")
    session.export(z, force=True)
    assert load_artifact(z).manifest.kernels
    # a symbolic link is not replaced, nor what it points to
    link = tmp_path / "link"
    link.symlink_to(home)
    with pytest.raises(ArtifactError, match=f"{link} .*symbolic link"):
        session.export(link, force=True)
    assert (home / "thesis.tex").exists()


def test_cli_force_refuses_a_directory_that_is_not_an_artifact(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "export",
                        "sample_graphs/layernorm.json", "--backend", "cpu", "-o", str(d),
                        "--force", "-q"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and str(d) in r.stderr and "not a Fusion Workbench artifact" \
        in r.stderr, r.stderr
    assert (d / "keep.txt").read_text() == "mine"


def test_the_manifest_checker_knows_every_kir_field():
    """A field the schedules add to kir.Buffer / Scratch / Kernel travels in the manifest
    (with a default, checked by its type); one without a default must be taught to the
    checker, or every artifact that has it would be refused."""
    from dataclasses import MISSING, fields

    import workbench.artifact.manifest_check as mf
    from workbench.codegen.kir import Buffer, Scratch
    from workbench.codegen.kernel import Kernel
    for cls, required in ((Buffer, mf._BUFFER_REQUIRED), (Scratch, mf._SCRATCH_REQUIRED)):
        assert {f.name for f in fields(cls) if f.default is MISSING
                and f.default_factory is MISSING} <= set(required), cls
    scalars = {f.name for f in fields(Kernel)} - mf._KERNEL_STRUCTURED
    assert scalars == set(mf._KERNEL_SCALARS)
    from workbench.artifact.export import _STRUCTURED
    assert _STRUCTURED == mf._KERNEL_STRUCTURED


def _home(m):
    """The first scratch row kept in an output's own row (a CPU softmax/LayerNorm row)."""
    return next(x for k in m["kernels"] for x in k["scratch"] if x.get("home"))


@pytest.mark.parametrize("edit,match", [
    (lambda m: _home(m)["home"].__setitem__("name", "elsewhere"),
     r"home 'elsewhere' is not one of the kernel's parameters"),
    (lambda m: _home(m)["home"].__setitem__("is_output", False), "home is not an output"),
    (lambda m: _home(m).__setitem__("home", {"name": "x"}), "home"),
])
def test_a_rows_home_is_one_of_the_kernels_outputs(pristine, tmp_path, fresh_cache, edit,
                                                   match):
    """A row kept in an output's row (rows44) names that output: any other buffer, or
    one that is not an output, is refused before anything is compiled."""
    assert _home(_manifest(pristine))          # (the pristine artifact has one)
    root = _copy(pristine, tmp_path / "a")
    _edit(root, edit)
    refused(root, match, fresh_cache)
