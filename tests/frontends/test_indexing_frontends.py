"""The indexing family through both importers: one ONNX model holding every indexing op
type, checked against onnxruntime, and one torch module holding every indexing ATen
op torch.export emits, checked against torch -- each under planners none, rules and
stitch on the cpu backend, on fresh random inputs with indices at the edges (negative,
first, last). Then constant folding (never an "unsupported" for a fold that failed),
and a transformers BERT with an attention mask through both paths.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper  # noqa: E402

import workbench as wb  # noqa: E402
from workbench import onnx_backend  # noqa: E402
from workbench.errors import GraphError  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402
from workbench.session import Session  # noqa: E402

PLANNERS = ("none", "rules", "stitch")
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _edge(rng, shape, n):
    """Indices in [-n, n): random, with the first, the last and -n among them."""
    a = rng.integers(-n, n, shape)
    flat = a.reshape(-1)
    flat[:3] = [0, n - 1, -n][:flat.size]
    return a


def _const(name, arr):
    return helper.make_node("Constant", [], [name],
                            value=onnx.numpy_helper.from_array(np.asarray(arr), name))


def _onnx_model():
    nodes = [
        helper.make_node("GatherElements", ["x", "ie"], ["ge"], axis=1),
        helper.make_node("GatherND", ["x", "ind"], ["gnd"]),
        helper.make_node("GatherND", ["x", "bind"], ["gnd_b"], batch_dims=1),
        helper.make_node("Exp", ["x"], ["ex"]),
        helper.make_node("ScatterElements", ["ex", "ie", "ge"], ["se"], axis=1,
                         reduction="add"),
        helper.make_node("ScatterElements", ["x", "ie", "ge"], ["se_max"], axis=1,
                         reduction="max"),
        helper.make_node("ScatterND", ["x", "sn", "upd"], ["snd"]),
        helper.make_node("ArgMax", ["x"], ["amax"], axis=2, keepdims=0),
        helper.make_node("ArgMin", ["x"], ["amin"], axis=0, select_last_index=1),
        _const("k", np.array([3], np.int64)),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1, largest=0),
        _const("ax", np.array(1, np.int64)),
        helper.make_node("CumSum", ["x", "ax"], ["cs"], exclusive=1, reverse=1),
        _const("diag", np.array(-1, np.int64)),
        helper.make_node("Trilu", ["x", "diag"], ["tril"], upper=0),
        _const("depth", np.array(6, np.int64)),
        _const("vals", np.array([-1.0, 2.0], np.float32)),
        helper.make_node("OneHot", ["oh", "depth", "vals"], ["onehot"], axis=1),
        # the BERT case: GatherElements on two constants folds with the workbench's own
        # definition (onnx's evaluator failed on it)
        _const("buf", np.arange(64, dtype=np.int64).reshape(1, 64)),
        _const("pos", np.array([[3, 1, 4, 1, 5, 9, 2, 6]], np.int64)),
        helper.make_node("GatherElements", ["buf", "pos"], ["folded"], axis=1),
    ]
    ins = [helper.make_tensor_value_info("x", F, [4, 6, 5]),
           helper.make_tensor_value_info("ie", I64, [4, 3, 5]),
           helper.make_tensor_value_info("ind", I64, [3, 2]),
           helper.make_tensor_value_info("bind", I64, [4, 2, 1]),
           helper.make_tensor_value_info("sn", I64, [3, 2]),
           helper.make_tensor_value_info("upd", F, [3, 5]),
           helper.make_tensor_value_info("oh", I64, [2, 3])]
    full = [4, 6, 5]
    outs = [helper.make_tensor_value_info(n, t, shape) for n, t, shape in [
        ("ge", F, [4, 3, 5]), ("gnd", F, [3, 5]), ("gnd_b", F, [4, 2, 5]), ("se", F, full),
        ("se_max", F, full), ("snd", F, full), ("amax", I64, [4, 6]),
        ("amin", I64, [1, 6, 5]), ("tv", F, [4, 6, 3]), ("ti", I64, [4, 6, 3]),
        ("cs", F, full), ("tril", F, full), ("onehot", F, [2, 6, 3]), ("folded", I64, [1, 8])]]
    g = helper.make_graph(nodes, "indexing", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _onnx_inputs(seed):
    rng = np.random.default_rng(seed)
    # ScatterND with reduction none: distinct positions (repeats are undefined in ONNX)
    flat = rng.permutation(24)[:3]
    sn = np.stack([flat // 6, flat % 6], -1) - np.array([[4, 0], [0, 6], [0, 0]])
    return {"x": rng.standard_normal((4, 6, 5)).astype(np.float32),
            "ie": _edge(rng, (4, 3, 5), 6), "ind": np.stack(
                [_edge(rng, (3,), 4), _edge(rng, (3,), 6)], -1),
            "bind": _edge(rng, (4, 2, 1), 6), "sn": sn.astype(np.int64),
            "upd": rng.standard_normal((3, 5)).astype(np.float32),
            "oh": rng.integers(-6, 6, (2, 3))}


@pytest.mark.parametrize("planner", PLANNERS)
def test_onnx_indexing_ops_match_onnxruntime(planner):
    model = _onnx_model()
    g = load_onnx(model)
    assert {"gather_elements", "gather_nd", "scatter_elements", "scatter_nd", "argmax",
            "argmin", "topk", "cumsum", "trilu"} <= {n.op for n in g.nodes}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    s = Session(g, backend="cpu")
    if planner != "none":
        s.auto(planner)
    for seed in (0, 1):
        ins = _onnx_inputs(seed)
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, ins)))
        got = s.run(ins)
        for name, w in want.items():
            assert got[name].dtype == w.dtype, name
            np.testing.assert_allclose(got[name], w, rtol=2e-6, atol=1e-6, err_msg=name)


def test_a_folding_failure_is_reported_as_one():
    # GatherElements on constants whose indices do not have the data's rank: the
    # workbench's fold refuses it and so does onnx's evaluator -- a malformed node,
    # said as such, not "unsupported"
    nodes = [_const("buf", np.arange(64, dtype=np.int64).reshape(1, 64)),
             _const("pos", np.array([3, 1], np.int64)),
             helper.make_node("GatherElements", ["buf", "pos"], ["y"], axis=1, name="ge")]
    g = helper.make_graph(nodes, "bad", [], [helper.make_tensor_value_info("y", I64, [1, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(GraphError, match=r"'ge' \(GatherElements\): constant folding "
                                         r"failed: .*rank") as e:
        load_onnx(model)
    assert "\n" not in str(e.value)


# -- torch ----------------------------------------------------------------------------

class Indexing(torch.nn.Module):
    def forward(self, x, mask, i, j):
        b = torch.arange(x.shape[0])[:, None, None, None]
        kv = torch.arange(mask.shape[1])[None, None, None, :]
        pm = mask.bool()[b, kv]                         # transformers' padding mask
        att = torch.where(pm, x[:, None, None, :, 0], -1.0)
        picked = x[i, :, j]                             # non-adjacent: index axes in front
        mid = x[:, i, j]                                # adjacent, not first: in place
        one = x[:, :, i]                                # one index tensor: a gather
        put = x.clone()
        put[i, :, j] = x[0, :, 0]                       # index_put with a None slot
        acc = torch.index_put(x, (i,), x[0, 0], accumulate=True)   # i repeats a row
        g = torch.gather(x, 1, j.abs().clamp(max=3)[None, :, None].expand(3, 4, 2))
        sc = torch.zeros(3, 6).scatter(1, i.abs()[None, :3].expand(3, 3),
                                       x[:, :3, 0])
        sa = torch.zeros(3, 6).scatter_add(1, j.abs()[None].expand(3, 4), x[:, :, 1])
        vmax, imax = torch.max(x, dim=1)
        vmin, imin = torch.min(x, dim=2, keepdim=True)
        tk = torch.topk(x, 2, dim=1, largest=False)
        al = torch.ops.aten.alias.default(x) * 2 + x.detach()
        return (att, picked, mid, one, put, acc, g, sc, sa, vmax, imax, vmin, imin, tk.values,
                tk.indices, x.argmax(), x.argmin(dim=0, keepdim=True),
                torch.cumsum(i.to(torch.int32), 0), torch.triu(x[..., 0], 1),
                torch.tril(x[..., 1], -1), torch.nn.functional.one_hot(i.abs(), 5), al)


def _torch_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 5, generator=g)
    mask = torch.randint(0, 2, (3, 4), generator=g)
    i = torch.tensor([0, -1, 2, -3])     # into axes of length 3 (x[i]) and 4
    j = torch.randint(-5, 5, (4,), generator=g)
    j[:2] = torch.tensor([-5, 4])
    return x, mask, i, j


@pytest.mark.parametrize("planner", PLANNERS)
def test_torch_indexing_ops_match_torch(planner):
    ins = _torch_inputs(0)
    g = wb.from_torch(Indexing(), ins)
    s = Session(g, backend="cpu")
    if planner != "none":
        s.auto(planner)
    for seed in (0, 1):
        ins = _torch_inputs(seed)
        with torch.no_grad():
            want = Indexing()(*ins)
        got = s.run(dict(zip(g.inputs, [t.numpy() for t in ins])))
        for name, w in zip(g.outputs, want):
            w = w.numpy()
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
            np.testing.assert_allclose(got[name], w, rtol=2e-6, atol=1e-6, err_msg=name)


# -- a transformers model with an attention mask, both paths --------------------------

@pytest.mark.slow   # (a transformers model exported and traced)
def test_bert_with_attention_mask_imports_through_both_paths():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, vocab_size=100)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0                                   # padding: the mask matters
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    feeds = [ids.numpy(), mask.numpy()]
    ep = torch.export.export(model, (ids, mask))     # exported once, for both paths
    g = wb.from_torch(ep)
    s = Session(g, backend="cpu")
    s.auto("rules")
    got = s.run(dict(zip(g.inputs, feeds)))["last_hidden_state"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ep, (ids, mask), f, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state", "pooler_output"])
    rep = onnx_backend.prepare(onnx.load_from_string(f.getvalue()), planner="rules",
                               backend="cpu")
    np.testing.assert_allclose(rep.run(feeds)[0], want, rtol=1e-4, atol=1e-5)


class _LogitsOf(torch.nn.Module):
    """The LM's logits from (input_ids, attention_mask), passed by name (GPT-2's second
    positional argument is the KV cache)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, mask):
        return self.lm(input_ids=ids, attention_mask=mask).logits


@pytest.mark.slow   # (transformers models traced)
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_causal_lm_with_attention_mask_imports_through_from_torch(arch):
    # LLaMA's head slices logits_to_keep (aten.alias); GPT-2's Conv1D views a value
    # torch's decomposition re-trace lays out non-contiguously (retried as reshapes)
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=64, n_layer=1, n_head=2, vocab_size=100, n_positions=16, use_cache=False))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, vocab_size=100, max_position_embeddings=16,
            use_cache=False))
    model.eval()
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, :3] = 0                                   # left padding
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits.numpy()
    g = wb.from_torch(_LogitsOf(model), (ids, mask))
    s = Session(g, backend="cpu")
    s.auto("rules")
    got = s.run(dict(zip(g.inputs, [ids.numpy(), mask.numpy()])))["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- where an unsupported node is, and the way around it -------------------------------

def test_onnx_unsupported_nodes_are_located_as_torch_locates_them():
    # torch.onnx.export records each node's module path and stack trace as metadata;
    # the message reads as from_torch's does
    nz = helper.make_node("NonZero", ["x"], ["nz"], name="node_NonZero_3")
    for k, v in (("pkg.torch.onnx.name_scopes", "['', 'encoder', 'encoder.layer.0', 'nz']"),
                 ("pkg.torch.onnx.stack_trace",
                  'File "/m/model.py", line 12, in forward\n    y = self.layer(x)\n'
                  '  File "/m/layer.py", line 40, in forward\n    i = torch.nonzero(x)')):
        p = nz.metadata_props.add()
        p.key, p.value = k, v
    att = helper.make_node("Attention", ["x", "x", "x"], ["a"], name="att",
                           domain="com.microsoft")
    g = helper.make_graph([nz, att], "where", [helper.make_tensor_value_info("x", F, [2, 3])],
                          [helper.make_tensor_value_info("nz", I64, [2, 6]),
                           helper.make_tensor_value_info("a", F, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                                helper.make_opsetid("com.microsoft", 1)])
    from workbench.errors import UnsupportedOpError
    with pytest.raises(UnsupportedOpError) as e:
        load_onnx(model)
    msg = str(e.value)
    assert "NonZero (node: node_NonZero_3 in encoder.layer.0 (layer.py:40))" in msg
    assert "com.microsoft.Attention (node: att (after x))" in msg
    assert "for NonZero: its result's shape depends on the data" in msg
    assert "for com.microsoft.Attention: export with the standard ONNX opset" in msg
    assert "\n" not in msg
