"""Only WorkbenchError escapes a public entry point, whatever the input.

A corpus of malformed inputs (files a hostile user could hand over, and wrong Python
types) drives every public way in: ``workbench.load``, ``load_json``/``from_json``,
``load_onnx``, ``Session(...)``, ``onnx_backend.prepare`` and the CLI's ``optimize``,
``show`` and ``export`` (as a subprocess: exit code 2, one ``error:`` line on stderr,
nothing on stdout, nothing written). Every message is one line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import workbench as wb  # noqa: E402
from workbench import onnx_backend  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.frontends import load, load_onnx  # noqa: E402
from workbench.ir import from_json, load_json  # noqa: E402

CLI = [sys.executable, "-m", "workbench.cli"]
ROOT = Path(__file__).resolve().parents[1]
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _doc(nodes, outputs, inputs=None, constants=None, **extra):
    d = {"format": "workbench.graph", "version": 1, "name": "bad",
         "inputs": {"x": {"shape": [4, 8]}} if inputs is None else inputs,
         "constants": constants or {}, "nodes": nodes, "outputs": outputs}
    d.update(extra)
    return json.dumps(d, ensure_ascii=False)


EXP = [{"op": "exp", "inputs": ["x"], "outputs": ["y"]}]


def _node(op, ins, outs, **attrs):
    return {"op": op, "inputs": ins, "outputs": outs, "attrs": attrs}


# name -> file content (str: written as UTF-8, bytes: as is); the suffix is in the name
JSON_FILES = {
    "no_nodes.json": _doc([], ["x"]),
    "output_is_input.json": _doc(EXP, ["y", "x"]),
    "negative_dim.json": _doc(EXP, ["y"], inputs={"x": {"shape": [-4, 8]}}),
    "add_one_input.json": _doc([_node("add", ["x"], ["y"])], ["y"]),
    "non_utf8.json": _doc(EXP, ["y"], description="caf\u00e9").encode("latin-1"),
    "deeply_nested.json": "[" * 100_000 + "]" * 100_000,
    "constant_2_40.json": _doc([_node("exp", ["c"], ["y"])], ["y"], inputs={},
                               constants={"c": {"shape": [2 ** 40], "init": {"fill": 1.0}}}),
    "input_2_40.json": _doc(EXP, ["y"], inputs={"x": {"shape": [2 ** 20, 2 ** 20]}}),
    "concat_axis_7.json": _doc([_node("concat", ["x", "x"], ["y"], axis=7)], ["y"]),
    "gather_axis_9.json": _doc([_node("gather", ["x", "i"], ["y"], axis=9)], ["y"],
                               inputs={"x": {"shape": [4, 8]},
                                       "i": {"shape": [2], "dtype": "int64"}}),
    "reduce_max_empty.json": _doc([_node("reduce_max", ["x"], ["y"], axes=[1])], ["y"],
                                  inputs={"x": {"shape": [4, 0]}}),
    "dim_4_5.json": _doc(EXP, ["y"], inputs={"x": {"shape": [4.5, 8]}}),
    "dim_true.json": _doc(EXP, ["y"], inputs={"x": {"shape": [True, 8]}}),
    "keepdims_no.json": _doc([_node("reduce_sum", ["x"], ["y"], axes=[1], keepdims="no")],
                             ["y"]),
    "split_oob.json": _doc([_node("split", ["x"], ["y", "z"], axis=1,
                                  sizes=[4194304, -4194296])], ["y", "z"]),
    "split_negative.json": _doc([_node("split", ["x"], ["y", "z"], axis=1, sizes=[-1, 9])],
                                ["y", "z"]),
    "slice_axis_5.json": _doc([_node("slice", ["x"], ["y"], starts=[0], ends=[1], axes=[5])],
                              ["y"]),
    "transpose_dup.json": _doc([_node("transpose", ["x"], ["y"], perm=[0, 0])], ["y"]),
    "reshape_neg.json": _doc([_node("reshape", ["x"], ["y"], shape=[-1, 32])], ["y"]),
    "cast_float64.json": _doc([_node("cast", ["x"], ["y"], to="float64")], ["y"]),
    "garbage.json": bytes(range(256)) * 4,
    "empty.json": "",
    "list.json": "[1, 2, 3]",
    "string.json": '"workbench.graph"',
    "null.json": "null",
    "nodes_int.json": _doc(5, ["y"]),
    "inputs_list.json": _doc(EXP, ["y"], inputs=[1, 2]),
    "shape_string.json": _doc(EXP, ["y"], inputs={"x": {"shape": "abc"}}),
    "version_string.json": _doc(EXP, ["y"], version="x"),
    "outputs_string.json": _doc(EXP, "y"),
    "outputs_missing.json": json.dumps({"format": "workbench.graph", "inputs": {},
                                        "nodes": []}),
    "attr_object.json": _doc([_node("reduce_sum", ["x"], ["y"], axes={"a": 1})], ["y"]),
    "constants_list.json": _doc(EXP, ["y"], constants=[1]),
    "op_number.json": _doc([{"op": 5, "inputs": ["x"], "outputs": ["y"]}], ["y"]),
    "bad_dtype.json": _doc(EXP, ["y"], inputs={"x": {"shape": [4], "dtype": [1]}}),
    "range_string.json": _doc(EXP, ["y"], inputs={"x": {"shape": [4], "range": "ab"}}),
    "inf_dim.json": '{"format": "workbench.graph", "inputs": {"x": {"shape": [Infinity]}}, '
                    '"nodes": [], "outputs": ["x"]}',
    "nan_fill.json": _doc([_node("exp", ["c"], ["y"])], ["y"], inputs={},
                          constants={"c": {"shape": [2], "init": {"fill": "abc"}}}),
    "data_ragged.json": _doc([_node("exp", ["c"], ["y"])], ["y"], inputs={},
                             constants={"c": {"shape": [2, 2], "init": {"data": [[1], [2, 3]]}}}),
    "random_bad.json": _doc([_node("exp", ["c"], ["y"])], ["y"], inputs={},
                            constants={"c": {"shape": [2], "init": {"random": {"seed": "a"}}}}),
    "int_random_huge.json": _doc([_node("neg", ["c"], ["y"])], ["y"], inputs={},
                                 constants={"c": {"shape": [2], "dtype": "int32",
                                                  "init": {"random": {"low": 1e300}}}}),
}


def _onnx_model(nodes, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _bad_initializer():
    # an initializer claiming 2^40 elements with 8 bytes of data
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2 ** 40], raw_data=b"\0" * 8)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", F32, [2 ** 40])],
                          [helper.make_tensor_value_info("y", F32, [2 ** 40])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m.SerializeToString()


def _onnx_files():
    import numpy as np
    relu = _onnx_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F32, [4, 8])],
                       [("y", F32, [4, 8])], [("w", np.ones(1000, np.float32))])
    return {
        "garbage.onnx": b"\x08\x07garbage-that-is-not-a-model" * 3,
        "random.onnx": bytes(range(256)) * 8,
        "empty.onnx": b"",
        "truncated.onnx": relu[: len(relu) // 2],
        "json_inside.onnx": JSON_FILES["no_nodes.json"].encode(),
        "opset_99.onnx": _onnx_model([helper.make_node("Relu", ["x"], ["y"])],
                                     [("x", F32, [4, 8])], [("y", F32, [4, 8])], opset=99),
        "transpose_dup.onnx": _onnx_model(
            [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])],
            [("x", F32, [4, 8])], [("y", F32, [4, 4])]),
        "gather_axis_9.onnx": _onnx_model(
            [helper.make_node("Gather", ["x", "i"], ["y"], axis=9)],
            [("x", F32, [4, 8]), ("i", I64, [2])], [("y", F32, [4, 2])]),
        "concat_axis_7.onnx": _onnx_model(
            [helper.make_node("Concat", ["x", "x"], ["y"], axis=7)],
            [("x", F32, [4, 8])], [("y", F32, [4, 16])]),
        "split_negative.onnx": _onnx_model(
            [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)],
            [("x", F32, [4, 8])], [("y", F32, [4, 4]), ("z", F32, [4, 4])],
            [("s", np.array([4194304, -4194296], np.int64))]),
        "reduce_axis_5.onnx": _onnx_model(
            [helper.make_node("ReduceMax", ["x", "a"], ["y"])],
            [("x", F32, [4, 8])], [("y", F32, [4, 1])], [("a", np.array([5], np.int64))]),
        "slice_axis_4.onnx": _onnx_model(
            [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])],
            [("x", F32, [4, 8])], [("y", F32, [4, 1])],
            [("s", np.array([0], np.int64)), ("e", np.array([1], np.int64)),
             ("a", np.array([4], np.int64))]),
        "bad_initializer.onnx": _bad_initializer(),
        "negative_dim.onnx": _onnx_model([helper.make_node("Relu", ["x"], ["y"])],
                                         [("x", F32, [-4, 8])], [("y", F32, [4, 8])]),
    }


ONNX_FILES = _onnx_files()
ALL_FILES = {**JSON_FILES, **ONNX_FILES}


def _write(tmp_path: Path, name: str) -> Path:
    content = ALL_FILES[name]
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8")
    return p


def _expect_one_line(fn, *args, **kw) -> str:
    """fn(*args, **kw) raises a WorkbenchError (anything else fails the test) with a
    one-line message."""
    with pytest.raises(WorkbenchError) as e:
        fn(*args, **kw)
    text = str(e.value)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)
    return text


def _prepare(path, **kw):
    return onnx_backend.prepare(str(path), backend="reference", **kw)


@pytest.mark.parametrize("name", list(ALL_FILES))
def test_every_python_entry_point_raises_only_workbench_error(tmp_path, name):
    p = _write(tmp_path, name)
    before = p.read_bytes()
    _expect_one_line(load, p)
    _expect_one_line(load, str(p))
    _expect_one_line(wb.Session, p, backend="reference")
    if name.endswith(".json"):
        _expect_one_line(load_json, p)
        try:
            d = json.loads(p.read_bytes())
        except (ValueError, RecursionError):
            pass
        else:
            _expect_one_line(from_json, d)
    else:
        _expect_one_line(load_onnx, p)
        _expect_one_line(load_onnx, str(p))
        _expect_one_line(_prepare, p)
        try:
            proto = onnx.load_from_string(p.read_bytes())
        except Exception:  # noqa: BLE001, S110 -- not a protobuf: nothing more to try
            pass
        else:
            _expect_one_line(load_onnx, proto)
            _expect_one_line(load, proto)
            _expect_one_line(onnx_backend.prepare, proto, backend="reference")
    assert p.read_bytes() == before


def test_directories_missing_files_and_other_suffixes(tmp_path):
    d = tmp_path / "graph.json"
    d.mkdir()
    o = tmp_path / "model.onnx"
    o.mkdir()
    t = tmp_path / "graph.txt"
    t.write_text("{}")
    for path in (d, o, t, tmp_path / "missing.json", tmp_path / "missing.onnx",
                 str(tmp_path / "nul\x00.json"), "", "x" * 5000 + ".json"):
        _expect_one_line(load, path)
        _expect_one_line(wb.Session, path, backend="reference")
    for path in (d, tmp_path / "missing.json", "x" * 5000 + ".json"):
        _expect_one_line(load_json, path)
    for path in (o, t, tmp_path / "missing.onnx", str(tmp_path / "nul\x00.onnx")):
        _expect_one_line(load_onnx, path)
        _expect_one_line(_prepare, path)
    assert "directory" in _expect_one_line(load, d)


def _good_files(tmp_path):
    js = tmp_path / "good.json"
    js.write_text(_doc(EXP, ["y"]))
    ox = tmp_path / "good.onnx"
    ox.write_bytes(_onnx_model([helper.make_node("Relu", ["x"], ["y"])],
                               [("x", F32, ["n", 8])], [("y", F32, ["n", 8])]))
    return js, ox


def test_wrong_types_everywhere(tmp_path):
    js, ox = _good_files(tmp_path)
    for bad in (None, 123, 4.5, b"bytes", ["a.json"], {"format": "workbench.graph"}, object()):
        _expect_one_line(load, bad)
        _expect_one_line(wb.Session, bad, backend="reference")
        _expect_one_line(load_onnx, bad)
        _expect_one_line(onnx_backend.prepare, bad, backend="reference")
    for bad in (None, "text", 5, [], [{"format": "workbench.graph"}]):
        _expect_one_line(from_json, bad)
    for bad in (None, 5, ["a"]):
        _expect_one_line(load_json, bad)
    # keyword arguments of the wrong kind or type
    _expect_one_line(load, js, input_shapes={"x": [4, 8]})
    _expect_one_line(load, js, bogus=1)
    for shapes in ("x", [4, 8], {"x": "ab"}, {"x": [4.5, 8]}, {"x": [-1, 8]}, {"x": 4},
                   {"nope": [4, 8]}, {5: [4, 8]}, {"x": [True, 8]}):
        _expect_one_line(load_onnx, ox, input_shapes=shapes)
        _expect_one_line(_prepare, ox, input_shapes=shapes)
    for kw in ({"backend": 5}, {"backend": ["cpu"]}, {"backend": "nope"}, {"seed": "x"},
               {"seed": 1.5}, {"progress": 5}):
        _expect_one_line(wb.Session, js, **{"backend": "reference", **kw})
    for kw in ({"planner": 5}, {"planner": ["rules"]}, {"planner": "nope"},
               {"backend": ["cpu"]}, {"backend": "nope"}, {"device": 5},
               {"device": "TPU"}):
        _expect_one_line(onnx_backend.prepare, ox, **{"backend": "reference",
                                                      "input_shapes": {"x": [2, 8]}, **kw})
    s = wb.Session(js, backend="reference")
    _expect_one_line(s.source, "n0", "fortran")
    _expect_one_line(s.source, "n0", 5)
    _expect_one_line(s.auto, "nope")
    _expect_one_line(s.auto, ["rules"])


def test_a_graph_made_by_hand_is_verified_on_the_way_in():
    # a Graph assembled without verify() (a split whose kernel would read out of
    # bounds) is refused by Session and load, not planned
    from workbench.dtypes import DType
    from workbench.ir import Graph, Node, Value
    x = Value("x", (4, 8), DType.float32)
    y, z = Value("y", (4, 4194304), DType.float32), Value("z", (4, -4194296), DType.float32)
    g = Graph("hand", (x, y, z), (Node.make("n0", "split", ["x"], ["y", "z"],
                                            {"axis": 1, "sizes": [4194304, -4194296]}),),
              ("x",), ("y", "z"))
    assert "negative" in _expect_one_line(load, g)
    _expect_one_line(wb.Session, g, backend="reference")
    ok = wb.GraphBuilder("ok")
    ok.output(ok.exp(ok.input("x", (2,))), "y")
    good = ok.build()
    assert load(good) is good


# -- the CLI, as a user runs it ---------------------------------------------------------

def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=env)


def _cli_in_process(*args, cwd):
    """``workbench ARGS`` as ``workbench.cli.main`` runs it, in this process: the same
    code as the command line but for Python's start (the fast form of the sweep below;
    the fast tier keeps real subprocesses of it)."""
    import contextlib
    import io
    from workbench import cli
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main([str(a) for a in args])
            except SystemExit as e:      # (argparse's own exits)
                code = e.code
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _assert_one_error_line(r, what):
    assert r.returncode == 2, (what, r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, (what, r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), (what, r.stderr[-2000:])
    assert r.stdout == "", (what, r.stdout[-2000:])


def _listing(d: Path) -> dict:
    return {p.relative_to(d): (p.stat().st_size if p.is_file() else None)
            for p in sorted(d.rglob("*"))}


CLI_CASES = list(ALL_FILES) + ["<directory>.json", "<missing>.onnx"]
# the cases run as real subprocesses, one through optimize and one through export (two
# subprocesses a case: seconds each); the rest through cli.main in this process
SUBPROCESS_CLI_CASES = ("outputs_missing.json", "<directory>.json")


@pytest.mark.parametrize("name", CLI_CASES)
def test_cli_one_error_line_exit_2_nothing_written(tmp_path, name):
    # every input through `show` (the loader every command shares), and through
    # `optimize` or `export` in turn (a subprocess costs a second of imports)
    k = CLI_CASES.index(name)
    if name == "<directory>.json":
        p = tmp_path / "dir.json"
        p.mkdir()
    elif name == "<missing>.onnx":
        p = tmp_path / "missing.onnx"
    else:
        p = _write(tmp_path, name)
    before = _listing(tmp_path)
    commands = [["show", p, "graph"],
                ["optimize", p, "--backend", "reference", "--json", tmp_path / "rows.json"],
                ["export", p, "-o", tmp_path / "artifact", "--backend", "reference"]]
    run = _cli if name in SUBPROCESS_CLI_CASES else _cli_in_process
    for args in (commands[0], commands[1 + k % 2]):
        _assert_one_error_line(run(*args, cwd=tmp_path), (name, args[0]))
        assert _listing(tmp_path) == before, (name, args[0])


def test_cli_3000_op_chain(tmp_path):
    # deep, not malformed: loads, verifies, plans and lowers (no RecursionError anywhere)
    nodes = [{"op": "neg", "inputs": [f"v{i}" if i else "x"], "outputs": [f"v{i + 1}"]}
             for i in range(3000)]
    p = tmp_path / "chain.json"
    p.write_text(_doc(nodes, ["v3000"], inputs={"x": {"shape": [4]}}))
    r = _cli("show", p, "graph", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("neg(") == 3000, r.stderr[-2000:]
    r = _cli("show", p, "c", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.count("-") >= 3000, r.stderr[-2000:]
