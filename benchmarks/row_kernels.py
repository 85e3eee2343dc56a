#!/usr/bin/env python
"""Row kernels on the CPU against what users would run instead: softmax, LayerNorm,
RMSNorm and logsumexp (issue 44's shapes), each a torch module exported to ONNX and
imported by the workbench (``stitch`` plan, ``cpu`` backend), timed beside onnxruntime,
torch eager and ``torch.compile`` in one run.

    .venv/bin/python benchmarks/row_kernels.py                    # every shape
    .venv/bin/python benchmarks/row_kernels.py --models softmax_512x32000 --repeats 20

Every method: one whole call (inputs in, the output out; the workbench program with
preallocated outputs, ``run(x, out=...)``, as a serving loop calls it), timed in
alternating blocks of ``--inner`` calls, each block after a 0.2 s idle pause (a thread
pool still spinning from the previous method would land on the next); the fastest
block's median (``quiet_ms``) and the median of all calls. Also the workbench's kernel
count and each kernel's own time (``Program.time``). Where the exp pass of a row
kernel is split around ``wb_expf_n`` (codegen/render/c_exp_rows.py), the same plan
with the pass fused (``MAX_COLS`` 0 while it compiles) is timed beside it. Writes
``<out>/row-kernels-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from harness import alternate, machine_line, quiet_ms, shapes_main

# name: (op, input shape)
SHAPES = {
    "softmax_512x32000": ("softmax", (512, 32000)),
    "softmax_8192x512": ("softmax", (8192, 512)),
    "layernorm_4096x768": ("layernorm", (4096, 768)),
    "rmsnorm_4096x768": ("rmsnorm", (4096, 768)),
    "logsumexp_512x32000": ("logsumexp", (512, 32000)),
}


def _module(op: str, width: int):
    import torch

    class Row(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(width, generator=g))
            self.b = torch.nn.Parameter(0.1 * torch.randn(width, generator=g))

        def forward(self, x):
            if op == "softmax":
                return torch.softmax(x, dim=-1)
            if op == "layernorm":
                return torch.nn.functional.layer_norm(x, (width,), self.w, self.b, 1e-5)
            if op == "rmsnorm":
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
            return torch.logsumexp(x, dim=-1)
    return Row().eval()


def _fused_exp(path: Path):
    """The ``stitch`` program of ``path`` with its row kernels' exp passes fused (as
    before codegen/render/c_exp_rows.py), or None where none is split."""
    import workbench as wb
    from workbench.codegen.render import c_exp_rows
    s = wb.Session(wb.load(path), backend="cpu")
    s.auto("stitch")
    if not any("wb_ex_" in s.source(k.group, target="c") for k in s.kernels()):
        return None
    keep, c_exp_rows.MAX_COLS = c_exp_rows.MAX_COLS, 0
    try:
        fused = wb.Session(wb.load(path), backend="cpu")
        fused.auto("stitch")
        return fused.program()        # (compiled here, while no row is split)
    finally:
        c_exp_rows.MAX_COLS = keep


def run_shape(name: str, folder: Path, rounds: int, inner: int) -> dict:
    import onnxruntime as ort
    import torch

    import workbench as wb
    from workbench.testing.zoo import _quiet
    from workbench.tolerance import relative_to_largest
    op, shape = SHAPES[name]
    module = _module(op, shape[-1])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3
    tx = torch.from_numpy(x)
    path = folder / f"{name}.onnx"
    with _quiet(), torch.no_grad():
        torch.onnx.export(module, (tx,), str(path), input_names=["x"], output_names=["y"],
                          dynamo=False, opset_version=17)
    s = wb.Session(wb.load(path), backend="cpu")
    s.auto("stitch")
    prog = s.program()
    out = prog.new_outputs()
    feeds = {"x": x}
    fused = _fused_exp(path)
    with torch.no_grad():
        want = module(tx).numpy()
    err = relative_to_largest(prog.run(feeds)["y"], want)
    if not err <= 1e-5:
        raise AssertionError(f"the workbench's output differs from torch's by {err:.3g}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = torch.compile(module)

    def run_compiled():
        with torch.no_grad():
            return compiled(tx)
    run_compiled()                       # (compiled once, untimed)

    def eager():
        with torch.no_grad():
            return module(tx)
    if fused is not None:
        if not np.array_equal(fused.run(feeds)["y"], prog.run(feeds)["y"]):
            raise AssertionError("the fused exp pass gives other bits than the split one")
        fused_out = fused.new_outputs()
        extra = {"workbench exp fused": lambda: fused.run(feeds, out=fused_out)}
    else:
        extra = {}
    calls = {"workbench stitch": lambda: prog.run(feeds, out=out), **extra,
             "onnxruntime": lambda: sess.run(None, feeds),
             "torch eager": eager, "torch.compile": run_compiled}
    samples = alternate(calls, rounds, inner)
    kernels = prog.time(feeds, warmup=1, repeats=inner)[0]
    return {"model": name, "op": op, "shape": list(shape), "error_vs_torch": err,
            "kernels": [k.name for k in s.kernels()],
            "kernel_ms": [round(t * 1e3, 4) for t in kernels],
            "quiet_ms": {k: quiet_ms(v, inner) for k, v in samples.items()},
            "median_ms": {k: float(np.median(v) * 1e3) for k, v in samples.items()}}


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Row kernels on the CPU ({res['date']})", "",
             f"{machine_line(res)}; onnxruntime {mi.get('onnxruntime')}, torch "
             f"{mi.get('torch')}, {mi.get('compiler')}. One torch module per shape, "
             "exported by the TorchScript exporter; the workbench's `stitch` plan of the "
             "ONNX file (outputs preallocated). ms: the fastest block's median (all calls' "
             f"median in brackets), {res['rounds']} alternating rounds of {res['inner']} "
             "calls, each block after a 0.2 s pause; x = the contender's ms / the "
             "workbench's (> 1: the workbench is faster).", "",
             "| shape | kernels (own ms) | workbench | workbench, exp pass fused "
             "| onnxruntime | torch eager | torch.compile |", "|---|---|---|---|---|---|---|"]
    for rec in res["models"]:
        if "error" in rec:
            lines.append(f"| {rec['model']} | failed: {rec['error']} | | | | | |")
            continue
        q, m = rec["quiet_ms"], rec["median_ms"]
        wbq = q["workbench stitch"]
        cells = [f"{wbq:.3f} ({m['workbench stitch']:.3f})"]
        for k in ("workbench exp fused", "onnxruntime", "torch eager", "torch.compile"):
            cells.append(f"{q[k]:.3f} ({m[k]:.3f}) {q[k] / wbq:.2f}x" if k in q else "-")
        ks = ", ".join(f"{n} {t:.3f}" for n, t in zip(rec["kernels"], rec["kernel_ms"]))
        lines.append(f"| {rec['model']} | {ks} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    return shapes_main(argv, __doc__, SHAPES, "row-kernels", markdown, run_shape,
                       "export, plan, compile, time: ", repeats=10)


if __name__ == "__main__":
    sys.exit(main())
