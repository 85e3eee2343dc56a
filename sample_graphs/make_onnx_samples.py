"""Write sample ONNX models built with onnx.helper, as PyTorch would export them.

Run from the repository root::

    python sample_graphs/make_onnx_samples.py            # writes sample_graphs/*.onnx
    python sample_graphs/make_onnx_samples.py OUT_DIR

Every model is checked with ``onnx.checker`` (full check, shapes inferred) and run once
with onnxruntime on seeded random inputs; the outputs are compared with a NumPy
formula written here. Weights are initializers drawn from seeded generators, so the
files are byte-identical from run to run. Shapes are static (the workbench IR is).

* ``layernorm_gelu.onnx`` (opset 17): x[2048, 1024] -> MatMul W[1024, 1024] -> Add bias
  -> GELU written as PyTorch exports it (Div, Erf, Add, Mul, Mul) -> LayerNormalization.
* ``bert_chain.onnx`` (opset 17): one BERT encoder layer, batch 2, seq 512, hidden 512,
  8 heads, FFN 2048: Q/K/V MatMul+Add, Reshape/Transpose into heads, scores Div by
  sqrt(64), additive mask built from an int64 attention_mask (Unsqueeze, Cast, Sub,
  Mul by -10000), Softmax, context MatMul, output projection, Add residual,
  LayerNormalization, FFN with erf GELU, Add residual, LayerNormalization.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
OPSET = 17


def _init(name, arr):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def _model(graph, opset=OPSET):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="fusion-workbench-samples")
    m.ir_version = 8  # readable by onnxruntime releases from 1.10 on
    return m


def _gelu_nodes(x, out, prefix):
    """GELU erf form as torch.onnx exports nn.GELU(): x * 0.5 * (1 + erf(x / sqrt 2))."""
    p = prefix
    return [
        helper.make_node("Div", [x, f"{p}_sqrt2"], [f"{p}_div"], name=f"{p}_Div"),
        helper.make_node("Erf", [f"{p}_div"], [f"{p}_erf"], name=f"{p}_Erf"),
        helper.make_node("Add", [f"{p}_erf", f"{p}_one"], [f"{p}_add"], name=f"{p}_Add"),
        helper.make_node("Mul", [x, f"{p}_add"], [f"{p}_mul"], name=f"{p}_Mul"),
        helper.make_node("Mul", [f"{p}_mul", f"{p}_half"], [out], name=f"{p}_Mul_1"),
    ], [_init(f"{p}_sqrt2", np.array(math.sqrt(2.0), np.float32)),
        _init(f"{p}_one", np.array(1.0, np.float32)),
        _init(f"{p}_half", np.array(0.5, np.float32))]


# -- NumPy formulas the models are checked against ------------------------------------

def _erf(x):
    f = np.vectorize(math.erf, otypes=[np.float64])
    return f(x.astype(np.float64))


def np_gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_layer_norm(x, g, b, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- layernorm_gelu.onnx ---------------------------------------------------------------

def layernorm_gelu(tokens=2048, hidden=1024):
    rng = np.random.default_rng(101)
    w = (rng.standard_normal((hidden, hidden)) / math.sqrt(hidden)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    gamma = (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    gelu, gelu_inits = _gelu_nodes("h", "act", "gelu")
    nodes = [helper.make_node("MatMul", ["x", "dense.weight"], ["mm"], name="MatMul"),
             helper.make_node("Add", ["mm", "dense.bias"], ["h"], name="Add"),
             *gelu,
             helper.make_node("LayerNormalization", ["act", "ln.weight", "ln.bias"], ["y"],
                              name="LayerNormalization", axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "layernorm_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, hidden])],
        [_init("dense.weight", w), _init("dense.bias", bias), _init("ln.weight", gamma),
         _init("ln.bias", beta), *gelu_inits])
    graph.doc_string = (f"Dense + GELU (erf, PyTorch export form) + LayerNorm: "
                        f"x[{tokens}, {hidden}] @ W[{hidden}, {hidden}]")

    def reference(feeds):
        h = feeds["x"].astype(np.float64) @ w + bias
        return {"y": np_layer_norm(np_gelu(h), gamma, beta)}

    def feeds(seed=0):
        r = np.random.default_rng(seed)
        return {"x": r.uniform(-1, 1, (tokens, hidden)).astype(np.float32)}

    return _model(graph), feeds, reference


# -- bert_chain.onnx -------------------------------------------------------------------

def bert_chain(batch=2, seq=512, hidden=512, heads=8, ffn=2048):
    dh = hidden // heads
    rng = np.random.default_rng(202)

    def lin(i, o):
        return ((rng.standard_normal((i, o)) / math.sqrt(i)).astype(np.float32),
                (0.02 * rng.standard_normal(o)).astype(np.float32))

    def ln():
        return ((1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32),
                (0.1 * rng.standard_normal(hidden)).astype(np.float32))

    P = {}
    for n, (i, o) in {"query": (hidden, hidden), "key": (hidden, hidden),
                      "value": (hidden, hidden), "attn_out": (hidden, hidden),
                      "ffn_up": (hidden, ffn), "ffn_down": (ffn, hidden)}.items():
        P[f"{n}.weight"], P[f"{n}.bias"] = lin(i, o)
    P["ln1.weight"], P["ln1.bias"] = ln()
    P["ln2.weight"], P["ln2.bias"] = ln()

    N = helper.make_node
    nodes, inits = [], [_init(k, v) for k, v in P.items()]
    inits += [_init("heads_shape", np.array([batch, seq, heads, dh], np.int64)),
              _init("hidden_shape", np.array([batch, seq, hidden], np.int64)),
              _init("mask_axes", np.array([1, 2], np.int64)),
              _init("sqrt_dh", np.array(math.sqrt(dh), np.float32)),
              _init("one", np.array(1.0, np.float32)),
              _init("neg_10000", np.array(-10000.0, np.float32))]

    def linear(x, name, out):
        nodes.append(N("MatMul", [x, f"{name}.weight"], [f"{name}_mm"], name=f"{name}_MatMul"))
        nodes.append(N("Add", [f"{name}_mm", f"{name}.bias"], [out], name=f"{name}_Add"))

    # additive mask from the int64 attention_mask [B, S]: (1 - m) * -10000 -> [B, 1, 1, S]
    nodes += [N("Unsqueeze", ["attention_mask", "mask_axes"], ["mask4"], name="Unsqueeze"),
              N("Cast", ["mask4"], ["maskf"], name="Cast", to=TensorProto.FLOAT),
              N("Sub", ["one", "maskf"], ["inv_mask"], name="Sub"),
              N("Mul", ["inv_mask", "neg_10000"], ["mask_add"], name="Mul_mask")]
    for n, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        linear("x", n, f"{n}_lin")
        nodes += [N("Reshape", [f"{n}_lin", "heads_shape"], [f"{n}_4d"], name=f"{n}_Reshape"),
                  N("Transpose", [f"{n}_4d"], [f"{n}_t"], name=f"{n}_Transpose", perm=perm)]
    nodes += [N("MatMul", ["query_t", "key_t"], ["scores"], name="scores_MatMul"),
              N("Div", ["scores", "sqrt_dh"], ["scores_scaled"], name="scores_Div"),
              N("Add", ["scores_scaled", "mask_add"], ["scores_masked"], name="mask_Add"),
              N("Softmax", ["scores_masked"], ["probs"], name="Softmax", axis=-1),
              N("MatMul", ["probs", "value_t"], ["ctx"], name="ctx_MatMul"),
              N("Transpose", ["ctx"], ["ctx_t"], name="ctx_Transpose", perm=[0, 2, 1, 3]),
              N("Reshape", ["ctx_t", "hidden_shape"], ["ctx_3d"], name="ctx_Reshape")]
    linear("ctx_3d", "attn_out", "attn_proj")
    nodes += [N("Add", ["attn_proj", "x"], ["res1"], name="res1_Add"),
              N("LayerNormalization", ["res1", "ln1.weight", "ln1.bias"], ["h1"],
                name="ln1", axis=-1, epsilon=1e-12)]
    linear("h1", "ffn_up", "up")
    gelu, gelu_inits = _gelu_nodes("up", "act", "gelu")
    nodes += gelu
    inits += gelu_inits
    linear("act", "ffn_down", "down")
    nodes += [N("Add", ["down", "h1"], ["res2"], name="res2_Add"),
              N("LayerNormalization", ["res2", "ln2.weight", "ln2.bias"], ["y"],
                name="ln2", axis=-1, epsilon=1e-12)]

    graph = helper.make_graph(
        nodes, "bert_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])],
        inits)
    graph.doc_string = (f"BERT encoder layer: batch {batch}, seq {seq}, hidden {hidden}, "
                        f"{heads} heads, FFN {ffn}, additive mask from int64 attention_mask")

    def reference(feeds):
        x = feeds["x"].astype(np.float64)
        m = feeds["attention_mask"]
        lin_ = lambda t, n: t @ P[f"{n}.weight"] + P[f"{n}.bias"]
        split = lambda t: t.reshape(batch, seq, heads, dh).transpose(0, 2, 1, 3)
        q, k, v = (split(lin_(x, n)) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        s = s + ((1.0 - m.astype(np.float64)) * -10000.0)[:, None, None, :]
        ctx = (np_softmax(s) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        h1 = np_layer_norm(lin_(ctx, "attn_out") + x, P["ln1.weight"], P["ln1.bias"], 1e-12)
        f = lin_(np_gelu(lin_(h1, "ffn_up")), "ffn_down")
        return {"y": np_layer_norm(f + h1, P["ln2.weight"], P["ln2.bias"], 1e-12)}

    def feeds(seed=0):
        r = np.random.default_rng(seed)
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq * 3 // 4:] = 0  # the last sequence is padded
        return {"x": r.uniform(-1, 1, (batch, seq, hidden)).astype(np.float32),
                "attention_mask": mask}

    return _model(graph), feeds, reference


BUILDERS = {"layernorm_gelu.onnx": layernorm_gelu, "bert_chain.onnx": bert_chain}


def build_all():
    """{file name: (onnx.ModelProto, feeds(seed) -> dict, reference(feeds) -> dict)}."""
    return {fname: fn() for fname, fn in BUILDERS.items()}


def run_onnxruntime(model_or_path, feeds):
    import onnxruntime as ort
    src = model_or_path if isinstance(model_or_path, (str, Path)) else \
        model_or_path.SerializeToString()
    sess = ort.InferenceSession(str(src) if isinstance(src, Path) else src,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def main(out_dir: Path = HERE) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, (model, feeds, reference) in build_all().items():
        onnx.checker.check_model(model, full_check=True)
        path = out_dir / fname
        onnx.save(model, str(path))
        f = feeds(0)
        got = run_onnxruntime(path, f)
        want = reference(f)
        err = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
        if not err < 1e-3:
            raise SystemExit(f"{fname}: onnxruntime differs from the NumPy formula by {err}")
        print(f"{path}  ({path.stat().st_size / 2**20:.1f} MiB, {len(model.graph.node)} "
              f"nodes, onnxruntime vs NumPy max |diff| {err:.1e})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
