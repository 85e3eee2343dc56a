"""The model zoo with TF32 allowed (``matmul_precision="tf32"``), as a GPU user runs it:
imported through ``from_torch``, planned for the H100 with ``stitch``, its CUDA
kernels -- the tensor-core GEMM kernels and fused attentions among them -- run in the
CUDA emulator (whose WMMA rounds as tensor cores do); every kernel checked against
NumPy within its bound (TF32's for the matmuls) and the outputs compared with torch's
float32 model.

    python scripts/zoo_tf32.py [--models bert llama ...] [--out DIR]

Writes ``<out>/zoo-tf32-<date>-cuda-emu.md``. A model passes when every kernel is within
its bound; the distance to torch's float32 output (``max |y - r| / max |r|``) is
reported, not judged (TF32's rounding, carried through the layers). Exits 1 when a
model fails.
"""
from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.testing import zoo  # noqa: E402
from workbench.measure import verify_kernels  # noqa: E402
from workbench.runtime.cc import cpu_model  # noqa: E402
from workbench.session import Session  # noqa: E402
from workbench.tolerance import relative_to_largest  # noqa: E402


def run_model(name: str) -> dict:
    t0 = time.perf_counter()
    m = zoo.build(name)
    s = Session(zoo.import_torch(m), backend="cuda-emu", matmul_precision="tf32")
    s.auto("stitch")
    kernels = s.kernels()
    prog = s.program()
    env = prog.run(m.numpy_inputs(fresh=True), keep_all=True)
    checks = verify_kernels(prog, env)
    dist = 0.0
    for fresh in (False, True):
        got, want = s.run(m.numpy_inputs(fresh)), m.torch_outputs(fresh)
        for k, r in want.items():
            dist = max(dist, relative_to_largest(got[k], r))
    return {"model": name, "kernels": len(kernels),
            "tensor_core": sum(k.tensor_cores for k in kernels),
            "attention": sum(gr.schedule.then is not None for gr in s.plan.groups
                             if gr.schedule.gemm is not None),
            "cublas_tf32": sum(k.library is not None and k.tf32 for k in kernels),
            "ok": all(c.within_tolerance for c in checks),
            "worst": max(c.max_rel_error for c in checks), "torch_fp32": dist,
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(zoo.MODELS), choices=zoo.MODELS)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    rows = []
    for name in args.models:
        r = run_model(name)
        rows.append(r)
        print(f"{name}: {r['kernels']} kernels, {r['tensor_core']} on tensor cores "
              f"({r['attention']} fused attentions), {r['cublas_tf32']} cuBLAS in TF32; "
              f"within bounds {r['ok']}; {r['torch_fp32']:.2e} from torch float32 "
              f"({r['seconds']:.0f} s)", flush=True)
    stamp = dt.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# The zoo with TF32 allowed, on the CUDA emulator ({stamp})", "",
             f"H100 plans (`stitch`, `matmul_precision=\"tf32\"`), CUDA source run by the "
             f"emulator on {cpu_model()}, Python {platform.python_version()}; "
             "`python scripts/zoo_tf32.py`. *worst*: the worst kernel's error over its "
             "bound's magnitude (within when <= 1e-4); *torch fp32*: max |y - r| / max |r| "
             "against torch's float32 model.", "",
             "| model | kernels | tensor-core kernels | fused attentions | cuBLAS TF32 "
             "| all within bound | worst | torch fp32 | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['kernels']} | {r['tensor_core']} | {r['attention']} | "
              f"{r['cublas_tf32']} | {r['ok']} | {r['worst']:.2e} | {r['torch_fp32']:.2e} | "
              f"{r['seconds']:.0f} |" for r in rows]
    path = out / f"zoo-tf32-{stamp}-cuda-emu.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
