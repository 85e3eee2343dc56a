"""Real CNN and audio models, built as users build them (transformers config classes,
small, random weights, eval mode): a ResNet, a Wav2Vec2 (conv1d feature encoder with
GroupNorm) and a Whisper encoder (conv1d). Each imports through ``wb.from_torch`` and
through ONNX (``torch.onnx.export``, its default exporter), runs on the cpu backend
and matches torch on the export input and on a fresh one."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript")     # torch.onnx.export's default exporter needs it

import workbench as wb  # noqa: E402
from workbench import onnx_backend  # noqa: E402
from workbench.tolerance import relative_to_largest


class _Hidden(torch.nn.Module):
    """The model's last hidden state (one tensor out, as a user would take it)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).last_hidden_state


def _resnet():
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                                    depths=[1, 1], layer_type="basic")
    return transformers.ResNetModel(cfg), (1, 3, 32, 32)


def _wav2vec2():
    cfg = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
        feat_extract_norm="group")
    return transformers.Wav2Vec2Model(cfg), (1, 400)


def _whisper_encoder():
    cfg = transformers.WhisperConfig(
        d_model=32, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64, num_mel_bins=8,
        max_source_positions=16)
    return transformers.WhisperModel(cfg).get_encoder(), (1, 8, 32)


MODELS = {"resnet": _resnet, "wav2vec2": _wav2vec2, "whisper_encoder": _whisper_encoder}


def _build(name):
    torch.manual_seed(0)
    model, shape = MODELS[name]()
    return _Hidden(model.eval()).eval(), shape


def _error(got, want) -> float:
    """Largest error relative to the largest output (what float32 rounding is
    relative to in these sums over channels and windows)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    return relative_to_largest(got, want)


def _inputs(shape):
    return [torch.randn(*shape), torch.randn(*shape)]     # the export input, a fresh one


# (stitch on the audio models takes seconds to plan today -- the planner's own work
# speeds that up; its plans for these ops are checked op by op in tests/ops)
@pytest.mark.parametrize("name,planner", [("resnet", "stitch"), ("wav2vec2", "rules"),
                                          ("whisper_encoder", "rules")])
def test_model_from_torch_matches_torch(name, planner):
    module, shape = _build(name)
    xs = _inputs(shape)
    g = wb.from_torch(module, (xs[0],))
    s = wb.Session(g, backend="cpu")
    s.auto(planner)
    for x in xs:
        with torch.no_grad():
            want = module(x).numpy()
        got = s.run({g.inputs[0]: x.numpy()})[g.outputs[0]]
        assert _error(got, want) < 1e-5, name


@pytest.mark.slow   # (torch.onnx.export of each model; the fast tier's model: from_torch's)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_through_onnx_matches_torch(name):
    module, shape = _build(name)
    xs = _inputs(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, (xs[0],), input_names=["x"],
                                    output_names=["y"], verbose=False)
    # (rules: the stitch planner's time on these is the planner work's, not this test's)
    rep = onnx_backend.prepare(program.model_proto, planner="rules", backend="cpu")
    for x in xs:
        with torch.no_grad():
            want = module(x).numpy()
        got, = rep.run([x.numpy()])
        assert _error(got, want) < 1e-5, name
