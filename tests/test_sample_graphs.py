"""The sample graphs in sample_graphs/: they load, verify, run, mean what they say, and
are exactly what the generator scripts write."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from workbench.ir import load_json, to_json
from workbench.runtime.reference import random_inputs, run_reference

SAMPLES = Path(__file__).resolve().parent.parent / "sample_graphs"


def _load_script(name):
    spec = importlib.util.spec_from_file_location(f"_samples_{name}", SAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


make_samples = _load_script("make_samples")
JSON_FILES = sorted(make_samples.BUILDERS)


def test_every_json_sample_is_generated_by_the_script():
    on_disk = sorted(p.name for p in SAMPLES.glob("*.json"))
    assert on_disk == JSON_FILES, "run `python sample_graphs/make_samples.py`"


def test_samples_stay_small():
    total = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
    assert total < 40 * 2**20
    for p in SAMPLES.glob("*.onnx"):
        assert p.stat().st_size < 20 * 2**20, p.name


@pytest.mark.parametrize("fname", JSON_FILES)
def test_json_sample_loads_verifies_and_is_reproducible(fname):
    g = load_json(SAMPLES / fname)
    g.verify()  # raises GraphError naming the fault
    assert g.description.strip() and "\n" not in g.description
    # Within the CI budget: inputs + constants about 64 MB at most (plus scalars).
    nbytes = sum(int(np.prod(g.value(i).shape)) * g.value(i).dtype.np.itemsize
                 for i in g.inputs) + sum(a.nbytes for a in g.constants.values())
    assert nbytes <= 64 * 2**20 + 4096
    # Re-running make_samples.py would write the same file.
    fresh = make_samples.BUILDERS[fname]()
    assert to_json(fresh) == json.loads((SAMPLES / fname).read_text())


# -- inputs in each graph's domain, and independent NumPy formulas ------------------------

def _inputs(fname, g, seed=0):
    ins = random_inputs(g, seed)
    if fname == "adam.json":
        ins["v"] = np.abs(ins["v"])  # a second moment is never negative
    if fname == "cross_entropy.json":
        n, classes = g.value("logits").shape
        labels = np.random.default_rng(seed + 1).integers(0, classes, n).astype(np.int64)
        labels[::97] = -100  # PyTorch's ignore_index: contributes 0
        ins["labels"] = labels
    return ins


_erf = np.vectorize(math.erf, otypes=[np.float64])
ROWS = slice(0, 64)  # row-independent graphs are checked on a few rows (erf is slow)


def _ln(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


def _gelu(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _check(fname, g, ins, out):
    c = g.constants
    close = lambda got, want, tol=1e-4: np.testing.assert_allclose(
        got, want, rtol=tol, atol=tol)
    if fname == "layernorm.json":
        close(out["y"][ROWS], _ln(ins["x"][ROWS], c["gamma"], c["beta"]))
    elif fname == "rmsnorm.json":
        x = ins["x"][ROWS].astype(np.float64)
        close(out["y"][ROWS], x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * c["weight"])
    elif fname == "softmax.json":
        close(out["y"].sum(-1), 1.0, 1e-5)
        close(out["y"][ROWS], _softmax(ins["x"][ROWS]))
    elif fname == "attention_softmax.json":
        p = out["probs"]
        close(p.sum(-1), 1.0, 1e-5)
        assert np.all(p[1, :, :, 700:] < 1e-30)  # padding gets no attention
        s = ins["scores"][:, :, :8].astype(np.float64) / 8.0 + c["mask"]
        close(p[:, :, :8], _softmax(s))
    elif fname == "bias_gelu.json":
        close(out["y"][ROWS], _gelu(ins["x"][ROWS] + c["bias"]))
    elif fname == "bias_gelu_residual_layernorm.json":
        h = _gelu(ins["x"][ROWS] + c["bias"]) + ins["residual"][ROWS]
        close(out["y"][ROWS], _ln(h, c["gamma"], c["beta"]))
    elif fname == "bias_gelu_residual_layernorm_bf16.json":
        # the reference rounds x + bias, GELU's result, the residual sum and the output
        # to bfloat16 (2^-9 each, the first three scaled by the LayerNorm's 1/std):
        # 0.014 of (|y| + 1) measured, held to 3e-2
        w = {k: np.asarray(v, np.float64) for k, v in c.items()}
        x, r = (ins[k][ROWS].astype(np.float64) for k in ("x", "residual"))
        h = _gelu(x + w["bias"]) + r
        close(out["y"][ROWS].astype(np.float64), _ln(h, w["gamma"], w["beta"]), 3e-2)
    elif fname == "cross_entropy.json":
        z, lab = ins["logits"].astype(np.float64), ins["labels"]
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        valid = (lab >= 0) & (lab < z.shape[1])
        loss = np.where(valid, lse - z[np.arange(len(lab)), np.where(valid, lab, 0)], 0.0)
        close(out["loss"][:, 0], loss)
        close(np.reshape(out["mean_loss"], ()), loss.mean())
        assert np.all(out["loss"][valid] > 0)
    elif fname == "adam.json":
        p, gr, m, v = (ins[k].astype(np.float64) for k in ("param", "grad", "m", "v"))
        m2, v2 = 0.9 * m + 0.1 * gr, 0.999 * v + 0.001 * gr * gr
        mhat, vhat = m2 / (1 - 0.9 ** 10), v2 / (1 - 0.999 ** 10)
        close(out["m_out"], m2)
        close(out["v_out"], v2)
        close(out["param_out"], p - 1e-3 * mhat / (np.sqrt(vhat) + 1e-8))
    elif fname == "bias_grad.json":
        close(out["dbias"], ins["dy"].astype(np.float64).sum(0), 1e-3)
    elif fname == "layernorm_param_grad.json":
        dy = ins["dy"].astype(np.float64)
        close(out["dgamma"], (dy * ins["xhat"]).sum(0), 1e-3)
        close(out["dbeta"], dy.sum(0), 1e-3)
    elif fname == "bert_chain.json":
        h = _ln(ins["attn_out"][ROWS] + c["attn_out_bias"] + ins["residual"][ROWS],
                c["ln1_gamma"], c["ln1_beta"])
        f = _gelu(h @ ins["w1"] + c["ffn_up_bias"]) @ ins["w2"]
        close(out["y"][ROWS], _ln(f + c["ffn_down_bias"] + h, c["ln2_gamma"], c["ln2_beta"]),
              1e-3)
    else:
        pytest.fail(f"no NumPy formula for {fname}; add one here")


@pytest.mark.parametrize("fname", JSON_FILES)
def test_json_sample_reference_is_finite_and_matches_numpy(fname):
    g = load_json(SAMPLES / fname)
    ins = _inputs(fname, g)
    out = run_reference(g, ins)
    for name, a in out.items():
        assert np.all(np.isfinite(a)), f"{fname}: output {name} is not finite"
    _check(fname, g, ins, out)


def test_reference_keeps_scalar_output_shapes():
    # cross_entropy's mean_loss is a 0-d output.
    g = load_json(SAMPLES / "cross_entropy.json")
    out = run_reference(g, _inputs("cross_entropy.json", g))
    for name in g.outputs:
        assert out[name].shape == g.value(name).shape, name


# -- ONNX samples ---------------------------------------------------------------------------

ONNX_FILES = ["layernorm_gelu.onnx", "bert_chain.onnx"]


@pytest.fixture(scope="module")
def onnx_samples():
    pytest.importorskip("onnx")
    return _load_script("make_onnx_samples").build_all()


@pytest.mark.parametrize("fname", ONNX_FILES)
def test_onnx_sample_is_reproducible_and_checks(fname, onnx_samples):
    import onnx
    model, _, _ = onnx_samples[fname]
    onnx.checker.check_model(model, full_check=True)
    assert (SAMPLES / fname).read_bytes() == model.SerializeToString(), \
        "run `python sample_graphs/make_onnx_samples.py`"


@pytest.mark.parametrize("fname", ONNX_FILES)
def test_onnx_sample_matches_numpy_in_onnxruntime(fname, onnx_samples):
    pytest.importorskip("onnxruntime")
    mod = _load_script("make_onnx_samples")
    _, feeds, reference = onnx_samples[fname]
    f = feeds(1)
    got = mod.run_onnxruntime(SAMPLES / fname, f)
    for k, want in reference(f).items():
        np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fname", ONNX_FILES)
def test_onnx_sample_imports_and_matches_onnxruntime(fname, onnx_samples):
    ort = pytest.importorskip("onnxruntime")  # noqa: F841
    import workbench.frontends as frontends
    if not hasattr(frontends, "load_onnx"):
        pytest.skip("workbench.frontends.load_onnx is not there yet")
    mod = _load_script("make_onnx_samples")
    _, feeds, _ = onnx_samples[fname]
    g = frontends.load_onnx(SAMPLES / fname)
    f = feeds(2)
    want = mod.run_onnxruntime(SAMPLES / fname, f)
    got = run_reference(g, {k: f[k] for k in g.inputs})
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        np.testing.assert_allclose(got[k], w, rtol=1e-4, atol=1e-4)
