"""The model zoo in bfloat16, as a user converts it (``model.to(torch.bfloat16)``),
through both import paths (``from_torch``; ``torch.onnx.export`` then ``load``),
planned with ``stitch`` and run on the CPU backend (or ``--backend cuda-emu``: the
H100's plans, their CUDA source in the CUDA emulator, bfloat16 matmuls on tensor
cores); each output compared with torch eager in bfloat16 and with the float32 model
(the truth both approximate).

    python scripts/zoo_bfloat16.py [--models bert llama ...] [--backend cpu|cuda-emu] [--out DIR]

Writes ``<out>/zoo-bfloat16-<date>.md`` (``-cuda-emu`` before ``.md`` on the emulator). A model passes when every kernel is within
its bound of the reference and the workbench's output is no further from the float32
model than twice torch's bfloat16 output is (``max |y - r| / max |r|``): fused kernels
round once per store where torch rounds after every op, so they are usually closer.
Exits 1 when a model that imports fails that check.
"""
from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.testing import zoo  # noqa: E402
from workbench.frontends import load  # noqa: E402
from workbench.session import Session  # noqa: E402
from workbench.tolerance import relative_to_largest  # noqa: E402

SLACK = 2.0     # the workbench may be this many times torch bfloat16's distance from f32


def distance(y, r) -> float:
    return relative_to_largest(y, r)


def onnx_checker(path: Path) -> str:
    """What ONNX's own full check says of an exported file (an exporter may write a
    model the spec does not allow)."""
    import onnx
    try:
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
        return "onnx.checker accepts the file"
    except Exception as e:    # noqa: BLE001
        return f"onnx.checker refuses the file too ({str(e).splitlines()[0][:160]})"


def check(name: str, path: str, folder: Path, backend: str = "cpu") -> dict:
    m32 = zoo.build(name)
    m = zoo.build(name, dtype="bfloat16")
    f32, b16 = m32.torch_outputs()[m.outputs[0]], m.torch_outputs()[m.outputs[0]]
    t0 = time.perf_counter()
    try:
        g = zoo.import_torch(m) if path == "torch" else load(
            str(zoo.export_onnx(m, folder / f"{name}.onnx")))
        s = Session(g, backend=backend)
        s.auto("stitch")
        feeds = dict(zip(g.inputs, m.numpy_inputs().values()))
        y = s.run(feeds)[g.outputs[0]]
        meas = s.measure(warmup=1, repeats=2)
    except Exception as e:    # noqa: BLE001 -- reported as the row's reason
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        if path == "onnx" and (folder / f"{name}.onnx").exists():
            why += "; " + onnx_checker(folder / f"{name}.onnx")
        return {"model": name, "path": path, "status": "refused", "why": why}
    out_dt = g.value(g.outputs[0]).dtype.value
    wb_f32, torch_f32 = distance(y, f32), distance(b16, f32)
    ok = meas.within_tolerance and out_dt == "bfloat16" and wb_f32 <= SLACK * torch_f32
    return {"model": name, "path": path, "status": "ok" if ok else "FAIL", "dtype": out_dt,
            "kernels": len(s.plan.groups), "worst_kernel": meas.max_rel_error,
            "tensor_core": sum(k.tensor_cores for k in s.kernels()),
            "kernels_ok": meas.within_tolerance, "wb_vs_torch_bf16": distance(y, b16),
            "wb_vs_f32": wb_f32, "torch_bf16_vs_f32": torch_f32,
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(zoo.MODELS), choices=zoo.MODELS)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--backend", choices=("cpu", "cuda-emu"), default="cpu")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            for path in ("torch", "onnx"):
                r = check(name, path, Path(tmp), a.backend)
                rows.append(r)
                print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in r.items()), flush=True)
    import torch
    date = dt.date.today().isoformat()
    lines = [f"# The model zoo in bfloat16 ({date})", "",
             f"Machine: {platform.processor() or platform.machine()}, "
             f"{platform.platform()}; Python {platform.python_version()}, NumPy "
             f"{np.__version__}, torch {torch.__version__}. Size `tiny`; `stitch`, "
             + ("CPU backend" if a.backend == "cpu" else "the H100's plans on the CUDA "
                "emulator (*tensor-core*: kernels whose matmuls run on tensor cores)")
             + ". Distances are `max |y - r| / max |r|` of the first output.", "",
             "| model | path | status | kernels | tensor-core | worst kernel err | "
             "wb vs torch bf16 | wb vs float32 | torch bf16 vs float32 | s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] == "refused":
            lines.append(f"| {r['model']} | {r['path']} | refused: {r['why']} "
                         "| | | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['path']} | {r['status']} | {r['kernels']} | "
                     f"{r['tensor_core']} | {r['worst_kernel']:.2g} | {r['wb_vs_torch_bf16']:.4f} | "
                     f"{r['wb_vs_f32']:.4f} | {r['torch_bf16_vs_f32']:.4f} | "
                     f"{r['seconds']:.1f} |")
    ok = sum(r["status"] == "ok" for r in rows)
    lines += ["", f"**{ok} of {len(rows)}** model/path pairs pass (every kernel within its "
              f"bound, output bfloat16, no further from float32 than {SLACK:g}x torch's "
              "bfloat16)."]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"zoo-bfloat16-{date}" + ("" if a.backend == "cpu" else f"-{a.backend}") + ".md"
    (out / name).write_text("\n".join(lines) + "\n")
    print(f"wrote {out / name}")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
