#!/usr/bin/env python
"""The NaN-propagating max/min helpers' C form, timed on whole models in one run.

    .venv/bin/python benchmarks/minmax_select.py
    .venv/bin/python benchmarks/minmax_select.py --models mobilenet_v2 --repeats 20

``wb_fmax``/``wb_fmin`` (``ops/elementwise.py``) keep NaN, as NumPy's maximum and
minimum do. Until 2026-11-24 they were written ``((a != a) | (a > b)) ? a : b``; GCC 12
cannot if-convert two of those in a row (a ReLU6 is ``min(max(x, 0), 6)``), so such a
loop was compiled as a branch per element, unvectorized ("control flow in loop",
``scripts/vectorization.py``). The form ``(a > b || a != a) ? a : b`` gives the same
bits for every pair of inputs (NaN, signed zeros, infinities) and vectorizes.

Each model (the zoo's, size ``small``, exported by ``torch.onnx.export`` and imported
from that file) is planned by ``stitch`` and compiled twice in this process, once with
each form of the helpers (``before``: the ``|`` form, ``after``: the current one), and
timed in alternation with onnxruntime on the same file (median ms of one call). Writes
``<out>/minmax-select-<date>.json`` and ``.md``. Never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np

from harness import (alternate, log, machine_line, method_rows, model_timing_args,
                     rel_error, time_models)

MODELS = ("mobilenet_v2", "resnet")
# the helpers as they were: the same bits, but GCC leaves two in a row unvectorized
BEFORE_C = r"""WB_FN float wb_fmax(float a, float b) { return ((a != a) | (a > b)) ? a : b; }
WB_FN float wb_fmin(float a, float b) { return ((a != a) | (a < b)) ? a : b; }
"""


@contextlib.contextmanager
def helper_form(c_text: str | None):
    """The FMAX helper's C text replaced by ``c_text`` (None: as it is) while kernels
    compile: the source, and so the cache key, differs."""
    from workbench.ops.elementwise import FMAX
    old = FMAX.c
    if c_text is not None:
        object.__setattr__(FMAX, "c", c_text)
    try:
        yield
    finally:
        object.__setattr__(FMAX, "c", old)


def _body(ck) -> str:
    """A compiled kernel's own function (its source after the shared prelude)."""
    return (ck.source or "").partition(f"void {ck.kernel.name}(")[2]


def run_model(name: str, folder: Path, rounds: int, inner: int) -> dict:
    import onnxruntime as ort

    import workbench as wb
    from workbench.testing import zoo
    from workbench.frontends import load_onnx
    path = zoo.export_onnx(zoo.build(name, size="small"), folder / f"{name}.onnx")
    g = load_onnx(path)
    rng = np.random.default_rng(0)
    inputs = {i: rng.standard_normal(g.value(i).shape).astype(g.value(i).dtype.np)
              for i in g.inputs}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
    methods = {"onnxruntime": lambda: sess.run(None, inputs)}
    rec: dict = {"model": name, "methods": {}}
    for how, text in (("before", BEFORE_C), ("after", None)):
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        with helper_form(text):
            prog = s.program()
        calls = sum(all(f in _body(ck) for f in ("wb_fmax(", "wb_fmin("))
                    for ck in prog.compiled)
        rec["methods"][how] = {"kernels": len(prog.compiled), "kernels_max_and_min": calls,
                               "error_vs_onnxruntime": rel_error(prog.run(inputs), want),
                               "kernel_ms": sum(prog.time(inputs, 2, 10)[0]) * 1e3}
        methods[f"workbench {how}"] = (lambda p: lambda: p.run(inputs))(prog)
    samples = alternate(methods, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    rec["samples_ms"] = {k: [x * 1e3 for x in v] for k, v in samples.items()}
    log(f"  {name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in rec["latency_ms"].items()))
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# NaN-propagating max/min: the helpers' C form on whole models ({res['date']})",
             "", f"{machine_line(res)}; NumPy {mi['numpy']}, onnxruntime {mi['onnxruntime']} "
             f"(default session options), torch {mi['torch']}; {mi['compiler']}.", "",
             "Each model planned by `stitch` and compiled with each form of `wb_fmax`/"
             "`wb_fmin` (`benchmarks/minmax_select.py`): **before** `((a != a) | (a > b)) "
             "? a : b`, **after** `(a > b || a != a) ? a : b` (same bits). Latency: median "
             f"ms of one call, {res['rounds']} alternating rounds of {res['inner']} calls; "
             "x = onnxruntime / method. Kernel ms: the kernels' summed medians "
             "(`Program.time`).", "",
             "| model | method | latency ms | x onnxruntime | kernel ms | kernels (with max "
             "and min) | error vs onnxruntime |", "|---|---|---|---|---|---|---|"]
    lines += method_rows(res, lambda r: [""] * 3 if r is None else [
        f"{r['kernel_ms']:.3f}", f"{r['kernels']} ({r['kernels_max_and_min']})",
        f"{r['error_vs_onnxruntime']:.1e}"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS, repeats=15)
    args = ap.parse_args(argv)
    return time_models(args, "minmax-select", markdown,
                       lambda name, tmp: run_model(name, tmp, args.repeats, args.inner),
                       label="[minmax_select] ")


if __name__ == "__main__":
    sys.exit(main())
