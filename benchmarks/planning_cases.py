"""The graphs and devices plan quality and planning time are judged on (issue 12 item 4),
shared by ``benchmarks/planning.py``, ``benchmarks/stitch_baseline.py`` and the tests.

- every sample graph (``sample_graphs``: the JSON builders and the ``.onnx`` files);
- synthetic graphs: ``transformer_stack`` at about 200, 500 and 1000 ops, a LayerNorm +
  GELU block chain, and random graphs of ``tests/test_properties.py``;
- small transformers blocks imported with ``from_torch`` (random weights, eval): a
  GPT-2 block (batch 2, seq 64, hidden 256, causal mask), a LLaMA decoder layer and a
  DistilBERT block -- skipped where transformers is not installed;
- BERT-base (12 layers, hidden 768, seq 64, no attention mask) exported by
  ``torch.onnx.export`` with the default (dynamo) exporter and the legacy one
  (``bert_base_onnx``: slow, about 30 s per export; the benchmark only).

Plan quality is the cost model's predicted latency on two devices: the H100 (datasheet
numbers) and ``REFERENCE_CPU``, the probe's numbers of the 2-core machine the baseline
was recorded on, frozen here so the numbers do not move with the machine.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "sample_graphs", ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from make_samples import block_chain, build_all, transformer_stack  # noqa: E402

from workbench.device import H100, Device  # noqa: E402

# runtime/calibrate.py's probe on the machine the baseline was recorded on (AMD EPYC,
# 2 threads, 2026-11-23), frozen so predictions are comparable across machines
REFERENCE_CPU = Device(
    name="AMD EPYC (2 threads), probe of 2026-11-23", kind="cpu",
    dram_bandwidth=31.3e9, launch_overhead=44.25e-6, units=2, peak_flops=91.6e9,
    cache_bytes=32 * 2**20, transaction_bytes=64,
    source="frozen copy of runtime.calibrate's probe on the baseline machine")
DEVICES = {"h100": H100, "cpu": REFERENCE_CPU}


def sample_cases() -> dict[str, Callable]:
    from workbench.frontends import load
    out = {name: (lambda g=g: g) for name, g in build_all().items()}
    for f in sorted((ROOT / "sample_graphs").glob("*.onnx")):
        out[f.name] = lambda f=f: load(str(f))
    return out


def synthetic_cases() -> dict[str, Callable]:
    from test_properties import random_graph
    out = {f"transformer_stack_{n}": (lambda n=n: transformer_stack(n))
           for n in (200, 500, 1000)}
    out["block_chain_12"] = lambda: block_chain(12)
    for seed in range(8):
        out[f"random_{seed}"] = lambda seed=seed: random_graph(seed, 24)
    return out


def _causal_mask(torch, batch, seq):
    m = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
    return m[None, None].expand(batch, 1, seq, seq).contiguous()


def gpt2_block(batch=2, seq=64, hidden=256, heads=4):
    """A transformers GPT2Block as ``from_torch`` imports it (the block the issue
    measured stitch losing to rules on), with the module and its arguments."""
    import torch
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    import workbench as wb
    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=hidden, n_head=heads, n_positions=max(1024, seq),
                     attn_implementation="eager")
    x = torch.randn(batch, seq, hidden)
    return wb.from_torch(GPT2Block(cfg).eval(), (x, None, _causal_mask(torch, batch, seq)),
                         name="gpt2_block")


def llama_layer(batch=2, seq=64, hidden=256, heads=4, inter=688):
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (LlamaDecoderLayer,
                                                          LlamaRotaryEmbedding)
    import workbench as wb
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, num_attention_heads=heads,
                      num_key_value_heads=heads, intermediate_size=inter,
                      attn_implementation="eager")
    x = torch.randn(batch, seq, hidden)
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(seq)[None].expand(batch, seq))
    args = (x, _causal_mask(torch, batch, seq), None, None, False, (cos, sin))
    return wb.from_torch(LlamaDecoderLayer(cfg, layer_idx=0).eval(), args,
                         name="llama_layer")


def distilbert_block(batch=2, seq=64, dim=256, heads=4, hidden=1024):
    import torch
    from transformers import DistilBertConfig
    from transformers.models.distilbert.modeling_distilbert import TransformerBlock
    import workbench as wb
    torch.manual_seed(0)
    cfg = DistilBertConfig(dim=dim, n_heads=heads, hidden_dim=hidden,
                           attn_implementation="eager")
    x = torch.randn(batch, seq, dim)
    return wb.from_torch(TransformerBlock(cfg).eval(), (x,), name="distilbert_block")


def transformers_cases() -> dict[str, Callable]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return {}
    return {"gpt2_block": gpt2_block, "llama_layer": llama_layer,
            "distilbert_block": distilbert_block}


def bert_base_onnx(path: Path, dynamo: bool = True, seq: int = 64):
    """BERT-base (transformers ``BertConfig()``: 12 layers, hidden 768; random weights,
    eval) exported to ``path`` as a user would, without an attention mask (masks do
    not import yet); token_type_ids are passed as an input: left to the model, its
    buffer's GatherElements does not import yet (issue 12 item 5). Returns the loaded
    graph."""
    import torch
    from transformers import BertConfig, BertModel
    from workbench.frontends import load
    path = Path(path)
    if not path.exists():
        torch.manual_seed(0)
        bert = BertModel(BertConfig()).eval()

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, ids, types):
                return self.bert(input_ids=ids, token_type_ids=types).last_hidden_state
        ids = torch.randint(0, 1000, (1, seq))
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.onnx.export(Encoder().eval(), (ids, torch.zeros_like(ids)), str(path),
                          dynamo=dynamo, input_names=["input_ids", "token_type_ids"])
    return load(str(path))


def all_cases(transformers: bool = True) -> dict[str, Callable]:
    out = {**sample_cases(), **synthetic_cases()}
    if transformers:
        out.update(transformers_cases())
    return out
