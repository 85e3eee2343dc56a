#!/usr/bin/env python
"""Transposed convolutions on the CPU: one convolution per output phase against the
input spread with zeros, side by side in one run, on models that upsample with them,
against onnxruntime and torch eager.

    .venv/bin/python benchmarks/conv_transpose.py
    .venv/bin/python benchmarks/conv_transpose.py --models hifigan --repeats 3

Models (random weights, exported by ``torch.onnx.export`` and imported from that file,
the one onnxruntime runs; ``stitch``):

- ``hifigan``: SpeechT5's HiFi-GAN vocoder at its default configuration (transformers:
  80 mel bins, four ConvTranspose1d upsampling 512 -> 32 channels by 8, 8, 2 and 2, with
  kernels 16, 16, 4, 4), 50 frames -> 12,800 samples;
- ``unet_decoder``: a UNet's decoder, three ConvTranspose2d 2 x 2 stride 2 and one 4 x 4
  stride 2 (pad 1), each followed by a 3 x 3 convolution and ReLU: 256 channels at
  16 x 16 up to 16 channels at 256 x 256.

Methods: **phases** (``composites_nn.conv_transpose``'s rule: one convolution per
output phase, no zeros multiplied) and **spread** (``transposed_conv.PHASES`` off at
import: the input spread with zeros, strides^d times the arithmetic), onnxruntime and
torch eager; median ms of one call, timed in alternation as ``benchmarks/models.py``
does. Writes ``<out>/conv-transpose-<date>.json`` and ``.md``; never exits non-zero
for a timing.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

from harness import (eager_rows, machine_line, method_rows, model_timing_args, rel_error,
                     time_beside, time_models)

MODELS = ("hifigan", "unet_decoder")


def _hifigan(torch):
    import transformers as T
    from workbench.testing.zoo import _quiet
    with _quiet():
        cfg = T.SpeechT5HifiGanConfig()
        m = T.SpeechT5HifiGan(cfg).eval()
    return m, torch.randn(1, 50, cfg.model_in_dim), "spectrogram"


def _unet_decoder(torch):
    nn = torch.nn

    def up(cin, cout, k=2, p=0):
        return [nn.ConvTranspose2d(cin, cout, k, stride=2, padding=p),
                nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU()]
    m = nn.Sequential(*up(256, 128), *up(128, 64), *up(64, 32), *up(32, 16, 4, 1)).eval()
    return m, torch.randn(1, 256, 16, 16), "x"


BUILDERS = {"hifigan": _hifigan, "unet_decoder": _unet_decoder}


def _spread():
    """Import with every transposed convolution over its input spread with zeros."""
    from workbench.ir.composites_nn import transposed_conv
    return mock.patch.object(transposed_conv, "PHASES", False)


def run_model(name: str, rounds: int, inner: int, folder: Path) -> dict:
    import torch

    import workbench as wb
    from workbench.testing.zoo import _quiet
    torch.manual_seed(0)
    m, x, input_name = BUILDERS[name](torch)
    with torch.no_grad():
        want = {"y": m(x).numpy()}
    path = folder / f"{name}.onnx"
    with _quiet(), torch.no_grad():
        torch.onnx.export(m, (x,), str(path), input_names=[input_name], output_names=["y"],
                          external_data=False)
    feeds = {input_name: x.numpy()}
    rec: dict = {"model": name, "input": list(x.shape), "methods": {}}
    calls = {}
    for how, ctx in (("phases", contextlib.nullcontext), ("spread", _spread)):
        with ctx():
            g = wb.load(path)
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        prog = s.program()
        convs = [ck for ck in prog.compiled if "conv" in ck.kernel.name]
        rec["methods"][how] = {"kernels": len(prog.compiled), "conv_kernels": len(convs),
                               "conv_gflop": sum(ck.kernel.flops for ck in convs) / 1e9,
                               "error_vs_torch": rel_error(prog.run(feeds), want)}
        calls[f"workbench {how}"] = (lambda p: lambda: p.run(feeds))(prog)
    time_beside(calls, rec, path, feeds, m, (x,), rounds, inner)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Transposed convolutions: phases against the input spread ({res['date']})",
             "", f"{machine_line(res)}; torch {mi['torch']}, transformers "
             f"{mi['transformers']}, onnxruntime {mi['onnxruntime']}, {mi['compiler']}. "
             "Each model exported by `torch.onnx.export` and imported from that file; "
             f"`stitch`. Median ms of one call, {res['rounds']} alternating rounds of "
             f"{res['inner']} calls; x = onnxruntime / method. Convolution GFLOP: what "
             "the convolution kernels compute, zeros included.", "",
             "| model | method | ms | x onnxruntime | kernels | convolution kernels | "
             "convolution GFLOP | error vs torch |", "|---|---|---|---|---|---|---|---|"]
    lines += method_rows(res, lambda r: ["", "", "", ""] if r is None else
                         [str(r["kernels"]), str(r["conv_kernels"]), f"{r['conv_gflop']:.2f}",
                          f"{r['error_vs_torch']:.1e}"])
    lines += eager_rows(res, 4)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS, repeats=5)
    a = ap.parse_args(argv)
    return time_models(a, "conv-transpose", markdown,
                       lambda name, tmp: run_model(name, a.repeats, a.inner, tmp),
                       label="export, import both ways, plan, compile, time: ")


if __name__ == "__main__":
    sys.exit(main())
