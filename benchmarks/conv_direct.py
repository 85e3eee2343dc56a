#!/usr/bin/env python
"""Convolutions computed directly (``CONV_DIRECT``, codegen ``wb_conv_lanes``) one by one
on the CPU, side by side in one run with onnxruntime: how the block of positions and
the cut of the tiles pay off.

    .venv/bin/python benchmarks/conv_direct.py
    .venv/bin/python benchmarks/conv_direct.py --models resnet50_l4 --repeats 20

Each shape is one convolution (one image, random constant filters and bias) followed
by a ReLU, written as an ONNX file with ``onnx.helper`` and imported from it by
``workbench.load``; onnxruntime runs the same file. The workbench plans it with
``stitch`` (one kernel: the convolution with its bias and ReLU), compiled these ways:

- **rule**: as the planner makes it -- blocks of 7 positions where a row's last block
  leaves fewer unused than 8 (``wb_conv_cr``), tiles cut so the busiest core has the
  least work (``gemm.direct.direct_split``), a thread's buffer of
  ``DirectConv.scratch`` floats;
- **blocks of 8**: the rule with every block 8 positions (``WB_CR7`` off);
- **rows cut only**: the rule with every tile holding all the filters, the rows cut
  for the cores (the cut before ``direct_split``);
- **before**: both of those and a buffer of 32768 floats (a convolution whose rows do
  not fit it is not computed directly: ResNet-50's strided 3 x 3 of its last stage
  went to sgemm);
- **sgemm**: ``blas=1`` (the patches gathered for the host BLAS per tile).

Times are ms of one whole call (``Program.run``; ``InferenceSession.run``), the
methods timed in alternation as ``benchmarks/models.py`` does. On the development VM
whole blocks of calls ran at about half speed now and then, onnxruntime's as well as
the workbench's (a core taken by the host): so the table's **quiet ms** is each
method's fastest block median (every method had the same rounds to find a quiet one),
its GFLOP/s (over 2 x MACs) and ratios from that; the median of all calls beside it.

Writes ``<out>/conv-direct-<date>.json`` and ``.md``; never exits non-zero for a
timing.
"""
from __future__ import annotations

import math
import sys
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import numpy as np

from harness import alternate, machine_line, one_op_case, quiet_ms, shapes_main

# name: (channels, plane, filters, kernel, stride) -- ResNet-50's 3 x 3s by stage (and
# their strided first ones), its 7 x 7 stem; DenseNet-121's growth convolutions (128
# channels to 32 filters) at each stage's plane
SHAPES = {
    "resnet50_l1": (64, 56, 64, 3, 1),
    "resnet50_l2": (128, 28, 128, 3, 1),
    "resnet50_l2_s2": (128, 56, 128, 3, 2),
    "resnet50_l3": (256, 14, 256, 3, 1),
    "resnet50_l3_s2": (256, 28, 256, 3, 2),
    "resnet50_l4": (512, 7, 512, 3, 1),
    "resnet50_l4_s2": (512, 14, 512, 3, 2),
    "resnet_stem": (3, 224, 64, 7, 2),
    "densenet_56": (128, 56, 32, 3, 1),
    "densenet_28": (128, 28, 32, 3, 1),
    "densenet_14": (128, 14, 32, 3, 1),
    "densenet_7": (128, 7, 32, 3, 1),
}
METHODS = ("rule", "blocks of 8", "rows cut only", "before", "sgemm")


def onnx_file(name: str, folder: Path, shape: tuple | None = None) -> Path:
    """One convolution with its bias, then a ReLU, as an ONNX file: ``shape`` (else
    ``SHAPES[name]``) is (channels, plane, filters, kernel, stride[, groups])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    c, hw, k, r, s, *groups = shape or SHAPES[name]
    group = groups[0] if groups else 1
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, c // group, r, r))
         / math.sqrt(c // group * r * r)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    out = (hw + 2 * (r // 2) - r) // s + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[r // 2] * 4,
                          strides=[s, s], kernel_shape=[r, r], group=group),
         helper.make_node("Relu", ["c"], ["y"])],
        name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, out, out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _rows_cut_only(n, oh, fit, k, units):
    """The cut before ``direct_split``: all the filters in every tile, the rows cut
    into as many tiles as the buffer needs, more where that makes their count a
    multiple of the cores."""
    from workbench.fusion.gemm.tiles import for_cores
    col_tiles = min(oh, for_cores(n, -(-oh // fit), units))
    return -(-oh // col_tiles), k


def _settings(how: str):
    """The planner and code generator patched to make ``how``."""
    from dataclasses import replace
    from workbench.codegen.render import c
    from workbench.fusion.gemm import direct
    patches = []
    if how in ("blocks of 8", "before"):
        patches.append(mock.patch.object(
            c, "MICRO_KERNEL_C",
            c.MICRO_KERNEL_C.replace("#define WB_CR7 1", "#define WB_CR7 0")))
    if how in ("rows cut only", "before"):
        patches.append(mock.patch.object(direct, "direct_split", _rows_cut_only))
    if how == "before":
        patches.append(mock.patch.object(direct, "DIRECT",
                                         replace(direct.DIRECT, scratch=32768)))
    return patches


def program(g, how: str):
    """``g``'s stitch plan compiled ``how``: the program, the convolution's schedule."""
    import workbench as wb
    with ExitStack() as stack:
        for p in _settings(how):
            stack.enter_context(p)
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        conv = next(gr for gr in s.plan.groups if gr.schedule.gemm is not None)
        if how == "sgemm":
            s.set_launch(conv.id, blas=1)
            conv = s.plan.group(conv.id)
        return s.program(), conv.schedule


def run_shape(name: str, folder: Path, rounds: int, inner: int) -> dict:
    g, feeds, sess, want = one_op_case(onnx_file(name, folder))
    rec = {"model": name, "conv": dict(zip(("channels", "plane", "filters", "kernel",
                                            "stride"), SHAPES[name])), "methods": {}}
    calls = {}
    for how in METHODS:
        prog, sched = program(g, how)
        got = prog.run(feeds)["y"]
        rec["methods"][how] = {
            "schedule": sched.describe(), "gflop": sched.gemm.flops / 1e9,
            "error_vs_onnxruntime": float(np.abs(got - want).max() / np.abs(want).max())}
        calls[how] = (lambda p: lambda: p.run(feeds))(prog)
    calls["onnxruntime"] = lambda: sess.run(None, feeds)
    samples = alternate(calls, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    rec["quiet_ms"] = {k: quiet_ms(v, inner) for k, v in samples.items()}
    rec["samples_ms"] = {k: [t * 1e3 for t in v] for k, v in samples.items()}
    return rec


def shapes_described(res: dict, lines: list[str], columns: int):
    """Each shape's record that ran, with its convolution in words (C -> K, plane,
    kernel/stride); a shape that failed becomes a row of its own in ``lines`` (a table
    of ``columns``)."""
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} |" + " |" * (columns - 2))
            continue
        c = rec["conv"]
        yield rec, (f"{c['channels']} -> {c['filters']}"
                    + (" depthwise" if c.get("groups", 1) > 1 else "")
                    + f", {c['plane']}^2, {c['kernel']}x{c['kernel']}/{c['stride']}")


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Direct convolutions one by one on the CPU ({res['date']})", "",
             f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, "
             f"{mi.get('compiler')}. One image, a convolution + bias + ReLU; median ms of "
             f"one call, {res['rounds']} alternating rounds of {res['inner']} calls; x = "
             "onnxruntime / method.", "",
             "| shape | C -> K, plane, kernel/stride | method | quiet ms | GFLOP/s | x onnxruntime "
             "| median ms | schedule |", "|---|---|---|---|---|---|---|---|"]
    for rec, geo in shapes_described(res, lines, 8):
        lat, quiet = rec["latency_ms"], rec["quiet_ms"]
        ort = quiet["onnxruntime"]
        for how, m in rec["methods"].items():
            ms = quiet[how]
            lines.append(f"| {rec['model']} | {geo} | {how} | {ms:.3f} | "
                         f"{m['gflop'] / ms * 1e3:.0f} | {ort / ms:.2f}x | {lat[how]:.3f} | "
                         f"{m['schedule'][:90]} |")
        gflop = rec["methods"]["rule"]["gflop"]
        lines.append(f"| {rec['model']} | {geo} | onnxruntime | {ort:.3f} | "
                     f"{gflop / ort * 1e3:.0f} | 1.00x | {lat['onnxruntime']:.3f} | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return shapes_main(argv, __doc__, SHAPES, "conv-direct", markdown, run_shape,
                       f"plan {len(METHODS)} ways, compile, time: ")


if __name__ == "__main__":
    sys.exit(main())
