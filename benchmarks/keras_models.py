#!/usr/bin/env python
"""Keras' image models whole on the CPU, as TensorFlow users bring them: built by
``tf.keras.applications`` (random weights, seeded; logits out), converted to ONNX by tf2onnx
(``tf2onnx.convert.from_keras``, its default opset), imported from that file (the one
onnxruntime runs) and planned by ``stitch``; side by side in one run with onnxruntime
and Keras itself.

    .venv/bin/python benchmarks/keras_models.py                   # every model
    .venv/bin/python benchmarks/keras_models.py --models ResNet50 MobileNetV2

TensorFlow is no dependency of the project: each model is built and converted by a
child process in a venv of its own (``--tf-python``, default ``tfvenv/bin/python``;
``python3 -m venv tfvenv && tfvenv/bin/pip install tensorflow-cpu tf2onnx
onnxruntime``), which writes the ONNX file and Keras' own output for one image. The
timing runs in this process, with no TensorFlow loaded: its thread pools, loaded
beside the others, slowed the workbench's calls by up to 10% (ResNet50 0.79x
onnxruntime against 0.89x alone).

A Keras model takes NHWC images; tf2onnx transposes once and keeps the convolutions
in NCHW, writes Keras' ZeroPadding2D as Pad nodes and its "same" padding as pads, and
puts a ResNet50 (v1) stage's stride on its first 1 x 1. These are what this script
found first: the Pad before ResNet50's max pool ran as a kernel of its own (2.7 ms of
46; ``ir/pad_folding.py`` now takes it into the pool), its strided 1 x 1s copied the
rows they skip (``wb_conv_lanes``), and InceptionV3's average pools of its concats
were split from their sums or stitched after them (``tests/fusion/test_pool_groups.py``).

Methods, timed in alternation as ``benchmarks/models.py`` does (median ms of one call,
and the fastest block's, ``quiet_ms``): **workbench stitch** and **onnxruntime**
(default session options). Per model also the error of the workbench's output and of
onnxruntime's against Keras' (``training=False``), and the stitch plan's five slowest
kernels. Writes ``<out>/keras-<date>.json`` and ``.md``; never exits non-zero
for a timing.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness import (ROOT, alternate, machine_line, model_timing_args, quiet_ms,
                     rel_error, slowest_kernels, slowest_rows, time_models)

# (ConvNeXtTiny is not among them: tf2onnx 1.17 leaves a StatefulPartitionedCall in
# its file, which neither onnxruntime nor the workbench runs -- the workbench says so:
# "fails the ONNX checker (No Op registered for StatefulPartitionedCall ...)")
MODELS = ("ResNet50", "MobileNetV2", "EfficientNetB0", "InceptionV3", "DenseNet121",
          "MobileNetV3Small", "Xception")


def export(name: str, folder: Path) -> None:
    """(In the TensorFlow venv.) Keras' model ``name`` (random weights, seed 0) into
    ``folder``: the ONNX file tf2onnx writes of it and ``<name>.npz`` holding one image
    for it (224 x 224; InceptionV3 and Xception 299, NHWC) and Keras' logits."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tf2onnx
    size = 299 if name in ("InceptionV3", "Xception") else 224
    tf.keras.utils.set_random_seed(0)
    # (logits, not the softmax: 1000 near-equal probabilities compare equal whatever
    # the logits' error)
    model = getattr(tf.keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                                 classifier_activation=None)
    x = np.random.default_rng(0).standard_normal((1, size, size, 3)).astype(np.float32)
    spec = (tf.TensorSpec((1, size, size, 3), tf.float32, name="x"),)
    tf2onnx.convert.from_keras(model, input_signature=spec,
                               output_path=str(folder / f"{name}.onnx"))
    np.savez(folder / f"{name}.npz", x=x, logits=np.asarray(model(x, training=False)),
             tensorflow=tf.__version__, tf2onnx=tf2onnx.__version__)


def run_model(name: str, rounds: int, inner: int, folder: Path, tf_python: str) -> dict:
    import onnxruntime as ort

    import workbench as wb
    r = subprocess.run([tf_python, __file__, "--export", name, "--to", str(folder)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        raise RuntimeError(f"the export failed: {lines[-1] if lines else r.returncode}")
    path, saved = folder / f"{name}.onnx", np.load(folder / f"{name}.npz")
    x = saved["x"]
    g = wb.load(path)
    (inp,) = g.inputs
    (out,) = g.outputs
    feeds = {inp: x}
    want = {out: saved["logits"]}
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    prog = s.program()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rec: dict = {"model": name, "image": x.shape[1], "nodes": len(g.nodes),
                 "tensorflow": str(saved["tensorflow"]), "tf2onnx": str(saved["tf2onnx"]),
                 "methods": {"stitch": {"kernels": len(prog.compiled),
                                        "error_vs_keras": rel_error(prog.run(feeds), want)}},
                 "onnxruntime_error_vs_keras": rel_error(
                     dict(zip([out], sess.run(None, feeds))), want)}
    samples = alternate({"workbench stitch": lambda: prog.run(feeds),
                         "onnxruntime": lambda: sess.run(None, feeds)}, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    rec["quiet_ms"] = {k: quiet_ms(v, inner) for k, v in samples.items()}
    rec["samples_ms"] = {k: [t * 1e3 for t in v] for k, v in samples.items()}
    rec["slowest_kernels"] = slowest_kernels(s, prog, feeds)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    ran = [r for r in res["models"] if "error" not in r]
    tf = f"TensorFlow {ran[0]['tensorflow']}, tf2onnx {ran[0]['tf2onnx']}, " if ran else ""
    lines = [f"# Keras' image models on the CPU, through tf2onnx ({res['date']})", "",
             f"{machine_line(res)}; {tf}onnxruntime {mi['onnxruntime']}, "
             f"{mi['compiler']}. One 224 x 224 image (InceptionV3, Xception: 299), random "
             "weights, logits out, converted by `tf2onnx.convert.from_keras` and imported "
             "from that file; `stitch`. Median ms of one call (and the fastest block's, "
             f"quiet), {res['rounds']} alternating rounds of {res['inner']} calls; x = "
             "onnxruntime / method, quiet.", "",
             "| model | method | ms (median / quiet) | x onnxruntime | kernels | error vs "
             "Keras |", "|---|---|---|---|---|---|"]
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} | | | | |")
            continue
        lat, q = rec["latency_ms"], rec["quiet_ms"]
        m = rec["methods"]["stitch"]
        lines.append(f"| {rec['model']} | workbench stitch | {lat['workbench stitch']:.3f} / "
                     f"{q['workbench stitch']:.3f} | "
                     f"{q['onnxruntime'] / q['workbench stitch']:.2f}x | {m['kernels']} | "
                     f"{m['error_vs_keras']:.1e} |")
        lines.append(f"| {rec['model']} | onnxruntime | {lat['onnxruntime']:.3f} / "
                     f"{q['onnxruntime']:.3f} | 1.00x | | "
                     f"{rec['onnxruntime_error_vs_keras']:.1e} |")
    lines += slowest_rows(res)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", help=argparse.SUPPRESS)    # (the child's: one model)
    ap.add_argument("--to", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tf-python", default=str(ROOT / "tfvenv" / "bin" / "python"),
                    help="a Python with tensorflow and tf2onnx (default tfvenv/bin/python)")
    model_timing_args(ap, MODELS, repeats=5)
    a = ap.parse_args(argv)
    if a.export:
        export(a.export, a.to)
        return 0
    if not Path(a.tf_python).exists():
        print(f"no Python at {a.tf_python}; see this script's docstring for a venv with "
              "TensorFlow and tf2onnx (--tf-python names another)", file=sys.stderr)
        return 2
    return time_models(a, "keras", markdown,
                       lambda name, tmp: run_model(name, a.repeats, a.inner, tmp,
                                                   a.tf_python),
                       label="build and convert (TensorFlow's venv), import, plan, "
                             "compile, time: ")


if __name__ == "__main__":
    sys.exit(main())
