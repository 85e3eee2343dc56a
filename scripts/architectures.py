#!/usr/bin/env python
"""Beyond the zoo: more transformers architectures, as users bring them, through both
import paths, planned with ``stitch``, run on the CPU backend and compared with torch
eager.

    .venv/bin/python scripts/architectures.py                  # every architecture
    .venv/bin/python scripts/architectures.py roberta swin      # some

Each is built from its transformers config class with a tiny random-weight
configuration (no download; seeded; eval mode; eager attention), then

- ``from_torch(model, inputs)``, and
- ``torch.onnx.export`` (default exporter and opset) then ``load``,

each planned by ``stitch`` and run on its example inputs: kernels, and the largest
``max |y - r| / max |r|`` over the outputs torch returns (an all-zero output, as some
random-init models give, is reported, not divided by). A failure is the importer's
one-line error. The zoo (``workbench/zoo.py``) holds the architectures the test suite
runs; this script runs the others and writes
``benchmarks/results/architectures-<date>.md`` (and ``.json``). Exits 1 when any
fails to import or is off by more than ``TOLERANCE``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOLERANCE = 1e-4          # as the zoo test's
BATCH, SEQ, IMAGE = 2, 16, 32


def _text(config: str, model: str, mask: bool = True, **kw):
    def build(T, torch):
        cfg = getattr(T, config)(**kw)
        cfg._attn_implementation = "eager"
        ids = torch.randint(0, 100, (BATCH, SEQ))
        padded = torch.ones(BATCH, SEQ, dtype=torch.int64)
        padded[1, SEQ - 4:] = 0                     # the mask must matter
        m = getattr(T, model)(cfg).eval()
        return m, ((ids, padded) if mask else (ids,)), \
            (("input_ids", "attention_mask") if mask else ("input_ids",))
    return build


def _image(config: str, model: str, size: int = IMAGE, **kw):
    def build(T, torch):
        cfg = getattr(T, config)(**kw)
        cfg._attn_implementation = "eager"
        return getattr(T, model)(cfg).eval(), (torch.randn(BATCH, 3, size, size),), \
            ("pixel_values",)
    return build


_H = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
_LM = dict(vocab_size=100, num_key_value_heads=2, use_cache=False, **_H)
ARCHITECTURES = {
    # encoders with a padding mask
    "roberta": _text("RobertaConfig", "RobertaModel", vocab_size=100,
                     max_position_embeddings=40, **_H),
    "xlm_roberta": _text("XLMRobertaConfig", "XLMRobertaModel", vocab_size=100,
                         max_position_embeddings=40, **_H),
    "albert": _text("AlbertConfig", "AlbertModel", vocab_size=100, embedding_size=32,
                    max_position_embeddings=40, **_H),
    "electra": _text("ElectraConfig", "ElectraModel", vocab_size=100, embedding_size=32,
                     max_position_embeddings=40, **_H),
    "deberta_v2": _text("DebertaV2Config", "DebertaV2Model", vocab_size=100,
                        max_position_embeddings=40, **_H),
    "mpnet": _text("MPNetConfig", "MPNetModel", vocab_size=100, max_position_embeddings=40,
                   **_H),
    # decoders with their LM heads (causal masks, rotary or ALiBi positions, GQA)
    "qwen2": _text("Qwen2Config", "Qwen2ForCausalLM", mask=False, **_LM),
    "mistral": _text("MistralConfig", "MistralForCausalLM", mask=False, **_LM),
    "phi3": _text("Phi3Config", "Phi3ForCausalLM", mask=False, pad_token_id=0, **_LM),
    "gemma": _text("GemmaConfig", "GemmaForCausalLM", mask=False, head_dim=16, **_LM),
    "gpt_neox": _text("GPTNeoXConfig", "GPTNeoXForCausalLM", mask=False, vocab_size=100,
                      use_cache=False, **_H),
    "opt": _text("OPTConfig", "OPTForCausalLM", mask=False, vocab_size=100, hidden_size=64,
                 num_hidden_layers=2, num_attention_heads=4, ffn_dim=128,
                 word_embed_proj_dim=64, max_position_embeddings=40, use_cache=False),
    "bloom": _text("BloomConfig", "BloomForCausalLM", mask=False, vocab_size=100,
                   hidden_size=64, n_layer=2, n_head=4, use_cache=False),
    "falcon": _text("FalconConfig", "FalconForCausalLM", mask=False, vocab_size=100,
                    hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    use_cache=False),
    # vision
    "deit": _image("DeiTConfig", "DeiTModel", image_size=IMAGE, patch_size=8, **_H),
    "clip_vision": _image("CLIPVisionConfig", "CLIPVisionModel", image_size=IMAGE,
                          patch_size=8, **_H),
    "convnext": _image("ConvNextConfig", "ConvNextModel", num_stages=2, hidden_sizes=[16, 32],
                       depths=[1, 1]),
    "regnet": _image("RegNetConfig", "RegNetModel", size=64, embedding_size=16,
                     hidden_sizes=[16, 32], depths=[1, 1], groups_width=8),
    "segformer": _image("SegformerConfig", "SegformerModel", size=64, hidden_sizes=[16, 32],
                        depths=[1, 1], num_encoder_blocks=2, sr_ratios=[2, 1],
                        num_attention_heads=[1, 2], strides=[4, 2], patch_sizes=[7, 3],
                        decoder_hidden_size=32),
    "mobilevit": _image("MobileViTConfig", "MobileViTModel", size=64, image_size=64,
                        hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
}


def _numpy(t) -> np.ndarray:
    from workbench.frontends.torch.common import tensor_numpy
    return tensor_numpy(t)


def _error(got: dict, want: dict) -> float | str:
    errs = []
    for k, r in want.items():
        if k not in got:
            return f"output {k} missing"
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if scale == 0.0:
            errs.append(float(np.max(np.abs(got[k]))) if r.size else 0.0)
            continue
        errs.append(float(np.max(np.abs(np.asarray(got[k], np.float64) - r)) / scale))
    return max(errs)


def _planned(g, feeds: dict) -> tuple[int, dict]:
    import workbench as wb
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    return len(s.plan.groups), s.program().run(feeds)


def probe(name: str) -> dict:
    import torch
    import transformers
    import workbench as wb
    from workbench.zoo import _quiet
    torch.manual_seed(0)
    with _quiet():
        model, inputs, names = ARCHITECTURES[name](transformers, torch)
        with torch.no_grad():
            out = model(*inputs)
    want = {k: _numpy(v) for k, v in out.items() if isinstance(v, torch.Tensor)}
    zero = sorted(k for k, v in want.items() if v.size and not np.any(v))
    feeds = {n: _numpy(t) for n, t in zip(names, inputs)}
    rec: dict = {"architecture": name, "outputs": sorted(want), "all_zero_outputs": zero}
    for path in ("from_torch", "onnx"):
        t0 = time.perf_counter()
        try:
            if path == "from_torch":
                g = wb.from_torch(model, inputs)
            else:
                with tempfile.TemporaryDirectory() as tmp, _quiet(), torch.no_grad():
                    f = os.path.join(tmp, "model.onnx")
                    torch.onnx.export(model, inputs, f, input_names=list(names),
                                      output_names=list(want), external_data=False)
                    g = wb.load(f)
            kernels, got = _planned(g, feeds)
            err = _error(got, want)
            rec[path] = {"nodes": len(g.nodes), "kernels": kernels, "error": err,
                         "ok": isinstance(err, float) and err <= TOLERANCE}
        except Exception as e:      # noqa: BLE001 -- reported, the others still run
            rec[path] = {"failed": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}",
                         "ok": False}
        rec[path]["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def markdown(res: dict) -> str:
    lines = [f"# More architectures through both imports ({res['date']})", "",
             f"{res['machine']}. transformers {res['transformers']}, torch {res['torch']}. "
             f"Tiny random-weight configurations, batch {BATCH}, {SEQ} tokens or "
             f"{IMAGE}-64 px images; `stitch`, CPU backend; error: max over outputs of "
             f"max |y - torch| / max |torch| (tolerance {TOLERANCE:g}).", "",
             "| architecture | from_torch: nodes / kernels / error | ONNX export: nodes / "
             "kernels / error | note |", "|---|---|---|---|"]
    for r in res["results"]:
        cells = []
        for path in ("from_torch", "onnx"):
            p = r[path]
            cells.append(f"failed: {p['failed']}" if "failed" in p else
                         f"{p['nodes']} / {p['kernels']} / {p['error']:.1e}"
                         if isinstance(p["error"], float) else str(p["error"]))
        note = (f"torch's own {', '.join(r['all_zero_outputs'])} all zeros (random init)"
                if r["all_zero_outputs"] else "")
        lines.append(f"| {r['architecture']} | {cells[0]} | {cells[1]} | {note} |")
    ok = sum(r["from_torch"]["ok"] and r["onnx"]["ok"] for r in res["results"])
    lines += ["", f"{ok} of {len(res['results'])} pass both ways."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=list(ARCHITECTURES),
                    help="architectures (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = ap.parse_args(argv)
    unknown = [n for n in a.names if n not in ARCHITECTURES]
    if unknown:
        print(f"unknown architecture(s) {', '.join(unknown)}; choose from "
              f"{', '.join(ARCHITECTURES)}", file=sys.stderr)
        return 2
    import platform

    import torch
    import transformers
    res = {"date": dt.date.today().isoformat(), "transformers": transformers.__version__,
           "torch": torch.__version__,
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "results": []}
    for name in a.names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        res["results"].append(probe(name))
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"architectures-{res['date']}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    stem.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0 if all(r["from_torch"]["ok"] and r["onnx"]["ok"] for r in res["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
