"""The CLI as a user runs it: a real subprocess, output rows, exit codes."""
import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "workbench.cli"]


# slow: the CLI tests beyond the fast tier's few (each a subprocess or two of seconds)
SUBPROCESSES = pytest.mark.slow


def run(*args):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=600)


def test_optimize_prints_one_row_per_step(tmp_path):
    out = tmp_path / "r.json"
    r = run("optimize", "sample_graphs/layernorm.json", "--backend", "cpu", "--repeats", "3",
            "--json", str(out))
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("layernorm.json ")]
    assert len(lines) == 2 and " none " in lines[0] and " rules " in lines[1]
    rows = json.loads(out.read_text())
    assert [row["kernels"] for row in rows] == [9, 1]
    assert all(row["ok"] for row in rows)
    assert rows[1]["bytes_moved_MB"] * 2 < rows[0]["bytes_moved_MB"]


@SUBPROCESSES
def test_optimize_counters_column_is_nan_without_a_gpu(tmp_path):
    out = tmp_path / "r.json"
    r = run("optimize", "sample_graphs/softmax.json", "--backend", "cpu", "--repeats", "2",
            "--counters", "--json", str(out))
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "MB moved  DRAM MB" in head
    lines = [l for l in r.stdout.splitlines() if l.startswith("softmax.json ")]
    assert len(lines) == 2 and all(" nan " in l for l in lines)
    assert "DRAM MB not measured: backend cpu" in r.stderr
    rows = json.loads(out.read_text())
    assert all(row["dram_source"].startswith("unavailable") for row in rows)
    plain = run("optimize", "sample_graphs/softmax.json", "--backend", "cpu", "--repeats", "1")
    assert "DRAM MB" not in plain.stdout and "DRAM" not in plain.stderr


@pytest.mark.parametrize("content,match", [(None, "file not found")] + [
    pytest.param(*case, marks=SUBPROCESSES) for case in [
        ("{not json", "not valid JSON"),
        ('{"format": "workbench.graph", "inputs": {"x": {"shape": [2, 3]}}, "nodes": '
         '[{"op": "add", "inputs": ["x", "y"], "outputs": ["z"]}], "outputs": ["z"]}',
         "undefined value 'y'"),
        ('{"format": "workbench.graph", "inputs": {"x": {"shape": [2, 3]}, "y": {"shape": [4]}},'
         ' "nodes": [{"op": "add", "inputs": ["x", "y"], "outputs": ["z"]}], "outputs": ["z"]}',
         "do not broadcast"),
        ('{"format": "workbench.graph", "inputs": {"x": {"shape": [2]}}, "nodes": '
         '[{"op": "frobnicate", "inputs": ["x"], "outputs": ["z"]}], "outputs": ["z"]}',
         "unknown op 'frobnicate'")]])
def test_bad_input_one_line_exit_2(tmp_path, content, match):
    p = tmp_path / "g.json"
    if content is not None:
        p.write_text(content)
    before = p.read_text() if content is not None else None
    r = run("optimize", str(p), "--backend", "cpu")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and err[0].startswith("error: ") and match in err[0], r.stderr
    if before is not None:
        assert p.read_text() == before        # the file is left as it was


@SUBPROCESSES
def test_malformed_onnx_exit_2(tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(b"\x08\x07garbage-that-is-not-a-model")
    r = run("optimize", str(p), "--backend", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: ")


@SUBPROCESSES
def test_show_plans_for_the_named_device():
    r = run("show", "sample_graphs/cross_entropy.json", "plan", "--planner", "stitch",
            "--device", "a100")
    assert r.returncode == 0 and "NVIDIA A100" in r.stdout and "stitched" in r.stdout
    r = run("show", "sample_graphs/softmax.json", "plan", "--device", "tpu")
    assert r.returncode == 2 and "tpu" in r.stderr


@SUBPROCESSES
def test_show_prints_plan_and_sources():
    r = run("show", "sample_graphs/softmax.json", "plan")
    assert r.returncode == 0 and "row_reduce" in r.stdout
    r = run("show", "sample_graphs/softmax.json", "cuda")
    assert "__global__" in r.stdout


def test_a_reader_that_leaves_early_is_not_an_internal_error():
    """``workbench show ... cuda | head``: the pipe closes under the CLI's prints; it
    stops quietly, as other tools do (exit 141, SIGPIPE's), with nothing on stderr."""
    p = subprocess.Popen(CLI + ["show", "sample_graphs/bert_chain.json", "cuda", "--planner",
                                "stitch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 141 and err == "", err
