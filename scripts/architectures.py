#!/usr/bin/env python
"""Beyond the zoo: more architectures, as users bring them, through both import paths,
planned with ``stitch``, run on the CPU backend (or, ``--backend cuda-emu``, the GPU's
plans in the CUDA emulator) and compared with torch eager.

    .venv/bin/python scripts/architectures.py                  # every architecture
    .venv/bin/python scripts/architectures.py roberta swin      # some
    .venv/bin/python scripts/architectures.py --backend cuda-emu

Transformers architectures are built from their config classes with tiny random-weight
configurations (no download; seeded; eval mode; eager attention); torchvision's models
(``tv_*``) by ``torchvision.models.get_model`` with random weights, whole, on 64 px
images (more where a model needs it). Each is then imported two ways,

- ``from_torch(model, inputs)``, and
- ``torch.onnx.export`` (default exporter and opset) then ``load``,

each planned by ``stitch`` and run on its example inputs: kernels, and the largest
``max |y - r| / max |r|`` over the outputs torch returns (an all-zero output, as some
random-init models give, is reported, not divided by). A failure is the importer's
one-line error. The zoo (``workbench/testing/zoo.py``) holds the architectures the test suite
runs; this script runs the others and writes
``benchmarks/results/architectures-<date>.md`` (and ``.json``). Exits 1 when any
fails to import or is off by more than ``FRAMEWORK_TOLERANCE`` (workbench.tolerance).

torchvision must match the torch it runs with. The CPU build of torch 2.13 the project
installs has no torchvision beside it (PyPI's fails to import with it: ``operator
torchvision::nms does not exist``), so without one the ``tv_*`` models are skipped, and
named ones refused. To run them, a venv of their own:
``python3 -m venv tv && tv/bin/pip install torch==2.14.1 torchvision==0.29.1 -e '.[test]'``
then ``tv/bin/python scripts/architectures.py``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.tolerance import FRAMEWORK_TOLERANCE  # noqa: E402

BATCH, SEQ, IMAGE = 2, 16, 32


def _text(config: str, model: str, mask: bool = True, **kw):
    def build(torch):
        import transformers as T
        cfg = getattr(T, config)(**kw)
        cfg._attn_implementation = "eager"
        ids = torch.randint(0, 100, (BATCH, SEQ))
        padded = torch.ones(BATCH, SEQ, dtype=torch.int64)
        padded[1, SEQ - 4:] = 0                     # the mask must matter
        m = getattr(T, model)(cfg).eval()
        return m, ((ids, padded) if mask else (ids,)), \
            (("input_ids", "attention_mask") if mask else ("input_ids",))
    return build


def _model(config: str, model: str, inputs, names: tuple, **kw):
    """A model built from its config class: ``inputs(torch)`` its positional example
    inputs, ``names`` theirs (as its forward names them)."""
    def build(torch):
        import transformers as T
        cfg = getattr(T, config)(**kw)
        cfg._attn_implementation = "eager"
        return getattr(T, model)(cfg).eval(), inputs(torch), names
    return build


def _image(config: str, model: str, size: int = IMAGE, **kw):
    return _model(config, model, lambda torch: (torch.randn(BATCH, 3, size, size),),
                  ("pixel_values",), **kw)


def _vocoder(config: str, model: str, mel: int, **kw):
    """A vocoder: a mel spectrogram [batch, frames, mel] in, a waveform out."""
    return _model(config, model, lambda torch: (torch.randn(BATCH, SEQ, mel),),
                  ("spectrogram",), model_in_dim=mel, **kw)


def _vision(model: str, shape=(BATCH, 3, 64, 64), he: bool = False, **kw):
    """A torchvision model as ``torchvision.models.get_model`` builds it (random
    weights). ``he``: its convolutions and linears He-initialized instead, where the
    model's own initialization fades the signal (GoogLeNet, Inception v3, ShuffleNet,
    MNASNet and DeepLabv3 gave the same output for every image, the bias alone, which
    any import matches; ViT's head starts at zero). Not everywhere: so initialized,
    EfficientNetV2 and MaxViT amplify rounding (torch's own float32 and float64 outputs
    differ by 0.54 and 1e-4 of their largest)."""
    def build(torch):
        from torchvision import models
        m = models.get_model(model, weights=None, **kw).eval()
        for layer in m.modules() if he else ():
            if isinstance(layer, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
                                  torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
        # the input named as forward names it, as from_torch does
        return m, (torch.randn(*shape),), tuple(inspect.signature(m.forward).parameters)[:1]
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
    "dinov2": _image("Dinov2Config", "Dinov2Model", image_size=IMAGE, patch_size=8, **_H),
    "beit": _image("BeitConfig", "BeitModel", image_size=IMAGE, patch_size=8,
                   use_relative_position_bias=True, **_H),
    # dense prediction: a ViT's features reassembled and upsampled (transposed
    # convolutions), fused, to a depth map
    "dpt": _model("DPTConfig", "DPTForDepthEstimation",
                  lambda torch: (torch.randn(BATCH, 3, IMAGE, IMAGE),), ("pixel_values",),
                  image_size=IMAGE, patch_size=8, hidden_size=64, num_hidden_layers=4,
                  num_attention_heads=4, intermediate_size=128,
                  backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 32, 64, 64],
                  fusion_hidden_size=32, head_in_index=-1),
    # video: tubelets by a 3-D convolution
    "videomae": _model("VideoMAEConfig", "VideoMAEModel",
                       lambda torch: (torch.randn(BATCH, 4, 3, IMAGE, IMAGE),),
                       ("pixel_values",), image_size=IMAGE, patch_size=8, num_frames=4,
                       tubelet_size=2, **_H),
    # audio in: a waveform's convolutions, a spectrogram's patches
    "hubert": _model("HubertConfig", "HubertModel", lambda torch: (torch.randn(BATCH, 4000),),
                     ("input_values",), conv_dim=[32, 32], conv_stride=[5, 2],
                     conv_kernel=[10, 3], num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=4, **_H),
    "ast": _model("ASTConfig", "ASTModel", lambda torch: (torch.randn(BATCH, 64, 32),),
                  ("input_values",), max_length=64, num_mel_bins=32, patch_size=8,
                  frequency_stride=8, time_stride=8, **_H),
    # encoder-decoder and two towers
    "bart": _model("BartConfig", "BartModel",
                   lambda torch: (torch.randint(0, 100, (BATCH, SEQ)),
                                  torch.ones(BATCH, SEQ, dtype=torch.int64),
                                  torch.randint(0, 100, (BATCH, SEQ))),
                   ("input_ids", "attention_mask", "decoder_input_ids"), vocab_size=100,
                   d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                   max_position_embeddings=40, use_cache=False),
    "clip": _model("CLIPConfig", "CLIPModel",
                   lambda torch: (torch.randint(0, 100, (BATCH, SEQ)),
                                  torch.randn(BATCH, 3, IMAGE, IMAGE)),
                   ("input_ids", "pixel_values"),
                   text_config=dict(vocab_size=100, max_position_embeddings=40, **_H),
                   vision_config=dict(image_size=IMAGE, patch_size=8, **_H), projection_dim=32),
    # audio out: transposed convolutions upsampling a spectrogram to a waveform
    "speecht5_hifigan": _vocoder("SpeechT5HifiGanConfig", "SpeechT5HifiGan", mel=16,
                                 upsample_initial_channel=32, upsample_rates=[4, 4],
                                 upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3, 7],
                                 resblock_dilation_sizes=[[1, 3], [1, 3]]),
}
# torchvision's models as users take them, whole (heads, auxiliary branches in eval mode);
# 64 px images but where a model needs more
TORCHVISION = {
    "tv_" + name: _vision(name, **kw) for name, kw in {
        "resnet18": {}, "resnet50": {}, "resnext50_32x4d": {}, "wide_resnet50_2": {},
        "mobilenet_v2": {}, "mobilenet_v3_small": {}, "mobilenet_v3_large": {},
        "efficientnet_b0": {}, "efficientnet_v2_s": {}, "mnasnet1_0": {"he": True},
        "regnet_y_400mf": {}, "densenet121": {}, "squeezenet1_1": {},
        "shufflenet_v2_x1_0": {"he": True}, "googlenet": {"he": True},
        "inception_v3": {"shape": (BATCH, 3, 96, 96), "he": True},
        "vgg11_bn": {}, "alexnet": {"shape": (BATCH, 3, 96, 96)},
        "convnext_tiny": {}, "vit_b_16": {"image_size": 64, "he": True},
        "swin_t": {}, "maxvit_t": {"shape": (BATCH, 3, 224, 224)},
        "fcn_resnet50": {"aux_loss": True, "weights_backbone": None},
        "deeplabv3_mobilenet_v3_large": {"weights_backbone": None, "he": True},
        "lraspp_mobilenet_v3_large": {"weights_backbone": None},
        "r3d_18": {"shape": (BATCH, 3, 8, 32, 32)},
    }.items()}
ARCHITECTURES.update(TORCHVISION)


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


_BACKEND_TEXT = {"cpu": "CPU backend",
                 "cuda-emu": "planned for the H100, its CUDA kernels run in the CUDA emulator"}


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"


def _planned(g, feeds: dict, backend: str = "cpu") -> tuple[int, dict]:
    import workbench as wb
    s = wb.Session(g, backend=backend)
    s.auto("stitch")
    return len(s.plan.groups), s.program().run(feeds)


def probe(name: str, backend: str = "cpu") -> dict:
    import torch
    import workbench as wb
    from workbench.testing.zoo import _quiet
    torch.manual_seed(0)
    try:
        with _quiet():
            model, inputs, names = ARCHITECTURES[name](torch)
            with torch.no_grad():
                out = model(*inputs)
    except Exception as e:          # noqa: BLE001 -- torch's side: reported, not ours
        failed = {"failed": f"building it in torch: {_first_line(e)}", "ok": False,
                  "seconds": 0.0}
        return {"architecture": name, "outputs": [], "all_zero_outputs": [],
                "same_for_every_example": [],
                "from_torch": failed, "onnx": failed}
    if isinstance(out, torch.Tensor):   # torchvision's classifiers; from_torch's name for it
        out = {"output": out}
    want = {k: _numpy(v) for k, v in out.items() if isinstance(v, torch.Tensor)}
    zero = sorted(k for k, v in want.items() if v.size and not np.any(v))
    # an output that hardly varies from one example to the next checks little
    same = sorted(k for k, v in want.items() if k not in zero and v.ndim and len(v) > 1
                  and np.max(np.ptp(v, axis=0)) <= 1e-4 * np.max(np.abs(v)))
    feeds = {n: _numpy(t) for n, t in zip(names, inputs)}
    rec: dict = {"architecture": name, "outputs": sorted(want), "all_zero_outputs": zero,
                 "same_for_every_example": same}
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
            kernels, got = _planned(g, feeds, backend)
            err = _error(got, want)
            rec[path] = {"nodes": len(g.nodes), "kernels": kernels, "error": err,
                         "ok": isinstance(err, float) and err <= FRAMEWORK_TOLERANCE}
        except Exception as e:      # noqa: BLE001 -- reported, the others still run
            rec[path] = {"failed": _first_line(e), "ok": False}
        rec[path]["seconds"] = round(time.perf_counter() - t0, 1)
    return rec


def markdown(res: dict) -> str:
    lines = [f"# More architectures through both imports ({res['date']})", "",
             f"{res['machine']}. transformers {res['transformers']}, torch {res['torch']}, "
             f"torchvision {res['torchvision']}. Tiny random-weight configurations, batch "
             f"{BATCH}, {SEQ} tokens or {IMAGE}-64 px images (torchvision's `tv_*`: 64 px, "
             f"more where the model needs it); `stitch`, "
             f"{_BACKEND_TEXT[res.get('backend', 'cpu')]}; error: max over "
             f"outputs of max |y - torch| / max |torch| (tolerance {FRAMEWORK_TOLERANCE:g}).", "",
             "| architecture | from_torch: nodes / kernels / error | ONNX export: nodes / "
             "kernels / error | note |", "|---|---|---|---|"]
    for r in res["results"]:
        cells = []
        for path in ("from_torch", "onnx"):
            p = r[path]
            cells.append(f"failed: {p['failed']}" if "failed" in p else
                         f"{p['nodes']} / {p['kernels']} / {p['error']:.1e}"
                         if isinstance(p["error"], float) else str(p["error"]))
        note = "; ".join(
            ([f"torch's own {', '.join(r['all_zero_outputs'])} all zeros (random init)"]
             if r["all_zero_outputs"] else []) +
            ([f"{', '.join(r['same_for_every_example'])} nearly the same for each example"]
             if r.get("same_for_every_example") else []))
        lines.append(f"| {r['architecture']} | {cells[0]} | {cells[1]} | {note} |")
    ok = sum(r["from_torch"]["ok"] and r["onnx"]["ok"] for r in res["results"])
    lines += ["", f"{ok} of {len(res['results'])} pass both ways."]
    if res["skipped"]:
        lines += ["", f"Skipped (torchvision does not import): {', '.join(res['skipped'])}."]
    return "\n".join(lines) + "\n"


def _torchvision():
    """torchvision, or why it does not import (a build for another torch)."""
    try:
        import torchvision
        return torchvision
    except Exception as e:          # noqa: BLE001 -- reported: its models are skipped
        return _first_line(e)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="architectures (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--backend", default="cpu", choices=sorted(_BACKEND_TEXT),
                    help="cpu (default), or cuda-emu: the H100's plans, their CUDA kernels "
                         "run in the CUDA emulator")
    a = ap.parse_args(argv)
    names = a.names or list(ARCHITECTURES)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        print(f"unknown architecture(s) {', '.join(unknown)}; choose from "
              f"{', '.join(ARCHITECTURES)}", file=sys.stderr)
        return 2
    import platform

    import torch
    import transformers
    vision = _torchvision()
    skipped = [n for n in names if n in TORCHVISION] if isinstance(vision, str) else []
    if skipped and a.names:
        print(f"{', '.join(skipped)} need torchvision, which does not import here: "
              f"{vision}\n(see this script's docstring for a venv that has it)",
              file=sys.stderr)
        return 2
    if skipped:
        names = [n for n in names if n not in skipped]
        print(f"skipping the {len(skipped)} torchvision models: {vision}", file=sys.stderr)
    res = {"date": dt.date.today().isoformat(), "transformers": transformers.__version__,
           "torch": torch.__version__,
           "torchvision": vision if isinstance(vision, str) else vision.__version__,
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
           "skipped": skipped, "backend": a.backend, "results": []}
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        res["results"].append(probe(name, a.backend))
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / (f"architectures-{res['date']}"
                     + ("" if a.backend == "cpu" else f"-{a.backend}"))
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    stem.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0 if all(r["from_torch"]["ok"] and r["onnx"]["ok"] for r in res["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
