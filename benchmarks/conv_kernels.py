#!/usr/bin/env python
"""The CNN kernels the rules choose between, one convolution at a time on the CPU, each
way side by side in one run with onnxruntime: 1 x 1 convolutions (computed directly,
on the micro-kernel, by sgemm) and depthwise ones (a plane at a time through its stride
phases, or tap by tap).

    .venv/bin/python benchmarks/conv_kernels.py
    .venv/bin/python benchmarks/conv_kernels.py --models r50_1024_256_14 dw5_480_14

Each shape is one convolution (one image, random constant filters and bias) and a
ReLU, an ONNX file (``conv_direct.onnx_file``) imported by ``workbench.load`` and run
by onnxruntime. The workbench plans it with ``stitch`` (one kernel) and compiles it
these ways:

- 1 x 1 (``pw``/``r50``/``g``/``m``/``e``/``s`` shapes: ResNet-50, GoogLeNet,
  MobileNetV3, EfficientNet-B0, SqueezeNet): **rule** (as planned:
  ``CONV_POINTWISE_DIRECT_DEPTH`` sends deep ones to the direct path), **micro-kernel**
  (``blas=0``: the input packed by every run, the filters packed once into slivers),
  **sgemm** (``blas=1``: the input read in place);
- depthwise (``dw`` shapes: MobileNetV3's and EfficientNet-B0's): **rule** (a plane at
  a time through its stride phases, ``codegen/planes.py``), **tap by tap** (``blas=0``:
  each tap's run added into the tile in memory, ``lower.convolution.direct``).

Per method the kernel's own time (the median of ``Program.time``'s launches, each
block's, the fastest block kept) and its GFLOP/s over 2 x MACs, and one whole call
(``Program.run``: its output allocated and poisoned) beside onnxruntime's
(``InferenceSession.run``), timed in alternation as ``benchmarks/models.py`` does; the
**quiet ms** of a call is its fastest block median (whole blocks ran at half speed now
and then on the development VM, onnxruntime's too). Writes
``<out>/conv-kernels-<date>.json`` and ``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from harness import machine_line, one_op_case, shapes_main, time_beside_onnxruntime
from conv_direct import onnx_file, shapes_described

# name: (channels, plane, filters, kernel, stride[, groups])
SHAPES = {
    "r50_64_256_56": (64, 56, 256, 1, 1), "r50_256_64_56": (256, 56, 64, 1, 1),
    "r50_128_512_28": (128, 28, 512, 1, 1), "r50_512_128_28": (512, 28, 128, 1, 1),
    "r50_256_1024_14": (256, 14, 1024, 1, 1), "r50_1024_256_14": (1024, 14, 256, 1, 1),
    "r50_512_2048_7": (512, 7, 2048, 1, 1), "r50_2048_512_7": (2048, 7, 512, 1, 1),
    "g_832_384_7": (832, 7, 384, 1, 1), "m_960_160_7": (960, 7, 160, 1, 1),
    "m_160_960_7": (160, 7, 960, 1, 1), "e_1152_320_7": (1152, 7, 320, 1, 1),
    "e_672_112_14": (672, 14, 112, 1, 1), "s_384_48_27": (384, 27, 48, 1, 1),
    "dw3_144_56": (144, 56, 144, 3, 1, 144), "dw3_96_112s2": (96, 112, 96, 3, 2, 96),
    "dw5_240_28": (240, 28, 240, 5, 1, 240), "dw5_480_14": (480, 14, 480, 5, 1, 480),
    "dw5_672_14s2": (672, 14, 672, 5, 2, 672), "dw5_1152_7": (1152, 7, 1152, 5, 1, 1152),
    "dw3_1152_7": (1152, 7, 1152, 3, 1, 1152),
}
POINTWISE = ("rule", "micro-kernel", "sgemm")
DEPTHWISE = ("rule", "tap by tap")
BLAS = {"micro-kernel": 0, "sgemm": 1, "tap by tap": 0}


def program(g, how: str):
    """``g``'s stitch plan compiled ``how``: the program, the convolution's schedule."""
    import workbench as wb
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    conv = next(gr for gr in s.plan.groups if gr.schedule.gemm is not None)
    if how in BLAS:
        s.set_launch(conv.id, blas=BLAS[how])
        conv = s.plan.group(conv.id)
    return s.program(), conv.schedule


def run_shape(name: str, folder: Path, rounds: int, inner: int) -> dict:
    g, feeds, sess, want = one_op_case(onnx_file(name, folder, SHAPES[name]))
    c, hw, k, r, s, *groups = SHAPES[name]
    rec = {"model": name, "conv": {"channels": c, "plane": hw, "filters": k, "kernel": r,
                                   "stride": s, "groups": groups[0] if groups else 1},
           "methods": {}}
    progs = {}
    for how in (DEPTHWISE if groups else POINTWISE):
        prog, sched = program(g, how)
        got = prog.run(feeds)["y"]
        rec["methods"][how] = {
            "schedule": sched.describe(), "gflop": sched.gemm.flops / 1e9,
            "error_vs_onnxruntime": float(np.abs(got - want).max() / np.abs(want).max())}
        progs[how] = prog
    time_beside_onnxruntime(progs, feeds, sess, rounds, inner, rec)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# CNN kernels one by one on the CPU: 1 x 1 and depthwise ({res['date']})", "",
             f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, "
             f"{mi.get('compiler')}. One image, a convolution + bias + ReLU. Kernel: the "
             "kernel's median launch (`Program.time`), fastest of "
             f"{res['rounds']} blocks; call: one whole call's fastest block median, "
             f"{res['rounds']} alternating rounds of {res['inner']} calls; x = "
             "onnxruntime's call / the method's.", "",
             "| shape | C -> K, plane, kernel/stride | method | kernel ms | GFLOP/s "
             "| call ms | x onnxruntime | error | schedule |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rec, geo in shapes_described(res, lines, 9):
        calls = rec["call_ms"]
        ort = calls["onnxruntime"]
        for how, m in rec["methods"].items():
            ms = m["kernel_ms"]
            lines.append(f"| {rec['model']} | {geo} | {how} | {ms:.3f} | "
                         f"{m['gflop'] / ms * 1e3:.0f} | {calls[how]:.3f} | "
                         f"{ort / calls[how]:.2f}x | {m['error_vs_onnxruntime']:.1e} | "
                         f"{m['schedule'][:80]} |")
        gflop = rec["methods"]["rule"]["gflop"]
        lines.append(f"| {rec['model']} | {geo} | onnxruntime | | {gflop / ort * 1e3:.0f} "
                     f"(call) | {ort:.3f} | 1.00x | | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return shapes_main(argv, __doc__, SHAPES, "conv-kernels", markdown, run_shape,
                       "plan each way, compile, time: ", repeats=6)


if __name__ == "__main__":
    sys.exit(main())
