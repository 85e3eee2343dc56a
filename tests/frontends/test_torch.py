"""The PyTorch importer: real modules (transformers' BERT layer, GPT-2 block and LLaMA
decoder layer built from small configs with random weights, and hand-written modules
covering the handlers) exported with torch.export, imported, run on the cpu backend
under the planners none and rules, and compared with torch's own outputs."""
from __future__ import annotations

import re

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree as pytree

import workbench as wb
from workbench.errors import GraphError, UnsupportedOpError, WorkbenchError
from workbench.frontends.torch import supported_aten_ops
from workbench.dtypes import DType
from workbench.ir import Graph, Origin, from_json, to_json
from workbench.tolerance import max_rel_error, tolerance
from workbench.runtime import run_reference


# ---------------------------------------------------------------------------------
# helpers

def feeds_for(g: Graph, args) -> dict[str, np.ndarray]:
    """The graph inputs from the example arguments (their tensors, in order)."""
    leaves = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    assert len(leaves) == len(g.inputs)
    return {name: t.detach().numpy() for name, t in zip(g.inputs, leaves)}


def torch_outputs(module: nn.Module, args) -> list[np.ndarray]:
    """torch's own outputs in eval mode (the module's training flag is restored)."""
    training = module.training
    with torch.no_grad():
        out = module.eval()(*args)
    module.train(training)
    return [t.numpy() for t in pytree.tree_leaves(out)]


def check_module(module: nn.Module, args, planners=("none", "rules")) -> Graph:
    """Import, run under each planner on the cpu backend, compare with torch."""
    g = wb.from_torch(module, args)
    want = torch_outputs(module, args)
    assert len(want) == len(g.outputs)
    feeds = feeds_for(g, args)
    for planner in planners:
        s = wb.Session(g, backend="cpu")
        if planner != "none":
            s.auto(planner)
        got = s.run(feeds)
        for name, w in zip(g.outputs, want):
            v = g.value(name)
            assert got[name].shape == w.shape and got[name].dtype == w.dtype, name
            err = max_rel_error(got[name], w)
            assert err <= tolerance(v.dtype), \
                f"{g.name} [{planner}, {len(s.plan.groups)} kernels] {name}: error {err:.3g}"
    return g


def composites_of(g: Graph) -> set[str]:
    return {n.origin.composite for n in g.nodes if n.origin}


def sources_of(g: Graph) -> set[str]:
    return {n.origin.source for n in g.nodes if n.origin}


def causal_mask(batch: int, seq: int) -> torch.Tensor:
    """An additive causal mask [batch, 1, seq, seq], as transformers builds it."""
    m = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
    return m[None, None].expand(batch, 1, seq, seq).contiguous()


# ---------------------------------------------------------------------------------
# torch stays optional

def test_import_workbench_does_not_import_torch():
    code = ("import sys, workbench; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, "
            "'workbench imported torch'; assert callable(workbench.from_torch)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------
# transformers layers (small configs, random weights, no downloads); each test skips
# on its own without transformers, so the hand-written modules still run

def test_bert_layer_matches_torch():
    pytest.importorskip("transformers")
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128,
                     attn_implementation="eager")
    layer = BertLayer(cfg)
    x = torch.randn(2, 8, 64)
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, ..., 6:] = torch.finfo(torch.float32).min  # padding in the second sequence
    g = check_module(layer, (x, mask))
    assert layer.training, "from_torch must restore the module's training flag"
    assert g.inputs == ("hidden_states", "attention_mask")
    assert g.outputs == ("output",)
    assert {"LayerNormalization", "Softmax", "Gelu", "Gemm"} <= composites_of(g)
    assert {"attention.self.query", "attention.self", "attention.output.LayerNorm",
            "intermediate.intermediate_act_fn"} <= sources_of(g)
    assert "attention.self.query.bias" in g.constants
    assert all(a.dtype == np.float32 for a in g.constants.values())


@pytest.mark.slow   # (the fast tier's transformer block: BERT's, below)
def test_gpt2_block_matches_torch():
    pytest.importorskip("transformers")
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    torch.manual_seed(1)
    cfg = GPT2Config(n_embd=64, n_head=4, n_positions=32, attn_implementation="eager")
    x = torch.randn(2, 12, 64)
    # forward(hidden_states, past_key_values, attention_mask)
    g = check_module(GPT2Block(cfg), (x, None, causal_mask(2, 12)))
    assert {"LayerNormalization", "Softmax", "Gemm"} <= composites_of(g)
    assert {"ln_1", "attn", "mlp.act", "mlp.c_fc"} <= sources_of(g)


def _llama():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaDecoderLayer,
        LlamaRotaryEmbedding,
    )
    torch.manual_seed(2)
    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, attn_implementation="eager")
    return cfg, LlamaDecoderLayer(cfg, layer_idx=0), LlamaRotaryEmbedding(cfg)


@pytest.mark.slow   # (the fast tier's transformer block: BERT's)
def test_llama_decoder_layer_matches_torch():
    _, layer, rope = _llama()
    x = torch.randn(2, 16, 64)
    cos, sin = rope(x, torch.arange(16)[None].expand(2, 16))
    # forward(hidden_states, attention_mask, position_ids, past_key_values, use_cache,
    #         position_embeddings)
    g = check_module(layer, (x, causal_mask(2, 16), None, None, False, (cos, sin)))
    assert g.inputs == ("hidden_states", "attention_mask", "position_embeddings_0",
                        "position_embeddings_1")
    assert {"LlamaRMSNorm", "LlamaMLP", "LlamaAttention", "Softmax"} <= composites_of(g)
    assert {"input_layernorm", "self_attn.q_proj", "mlp.down_proj"} <= sources_of(g)


def test_llama_rotary_tables_fold_to_constants():
    """A layer that builds its rotary tables from fixed positions: arange, matmul, cat,
    cos and sin all depend on constants only, so they become constants at import."""
    _, layer, rope = _llama()

    class WithRope(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rope = layer, rope
            self.register_buffer("positions", torch.arange(8)[None], persistent=False)

        def forward(self, x):
            cos, sin = self.rope(x, self.positions)
            return self.layer(x, position_embeddings=(cos, sin))

    g = check_module(WithRope(), (torch.randn(1, 8, 64),), planners=("rules",))
    ops = {n.op for n in g.nodes}
    assert not ops & {"cos", "sin"}
    assert g.inputs == ("x",)


# ---------------------------------------------------------------------------------
# hand-written modules, one family of handlers each

class Elementwise(nn.Module):
    def forward(self, x, y, i):
        a = torch.abs(x) + 1.0
        r = [torch.exp(x), torch.log(a), torch.sqrt(a), torch.rsqrt(a), torch.reciprocal(a),
             torch.tanh(x), torch.erf(x), torch.sigmoid(x), torch.relu(x), torch.sin(x),
             torch.cos(x), torch.floor(x * 3), torch.ceil(x * 3), -x, x ** 3, x ** 2,
             torch.pow(a, y), torch.maximum(x, y), torch.minimum(x, y), 2.0 - x, x / y,
             torch.div(x * 4, y, rounding_mode="floor"), torch.div(x * 4, y, rounding_mode="trunc"),
             torch.clamp(x, -0.5, 0.5), torch.clamp(x, min=0.1), torch.where(x > y, x, 0.5)]
        ints = [i * 3 - 1, i + i, i / 2, i.float() * x[..., :1], i.abs(), -i]
        bools = [(x > 0) & (y < 0), (x >= y) | (i == 2)[..., :1], ~(x != y), x <= 0.25,
                 (x > 0) ^ (y > 1), torch.logical_and(x, i), torch.logical_or(x > 0, y > 1),
                 torch.logical_xor(x > 0, i), torch.logical_not(i)]
        r += [torch.log1p(a), torch.expm1(x), torch.log1p(x * 1e-5), torch.expm1(x * 1e-5)]
        return r, ints, bools


class Activations(nn.Module):
    def forward(self, x):
        return (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.leaky_relu(x, 0.2),
                F.elu(x), F.softplus(x), F.hardtanh(x), F.hardsigmoid(x), F.hardswish(x),
                F.mish(x), torch.sign(x), F.softmax(x, -1), F.log_softmax(x, 1),
                F.relu6(x))


class Reductions(nn.Module):
    def forward(self, x, i):
        return (x.sum(-1), x.mean((0, 2), keepdim=True), x.amax(1), x.amin(-1, keepdim=True),
                x.var(-1), x.var(1, correction=0, keepdim=True), x.prod(-1), x.sum(),
                (x > 0).any(-1), (x > -2).all(1), i.sum(-1), x.std(-1))


class Layout(nn.Module):
    def forward(self, x, idx):
        a, b, c = x.split([1, 2, 3], dim=-1)
        q0, q1 = x.chunk(2, dim=1)
        return (x.view(4, -1), x.permute(2, 0, 1), x.transpose(0, 1), x[:, 1:3],
                x[..., ::2], x[1], x[:, -1], torch.cat([a, c, b], -1), q0 + q1,
                x.unsqueeze(1).expand(2, 3, 4, 6), x[:, :1].squeeze(1), x.flatten(1),
                x.repeat(1, 2, 1), torch.stack([a, b[..., :1]], 0), x.index_select(1, idx),
                x.unbind(0)[1], x.mT, x.reshape(2, 2, 2, 6).sum(1))


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 24)
        self.nobias = nn.Linear(24, 8, bias=False)
        self.conv = nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.gconv = nn.Conv2d(6, 6, 3, padding=1, groups=3, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.ln = nn.LayerNorm(8)
        self.emb = nn.Embedding(10, 8)
        with torch.no_grad():  # non-trivial running statistics
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x, m, img, tokens):
        h = self.ln(self.nobias(torch.relu(self.fc(x))))
        y = self.gconv(self.bn(self.conv(img)))
        q = m.view(2, 1, 5, 5).expand(2, 3, 5, 5)
        causal = torch.ones(5, 5, dtype=torch.bool).tril()
        return (h + self.emb(tokens), torch.bmm(m, m.transpose(1, 2)), x @ x[0].T,
                torch.baddbmm(m, m, m, beta=0.5, alpha=2.0), y,
                torch.addmm(x[:, 0], x, x.T, beta=0.5, alpha=1.5),
                F.scaled_dot_product_attention(q, q * 0.5, q + 1.0, attn_mask=causal))


class Strided(nn.Module):
    """as_strided over contiguous storage: a restride that is a reshape (what Swin's
    AdaptiveAvgPool1d pooler exports to), overlapping windows, a transpose by strides,
    a storage offset."""
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(1)

    def forward(self, x, y):
        flat = x.flatten()
        return (self.pool(x.transpose(1, 2)).flatten(1), torch.as_strided(x, (2, 4, 6), (24, 6, 1)),
                flat.as_strided((5, 4), (3, 1)), y.as_strided((4, 3), (1, 4)),
                flat.as_strided((3, 2), (5, 2), 7) * 2.0)


def _rand(*shape):
    return torch.randn(*shape)


HANDLER_CASES = {
    "elementwise": lambda: (Elementwise(), (_rand(2, 3, 8), _rand(2, 3, 8).abs() + 0.5,
                                            torch.randint(-5, 5, (2, 3, 8)))),
    "activations": lambda: (Activations(), (_rand(4, 16) * 4,)),
    "reductions": lambda: (Reductions(), (_rand(2, 5, 7), torch.randint(-9, 9, (3, 4)))),
    "layout": lambda: (Layout(), (_rand(2, 4, 6), torch.tensor([3, 0, 0, 2]))),
    "strided": lambda: (Strided(), (_rand(2, 4, 6), _rand(3, 4))),
    "linear": lambda: (Linear(), (_rand(3, 16), _rand(2, 5, 5), _rand(2, 4, 8, 8),
                                  torch.randint(0, 10, (3,)))),
}


@pytest.mark.parametrize("case", sorted(HANDLER_CASES))
def test_handlers_match_torch(case):
    torch.manual_seed(3)
    module, args = HANDLER_CASES[case]()
    check_module(module, args)


def test_every_registered_handler_is_a_core_aten_packet():
    ops = supported_aten_ops()
    assert {"addmm", "native_layer_norm", "_softmax", "gelu", "view", "permute"} <= set(ops)
    assert all(hasattr(torch.ops.aten, name) for name in ops)


# ---------------------------------------------------------------------------------
# namespaces, constants, outputs

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        p = torch.softmax(self.proj(x), dim=-1)
        return p * x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.attn(x)) + 1.0


def test_origins_carry_module_paths():
    torch.manual_seed(4)
    g = check_module(Block(), (_rand(2, 8),), planners=("none",))
    by_fx = {}
    for n in g.nodes:
        by_fx.setdefault(n.name, set()).add(n.origin)
    assert by_fx["addmm"] == {Origin("Gemm", "attn.proj")}
    assert by_fx["_softmax"] == {Origin("Softmax", "attn")}
    assert by_fx["mul"] == {Origin("Attention", "attn")}
    assert by_fx["native_layer_norm"] == {Origin("LayerNormalization", "norm")}
    assert by_fx["add"] == {Origin("Block", "")}  # the root module's own op
    # the weight transpose folded into a constant; the bias keeps its module path
    assert "attn.proj.bias" in g.constants and "attn.proj.weight" not in g.constants
    assert not any(n.op == "transpose" for n in g.nodes)
    # origins and names survive the JSON round trip
    back = from_json(to_json(g))
    assert [(n.name, n.origin) for n in back.nodes] == [(n.name, n.origin) for n in g.nodes]


class WithBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))
        self.register_buffer("steps", torch.arange(8), persistent=False)
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        n = x.shape[-1]
        mask = torch.full((n, n), float("-inf")).triu(1)      # built from constants
        bias = torch.tensor([0.25, -0.5]).repeat(4)            # a lifted constant
        s = x @ self.w + mask[: x.shape[0]] + self.steps.float() * 0.1
        return torch.softmax(s, -1) * self.scale + bias


def test_module_with_buffers_and_constants():
    torch.manual_seed(5)
    g = check_module(WithBuffers(), (_rand(8, 8),))
    assert {"scale", "w"} <= set(g.constants)
    # the mask (full, arange, ge, where), the cast of steps and the lifted tensor
    # folded: no node computes from constants alone
    const = set(g.constants)
    assert all(any(i not in const for i in n.inputs) for n in g.nodes)
    assert {n.op for n in g.nodes} >= {"matmul", "exp", "reduce_sum"}


class Outputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(3))

    def forward(self, x, y):
        return {"sum": x + y, "pair": (x * 2, y), "table": self.table}


def test_nested_outputs_are_flattened_with_readable_names():
    torch.manual_seed(6)
    g = check_module(Outputs(), (_rand(2, 3), _rand(2, 3)), planners=("none",))
    # (the buffer "table" holds its own name, so the output copy of it is "table_1")
    assert g.outputs == ("sum", "pair.0", "pair.1", "table_1")
    g2 = wb.from_torch(nn.Sequential(nn.Linear(4, 4)), (_rand(1, 4),), name="seq")
    assert g2.name == "seq" and g2.outputs == ("output",)
    g3 = wb.from_torch(Attention(), torch.randn(3, 8))  # a single tensor is one argument
    assert g3.inputs == ("x",)


def test_exported_program_is_accepted():
    ep = torch.export.export(Attention().eval(), (_rand(2, 8),))
    g = wb.from_torch(ep)
    assert g.name == "exported_program" and g.inputs == ("x",)
    assert composites_of(g) >= {"Softmax", "Gemm"}


# ---------------------------------------------------------------------------------
# errors: one message naming cause and fix

class Unsupported(nn.Module):
    def forward(self, x):
        return torch.sort(x, 0).values + torch.nonzero(x).sum() + torch.sort(x, 1).values


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Unsupported()

    def forward(self, x):
        return self.inner(x)


def test_unsupported_ops_are_listed_in_one_error():
    with pytest.raises(UnsupportedOpError) as e:
        wb.from_torch(Outer(), (_rand(3, 4),))
    assert {"aten.sort.default", "aten.nonzero.default"} <= set(e.value.unsupported)
    assert e.value.unsupported["aten.sort.default"] == ["sort", "sort_1"]
    msg = str(e.value)
    assert "\n" not in msg
    # every node with its module path and source line, and the way around nonzero
    assert re.search(r"aten.sort.default \(2 nodes: sort in inner \(test_torch.py:\d+\), "
                     r"sort_1 in inner \(test_torch.py:\d+\)\)", msg), msg
    assert "for aten.nonzero.default: its result's shape depends on the data" in msg


def test_as_strided_of_a_non_contiguous_tensor_is_refused_with_its_reason():
    class Restride(nn.Module):
        def forward(self, x):
            return x.t().as_strided((3, 4), (1, 3)) + 1.0

    with pytest.raises(UnsupportedOpError) as e:
        wb.from_torch(Restride(), (_rand(3, 4),))
    (key,) = e.value.unsupported
    assert key.startswith("aten.as_strided.default") and "non-contiguous strides (1, 4)" in key


def test_unsupported_lists_are_capped():
    class Many(nn.Module):
        def forward(self, x):
            for _ in range(8):
                x = torch.sort(x, 0).values
            return x
    with pytest.raises(UnsupportedOpError) as e:
        wb.from_torch(Many(), (_rand(3, 4),))
    assert len(e.value.unsupported["aten.sort.default"]) == 8
    assert "(8 nodes: sort at the top level" in str(e.value)
    assert "sort_4 at the top level (test_torch.py" in str(e.value)
    assert "and 3 more)" in str(e.value) and "sort_5" not in str(e.value)


def test_dynamic_shapes_are_refused():
    with pytest.raises(GraphError, match="symbolic shapes are not supported"):
        wb.from_torch(Block(), (_rand(2, 8),), dynamic=True)


def test_bad_inputs_give_one_clear_error():
    with pytest.raises(WorkbenchError, match="needs a torch.nn.Module"):
        wb.from_torch(lambda x: x, (_rand(2),))
    with pytest.raises(GraphError, match="float64.*x.float"):
        wb.from_torch(Block().double(), (_rand(2, 8).double(),))

    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(GraphError, match="torch.export could not export module "
                                         "DataDependent"):
        wb.from_torch(DataDependent(), (_rand(2, 8),))


def test_in_place_buffer_updates_are_refused():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            return x + self.n

    with pytest.raises(GraphError, match="in place"):
        wb.from_torch(Counter(), (_rand(2),))


def test_reference_agrees_with_torch_on_int_and_bool_outputs():
    """Integer and boolean outputs must match exactly (tolerance 0)."""
    torch.manual_seed(7)
    module, args = HANDLER_CASES["elementwise"]()
    g = wb.from_torch(module, args)
    ref = run_reference(g, feeds_for(g, args))
    for name, want in zip(g.outputs, torch_outputs(module, args)):
        if g.value(name).dtype in (DType.int64, DType.bool):
            assert np.array_equal(ref[name], want), name
