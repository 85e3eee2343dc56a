"""Transformer-block graphs for the differential fuzzer (``--family blocks``).

The mixed family (:mod:`.graphs`) rarely draws a graph rich in matmuls: a
matmul there is one product by a narrow input. What users bring is different: linear
layers with constant weights (given transposed half the time, as ONNX's Gemm and
torch's ``Linear`` store them), bias and activation epilogues, residual adds,
LayerNorm and RMSNorm after a GEMM, and attention -- Q, K and V projected (or split
from one packed projection, as GPT-2 does), reshaped into heads, ``Q Kᵀ`` scaled,
masked the ways exporters write masks (a padding mask scaled by the dtype's most
negative value, a causal ``where``, a causal mask added, or the causal mask and the
user's padding as transformers combine them), a softmax, ``· V``, the
heads merged back. These are the graphs whose plans hold GEMM kernels with prologues
and epilogues, and fused attention, on both backends; this module draws them from one
seed.

Inputs are what a model sees: activations of order one, weights scaled by
1/sqrt(fan-in) as initialisers do, a mask of zeros and the dtype's most negative value;
in a tenth of the cases one activation element is inf or NaN (how a non-finite value
travels through a GEMM tile, a row of scores and a normalisation is checked too,
without turning every output into NaN).
"""
from __future__ import annotations

import math

import numpy as np

from ...fusion.key_limit import causal_mask
from ...dtypes import DType
from ...ir import Graph, GraphBuilder

F32, F16, BF16 = DType.float32, DType.float16, DType.bfloat16
ACTIVATIONS = ["none", "gelu", "gelu_tanh", "relu", "silu", "tanh"]
MASKS = ["none", "none", "padding", "causal", "both", "causal_added", "causal_padding"]


class _BlockDrawer:
    """Draws one transformer-like graph from a seed (see the module docstring)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder(f"block{seed}")
        self.dtype = self.pick([F32, F32, F32, F16, BF16])
        self.batch = self.pick([1, 1, 2])
        self.seq = self.pick([1, 3, 16, 17, 33, 64, 130, 257])   # (257: K and V packed on a CPU)
        self.heads = self.pick([1, 2, 4])
        self.head_dim = self.pick([4, 8, 16])
        self.hidden = self.heads * self.head_dim
        self.n_weights = 0
        self.masks: list[str] = []         # inputs holding 0 and the dtype's lowest value

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def weight(self, shape, fan_in: int):
        """A constant (an initialiser) of order 1/sqrt(fan-in); now and then an input."""
        w = self.rng.uniform(-1, 1, shape) / math.sqrt(max(fan_in, 1))
        self.n_weights += 1
        if self.rng.random() < 0.15:
            return self.b.input(f"w{self.n_weights}", shape, self.dtype)
        return self.b.constant(w.astype(self.dtype.np), f"w{self.n_weights}")

    # -- layers ------------------------------------------------------------------------
    def linear(self, x, n_out: int, act: str | None = None):
        """x @ W (+ bias) (activation): W stored [in, out], or [out, in] and transposed
        (a Gemm with transB, torch's Linear)."""
        k = x.shape[-1]
        if self.rng.random() < 0.5:
            w = self.b.transpose(self.weight((n_out, k), k), perm=[1, 0])
        else:
            w = self.weight((k, n_out), k)
        y = self.b.matmul(x, w)
        if self.rng.random() < 0.75:
            y = y + self.weight((n_out,), 1)
        return self.activate(y, act if act is not None else self.pick(ACTIVATIONS))

    def activate(self, y, act: str):
        if act == "gelu":
            return self.b.gelu(y)
        if act == "gelu_tanh":
            return self.b.gelu(y, approximate="tanh")
        if act == "relu":
            return self.b.relu(y)
        if act == "silu":
            return y * self.b.sigmoid(y)
        if act == "tanh":
            return self.b.tanh(y)
        return y

    def norm(self, x):
        d = x.shape[-1]
        if self.rng.random() < 0.6:
            return self.b.layer_norm(x, self.weight((d,), 1) + 1.0, self.weight((d,), 1))
        return self.b.rms_norm(x, self.weight((d,), 1) + 1.0)

    def ffn(self, x):
        h = self.linear(x, self.pick([2, 4]) * self.hidden,
                        self.pick(["gelu", "gelu_tanh", "relu", "silu"]))
        return self.linear(h, self.hidden, "none")

    def heads_of(self, t):
        """[B, S, D] -> [B, H, S, d]."""
        t = self.b.reshape(t, shape=[self.batch, self.seq, self.heads, self.head_dim])
        return self.b.transpose(t, perm=[0, 2, 1, 3])

    def attention(self, x):
        d = self.hidden
        if self.rng.random() < 0.4:        # one packed projection, split (GPT-2)
            q, k, v = self.b.split(self.linear(x, 3 * d, "none"), axis=2,
                                   sizes=[d, d, d])
        else:
            q, k, v = (self.linear(x, d, "none") for _ in range(3))
        q, v = self.heads_of(q), self.heads_of(v)
        if self.rng.random() < 0.5:        # Kᵀ as one transpose of [B, S, H, d]
            kt = self.b.transpose(self.b.reshape(
                k, shape=[self.batch, self.seq, self.heads, self.head_dim]), perm=[0, 2, 3, 1])
        else:                              # heads first, then the last two axes swapped
            kt = self.b.transpose(self.heads_of(k), perm=[0, 1, 3, 2])
        scale = 1.0 / math.sqrt(self.head_dim)
        how = self.pick(["mul", "div", "q"])
        if how == "q":
            q = q * scale
        s = self.b.matmul(q, kt)
        if how == "mul":
            s = s * scale
        elif how == "div":
            s = s / math.sqrt(self.head_dim)
        s = self.mask(s)
        p = self.b.softmax(s, axis=-1)
        o = self.b.matmul(p, v)
        o = self.b.reshape(self.b.transpose(o, perm=[0, 2, 1, 3]),
                           shape=[self.batch, self.seq, d])
        return self.linear(o, d, "none")

    def mask(self, s):
        how = self.pick(MASKS)
        if how in ("padding", "both"):     # BERT: (1 - mask) * lowest, added
            m = self.b.input(f"mask{len(self.masks)}", (self.batch, 1, 1, self.seq),
                             self.dtype)
            self.masks.append(m.name)
            s = s + m
        tril = np.tril(np.ones((self.seq, self.seq), bool))[None, None]
        if how in ("causal", "both"):      # GPT-2: where(tril, scores, lowest)
            s = self.b.where(self.b.constant(tril), s,
                             self.b.constant(np.array(self.dtype.lowest, self.dtype.np)))
        if how == "causal_added":   # GPT-2 and LLaMA as torch.onnx.export writes them
            s = s + self.b.constant(causal_mask(self.seq, self.seq, self.dtype))
        if how == "causal_padding":     # ... called with an attention_mask (keep*)
            keep = self.b.input(f"keep{len(self.masks)}", (self.batch, 1, 1, self.seq),
                                "bool")
            self.masks.append(keep.name)
            s = s + self.b.where(self.b.op("and", self.b.constant(tril), keep),
                                 self.b.constant(np.array(0, self.dtype.np)),
                                 self.b.constant(np.array(self.dtype.lowest,
                                                          self.dtype.np)))
        return s

    def block(self, x):
        """A pre-LN or post-LN encoder block, or one of its parts."""
        form = self.pick(["pre", "post", "attention", "ffn", "linear_norm"])
        if form == "pre":
            h = x + self.attention(self.norm(x))
            return h + self.ffn(self.norm(h))
        if form == "post":
            h = self.norm(x + self.attention(x))
            return self.norm(h + self.ffn(h))
        if form == "attention":
            return self.attention(x)
        if form == "ffn":
            return x + self.ffn(x)
        return self.norm(x + self.linear(x, self.hidden))     # GEMM + residual + LN


def draw_block_graph(seed: int) -> Graph:
    """One transformer-block graph (see the module docstring)."""
    d = _BlockDrawer(seed)
    x = d.b.input("x", (d.batch, d.seq, d.hidden), d.dtype)
    y = d.block(x)
    if d.rng.random() < 0.3:
        y = d.block(y)
    d.b.output(y, "y")
    return d.b.build()


def draw_block_inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    """Activations uniform in [-1, 1], weights (inputs named w*) by 1/sqrt(fan-in),
    masks (mask*) of 0 and the dtype's lowest value, attention masks (keep*) a quarter
    padding, one element of x inf or NaN in a tenth of the cases."""
    rng = np.random.default_rng(seed + 7919)
    out = {}
    for name in g.inputs:
        v = g.value(name)
        if name.startswith("mask"):
            a = np.where(rng.random(v.shape) < 0.25, v.dtype.lowest, 0.0)
            a[..., 0] = 0.0           # every row keeps a key (an all-masked row is NaN)
        elif name.startswith("keep"):
            a = rng.random(v.shape) >= 0.25
            a[..., 0] = True
        elif name.startswith("w"):
            a = rng.uniform(-1, 1, v.shape) / math.sqrt(max(v.shape[0], 1))
        else:
            a = rng.uniform(-1, 1, v.shape)
            if rng.random() < 0.1 and a.size:
                a.flat[int(rng.integers(a.size))] = rng.choice([np.inf, -np.inf, np.nan])
        out[name] = np.asarray(a).astype(v.dtype.np)
    return out
