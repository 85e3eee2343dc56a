"""A zoo of real model architectures, built as users build them, small enough to test.

Each entry builds a transformers model from its config class with a SMALL random-weight
configuration (no download; seeded; eval mode) and gives its example inputs (and a
fresh set of the same shapes). The model is used as it is: its positional inputs are
forward's first parameters (``input_ids, attention_mask``; ``pixel_values``), its
outputs the ModelOutput's tensor fields (``last_hidden_state``, ``logits``), which is
what ``from_torch`` and ``torch.onnx.export`` both name them. The zoo is what the model-zoo test
(``tests/frontends/test_model_zoo.py``) and ``benchmarks/models.py`` run, and what a
user can load to try the workbench on a whole model::

    >>> from workbench.testing import zoo
    >>> m = zoo.build("bert")                                   # doctest: +SKIP
    >>> path = zoo.export_onnx(m, "/tmp/bert.onnx")             # doctest: +SKIP
    >>> g = zoo.import_torch(m)                                 # doctest: +SKIP

``export_onnx`` calls ``torch.onnx.export`` as a user does: its default (dynamo)
exporter and its default opset. It lives in the package, not in the tests, because
it is the workbench's own answer to "does my model import": the test, the benchmark
and a notebook use one definition. It imports torch and transformers on first use
only (``import workbench`` stays light).
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import WorkbenchError



@dataclass(frozen=True)
class Size:
    """The dimensions every zoo model is built with (text: batch x seq tokens; images:
    image x image pixels; Whisper: frames of mel features; Wav2Vec2: audio samples)."""
    batch: int
    seq: int
    vocab: int
    hidden: int
    heads: int
    layers: int
    ffn: int
    image: int
    frames: int
    samples: int


SIZES = {
    # the test's: the whole zoo builds, exports and runs in seconds, and every reshape
    # and head split is still non-trivial
    "tiny": Size(batch=2, seq=16, vocab=128, hidden=64, heads=4, layers=2, ffn=128,
                 image=32, frames=32, samples=800),
    # the benchmark's: 2 layers at BERT-mini-like widths (issue 13's whole-model runs)
    "small": Size(batch=2, seq=128, vocab=1000, hidden=256, heads=4, layers=2, ffn=1024,
                  image=64, frames=256, samples=6400),
    # 2 layers at BERT-base widths (768 wide, 12 heads, 3072 in the FFN), one sequence
    # of 128 tokens and BERT's vocabulary: the matmuls and heads a user's real model
    # has, at a depth a benchmark can afford
    "base": Size(batch=1, seq=128, vocab=30522, hidden=768, heads=12, layers=2, ffn=3072,
                 image=128, frames=400, samples=16000),
    # the small widths at a decoder's context length (GPT-2's 1024 tokens): attention,
    # causal for GPT-2 and LLaMA, takes most of the time
    "long": Size(batch=1, seq=1024, vocab=1000, hidden=256, heads=4, layers=2, ffn=1024,
                 image=64, frames=1024, samples=32000),
}


@dataclass(frozen=True)
class ZooModel:
    """One built model: the transformers module (eval mode), the example inputs it is
    exported and imported with, and a fresh set of the same shapes and dtypes.
    ``input_names`` name the positional inputs (the ONNX graph inputs and from_torch's),
    ``outputs`` the tensors the model returns (the ONNX outputs and from_torch's)."""
    name: str
    module: Any                       # the transformers model (torch.nn.Module), eval mode
    inputs: tuple                     # torch tensors, positional (forward's first params)
    fresh_inputs: tuple
    input_names: tuple[str, ...]      # forward's parameter names for them
    outputs: tuple[str, ...]          # the ModelOutput's tensor fields, in order

    def numpy_inputs(self, fresh: bool = False) -> dict[str, np.ndarray]:
        ins = self.fresh_inputs if fresh else self.inputs
        return {n: _to_numpy(t) for n, t in zip(self.input_names, ins)}

    def torch_outputs(self, fresh: bool = False) -> dict[str, np.ndarray]:
        """What torch eager computes: output name -> array."""
        return run_torch(self.module, self.fresh_inputs if fresh else self.inputs)


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:  # pragma: no cover - the torch extra is not installed
        raise WorkbenchError(f"the model zoo needs torch and transformers ({e}); install "
                             "them with pip install 'fusion-workbench[torch]'") from None
    return torch


def _ids(gen, shape, vocab):
    torch = _torch()
    return torch.randint(0, vocab, shape, generator=gen)


def _mask(gen, batch, seq):
    """An attention mask with padding: row b keeps its first seq - 3b tokens (at least
    one), so the mask changes the result and is not all ones."""
    torch = _torch()
    m = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(batch):
        keep = max(1, seq - 3 * b - int(torch.randint(0, 3, (1,), generator=gen)))
        m[b, keep:] = 0
    return m


def _text_inputs(z: Size, with_mask: bool):
    def make(gen):
        ids = _ids(gen, (z.batch, z.seq), z.vocab)
        return (ids, _mask(gen, z.batch, z.seq)) if with_mask else (ids,)
    return make, (("input_ids", "attention_mask") if with_mask else ("input_ids",))


def _bert(z: Size):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=z.vocab, hidden_size=z.hidden, num_hidden_layers=z.layers,
                     num_attention_heads=z.heads, intermediate_size=z.ffn,
                     max_position_embeddings=2 * z.seq, attn_implementation="eager")
    return BertModel(cfg, add_pooling_layer=False), "last_hidden_state", _text_inputs(z, True)


def _distilbert(z: Size):
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(vocab_size=z.vocab, dim=z.hidden, n_layers=z.layers, n_heads=z.heads,
                           hidden_dim=z.ffn, max_position_embeddings=2 * z.seq,
                           attn_implementation="eager")
    return DistilBertModel(cfg), "last_hidden_state", _text_inputs(z, True)


def _gpt2(z: Size):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=z.vocab, n_embd=z.hidden, n_layer=z.layers, n_head=z.heads,
                     n_inner=z.ffn, n_positions=2 * z.seq, use_cache=False,
                     attn_implementation="eager")
    return GPT2LMHeadModel(cfg), "logits", _text_inputs(z, False)


def _llama(z: Size):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=z.vocab, hidden_size=z.hidden, num_hidden_layers=z.layers,
                      num_attention_heads=z.heads, num_key_value_heads=z.heads // 2,
                      intermediate_size=z.ffn, max_position_embeddings=2 * z.seq, use_cache=False,
                      attn_implementation="eager")
    return LlamaForCausalLM(cfg), "logits", _text_inputs(z, False)


def _t5_encoder(z: Size):
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=z.vocab, d_model=z.hidden, d_kv=z.hidden // z.heads, d_ff=z.ffn,
                   num_layers=z.layers, num_heads=z.heads, use_cache=False,
                   attn_implementation="eager")
    return T5EncoderModel(cfg), "last_hidden_state", _text_inputs(z, True)


def _image_inputs(z: Size, channels=3):
    def make(gen):
        torch = _torch()
        return (torch.randn(z.batch, channels, z.image, z.image, generator=gen),)
    return make, ("pixel_values",)


def _vit(z: Size):
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(hidden_size=z.hidden, num_hidden_layers=z.layers, num_attention_heads=z.heads,
                    intermediate_size=z.ffn, image_size=z.image, patch_size=8,
                    attn_implementation="eager")
    return ViTModel(cfg, add_pooling_layer=False), "last_hidden_state", _image_inputs(z)


def _resnet(z: Size):
    from transformers import ResNetConfig, ResNetModel
    cfg = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                       layer_type="basic")
    return ResNetModel(cfg), "last_hidden_state", _image_inputs(z)


def _swin(z: Size):
    from transformers import SwinConfig, SwinModel
    # windows of 4 x 4 patches; the pooler's AdaptiveAvgPool1d exports to an as_strided
    cfg = SwinConfig(image_size=z.image, patch_size=4, embed_dim=z.hidden // 4, depths=[1, 1],
                     num_heads=[2, 4], window_size=4, attn_implementation="eager")
    return SwinModel(cfg), "last_hidden_state", _image_inputs(z)


def _mobilenet_v2(z: Size):
    from transformers import MobileNetV2Config, MobileNetV2Model
    # depthwise convolutions with TensorFlow "same" padding (an explicit pad before each)
    cfg = MobileNetV2Config(image_size=z.image, depth_multiplier=0.35)
    return MobileNetV2Model(cfg), "last_hidden_state", _image_inputs(z)


def _audio_features(z: Size):
    def make(gen):
        torch = _torch()
        return (torch.randn(z.batch, 16, z.frames, generator=gen),)  # [batch, mel, frames]
    return make


def _whisper_encoder(z: Size):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = WhisperConfig(vocab_size=z.vocab, num_mel_bins=16, d_model=z.hidden,
                        encoder_layers=z.layers, encoder_attention_heads=z.heads,
                        encoder_ffn_dim=z.ffn, decoder_layers=1, decoder_attention_heads=z.heads,
                        decoder_ffn_dim=z.ffn, max_source_positions=z.frames // 2,
                        attn_implementation="eager")
    # the encoder sees max_source_positions * 2 frames (its second conv has stride 2)
    return WhisperEncoder(cfg), "last_hidden_state", (_audio_features(z), ("input_features",))


def _wav2vec2(z: Size):
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    cfg = Wav2Vec2Config(vocab_size=z.vocab, hidden_size=z.hidden, num_hidden_layers=z.layers,
                         num_attention_heads=z.heads, intermediate_size=z.ffn,
                         conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                         feat_extract_norm="group", do_stable_layer_norm=False,
                         mask_time_prob=0.0, attn_implementation="eager")

    def make(gen):
        torch = _torch()
        return (torch.randn(z.batch, z.samples, generator=gen),)    # raw audio samples
    return Wav2Vec2Model(cfg), "last_hidden_state", (make, ("input_values",))


_BUILDERS: dict[str, Callable] = {
    "bert": _bert, "distilbert": _distilbert, "gpt2": _gpt2, "llama": _llama,
    "t5_encoder": _t5_encoder, "vit": _vit, "resnet": _resnet, "swin": _swin,
    "mobilenet_v2": _mobilenet_v2, "whisper_encoder": _whisper_encoder, "wav2vec2": _wav2vec2,
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)


# -- the families of issue 44's benchmark (benchmarks/models.py --families): models as
# users export them that the project's own tests never tuned for; built at the same
# zoo sizes, not part of the model-zoo test's MODELS


def _decoder(config_name: str, model_name: str):
    def build(z: Size):
        import transformers
        cfg = getattr(transformers, config_name)(
            vocab_size=z.vocab, hidden_size=z.hidden, num_hidden_layers=z.layers,
            num_attention_heads=z.heads, num_key_value_heads=z.heads // 2,
            intermediate_size=z.ffn, max_position_embeddings=2 * z.seq, use_cache=False,
            attn_implementation="eager")
        return getattr(transformers, model_name)(cfg), "logits", _text_inputs(z, False)
    return build


def _seq2seq_inputs(z: Size):
    """input_ids, attention_mask and decoder_input_ids (half as many target tokens)."""
    def make(gen):
        return (_ids(gen, (z.batch, z.seq), z.vocab), _mask(gen, z.batch, z.seq),
                _ids(gen, (z.batch, z.seq // 2), z.vocab))
    return make, ("input_ids", "attention_mask", "decoder_input_ids")


def _encoder_decoder(config_name: str, model_name: str, output: str):
    def build(z: Size):
        import transformers
        cfg = getattr(transformers, config_name)(
            vocab_size=z.vocab, d_model=z.hidden, encoder_layers=z.layers,
            decoder_layers=z.layers, encoder_attention_heads=z.heads,
            decoder_attention_heads=z.heads, encoder_ffn_dim=z.ffn, decoder_ffn_dim=z.ffn,
            max_position_embeddings=2 * z.seq, pad_token_id=1, decoder_start_token_id=2,
            use_cache=False, attn_implementation="eager")
        return (getattr(transformers, model_name)(cfg), output, _seq2seq_inputs(z))
    return build


def efficientnet(image: int, width: float = 1.0, depth: float = 1.0,
                 hidden_dim: int = 1280, pooled: bool = False):
    """transformers' EfficientNet (B0: width and depth 1.0, hidden 1280; the config's
    default is B7's) with random weights moved off their initial values, whose batch
    norms zero the pooled features; its pooler is ``AvgPool2d(hidden_dim,
    ceil_mode=True)`` over the last map, the window larger than its map that issue 44
    found as a cliff. ``pooled``: a module returning only ``pooler_output`` (one tensor,
    for an export with one named output). Call ``torch.manual_seed`` first."""
    torch = _torch()
    from transformers import EfficientNetConfig, EfficientNetModel
    with _quiet():
        model = EfficientNetModel(EfficientNetConfig(
            image_size=image, width_coefficient=width, depth_coefficient=depth,
            hidden_dim=hidden_dim)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return _Pooled(model).eval() if pooled else model


def _Pooled(model):
    torch = _torch()

    class Pooled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x).pooler_output
    return Pooled(model)


def _efficientnet(z: Size):
    return efficientnet(z.image), "pooler_output", _image_inputs(z)


def _convnext(z: Size):
    from transformers import ConvNextConfig, ConvNextModel
    cfg = ConvNextConfig(hidden_sizes=[z.hidden // 4, z.hidden // 2], depths=[1, 1],
                         num_stages=2, image_size=z.image)
    return ConvNextModel(cfg), "last_hidden_state", _image_inputs(z)


def _clip(z: Size):
    from transformers import CLIPConfig, CLIPModel
    common = dict(hidden_size=z.hidden, num_hidden_layers=z.layers,
                  num_attention_heads=z.heads, intermediate_size=z.ffn,
                  attn_implementation="eager")
    cfg = CLIPConfig(text_config=dict(vocab_size=z.vocab, max_position_embeddings=z.seq,
                                      **common),
                     vision_config=dict(image_size=z.image, patch_size=8, **common),
                     projection_dim=z.hidden // 2)

    def make(gen):
        torch = _torch()
        return (_ids(gen, (z.batch, z.seq), z.vocab),
                torch.randn(z.batch, 3, z.image, z.image, generator=gen),
                _mask(gen, z.batch, z.seq))
    return CLIPModel(cfg), "logits_per_image", (make, ("input_ids", "pixel_values",
                                                       "attention_mask"))


def _mamba(z: Size):
    from transformers import MambaConfig, MambaModel
    # the selective scan without its CUDA kernels: transformers' sequential path, which
    # the exporter unrolls over the tokens (a short sequence keeps the graph in bounds)
    cfg = MambaConfig(vocab_size=z.vocab, hidden_size=z.hidden // 2, state_size=16,
                      num_hidden_layers=z.layers, use_cache=False, use_mambapy=False)
    seq = max(4, z.seq // 8)

    def make(gen):
        return (_ids(gen, (z.batch, seq), z.vocab),)
    return MambaModel(cfg), "last_hidden_state", (make, ("input_ids",))


_FAMILIES: dict[str, Callable] = {
    "mistral": _decoder("MistralConfig", "MistralForCausalLM"),
    "qwen2": _decoder("Qwen2Config", "Qwen2ForCausalLM"),
    "bart": _encoder_decoder("BartConfig", "BartModel", "last_hidden_state"),
    "marian": _encoder_decoder("MarianConfig", "MarianMTModel", "logits"),
    "efficientnet": _efficientnet, "convnext": _convnext, "clip": _clip, "mamba": _mamba,
}
# issue 44's families: decoders, encoder-decoders, vision, CLIP, a selective scan
FAMILIES: tuple[str, ...] = ("mistral", "qwen2", "bart", "marian", "swin", "convnext",
                             "efficientnet", "mobilenet_v2", "clip", "mamba")
ALL_MODELS: tuple[str, ...] = MODELS + tuple(_FAMILIES)
_BUILDERS.update(_FAMILIES)


DTYPES = ("float32", "bfloat16")


def build(name: str, seed: int = 0, size: str = "tiny", dtype: str = "float32") -> ZooModel:
    """Build zoo model ``name`` (one of :data:`MODELS`) at ``size`` (a key of
    :data:`SIZES`) with weights and inputs seeded by ``seed``; ``dtype="bfloat16"``
    converts the module and its float inputs (pixels, audio) to bfloat16 after the
    float32 weights are drawn, as a user's ``model.to(torch.bfloat16)`` does."""
    if name not in _BUILDERS:
        raise WorkbenchError(f"unknown zoo model {name!r}; choose one of "
                             f"{', '.join(ALL_MODELS)}")
    if size not in SIZES:
        raise WorkbenchError(f"unknown zoo size {size!r}; choose one of {', '.join(SIZES)}")
    if dtype not in DTYPES:
        raise WorkbenchError(f"unknown zoo dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    torch = _torch()
    torch.manual_seed(seed)
    with _quiet():
        model, output, (make_inputs, names) = _BUILDERS[name](SIZES[size])
    model.eval()
    gen = torch.Generator().manual_seed(seed + 1)
    inputs, fresh = make_inputs(gen), make_inputs(gen)
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
        inputs, fresh = (tuple(t.to(torch.bfloat16) if t.is_floating_point() else t
                               for t in ins) for ins in (inputs, fresh))
    outputs = tuple(run_torch(model, inputs))
    if output not in outputs:   # pragma: no cover - a transformers change
        raise WorkbenchError(f"zoo model {name}: {output} missing from its outputs {outputs}")
    return ZooModel(name, model, inputs, fresh, names, outputs)


def run_torch(model, inputs, kwargs=None) -> dict[str, np.ndarray]:
    """What torch eager computes from positional ``inputs`` (and ``kwargs``, say an
    attention_mask): output name -> array."""
    torch = _torch()
    with torch.no_grad():
        out = model(*inputs, **(kwargs or {}))
    return {k: _to_numpy(v) for k, v in out.items() if isinstance(v, torch.Tensor)}


def _to_numpy(t) -> np.ndarray:
    from ..frontends.torch.common import tensor_numpy
    return tensor_numpy(t)


def export_onnx(m: ZooModel, path: str | os.PathLike, attention_mask=None,
                dynamo: bool = True) -> Path:
    """``torch.onnx.export`` of the model as users call it: the default exporter
    (dynamo, which needs onnxscript) and its default opset; one file (weights
    inside). ``attention_mask`` (a torch tensor, batch x tokens of 1 and 0): passed
    by name after the positional inputs, as ``model(**tokenizer(texts,
    padding=True))`` does -- a decoder's forward takes it after ``past_key_values``
    -- and the graph's last input. ``dynamo=False``: the legacy TorchScript exporter,
    the other form users export with (opset 17 where its default is older)."""
    torch = _torch()
    path = Path(path)
    kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
    names = list(m.input_names) + list(kwargs)
    with _quiet(), torch.no_grad():
        if dynamo:
            torch.onnx.export(m.module, m.inputs, str(path), kwargs=kwargs, input_names=names,
                              output_names=list(m.outputs), external_data=False)
        else:
            torch.onnx.export(m.module, m.inputs, str(path), kwargs=kwargs, input_names=names,
                              output_names=list(m.outputs), dynamo=False, opset_version=17)
    return path


def import_torch(m: ZooModel):
    """The model through :func:`workbench.from_torch` on its example inputs."""
    from ..frontends.torch import from_torch
    return from_torch(m.module, m.inputs, name=m.name)


@contextlib.contextmanager
def _quiet():
    """The exporter and transformers print progress, deprecation chatter and log lines
    about optional packages (torchvision) at every export."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch._dynamo", "transformers")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
