#!/usr/bin/env python
"""Max pools on the CPU, one at a time, side by side in one run with onnxruntime: the
CNNs' 3 x 3 pools (ResNet's and GoogLeNet's stems, GoogLeNet's inception branches and
stage ends), each lowered a plane at a time (``codegen/planes.py``) with its max as
planned (``planes.window_max``: maxps chained, one unordered compare a pair of taps
for the NaN) and as before (``wb_fmax`` nested, NaN-propagating at every tap).

    .venv/bin/python benchmarks/pool_planes.py
    .venv/bin/python benchmarks/pool_planes.py --models g_480_14 r50_64_112

Each shape is one ``MaxPool`` (one image of random normal values) in an ONNX file,
imported by ``workbench.load`` and run by onnxruntime; the workbench's outputs equal
onnxruntime's bit for bit (checked before timing). Per method the kernel's own time
(the median of ``Program.time``'s launches, the fastest of the blocks) and one whole
call's (``Program.run``: the output allocated and poisoned; the fastest block's
median, ``quiet_ms``) beside onnxruntime's ``InferenceSession.run``, timed in
alternation. Writes ``<out>/pool-planes-<date>.json`` and ``.md``; never exits
non-zero for a timing.
"""
from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import numpy as np

from harness import machine_line, one_op_case, shapes_main, time_beside_onnxruntime

# name: (channels, plane, kernel, stride, pads (top, left, bottom, right))
SHAPES = {
    "r50_64_112": (64, 112, 3, 2, (1, 1, 1, 1)),      # ResNet's stem
    "g_64_112": (64, 112, 3, 2, (0, 0, 1, 1)),        # GoogLeNet's (ceil mode)
    "g_192_56": (192, 56, 3, 2, (0, 0, 1, 1)),
    "g_192_28": (192, 28, 3, 1, (1, 1, 1, 1)),        # inception branches
    "g_256_28": (256, 28, 3, 1, (1, 1, 1, 1)),
    "g_480_28": (480, 28, 3, 2, (0, 0, 1, 1)),
    "g_480_14": (480, 14, 3, 1, (1, 1, 1, 1)),
    "g_512_14": (512, 14, 3, 1, (1, 1, 1, 1)),
    "g_832_7": (832, 7, 3, 1, (1, 1, 1, 1)),
}
METHODS = ("rule", "wb_fmax chain")


def onnx_file(name: str, folder: Path) -> Path:
    """One max pool as an ONNX file."""
    import onnx
    from onnx import TensorProto, helper
    c, hw, k, s, pads = SHAPES[name]
    out = (hw + pads[0] + pads[2] - k) // s + 1
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                          pads=list(pads))],
        name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, out, out])])
    path = folder / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))
    return path


def _fmax_chain(taps: list[str]) -> tuple[tuple, str]:
    """The max as it was lowered before: ``wb_fmax`` nested over the taps."""
    total = taps[0]
    for v in taps[1:]:
        total = f"wb_fmax({total}, {v})"
    return (), total


def program(g, how: str):
    """``g``'s stitch plan (one kernel) compiled ``how``: the program, its schedule."""
    import workbench as wb
    from workbench.codegen import planes
    with mock.patch.object(planes, "window_max", _fmax_chain if how != "rule"
                           else planes.window_max):
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        prog = s.program()
    (k,) = s.kernels()
    return prog, k.schedule


def run_shape(name: str, folder: Path, rounds: int, inner: int) -> dict:
    g, feeds, sess, want = one_op_case(onnx_file(name, folder))
    c, hw, k, s, pads = SHAPES[name]
    rec = {"model": name, "pool": {"channels": c, "plane": hw, "kernel": k, "stride": s,
                                   "pads": list(pads)}, "methods": {}}
    progs = {}
    for how in METHODS:
        prog, sched = program(g, how)
        if not np.array_equal(prog.run(feeds)["y"], want):
            raise AssertionError(f"{how}: the output differs from onnxruntime's")
        rec["methods"][how] = {"schedule": sched}
        progs[how] = prog
    time_beside_onnxruntime(progs, feeds, sess, rounds, inner, rec)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Max pools one by one on the CPU ({res['date']})", "",
             f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, "
             f"{mi.get('compiler')}. One image, one `MaxPool`; outputs equal to "
             "onnxruntime's bit for bit. Kernel: the kernel's median launch "
             f"(`Program.time`), fastest of {res['rounds']} blocks; call: one whole call's "
             f"fastest block median, {res['rounds']} alternating rounds of {res['inner']} "
             "calls; x = onnxruntime's call / the method's.", "",
             "| shape | C, plane, kernel/stride | method | kernel ms | call ms "
             "| x onnxruntime |", "|---|---|---|---|---|---|"]
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} | | | | |")
            continue
        p = rec["pool"]
        geo = f"{p['channels']}, {p['plane']}^2, {p['kernel']}x{p['kernel']}/{p['stride']}"
        calls = rec["call_ms"]
        ort = calls["onnxruntime"]
        for how, m in rec["methods"].items():
            lines.append(f"| {rec['model']} | {geo} | {how} | {m['kernel_ms']:.3f} | "
                         f"{calls[how]:.3f} | {ort / calls[how]:.2f}x |")
        lines.append(f"| {rec['model']} | {geo} | onnxruntime | | {ort:.3f} | 1.00x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return shapes_main(argv, __doc__, SHAPES, "pool-planes", markdown, run_shape,
                       "plan each way, compile, time: ", repeats=6)


if __name__ == "__main__":
    sys.exit(main())
