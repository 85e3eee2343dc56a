"""Build the sample graphs with the GraphBuilder API and write them as JSON.

Run from the repository root::

    python sample_graphs/make_samples.py            # writes sample_graphs/*.json
    python sample_graphs/make_samples.py OUT_DIR    # writes somewhere else

Sizes are those of real models (thousands of rows x 1024-4096 columns) but every
graph's inputs plus constants stay at or under 64 MB of float32 so a 2-core CI machine
can run it. Big tensors are graph *inputs* (not stored in the file); only small
parameters (gamma, beta, biases, masks) are constants, so the files stay small.
Constants come from seeded generators: running the script twice writes identical files.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # so `python sample_graphs/make_samples.py` works

from workbench.ir import Graph, GraphBuilder, save_json  # noqa: E402


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _affine(rng, n):
    """LayerNorm-like gamma near 1 and beta near 0 (what trained models have)."""
    gamma = (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(n)).astype(np.float32)
    return gamma, beta


def _bias(rng, n):
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


# -- the graphs -------------------------------------------------------------------------

def layernorm(rows=4096, cols=1024) -> Graph:
    b = GraphBuilder("layernorm", f"LayerNorm over the last axis of x[{rows}, {cols}] "
                     f"with gamma/beta[{cols}], eps 1e-5")
    rng = _rng(1)
    x = b.input("x", (rows, cols))
    g, be = _affine(rng, cols)
    y = b.layer_norm(x, b.constant(g, "gamma"), b.constant(be, "beta"), eps=1e-5,
                     source="ln")
    b.output(y, "y")
    return b.build()


def rmsnorm(rows=2048, cols=4096) -> Graph:
    b = GraphBuilder("rmsnorm", f"RMSNorm (LLaMA style) of x[{rows}, {cols}] with "
                     f"weight[{cols}], eps 1e-6")
    rng = _rng(2)
    x = b.input("x", (rows, cols))
    w, _ = _affine(rng, cols)
    b.output(b.rms_norm(x, b.constant(w, "weight"), eps=1e-6, source="rmsnorm"), "y")
    return b.build()


def softmax(rows=4096, cols=1024) -> Graph:
    b = GraphBuilder("softmax", f"Softmax over the last axis of x[{rows}, {cols}]")
    x = b.input("x", (rows, cols))
    b.output(b.softmax(x, axis=-1, source="softmax"), "y")
    return b.build()


def attention_softmax(batch=2, heads=4, seq=1024, head_dim=64) -> Graph:
    rows = batch * heads * seq
    b = GraphBuilder(
        "attention_softmax",
        f"Attention probabilities softmax(scores * 1/sqrt({head_dim}) + mask): scores"
        f"[{batch}, {heads}, {seq}, {seq}] ({rows} rows x {seq}), additive padding mask"
        f"[{batch}, 1, 1, {seq}] (0 or -10000; batch 1 padded after 700 tokens)")
    scores = b.input("scores", (batch, heads, seq, seq))
    # BERT-style additive mask: 0 for real tokens, -10000 for padding.
    lengths = [seq, min(seq, 700)] + [seq] * (batch - 2)
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    for i, n in enumerate(lengths[:batch]):
        mask[i, ..., n:] = -10000.0
    s = scores * (1.0 / math.sqrt(head_dim)) + b.constant(mask, "mask")
    b.output(b.softmax(s, axis=-1, source="attn_softmax"), "probs")
    return b.build()


def bias_gelu(rows=2048, cols=4096) -> Graph:
    b = GraphBuilder("bias_gelu", f"FFN up-projection epilogue: GELU (erf form) of "
                     f"x[{rows}, {cols}] + bias[{cols}]")
    rng = _rng(3)
    x = b.input("x", (rows, cols))
    h = x + b.constant(_bias(rng, cols), "bias")
    b.output(b.gelu(h, source="gelu"), "y")
    return b.build()


def bias_gelu_residual_layernorm(rows=4096, cols=1024, dtype="float32") -> Graph:
    half = dtype != "float32"
    b = GraphBuilder("bias_gelu_residual_layernorm" + ("_bf16" if half else ""),
                     f"LayerNorm(GELU(x + bias) + residual) on [{rows}, {cols}] with "
                     f"bias/gamma/beta[{cols}]: elementwise chain into a row reduction"
                     + (f", all {dtype}" if half else ""))
    rng = _rng(4)
    x = b.input("x", (rows, cols), dtype)
    res = b.input("residual", (rows, cols), dtype)
    h = b.gelu(x + b.constant(_bias(rng, cols), "bias", dtype=dtype), source="gelu")
    g, be = _affine(rng, cols)
    y = b.layer_norm(h + res, b.constant(g, "gamma", dtype=dtype),
                     b.constant(be, "beta", dtype=dtype), source="ln")
    b.output(y, "y")
    return b.build()


def bias_gelu_residual_layernorm_bf16(rows=4096, cols=1024) -> Graph:
    """The BERT tail in bfloat16 storage (computed in float32, rounded once per store)."""
    return bias_gelu_residual_layernorm(rows, cols, "bfloat16")


def cross_entropy(rows=2048, classes=4096) -> Graph:
    b = GraphBuilder(
        "cross_entropy",
        f"Cross-entropy of logits[{rows}, {classes}] and int64 labels[{rows}]: "
        f"loss[{rows}, 1] = -log_softmax picked at the label (one-hot via iota == label; "
        f"a label outside [0, {classes}) such as -100 contributes 0) and its mean")
    logits = b.input("logits", (rows, classes))
    labels = b.input("labels", (rows,), "int64")
    lsm = b.log_softmax(logits, axis=-1, source="log_softmax")
    iota = b.constant(np.arange(classes, dtype=np.int64), "class_ids")
    onehot = b.eq(iota, b.unsqueeze(labels, axes=[1]))  # bool [rows, classes]
    # (the zero is made explicitly: a bare 0.0 would take the bool condition's dtype)
    picked = b.where(onehot, lsm, b.constant(np.float32(0.0), "zero"))
    loss = -b.reduce_sum(picked, axes=[-1], keepdims=True)
    loss = b.output(loss, "loss")  # output() renames; use the handle it returns
    b.output(b.reduce_mean(loss, axes=[0, 1], keepdims=False), "mean_loss")
    return b.build()


def adam(rows=4096, cols=1024) -> Graph:
    b = GraphBuilder("adam", f"One Adam step (lr 1e-3, betas 0.9/0.999, eps 1e-8, step 10) "
                     f"on param/grad/m/v[{rows}, {cols}] ({rows * cols // 2**20}M elements); "
                     f"outputs new param, m, v")
    p, g = b.input("param", (rows, cols)), b.input("grad", (rows, cols))
    m, v = b.input("m", (rows, cols)), b.input("v", (rows, cols), range=(0.0, 1.0))
    p2, m2, v2 = b.adam_update(p, g, m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                               step=10, source="adam")
    b.output(p2, "param_out")
    b.output(m2, "m_out")
    b.output(v2, "v_out")
    return b.build()


def bias_grad(rows=4096, cols=1024) -> Graph:
    b = GraphBuilder("bias_grad", f"Bias gradient: column sum of dy[{rows}, {cols}] over "
                     f"rows -> [{cols}]")
    dy = b.input("dy", (rows, cols))
    b.output(b.reduce_sum(dy, axes=[0], keepdims=False), "dbias")
    return b.build()


def layernorm_param_grad(rows=4096, cols=1024) -> Graph:
    b = GraphBuilder("layernorm_param_grad",
                     f"LayerNorm parameter gradients: dgamma = sum(dy * xhat) and "
                     f"dbeta = sum(dy) over rows of [{rows}, {cols}] -> [{cols}] each "
                     f"(two column reductions sharing an input)")
    dy, xhat = b.input("dy", (rows, cols)), b.input("xhat", (rows, cols))
    b.output(b.reduce_sum(dy * xhat, axes=[0], keepdims=False), "dgamma")
    b.output(b.reduce_sum(dy, axes=[0], keepdims=False), "dbeta")
    return b.build()


def bert_chain(tokens=2048, hidden=1024, ffn=4096) -> Graph:
    # T=2048 keeps the two FFN matmuls (~17 GFLOP together) near 0.2 s with NumPy on 2
    # cores; inputs+constants are 48 MB. The weights are inputs so the file stays small.
    b = GraphBuilder(
        "bert_chain",
        f"Post-attention half of a BERT-large encoder layer, T={tokens} tokens, hidden "
        f"{hidden}, FFN {ffn}: LN1(attn_out + bias + residual) -> matmul W1[{hidden}, {ffn}]"
        f" -> bias + GELU -> matmul W2[{ffn}, {hidden}] -> bias + residual -> LN2 "
        f"(weights are inputs; the matmuls are opaque)")
    rng = _rng(5)
    attn = b.input("attn_out", (tokens, hidden))  # attention output projection result
    res = b.input("residual", (tokens, hidden))
    w1 = b.input("w1", (hidden, ffn))
    w2 = b.input("w2", (ffn, hidden))
    bo = b.constant(_bias(rng, hidden), "attn_out_bias")
    g1, be1 = _affine(rng, hidden)
    h = b.layer_norm(attn + bo + res, b.constant(g1, "ln1_gamma"),
                     b.constant(be1, "ln1_beta"), source="ln1")
    f = b.matmul(h, w1, node_name="ffn_up")
    f = b.gelu(f + b.constant(_bias(rng, ffn), "ffn_up_bias"), source="gelu")
    o = b.matmul(f, w2, node_name="ffn_down")
    g2, be2 = _affine(rng, hidden)
    y = b.layer_norm(o + b.constant(_bias(rng, hidden), "ffn_down_bias") + h,
                     b.constant(g2, "ln2_gamma"), b.constant(be2, "ln2_beta"), source="ln2")
    b.output(y, "y")
    return b.build()


BUILDERS = {
    "layernorm.json": layernorm,
    "rmsnorm.json": rmsnorm,
    "softmax.json": softmax,
    "attention_softmax.json": attention_softmax,
    "bias_gelu.json": bias_gelu,
    "bias_gelu_residual_layernorm.json": bias_gelu_residual_layernorm,
    "bias_gelu_residual_layernorm_bf16.json": bias_gelu_residual_layernorm_bf16,
    "cross_entropy.json": cross_entropy,
    "adam.json": adam,
    "bias_grad.json": bias_grad,
    "layernorm_param_grad.json": layernorm_param_grad,
    "bert_chain.json": bert_chain,
}


def build_all() -> dict[str, Graph]:
    """Every sample graph, keyed by its file name."""
    return {fname: fn() for fname, fn in BUILDERS.items()}



# -- synthetic graphs of a chosen size (planning-time and UI benchmarks, tests); not
# written to disk

def transformer_stack(target_nodes: int, tokens=128, hidden=64, ffn=256) -> Graph:
    """LayerNorm -> matmul -> bias+GELU -> matmul -> bias+residual -> LayerNorm ->
    softmax blocks until the graph has ``target_nodes`` ops (a planning load)."""
    b = GraphBuilder(f"transformer_stack_{target_nodes}")
    rng = _rng(0)
    c = lambda *s: b.constant((0.1 * rng.standard_normal(s)).astype(np.float32))  # noqa
    x = b.input("x", (tokens, hidden))
    k = 0
    while len(b._nodes) < target_nodes:
        h = b.layer_norm(x, c(hidden), c(hidden), source=f"ln{k}a")
        f = b.gelu(b.matmul(h, c(hidden, ffn)) + c(ffn), source=f"gelu{k}")
        o = b.matmul(f, c(ffn, hidden)) + c(hidden) + h
        x = b.layer_norm(o, c(hidden), c(hidden), source=f"ln{k}b")
        x = x + b.softmax(x, axis=-1, source=f"sm{k}")
        k += 1
    b.output(x, "y")
    return b.build()


def block_chain(blocks: int, rows: int = 32, cols: int = 64, name: str = "chain") -> Graph:
    """``blocks`` x (LayerNorm -> GELU -> residual add): 15 nodes per block."""
    b = GraphBuilder(name)
    x = b.input("x", (rows, cols))
    rng = _rng(0)
    for i in range(blocks):
        gamma = b.constant(rng.uniform(0.5, 1.5, cols).astype(np.float32), f"gamma{i}")
        beta = b.constant(rng.uniform(-0.5, 0.5, cols).astype(np.float32), f"beta{i}")
        x = b.gelu(b.layer_norm(x, gamma, beta, source=f"block{i}/ln"),
                   source=f"block{i}/gelu") + x
    b.output(x, "y")
    return b.build()


def main(out_dir: Path = HERE) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for fname, g in build_all().items():
        path = out_dir / fname
        save_json(g, path)
        print(f"{path}  ({path.stat().st_size / 1024:.1f} KiB, {len(g.nodes)} nodes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
