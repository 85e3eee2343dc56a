"""The model zoo as users run it: every architecture of ``workbench.testing.zoo`` (transformers
config classes, small random-weight configurations, no downloads) through both paths a
new user takes, each planned with ``stitch`` and run on the CPU backend:

- ONNX: ``torch.onnx.export`` with its default (dynamo) exporter and default opset,
  then ``workbench.onnx_backend.prepare(path, planner="stitch", backend="cpu")``;
- torch: ``wb.from_torch(model, example_inputs)`` -> ``Session(backend="cpu")`` ->
  ``auto("stitch")``.

Each output must match torch eager on the export input and on a fresh input of the
same shapes: ``max |y - r| <= 1e-4 * max |r|`` (relative to the output's largest
magnitude, as in issue 12; float32 GEMMs over 64-128 terms agree to about 1e-6, so
1e-4 still catches any wrong element -- a dropped mask moves outputs by O(1)).

A model that does not import fails here with the importer's one-line error (an
unsupported op names itself); nothing is skipped or expected to fail.

Every model is built and exported once per test session into a temporary folder; the
module runs in one xdist group (model_zoo) so one worker builds them. The scripts'
tests that export zoo models in subprocesses have a group of their own (torch_scripts),
so that the other worker takes them.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import workbench as wb  # noqa: E402
from workbench import onnx_backend
from workbench.testing import zoo  # noqa: E402
from workbench.tolerance import FRAMEWORK_TOLERANCE, relative_to_largest

# slow: every architecture built in torch, exported and imported (minutes)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("model_zoo")]



@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


_BUILT: dict[str, tuple] = {}


def built(name: str, folder) -> tuple:
    """(ZooModel, path of its ONNX export), made once per session."""
    if name not in _BUILT:
        m = zoo.build(name)
        _BUILT[name] = (m, zoo.export_onnx(m, folder / f"{name}.onnx"))
    return _BUILT[name]


def check_outputs(m, run) -> None:
    for fresh in (False, True):
        got, want = run(m.numpy_inputs(fresh)), m.torch_outputs(fresh)
        assert set(want) <= set(got), (sorted(got), sorted(want))
        for k, r in want.items():
            y = np.asarray(got[k])
            assert y.shape == r.shape and y.dtype == r.dtype, (k, y.shape, r.shape, y.dtype)
            err = relative_to_largest(y, r)
            assert err <= FRAMEWORK_TOLERANCE, (f"{m.name} {k} ({'fresh' if fresh else 'export'} "
                                                f"input): {err:.3g} > {FRAMEWORK_TOLERANCE}")


def test_the_zoo_has_the_architectures_of_issue_12():
    assert set(zoo.MODELS) >= {"bert", "distilbert", "gpt2", "llama", "t5_encoder", "vit",
                               "resnet", "whisper_encoder", "wav2vec2"}


def test_masked_models_really_pad(zoo_dir):
    """The mask must matter: a padded row of BERT changes when the mask is dropped."""
    m, _ = built("bert", zoo_dir)
    mask = m.inputs[1]
    assert 0 < int(mask.sum()) < mask.numel()
    import torch
    with torch.no_grad():
        masked = m.module(*m.inputs).last_hidden_state
        unmasked = m.module(m.inputs[0]).last_hidden_state
    assert not torch.allclose(masked, unmasked, atol=1e-3)


def test_export_is_the_default_exporter_and_opset(zoo_dir):
    import onnx
    import torch.onnx._constants as onnx_constants
    _, path = built("gpt2", zoo_dir)
    model = onnx.load(str(path))
    assert model.producer_name == "pytorch"
    assert {o.domain: o.version for o in model.opset_import}[""] == \
        onnx_constants.ONNX_DEFAULT_OPSET


@pytest.mark.parametrize("name", zoo.MODELS)
def test_onnx_export_imports_plans_runs_and_matches_torch(name, zoo_dir):
    m, path = built(name, zoo_dir)
    rep = onnx_backend.prepare(str(path), planner="stitch", backend="cpu")
    assert rep.session.backend.name == "cpu"
    check_outputs(m, lambda ins: rep.run(ins)._asdict())


@pytest.mark.parametrize("name", zoo.MODELS)
def test_from_torch_imports_plans_runs_and_matches_torch(name, zoo_dir):
    m, _ = built(name, zoo_dir)
    s = wb.Session(zoo.import_torch(m), backend="cpu")
    s.auto("stitch")
    check_outputs(m, s.run)


@pytest.mark.parametrize("name", zoo.MODELS)
def test_the_gpu_plan_of_every_model_runs_in_the_cuda_emulator(name, zoo_dir):
    """What a GPU user runs: the model through from_torch, planned for the H100 with
    stitch, its CUDA kernels (masks, rotary tables, gathers, convolutions' epilogues,
    the attention softmax...) run in the CUDA emulator, every kernel within its bound
    and the outputs matching torch as on the CPU."""
    from workbench.measure import verify_kernels
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    m, _ = built(name, zoo_dir)
    s = wb.Session(zoo.import_torch(m), backend="cuda-emu")
    s.auto("stitch")
    assert s.device.is_gpu and any(k.library is None for k in s.kernels())
    prog = s.program()
    env = prog.run(m.numpy_inputs(fresh=True), keep_all=True)
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    check_outputs(m, s.run)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_with_tf32_allowed_the_gpu_plan_runs_on_tensor_cores_within_tf32_s_bound(
        name, zoo_dir, nvrtc_toolchain):
    """The GPU plan with matmul_precision="tf32" (scripts/zoo_tf32.py runs every model):
    fused attentions and GEMM kernels on tensor cores, the rest of the matmuls cuBLAS
    in TF32, run in the CUDA emulator (WMMA rounding as tensor cores do); every kernel
    within its bound, and the outputs within TF32's reach of torch's float32 model.
    NVRTC compiles each tensor-core kernel with the runtime's options within 128
    registers, no spills."""
    from workbench.codegen import render_kernel
    from workbench.measure import verify_kernels
    from workbench.runtime import nvrtc
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if CudaEmuBackend.unavailable() and not os.environ.get("WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    m, _ = built(name, zoo_dir)
    s = wb.Session(zoo.import_torch(m), backend="cuda-emu", matmul_precision="tf32")
    s.auto("stitch")
    ks = s.kernels()
    assert sum(k.tensor_cores for k in ks) >= 2
    assert all(k.tf32 for k in ks if k.library is not None and k.library.op == "matmul")
    for k in ks:
        if k.tensor_cores:
            rep = nvrtc.ptxas_report(render_kernel(k, "cuda"), k.name)
            assert rep.spill_bytes == rep.stack_bytes == 0 and rep.registers <= 128, rep.log
    prog = s.program()
    env = prog.run(m.numpy_inputs(fresh=True), keep_all=True)
    assert all(c.within_tolerance for c in verify_kernels(prog, env))
    for fresh in (False, True):
        for k, r in m.torch_outputs(fresh).items():
            y = np.asarray(s.run(m.numpy_inputs(fresh))[k]).astype(np.float64)
            assert relative_to_largest(y, r) <= 2e-3, (name, k)


def _padding(batch: int, seq: int, left: int = 0, right: int = 0):
    """A tokenizer's attention_mask for a padded batch: the last row padded ``right``
    tokens at its end (padding_side="right"), the first ``left`` at its start."""
    import torch
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - right:] = 0
    mask[0, :left] = 0
    return mask


@pytest.mark.parametrize("path", ["onnx", "onnx_attention_mask", "torch"])
@pytest.mark.parametrize("dtype", zoo.DTYPES)
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_decoder_s_causal_mask_is_recognized_as_users_export_it(name, dtype, path,
                                                                   zoo_dir, tmp_path):
    """The decoders' masks as the exporters leave them (0 and the dtype's lowest added
    to the scaled scores; in bfloat16 the sum widened to float32 for the softmax):
    every fused attention of the GPU's stitch plan skips the keys past its row
    (fusion/key_limit.py), in float32 and in bfloat16, from the ONNX file and from
    from_torch alike. With the user's attention_mask the mask is no constant
    (``where(causal & padding, 0, lowest)``, the padding from the input), but the
    causal part still hides the same keys whatever the padding."""
    from workbench.fusion import run_planner
    from workbench.device import H100
    if dtype == "float32" and path != "onnx_attention_mask":
        m, onnx_path = built(name, zoo_dir)
    else:
        m = zoo.build(name, dtype=dtype)
        z = zoo.SIZES["tiny"]
        onnx_path = None if path == "torch" else zoo.export_onnx(
            m, tmp_path / f"{name}.onnx", _padding(z.batch, z.seq, right=3)
            if path == "onnx_attention_mask" else None)
    g = zoo.import_torch(m) if path == "torch" else wb.load(str(onnx_path))
    assert ("attention_mask" in g.inputs) == (path == "onnx_attention_mask")
    plan, _ = run_planner("stitch", g, device=H100)
    onlines = [gr.schedule.then.online for gr in plan.groups
               if gr.schedule.online is not None]
    assert len(onlines) == 2                                   # (one a layer)
    lowest = -3.4028234663852886e38 if dtype == "float32" else -3.3895313892515355e38
    assert all(o.limit is not None and (o.limit.offset, o.limit.fill) == (1, lowest)
               for o in onlines), [o.limit for o in onlines]


def test_a_padded_batch_through_gpt2_at_1024_tokens_skips_and_matches_torch(tmp_path):
    """GPT-2 (the zoo's ``long`` size: 1024 tokens) exported with the user's
    attention_mask, its first 5 tokens padding (padding_side="left"): the CPU's
    stitch plan takes the online softmax with the causal skip; the padded queries,
    whose every key is masked, fail the row check (their tile takes every block, as
    the reference's uniform softmax needs); the logits match torch's."""
    m = zoo.build("gpt2", size="long")
    z = zoo.SIZES["long"]
    mask = _padding(z.batch, z.seq, left=5)
    g = wb.load(str(zoo.export_onnx(m, tmp_path / "gpt2.onnx", mask)))
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    onlines = [gr.schedule.then.online for gr in s.plan.groups
               if gr.schedule.online is not None]
    assert len(onlines) == 2 and all(o.limit is not None for o in onlines)
    import torch
    with torch.no_grad():
        want = m.module(m.inputs[0], attention_mask=mask).logits.numpy()
    got = s.run({"input_ids": m.inputs[0].numpy(), "attention_mask": mask.numpy()})["logits"]
    err = relative_to_largest(got, want)
    assert err <= FRAMEWORK_TOLERANCE, err


# -- bfloat16: the user's model.to(torch.bfloat16) -------------------------------------
# scripts/zoo_bfloat16.py runs the whole zoo both ways (benchmarks/results/zoo-bfloat16-*)
@pytest.mark.parametrize("name, path, backend", [
    ("bert", "onnx", "cpu"), ("bert", "torch", "cpu"), ("llama", "torch", "cpu"),
    # the GPU's plans, their bfloat16 CUDA kernels run in the CUDA emulator
    ("bert", "onnx", "cuda-emu"), ("llama", "torch", "cuda-emu")])
def test_a_bfloat16_model_runs_in_bfloat16_as_accurately_as_torch(name, path, backend,
                                                                  tmp_path):
    """Imported with bfloat16 storage, every kernel within its bound, the output
    bfloat16, and no further from the float32 model than twice torch's own bfloat16
    output is (fused kernels round once per store where torch rounds per op)."""
    import torch
    from workbench.runtime.cuda_emu import CudaEmuBackend
    if backend == "cuda-emu" and CudaEmuBackend.unavailable() and not os.environ.get(
            "WB_REQUIRE_CUDA_EMU"):
        pytest.skip(CudaEmuBackend.unavailable())
    m32, m = zoo.build(name), zoo.build(name, dtype="bfloat16")
    assert all(p.dtype is torch.bfloat16 for p in m.module.parameters())
    g = zoo.import_torch(m) if path == "torch" else wb.load(
        str(zoo.export_onnx(m, tmp_path / f"{name}.onnx")))
    assert g.value(g.outputs[0]).dtype.value == "bfloat16"
    s = wb.Session(g, backend=backend)
    s.auto("stitch")
    assert s.measure(warmup=1, repeats=1).within_tolerance
    for fresh in (False, True):
        y = s.run(dict(zip(g.inputs, m.numpy_inputs(fresh).values())))[g.outputs[0]]
        assert y.dtype.name == "bfloat16"
        f32 = m32.torch_outputs(fresh)[m.outputs[0]].astype(np.float64)
        b16 = m.torch_outputs(fresh)[m.outputs[0]].astype(np.float64)

        def dist(a):
            return relative_to_largest(a, f32)
        assert 0 < dist(b16) < 0.05               # bfloat16 really differs from float32
        assert dist(y) <= 2 * dist(b16), (name, path, fresh, dist(y), dist(b16))
