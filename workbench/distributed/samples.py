"""The CoCoNet workloads as distributed programs (sample_graphs/distributed/ holds them
as JSON, written by sample_graphs/make_distributed_samples.py).

* :func:`dp_adamw`: a data-parallel AdamW step -- each rank's gradient is one addend of
  the mean (``P(avg)``), averaged by an AllReduce, then torch's AdamW update (decoupled
  weight decay) on replicated parameter and moments.
* :func:`dp_lamb`: the same with LAMB's per-tensor trust ratio (two whole-tensor norms).
* :func:`pp_stage`: a pipeline-stage boundary (each rank a stage, ``send_recv`` to the
  next).
* :func:`dp_lamb_sharded`: LAMB on each rank's 1/p (ReduceScatter, the update on the
  shard, its two norms as per-rank partial sums finished by AllReduces, AllGather of
  the parameter): the same function as :func:`dp_lamb`.
* :func:`tp_attention`: a Megatron tensor-parallel attention block -- per-rank heads
  (Q, K, V weights sharded by head), softmax attention per head, the output projection
  row-parallel (each rank's heads summed: a partial sum), AllReduce, bias, residual and
  LayerNorm.
* :func:`moe_ep`: an expert-parallel MoE layer (one expert per rank): tokens sharded
  on dim 0, ``all_to_all_single`` dispatch, each rank's expert MLP (matmul, GELU,
  matmul), ``all_to_all_single`` combine, the router's gate and the residual.
* :func:`tp_mlp`: a Megatron tensor-parallel MLP block -- column-parallel matmul
  (weights ``S(1)``), bias, GELU, row-parallel matmul (``S(0)``, a partial sum),
  AllReduce, bias, residual and LayerNorm (dropout omitted: this is inference, where it
  is the identity).
"""
from __future__ import annotations

import math

import numpy as np

from .builder import DistBuilder
from .program import DistProgram

ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, step=10)


def adamw(b, p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
    """torch.optim.AdamW's update, in its order of operations: (new p, new m, new v)."""
    with b.composite("AdamW", "adamw"):
        m2 = m * beta1 + g * (1.0 - beta1)
        v2 = v * beta2 + g * g * (1.0 - beta2)
        denom = b.sqrt(v2) * (1.0 / math.sqrt(1.0 - beta2 ** step)) + eps
        p2 = p * (1.0 - lr * weight_decay) - m2 / denom * (lr / (1.0 - beta1 ** step))
        return p2, m2, v2


def dp_adamw(rows: int = 4096, cols: int = 4096, ranks: int = 2) -> DistProgram:
    b = DistBuilder("dp_adamw", ranks,
                    f"Data-parallel AdamW step on {ranks} ranks: gradient AllReduce (mean), "
                    f"then AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 1e-2, "
                    f"step 10) on param/m/v[{rows}, {cols}] "
                    f"({rows * cols / 2**20:.3g}M parameters)")
    g = b.input("grad", (rows, cols), placement="P(avg)")
    p, m = b.input("param", (rows, cols)), b.input("m", (rows, cols))
    v = b.input("v", (rows, cols), range=(0.0, 1.0))
    p2, m2, v2 = adamw(b, p, b.all_reduce(g, "avg"), m, v, **ADAMW)
    b.output(p2, "param_out")
    b.output(m2, "m_out")
    b.output(v2, "v_out")
    return b.build()


def dp_lamb(rows: int = 4096, cols: int = 4096, ranks: int = 2) -> DistProgram:
    """LAMB (Adam's update scaled per tensor by ||param|| / ||update||) after the gradient
    AllReduce: its two norms reduce over every element, so moving its work onto a shard
    stops at them (a row split across ranks) -- CoCoNet computes them as partial sums
    and an AllReduce, which is not built here."""
    b = DistBuilder("dp_lamb", ranks,
                    f"Data-parallel LAMB step on {ranks} ranks: gradient AllReduce (mean), "
                    f"then LAMB (lr 1e-3, betas 0.9/0.999, eps 1e-6, weight decay 1e-2, "
                    f"step 10) on param/m/v[{rows}, {cols}]")
    g = b.input("grad", (rows, cols), placement="P(avg)")
    p, m = b.input("param", (rows, cols)), b.input("m", (rows, cols))
    v = b.input("v", (rows, cols), range=(0.0, 1.0))
    gr = b.all_reduce(g, "avg")
    beta1, beta2, step = 0.9, 0.999, 10
    with b.composite("LAMB", "lamb"):
        m2 = m * beta1 + gr * (1.0 - beta1)
        v2 = v * beta2 + gr * gr * (1.0 - beta2)
        u = m2 * (1.0 / (1.0 - beta1 ** step)) / (
            b.sqrt(v2 * (1.0 / (1.0 - beta2 ** step))) + 1e-6) + p * 1e-2
        ratio = b.sqrt(b.reduce_sum(p * p)) / b.sqrt(b.reduce_sum(u * u))
        p2 = p - u * ratio * 1e-3
    b.output(p2, "param_out")
    b.output(m2, "m_out")
    b.output(v2, "v_out")
    return b.build()


def tp_mlp(tokens: int = 512, hidden: int = 1024, ffn: int = 4096,
           ranks: int = 2) -> DistProgram:
    b = DistBuilder("tp_mlp", ranks,
                    f"Megatron tensor-parallel MLP on {ranks} ranks: x[{tokens}, {hidden}] "
                    f"@ W1[{hidden}, {ffn}] (column-parallel) + b1, GELU, @ W2[{ffn}, "
                    f"{hidden}] (row-parallel), AllReduce, + b2, + x, LayerNorm")
    rng = np.random.default_rng(0)
    x = b.input("x", (tokens, hidden))
    w1 = b.input("w1", (hidden, ffn), placement="S(1)")
    w2 = b.input("w2", (ffn, hidden), placement="S(0)")
    b1 = b.constant(rng.uniform(-0.1, 0.1, ffn).astype(np.float32), "b1", placement="S(0)")
    b2 = b.constant(rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "b2")
    gamma = b.constant(rng.uniform(0.5, 1.5, hidden).astype(np.float32), "gamma")
    beta = b.constant(rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "beta")
    h = b.gelu(b.matmul(x, w1) + b1)
    y = b.all_reduce(b.matmul(h, w2)) + b2
    b.output(b.layer_norm(y + x, gamma, beta), "out")
    return b.build()


def dp_lamb_sharded(rows: int = 4096, cols: int = 4096, ranks: int = 2) -> DistProgram:
    """:func:`dp_lamb` as CoCoNet shards it: the gradient ReduceScattered, parameter and
    moments held as shards (ZeRO), LAMB's update on the shard, and its two whole-tensor
    norms as each rank's sum of squares over its shard (a partial sum) finished by an
    AllReduce of one number each; the new parameter AllGathered."""
    b = DistBuilder("dp_lamb_sharded", ranks,
                    f"Data-parallel LAMB step on {ranks} ranks, sharded: gradient "
                    f"ReduceScatter (mean), LAMB on each rank's 1/{ranks} of "
                    f"param/m/v[{rows}, {cols}], norms by AllReduce, param AllGather")
    g = b.input("grad", (rows, cols), placement="P(avg)")
    p = b.input("param", (rows, cols), placement="S(0)")
    m = b.input("m", (rows, cols), placement="S(0)")
    v = b.input("v", (rows, cols), range=(0.0, 1.0), placement="S(0)")
    gr = b.reduce_scatter(g, 0, "avg")
    beta1, beta2, step = 0.9, 0.999, 10
    with b.composite("LAMB", "lamb"):   # (dp_lamb's update, term for term)
        m2 = m * beta1 + gr * (1.0 - beta1)
        v2 = v * beta2 + gr * gr * (1.0 - beta2)
        u = m2 * (1.0 / (1.0 - beta1 ** step)) / (
            b.sqrt(v2 * (1.0 / (1.0 - beta2 ** step))) + 1e-6) + p * 1e-2
        ratio = b.sqrt(b.all_reduce(b.reduce_sum(p * p))) / \
            b.sqrt(b.all_reduce(b.reduce_sum(u * u)))
        p2 = p - u * ratio * 1e-3
    b.output(b.all_gather(p2, 0), "param_out")
    b.output(m2, "m_out")
    b.output(v2, "v_out")
    return b.build()


def tp_attention(tokens: int = 128, hidden: int = 512, heads: int = 8,
                 ranks: int = 2) -> DistProgram:
    """Megatron's attention block with per-rank heads. The weights are laid out by head
    (``wq[heads, hidden, d]``...), sharded on the head dim: ``x @ wq`` is each rank's
    heads' queries (column-parallel), ``K^T`` comes as ``wk_t @ x^T``; scores, softmax
    and ``@ V`` per head; the output projection ``ctx @ wo`` per head, summed over the
    rank's heads -- one addend of the sum over all heads (row-parallel) -- AllReduced,
    then bias, residual and LayerNorm (dropout omitted: inference)."""
    d = hidden // heads
    b = DistBuilder("tp_attention", ranks,
                    f"Megatron tensor-parallel attention on {ranks} ranks: x[{tokens}, "
                    f"{hidden}], {heads} heads of {d} split across ranks, per-head softmax "
                    "attention, row-parallel output projection, AllReduce, bias, residual, "
                    "LayerNorm")
    rng = np.random.default_rng(1)
    x = b.input("x", (tokens, hidden))
    wq = b.input("wq", (heads, hidden, d), placement="S(0)")
    wk_t = b.input("wk_t", (heads, d, hidden), placement="S(0)")
    wv = b.input("wv", (heads, hidden, d), placement="S(0)")
    wo = b.input("wo", (heads, d, hidden), placement="S(0)")
    bo = b.constant(rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "bo")
    gamma = b.constant(rng.uniform(0.5, 1.5, hidden).astype(np.float32), "gamma")
    beta = b.constant(rng.uniform(-0.1, 0.1, hidden).astype(np.float32), "beta")
    q = b.matmul(x, wq)                                     # [heads, tokens, d]
    k_t = b.matmul(wk_t, b.transpose(x, perm=[1, 0]))       # [heads, d, tokens]
    probs = b.softmax(b.matmul(q, k_t) * (1.0 / math.sqrt(d)), axis=-1)
    per_head = b.matmul(b.matmul(probs, b.matmul(x, wv)), wo)   # [heads, tokens, hidden]
    y = b.all_reduce(b.reduce_sum(per_head, axes=[0], keepdims=False)) + bo
    b.output(b.layer_norm(y + x, gamma, beta), "out")
    return b.build()


def pp_stage(tokens: int = 512, hidden: int = 1024, ranks: int = 2) -> DistProgram:
    """A pipeline-stage boundary: rank r is stage r, holding its stage's weights (dim 0
    of ``w``, sharded) and its micro-batch's activations (dim 0 of ``x``); it computes
    ``GELU(x @ W + b)`` and sends the result to stage r+1 (``send_recv``, a ring: the
    last stage's goes to the first, as the next micro-batch's input would)."""
    b = DistBuilder("pp_stage", ranks,
                    f"Pipeline-stage boundary on {ranks} ranks: each rank's stage computes "
                    f"GELU(x[{tokens}, {hidden}] @ W[{hidden}, {hidden}] + b) on its "
                    f"micro-batch and sends it to the next stage")
    x = b.input("x", (ranks, tokens, hidden), placement="S(0)")
    w = b.input("w", (ranks, hidden, hidden), placement="S(0)")
    bias = b.input("bias", (ranks, 1, hidden), placement="S(0)")
    h = b.gelu(b.matmul(x, w) + bias)
    b.output(b.send_recv(h, dim=0, shift=1), "next_stage_in")
    return b.build()


def moe_ep(capacity: int = 64, hidden: int = 256, ffn: int = 1024,
           ranks: int = 2) -> DistProgram:
    """An MoE layer with expert parallelism as users write it (top-1 routing already
    done, as by a router before the layer): rank r holds expert r's weights and its
    own ``p * capacity`` token slots, laid out by destination expert -- slots
    ``[j * capacity, (j + 1) * capacity)`` of its rows go to expert j (padded to the
    capacity, as GShard and Switch do). ``all_to_all_single`` dispatches them (rank j
    then holds every rank's tokens for expert j), the expert's MLP runs on them
    (``[p * capacity, hidden]`` as its batch of one), a second ``all_to_all_single``
    sends the results back to the tokens' ranks, and each token's result is scaled by
    its router probability (``gate``, one per token) and added to the token (the
    residual). The program's reference is the single-process layer: expert e applied
    to rows ``[e * p * c, (e + 1) * p * c)`` of the dispatched tokens."""
    p, c = ranks, capacity
    tokens = p * p * c
    b = DistBuilder("moe_ep", ranks,
                    f"Expert-parallel MoE layer on {ranks} ranks, one expert each: "
                    f"{tokens} token slots x {hidden} (capacity {c} per rank and expert), "
                    f"all_to_all_single dispatch, expert MLP {hidden} -> {ffn} (GELU) -> "
                    f"{hidden}, all_to_all_single combine, gate and residual")
    x = b.input("x", (tokens, hidden), placement="S(0)")
    gate = b.input("gate", (tokens, 1), range=(0.0, 1.0), placement="S(0)")
    w1 = b.input("w1", (p, hidden, ffn), placement="S(0)")
    w2 = b.input("w2", (p, ffn, hidden), placement="S(0)")
    xe = b.reshape(b.all_to_all_single(x), shape=[p, p * c, hidden])   # dispatch
    h = b.matmul(b.gelu(b.matmul(xe, w1)), w2)
    y = b.all_to_all_single(b.reshape(h, shape=[tokens, hidden]))      # combine
    b.output(x + y * gate, "out")
    return b.build()


# file name -> (builder, the sizes the file is written at)
SAMPLES = {"dp_adamw.json": (dp_adamw, dict(rows=1024, cols=1024)),
           "dp_lamb.json": (dp_lamb, dict(rows=1024, cols=1024)),
           "tp_mlp.json": (tp_mlp, dict(tokens=256, hidden=512, ffn=2048)),
           "pp_stage.json": (pp_stage, dict(tokens=256, hidden=512)),
           "dp_lamb_sharded.json": (dp_lamb_sharded, dict(rows=1024, cols=1024)),
           "tp_attention.json": (tp_attention, dict(tokens=128, hidden=512, heads=8)),
           "moe_ep.json": (moe_ep, dict(capacity=64, hidden=256, ffn=1024))}
