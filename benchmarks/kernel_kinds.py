#!/usr/bin/env python
"""Where a CNN's time goes, by kind of kernel, beside onnxruntime's own profile: the
workbench's kernels (each ``stitch`` kernel's median launch, ``Program.time``) and
onnxruntime's nodes (its profiler's per-node durations, ``enable_profiling``), summed
per kind -- 1 x 1 convolutions, k x k ones, depthwise and grouped ones, pooling
windows, global reductions, matmuls, onnxruntime's layout reorders, the rest. This is
how the 2026-11-25 session chose what to fix.

    tv/bin/python benchmarks/kernel_kinds.py                       # torchvision's CNNs
    .venv/bin/python benchmarks/kernel_kinds.py --models model.onnx other.onnx

A model is an ONNX file (its first input fed random normal values) or a name of
``torchvision_models.MODELS``, exported as that script exports it (in a venv with
torchvision). A kernel's kind is its group's first convolution, matmul or windowed
reduction; an onnxruntime node's is read from its op and its inputs' shapes (NCHWc
inputs unblocked). Also one whole call of each, timed in alternation (median ms, and
the fastest block's: ``quiet_ms``). The kinds' sums are of launches in sequence (the
workbench's from Python, one at a time; onnxruntime's inside its run), so compare
kinds with kinds, not with the calls. Writes ``<out>/kernel-kinds-<date>.json`` and
``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from harness import RESULTS, alternate, machine_line, quiet_ms, time_models

TORCHVISION = ("resnet50", "mobilenet_v3_large", "efficientnet_b0", "googlenet",
               "squeezenet1_1", "regnet_y_400mf", "shufflenet_v2_x1_0")


def conv_kind(x_channels: int, w_shape) -> str:
    """A 2-D (or 1-D, 3-D) convolution's kind from its input channels and filters."""
    taps = "x".join(str(k) for k in w_shape[2:])
    if w_shape[1] == 1 and x_channels > 1:
        return f"depthwise {taps}"
    if w_shape[1] < x_channels:
        return f"grouped {taps}"
    return "conv 1x1" if all(k == 1 for k in w_shape[2:]) else f"conv {taps}"


def workbench_kind(g, nodes) -> str:
    """The kind of a kernel of ``g`` made of ``nodes``."""
    for nid in nodes:
        n = g.node(nid)
        if n.op in ("conv", "conv2d"):
            return conv_kind(g.value(n.inputs[0]).shape[1], g.value(n.inputs[1]).shape)
    for nid in nodes:
        n = g.node(nid)
        if n.op in ("matmul", "gemm", "batch_matmul"):
            return "matmul"
        if n.op == "window":
            return "pool"
    if any(g.node(nid).op.startswith("reduce") for nid in nodes):
        return "reduce"
    return "elementwise, other"


def onnxruntime_kind(op: str, shapes: list) -> str:
    """The kind of an onnxruntime node, from its op type and its inputs' shapes."""
    if "Conv" in op and len(shapes) > 1:
        x = shapes[0]
        channels = x[1] * x[-1] if op == "NchwcConv" or len(x) == 5 else x[1]
        return conv_kind(channels, shapes[1])
    if op in ("MatMul", "Gemm", "FusedMatMul", "FusedGemm"):
        return "matmul"
    if "Pool" in op and "Global" not in op:
        return "pool"
    if op.startswith("Reduce") or "GlobalAveragePool" in op or "GlobalMaxPool" in op:
        return "reduce"
    if op.startswith("Reorder"):
        return "layout (onnxruntime's NCHWc)"
    return "elementwise, other"


def _graph(name: str, folder: Path) -> Path:
    """The model's ONNX file: the given one, or torchvision's exported into folder."""
    if name.endswith(".onnx"):
        return Path(name)
    from torchvision_models import export
    return export(name, folder)[2]


def run_model(name: str, folder: Path, rounds: int, inner: int) -> dict:
    import onnxruntime as ort

    import workbench as wb
    path = _graph(name, folder)
    g = wb.load(path)
    x = np.random.default_rng(0).standard_normal(g.value(g.inputs[0]).shape)
    feeds = {g.inputs[0]: x.astype(np.float32)}
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    prog = s.program()
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(folder / "ort_profile")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    samples = alternate({"workbench": lambda: prog.run(feeds),
                         "onnxruntime": lambda: sess.run(None, feeds)}, rounds, inner)
    ort_runs = 2 + rounds * (inner + 1)     # (alternate's calls: two warm-up, then
    # an untimed one before each block)
    profile = sess.end_profiling()
    with open(profile) as f:
        events = json.load(f)
    os.remove(profile)
    ort_ms: dict = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            shapes = [list(d.values())[0] for d in e["args"].get("input_type_shape", [])]
            ort_ms[onnxruntime_kind(e["args"].get("op_name", ""), shapes)] += (
                e["dur"] / 1e3 / ort_runs)
    blocks = [prog.time(feeds, warmup=1, repeats=inner)[0] for _ in range(rounds)]
    per = np.min(blocks, axis=0)        # (each kernel's fastest block median)
    wb_ms: dict = defaultdict(float)
    for t, ck in zip(per, prog.compiled):
        wb_ms[workbench_kind(g, s.plan.group(ck.kernel.group).nodes)] += float(t) * 1e3
    return {"model": name, "kernels": len(prog.compiled),
            "latency_ms": {k: float(np.median(v) * 1e3) for k, v in samples.items()},
            "quiet_ms": {k: quiet_ms(v, inner) for k, v in samples.items()},
            "workbench_kinds_ms": dict(wb_ms), "onnxruntime_kinds_ms": dict(ort_ms)}


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Where the time goes, by kind of kernel, beside onnxruntime ({res['date']})",
             "", f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, "
             f"{mi.get('compiler')}. `stitch`. Kinds: the workbench's kernels (fastest of "
             f"{res['rounds']} blocks of `Program.time`) and onnxruntime's profiled nodes "
             "(mean per run), ms summed per kind; calls: median and quiet ms of one whole "
             f"call, {res['rounds']} alternating rounds of {res['inner']}.", "",
             "| model | kind | workbench ms | onnxruntime ms | workbench - onnxruntime |",
             "|---|---|---|---|---|"]
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} | | | |")
            continue
        w, o = rec["workbench_kinds_ms"], rec["onnxruntime_kinds_ms"]
        for kind in sorted(set(w) | set(o), key=lambda k: -max(w.get(k, 0), o.get(k, 0))):
            a, b = w.get(kind, 0.0), o.get(kind, 0.0)
            lines.append(f"| {rec['model']} | {kind} | {a:.3f} | {b:.3f} | {a - b:+.3f} |")
        lat, q = rec["latency_ms"], rec["quiet_ms"]
        lines.append(f"| {rec['model']} | **one call** (median / quiet) | "
                     f"{lat['workbench']:.3f} / {q['workbench']:.3f} | "
                     f"{lat['onnxruntime']:.3f} / {q['onnxruntime']:.3f} | "
                     f"x onnxruntime {q['onnxruntime'] / q['workbench']:.2f} (quiet) |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(TORCHVISION),
                    help="ONNX files, or torchvision model names (in a venv with it)")
    ap.add_argument("--repeats", type=int, default=6, help="alternating rounds")
    ap.add_argument("--inner", type=int, default=5, help="timed calls per method per round")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    return time_models(a, "kernel-kinds", markdown,
                       lambda name, tmp: run_model(name, tmp, a.repeats, a.inner),
                       label="export or load, plan, compile, profile: ")


if __name__ == "__main__":
    sys.exit(main())
