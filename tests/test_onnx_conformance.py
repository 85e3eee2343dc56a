"""The ONNX backend node test suite, run through the workbench.

Every node test case of the installed onnx package becomes one pytest case. A case
whose model the importer refuses (an unsupported op type or use of an op, or an
unsupported dtype) is skipped with the importer's reason; every imported case must
match ONNX's expected outputs.

Execution is one call, :func:`_run`: ``onnx_backend.prepare(model, planner="rules",
backend=BACKEND)``. ``BACKEND`` is the environment variable ``WB_ONNX_BACKEND``, else
``cpu`` when :mod:`workbench.session` exists, else ``reference`` (NumPy op by op).
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx.backend.test.case.node import collect_testcases  # noqa: E402

from workbench import onnx_backend  # noqa: E402
from workbench.errors import GraphError, UnsupportedOpError  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402

BACKEND = os.environ.get("WB_ONNX_BACKEND") or "cpu"   # the compiled kernels, planner rules

# (rtol, atol) per expected-output dtype; integers and booleans must match exactly
TOLERANCE = {np.dtype(np.float32): (1e-3, 1e-5), np.dtype(np.float16): (1e-2, 1e-3)}


def _cases():
    with warnings.catch_warnings():  # the generators warn about their own overflows
        warnings.simplefilter("ignore")
        return sorted(collect_testcases(None), key=lambda c: c.name)


CASES = _cases()


def _run(model, inputs):
    """Run ``model`` on ``inputs`` (a list in graph-input order) -> list of outputs."""
    rep = onnx_backend.prepare(model, planner="rules", backend=BACKEND)
    return list(rep.run(inputs))


# Inputs the importer needs as constants (shapes, axes, slice bounds...). The node
# tests feed them as graph inputs; the workbench has static shapes, so such an input
# is bound to the data set's value as an initializer before import.
SHAPE_INPUTS = {"Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4},
                "Split": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "Range": {0, 1, 2},
                "ConstantOfShape": {0}, "Dropout": {1, 2},
                "TopK": {1}, "CumSum": {1}, "Trilu": {1}, "OneHot": {1},
                "Pad": {1, 2, 3}, "Resize": {1, 2, 3},
                **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                      "ReduceProd", "ReduceSumSquare", "ReduceL1",
                                      "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")}}


def _freeze_shape_inputs(model, inputs):
    """model with graph inputs that feed shape positions made initializers; the
    remaining inputs' values."""
    names = [v.name for v in model.graph.input]
    frozen = {i for n in model.graph.node for k, i in enumerate(n.input)
              if k in SHAPE_INPUTS.get(n.op_type, ()) and i in names}
    if not frozen:
        return model, inputs
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [v for v in m.graph.input if v.name not in frozen]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, value in zip(names, inputs):
        if name in frozen:
            m.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    return m, [v for n, v in zip(names, inputs) if n not in frozen]


def _array(x):
    """Test data is stored as arrays, or as TensorProtos for types NumPy lacks."""
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x if isinstance(x, (list, dict)) or x is None else np.asarray(x)  # sequences stay


def _assert_close(name, expected, got):
    expected = _array(expected)
    got = np.asarray(got)
    assert got.shape == expected.shape, f"{name}: shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} != {expected.dtype}"
    if expected.dtype.name == "bfloat16":
        # compared as float32, to float16's tolerance (2.5 bfloat16 ulps): the workbench
        # computes bfloat16 in float32 and rounds once per kernel store, so a fused
        # kernel is more precise than the reference's bfloat16 steps
        rtol, atol = TOLERANCE[np.dtype(np.float16)]
        np.testing.assert_allclose(got.astype(np.float64),
                                   expected.astype(np.float32).astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
    elif expected.dtype.name.startswith(("float8", "float4")):
        # FP8/FP4 (ml_dtypes): exact, compared as float32 (whose NaN NumPy knows)
        np.testing.assert_array_equal(got.astype(np.float32),
                                      expected.astype(np.float32), err_msg=name)
    elif expected.dtype in TOLERANCE:
        rtol, atol = TOLERANCE[expected.dtype]
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=name)


# ONNX's Cast leaves a float out of the range of a fixed-point target undefined; the
# node tests' expected 2- and 4-bit integers for such inputs are whatever the
# installed ml_dtypes' astype gives (0.5 wraps, 0.7 gives 0), so only the elements in
# range are compared there
_SMALL_INTS = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}


def _defined(case, inputs, expected) -> np.ndarray | None:
    """Where ONNX defines a Cast/CastLike to a 2- or 4-bit integer of a float input (the
    input in the target's range), or None: every element is defined."""
    ops = [n.op_type for n in case.model.graph.node]
    expected = _array(expected)
    if ops not in (["Cast"], ["CastLike"]) or expected.dtype.name not in _SMALL_INTS:
        return None
    x = _array(inputs[0])
    if x.dtype.kind != "f" and not x.dtype.name.startswith(("float8", "float4", "bfloat")):
        return None
    lo, hi = _SMALL_INTS[expected.dtype.name]
    x = np.trunc(x.astype(np.float64))
    return (x >= lo) & (x <= hi)


def _reason(message: str) -> str:
    """The importer's refusal without the names, so the skip summary groups them."""
    import re
    return re.sub(r"'[^']*'", "'...'", message.split(";")[0])[:120]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    if case.model is None:
        pytest.skip("case has no model")
    for inputs, expected in case.data_sets:
        model, inputs = _freeze_shape_inputs(case.model, [_array(x) for x in inputs])
        try:
            load_onnx(model)
        except UnsupportedOpError as e:
            pytest.skip(f"unsupported: {', '.join(e.unsupported)}")
        except GraphError as e:
            if "importer bug" in str(e):  # the shape-inference cross-check: never a skip
                raise
            pytest.skip(f"refused: {_reason(str(e))}")
        got = _run(model, inputs)
        assert len(got) == len(expected)
        for i, (e, g) in enumerate(zip(expected, got)):
            defined = _defined(case, inputs, e)
            if defined is not None:
                assert defined.any(), case.name
                e, g = _array(e)[defined], np.asarray(g)[defined]
            _assert_close(f"{case.name} output {i}", e, g)
