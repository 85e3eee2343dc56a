"""One error family at every boundary: what the red team's careless user passed to the
Python API and the CLI is refused with one WorkbenchError line (exit 2 from the CLI)
before anything runs -- each defect it found pinned here -- and a bounded, seeded
sample of junk calls to every face (workbench/testing/fuzz/api.py) raises nothing
else."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.errors import OutOfMemory, WorkbenchError
from workbench.testing.fuzz.api import call_failures

SAMPLE = str(Path(__file__).resolve().parent.parent / "sample_graphs" / "layernorm.json")


@pytest.fixture(scope="module")
def session():
    s = wb.Session(SAMPLE, backend="cpu")
    s.auto("rules")
    return s


@pytest.mark.parametrize("call, match", [
    (lambda s: s.measure("n0"), "plan must be a Plan of this session's graph"),
    (lambda s: s.measure(warmup=2 ** 70), "warmup must be an integer from 0 to 1000000"),
    (lambda s: s.measure(repeats=0), "repeats must be an integer from 1"),
    (lambda s: s.export("a\x00b"), "holds no NUL byte"),
    (lambda s: s.export(3), "export path must be a path"),
    (lambda s: s.fuse(None), "refs must be a list of node or kernel ids"),
    (lambda s: s.fuse(["n0", 3]), "each of refs must be a node or kernel id"),
    (lambda s: s.split(None), "ref must be a node or kernel id"),
    (lambda s: s.kernel(["n0"]), "ref must be a node or kernel id"),
    (lambda s: s.run([1, 2]), "inputs must be a dict"),
    (lambda s: s.source("n0", None), "unknown source target"),
    (lambda s: s.table(repeats=-1), "repeats must be an integer"),
    (lambda s: s.table(nope=1), "table takes measure, warmup, repeats and counters"),
    (lambda s: s.tune(repeats=2 ** 40), "repeats must be an integer from 1"),
])
def test_a_wrong_argument_is_one_workbench_error(session, call, match):
    before = (list(session.history), session.position)
    with pytest.raises(WorkbenchError, match=match) as e:
        call(session)
    assert "\n" not in str(e.value)
    assert (list(session.history), session.position) == before


def test_a_value_too_large_for_memory_is_one_line_not_a_memory_error():
    b = wb.GraphBuilder("big")
    x = b.input("x", (2 ** 34,))
    b.output(b.exp(x), "y")
    s = wb.Session(b.build(), backend="cpu")
    with pytest.raises(OutOfMemory, match="out of memory: graph 'big' holds 128.0 GiB"):
        s.measure()


def test_the_app_refuses_junk_in_its_status_line():
    pytest.importorskip("ipywidgets")
    from workbench.ui.app import WorkbenchApp
    app = WorkbenchApp(wb.Session(SAMPLE, backend="cpu"))
    with pytest.raises(WorkbenchError, match="query must be a name"):
        app.select(None)
    with pytest.raises(WorkbenchError, match="selected must be a list of node"):
        app.selected = 5
    assert app.fuse(None) is None                       # (nothing selected: refused)
    assert app.export("a\x00b") is None and "NUL byte" in app.message
    assert app.set_matmul_precision(["tf32"]) is None
    assert "matmul_precision must be one of" in app.message


def test_export_never_writes_what_its_loader_refuses(tmp_path):
    b = wb.GraphBuilder("long")
    x = b.input("x" * 70000, (4, 4))
    b.output(b.exp(x), "y")
    s = wb.Session(b.build(), backend="cpu")
    with pytest.raises(WorkbenchError, match="load_artifact would refuse it .* 70000 "
                                             "characters long .*nothing was written"):
        s.export(tmp_path / "a")
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []


def _cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *argv],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


SLOW = pytest.mark.slow      # (a subprocess each: the fast tier keeps one of a kind)


@pytest.mark.parametrize("argv, match", [
    (["--json", "/nonexistent/dir/rows.json"], "no directory /nonexistent/dir"),
    pytest.param(["--json", "/tmp"], "is not a regular file", marks=SLOW),
    pytest.param(["--json", "/dev/full"], "is not a regular file", marks=SLOW),
    (["--repeats", "0"], "'0' is not an integer from 1 to 1000000"),
    pytest.param(["--repeats", "-1"], "not an integer from 1", marks=SLOW),
    pytest.param(["--warmup", "-5"], "'-5' is not an integer from 0", marks=SLOW),
    pytest.param(["--seed", "9" * 200], "is not an integer from 0", marks=SLOW),
])
def test_cli_counts_and_paths_are_checked_before_the_job(argv, match):
    r = _cli("optimize", SAMPLE, "--backend", "cpu", *argv)
    assert r.returncode == 2 and match in r.stderr, r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1   # nothing ran


@pytest.mark.parametrize("text, match", [
    ('{"format": "workbench.graph", "format": "x"}', "key 'format' appears twice"),
    ('{"format": "workbench.graph", "version": ' + "9" * 200_000 + "}",
     "an integer of 200000 digits"),
    (json.dumps({"format": "workbench.graph", "version": 1, "name": "e",
                 "inputs": {"x": {"shape": [0], "dtype": "float32"}},
                 "nodes": [{"op": "reshape", "inputs": ["x"], "outputs": ["y"],
                            "attrs": {"shape": [2 ** 33, 2 ** 33, 0]}}],
                 "outputs": ["y"]}), "other extents multiply to"),
])
def test_graph_files_that_were_internal_errors_are_user_errors(tmp_path, text, match):
    f = tmp_path / "g.json"
    f.write_text(text)
    r = _cli("optimize", str(f), "--backend", "cpu")
    assert r.returncode == 2 and match in r.stderr, r.stderr
    with pytest.raises(WorkbenchError, match=match):
        wb.load(f)


@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=SLOW) for s in (1, 2, 3))])
def test_junk_calls_to_every_face_raise_only_workbench_errors(session, tmp_path, seed,
                                                              monkeypatch):
    """The CI's bounded sample of the API fuzzer (workbench/testing/fuzz/api.py; a
    longer run is call_failures over more seeds and rounds)."""
    pytest.importorskip("ipywidgets")
    from workbench.ui.app import WorkbenchApp
    monkeypatch.chdir(tmp_path)       # (junk paths are relative: written here, if at all)
    art = wb.load_artifact(session.export(tmp_path / "art"), backend="cpu")
    app = WorkbenchApp(wb.Session(SAMPLE, backend="cpu"))
    fails = call_failures(seed, 12, wb.Session(SAMPLE, backend="cpu"), app, art)
    assert not fails, "\n".join(f"{f.target}.{f.call}: {f.error}" for f in fails[:10])
