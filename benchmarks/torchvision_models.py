#!/usr/bin/env python
"""torchvision's CNNs whole on the CPU, as users run them: one 224 x 224 image (299 for
Inception v3), random weights, exported by ``torch.onnx.export`` and imported from that
file (the one onnxruntime runs), planned by ``stitch``; side by side in one run with
onnxruntime and torch eager.

    tv/bin/python benchmarks/torchvision_models.py                 # every model
    tv/bin/python benchmarks/torchvision_models.py --models densenet121 googlenet

torchvision must match its torch; the project's CPU torch 2.13 has none beside it, so
this runs in a venv of its own (see ``scripts/architectures.py``: ``python3 -m venv tv
&& tv/bin/pip install torch==2.14.1 torchvision==0.29.1 -e '.[test]'``).

Methods, timed in alternation as ``benchmarks/models.py`` does (median ms of one call):

- **workbench stitch**;
- **stitch, concats unsplit** (models with a concat): the same plan compiled with
  every concat read as before ``lower.elementwise._split_concat`` (each element reading every part
  at a clamped index and keeping one): what the split gains, side by side;
- **stitch, deep 1 x 1s by GEMM**: planned with every 1 x 1 convolution read in place
  multiplied as a GEMM (sgemm or the micro-kernel), as before deep ones were computed
  directly (``CONV_POINTWISE_DIRECT_DEPTH``, 2026-11-25), side by side with the rule now;
- **stitch, one buffer per value**: the same compiled kernels with every intermediate
  an array of its own (``$WB_MEMORY_PLAN=0``), as before ``runtime/memory_plan.py``
  laid them out in one shared arena: what the memory plan gains, side by side;
- **onnxruntime** (default session options) and **torch eager**.

Per model also the error of the workbench's output against torch's, and its five
slowest kernels (``Program.time``). Writes ``<out>/torchvision-<date>.json`` and
``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np

from harness import (eager_rows, machine_line, method_rows, model_timing_args, rel_error,
                     slowest_kernels, slowest_rows, time_beside, time_models)

MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "densenet121",
          "googlenet", "inception_v3", "shufflenet_v2_x1_0", "squeezenet1_1",
          "regnet_y_400mf", "convnext_tiny")
UNSPLIT = "stitch, concats unsplit"
UNPLANNED = "stitch, one buffer per value"
POINTWISE_BEFORE = "stitch, deep 1 x 1s by GEMM"


def _concats_unsplit():
    """Compile with no loop split at a concat (as before ``_split_concat``)."""
    from workbench.codegen.lower import elementwise
    return mock.patch.object(elementwise, "CONCAT_SPLIT_RUN", 1 << 62)


def _stitched(g):
    """A CPU session of ``g`` planned by ``stitch``."""
    import workbench as wb
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    return s


def export(name: str, folder: Path):
    """torchvision's model ``name`` (random weights, seeded), one image for it (224 x
    224, Inception v3 299) and the ONNX file ``torch.onnx.export`` writes of it into
    ``folder``: (module, image, path)."""
    import torch
    from torchvision import models

    from workbench.testing.zoo import _quiet
    size = 299 if name == "inception_v3" else 224
    torch.manual_seed(0)
    with _quiet():
        m = models.get_model(name, weights=None).eval()
    x = torch.randn(1, 3, size, size)
    path = folder / f"{name}.onnx"
    with _quiet(), torch.no_grad():
        torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"],
                          external_data=False)
    return m, x, path


def run_model(name: str, rounds: int, inner: int, folder: Path) -> dict:
    import torch

    import workbench as wb
    m, x, path = export(name, folder)
    size = x.shape[-1]
    with torch.no_grad():
        want = {"y": m(x).numpy()}
        # (GoogLeNet's random initialization shrinks its features to ~3e-11: its
        # logits are its classifier's bias whatever the image, and every method's
        # error 0 -- a check that cannot fail, so the report says so)
        blind = bool(np.array_equal(m(torch.randn_like(x)).numpy(), want["y"]))
    g = wb.load(path)
    feeds = {"x": x.numpy()}
    rec: dict = {"model": name, "image": size, "nodes": len(g.nodes), "methods": {},
                 "output_ignores_input": blind}
    calls = {}

    def method(label: str, p) -> None:
        """One more program to time beside the others, and its error against torch."""
        rec["methods"][label] = {"kernels": len(p.compiled),
                                 "error_vs_torch": rel_error(p.run(feeds), want)}
        calls[f"workbench {label}"] = lambda: p.run(feeds)

    s = _stitched(g)
    prog = s.program()
    method("stitch", prog)
    from dataclasses import replace
    from workbench.fusion.gemm import conv_rule
    with mock.patch.object(conv_rule, "CONV_RULE",
                           replace(conv_rule.CONV_RULE, pointwise_direct_depth=1 << 62)):
        pointwise = _stitched(g).program()
    method(POINTWISE_BEFORE, pointwise)
    from workbench.runtime.memory_plan import MEMORY_PLAN_ENV
    from workbench.runtime.program import Program
    with mock.patch.dict(os.environ, {MEMORY_PLAN_ENV: "0"}):
        unplanned = Program(s.plan, prog.backend, kernels=prog.kernels, compiled=prog.compiled)
    method(UNPLANNED, unplanned)
    if any(n.op == "concat" for n in g.nodes):
        with _concats_unsplit():        # a session of its own: none of s's kernels
            unsplit = _stitched(g).program()
        method(UNSPLIT, unsplit)
        rec["methods"]["stitch"]["concat_kernels_split"] = sum(
            a.source != b.source for a, b in zip(prog.compiled, unsplit.compiled))
    time_beside(calls, rec, path, feeds, m, (x,), rounds, inner)
    rec["slowest_kernels"] = slowest_kernels(s, prog, feeds)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# torchvision's CNNs on the CPU ({res['date']})", "",
             f"{machine_line(res)}; torch {mi['torch']}, torchvision {res['torchvision']}, "
             f"onnxruntime {mi['onnxruntime']}, {mi['compiler']}. One 224 x 224 image "
             f"(Inception v3: 299), random weights, exported by `torch.onnx.export` and "
             f"imported from that file; `stitch`. Median ms of one call, {res['rounds']} "
             f"alternating rounds of {res['inner']} calls; x = onnxruntime / method.", "",
             "| model | method | ms | x onnxruntime | kernels | error vs torch |",
             "|---|---|---|---|---|---|"]
    lines += method_rows(res, lambda r: ["", ""] if r is None else
                         [str(r["kernels"]), f"{r['error_vs_torch']:.1e}"])
    lines += eager_rows(res, 2)
    blind = [r["model"] for r in res["models"] if r.get("output_ignores_input")]
    if blind:
        lines += ["", f"Random weights make the output of {', '.join(blind)} the same "
                  "for every image (torch's too): the error there checks nothing."]
    lines += slowest_rows(res)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS, repeats=5)
    a = ap.parse_args(argv)
    try:
        import torchvision
    except Exception as e:      # noqa: BLE001 -- not installed, or built for another torch
        print(f"torchvision does not import here ({type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}); see this script's docstring "
              "for a venv that has it", file=sys.stderr)
        return 2
    return time_models(a, "torchvision", markdown,
                       lambda name, tmp: run_model(name, a.repeats, a.inner, tmp),
                       label="export, import, plan, compile, time: ",
                       torchvision=torchvision.__version__)


if __name__ == "__main__":
    sys.exit(main())
