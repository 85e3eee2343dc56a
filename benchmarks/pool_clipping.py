#!/usr/bin/env python
"""Pools whose window is larger than their map, on the CPU, side by side in one run
with onnxruntime: each lowered with its window clipped to the taps that read the input
(``ops.window.clip_taps``, as planned) and as before (every tap of the window as given,
the padding read and reduced).

    .venv/bin/python benchmarks/pool_clipping.py
    .venv/bin/python benchmarks/pool_clipping.py --models effnet_pooler

Each shape is one pool module exported by ``torch.onnx.export`` (the TorchScript
exporter, as transformers' EfficientNet is exported), imported by ``workbench.load``
and run by onnxruntime; every method's output is checked against onnxruntime's and
torch's before timing. Per method the kernels' own time (``Program.time``: the sum of
the kernels' median launches, the fastest of the blocks) and one whole call's
(``Program.run``, quiet ms) beside onnxruntime's ``InferenceSession.run``, timed in
alternation. ``efficientnet_b0`` is the whole of transformers' EfficientNet-B0 (224 px,
random weights), whose pooler is the first shape; ``efficientnet_b7_224`` the config's
default (B7's widths and depths) at 224 px, its pooler ``AvgPool2d(2560, ceil_mode=True)``
on 7 x 7. Writes ``<out>/pool-clipping-<date>.json`` and ``.md``; never exits
non-zero for a timing.
"""
from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import numpy as np

from harness import machine_line, shapes_main, alternate, quiet_ms

# name: (pool kind, input shape, torch module arguments)
SHAPES = {
    # transformers' EfficientNet-B0 pooler: nn.AvgPool2d(hidden_dim, ceil_mode=True)
    "effnet_pooler": ("avg", (1, 1280, 7, 7), dict(kernel_size=1280, ceil_mode=True)),
    # windows larger than their map, padded: the padding counted and not (the second
    # one window over the whole map), and a max (the padding never wins)
    "avg_pad_incl": ("avg", (1, 512, 4, 4),
                     dict(kernel_size=20, stride=2, padding=10, ceil_mode=True,
                          count_include_pad=True)),
    "avg_pad_excl": ("avg", (1, 256, 7, 7),
                     dict(kernel_size=16, stride=16, padding=8, ceil_mode=True,
                          count_include_pad=False)),
    "max_pad": ("max", (1, 512, 4, 4),
                dict(kernel_size=20, stride=2, padding=10, ceil_mode=True)),
}
METHODS = ("clipped", "unclipped")
# whole models: name -> input shape (the module: ``_model``)
MODELS = {"efficientnet_b0": (1, 3, 224, 224),
          # transformers' default EfficientNetConfig (B7's widths and depths), at 224 px
          "efficientnet_b7_224": (1, 3, 224, 224)}


def _model(name: str):
    """transformers' EfficientNet (``zoo.efficientnet``: B0, or the config's default
    B7), its pooled output."""
    import torch
    from workbench.testing import zoo
    torch.manual_seed(0)
    if name == "efficientnet_b0":
        return zoo.efficientnet(224, pooled=True)
    return zoo.efficientnet(600, width=2.0, depth=3.1, hidden_dim=2560, pooled=True)


def onnx_file(name: str, folder: Path) -> tuple[Path, object, tuple]:
    """The pool (or model) exported to ONNX, the torch module, its input shape."""
    import torch
    if name in MODELS:
        m, shape, kw = _model(name), MODELS[name], {}
    else:
        kind, shape, kw = SHAPES[name]
        m = (torch.nn.AvgPool2d if kind == "avg" else torch.nn.MaxPool2d)(**kw).eval()
    path = folder / f"{name}.onnx"
    torch.onnx.export(m, (torch.zeros(shape),), str(path), dynamo=False,
                      input_names=["x"], output_names=["y"])
    return path, m, shape


def _unclipped(n, k, s, dl, pb, pe, out):
    return k, pb, pe          # every tap as given: the lowering before the clip


def program(path: Path, how: str):
    """The pool imported and planned (``stitch``) ``how``: the program, its kernels'
    taps (the product of the lowered window's kernel, or of the map reduced)."""
    import workbench as wb
    from workbench.ops import window
    with mock.patch.object(window, "clip_taps", _unclipped if how == "unclipped"
                           else window.clip_taps):
        g = wb.load(path)
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        prog = s.program()
    ops = [n.op for n in g.nodes]
    return prog, ops


def run_shape(name: str, folder: Path, rounds: int, inner: int) -> dict:
    import onnxruntime as ort
    import torch
    path, module, shape = onnx_file(name, folder)
    kind, _, kw = SHAPES.get(name, ("model", shape, {}))
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    feeds = {"x": x}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)[0]
    with torch.no_grad():
        eager = module(torch.from_numpy(x)).numpy()
    rec = {"model": name, "pool": {"kind": kind, "input": list(shape), **kw},
           "methods": {}}
    progs = {}
    for how in METHODS:
        prog, ops = program(path, how)
        y = prog.run(feeds)["y"]
        err = max(float(np.abs(y - want).max()), float(np.abs(y - eager).max())) / \
            max(float(np.abs(want).max()), 1.0)
        if y.shape != want.shape or not err <= 1e-5:     # (NaN fails too)
            raise AssertionError(f"{how}: the output differs from onnxruntime's or "
                                 f"torch's by {err:.3g}")
        rec["methods"][how] = {"ops": ops if len(ops) < 8 else [f"{len(ops)} ops"],
                               "kernels": len(prog.time(feeds, warmup=0, repeats=1)[0]),
                               "error": err}
        progs[how] = prog
    calls = {how: (lambda p: lambda: p.run(feeds))(prog) for how, prog in progs.items()}
    calls["onnxruntime"] = lambda: sess.run(None, feeds)
    samples = alternate(calls, rounds, inner)
    rec["call_ms"] = {k: quiet_ms(v, inner) for k, v in samples.items()}
    for how, prog in progs.items():      # the kernels alone, blocks of launches
        blocks = [sum(prog.time(feeds, warmup=1, repeats=inner)[0]) for _ in range(rounds)]
        rec["methods"][how]["kernel_ms"] = min(blocks) * 1e3
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Pools larger than their map, clipped and not, on the CPU ({res['date']})",
             "", f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, torch "
             f"{mi.get('torch')}, {mi.get('compiler')}. One torch pool module exported "
             "by `torch.onnx.export` (TorchScript); every method's output within 1e-5 "
             "(relative to the largest, or absolute under 1) of onnxruntime's and torch's. Kernels: the sum of the kernels' median launches "
             f"(`Program.time`), fastest of {res['rounds']} blocks; call: one whole call's "
             f"fastest block median, {res['rounds']} alternating rounds of {res['inner']} "
             "calls after a 0.2 s pause; x = onnxruntime's call / the method's. "
             "`unclipped` is the lowering before the clip (every tap as given).", "",
             "| shape | pool | method | ops | kernels | kernels ms | call ms | x onnxruntime |",
             "|---|---|---|---|---|---|---|---|"]
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} | | | | | | |")
            continue
        p = rec["pool"]
        geo = ", ".join(f"{k}={v}" for k, v in p.items())
        calls = rec["call_ms"]
        ort = calls["onnxruntime"]
        for how, m in rec["methods"].items():
            lines.append(f"| {rec['model']} | {geo} | {how} | {' '.join(m['ops'])} | "
                         f"{m['kernels']} | {m['kernel_ms']:.3f} | {calls[how]:.3f} | "
                         f"{ort / calls[how]:.3f}x |")
        lines.append(f"| {rec['model']} | {geo} | onnxruntime | | | | {ort:.3f} | 1.00x |")
    if res.get("notes"):
        lines += [""] + res["notes"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return shapes_main(argv, __doc__, {**SHAPES, **MODELS}, "pool-clipping", markdown,
                       run_shape,
                       "export, plan each way, compile, time: ", repeats=4)


if __name__ == "__main__":
    sys.exit(main())
