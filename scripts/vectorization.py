#!/usr/bin/env python
"""Which SIMD loops of the generated C kernels GCC left scalar, model by model.

    .venv/bin/python scripts/vectorization.py                       # every zoo model
    .venv/bin/python scripts/vectorization.py --models mobilenet_v2 resnet --size tiny

Each zoo model (random weights; ``--dtype bfloat16`` converts it, as a user's
``model.to(torch.bfloat16)`` does) is exported by ``torch.onnx.export`` and imported
from that file, as a user brings it (through ``from_torch`` where that fails), planned
by ``stitch`` for this CPU, and every generated kernel is compiled with the CPU
backend's own flags and GCC's ``-fopt-info-vec`` report
(``workbench/runtime/vectorization.py``). Lists each ``#pragma omp simd`` loop the
compiler did not vectorize, with its reasons. A loop GCC turned into ``memset`` or
``memcpy`` says so ("statement clobbers memory"); one with no reason has too few
iterations to be worth it; "control flow in loop" on a loop of many iterations is the
kind of loss to fix (a select GCC cannot if-convert, as ``wb_fmax``'s form before
2026-11-24). Writes ``<out>/vectorization-<date>.md`` and ``.json`` (with ``--dtype
bfloat16``, ``vectorization-<date>-bfloat16``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.testing import zoo  # noqa: E402
from workbench.codegen import lower_plan  # noqa: E402
from workbench.frontends import load_onnx  # noqa: E402
from workbench.runtime import get_backend  # noqa: E402
from workbench.runtime.cc import cflags, find_compiler  # noqa: E402
from workbench.runtime.vectorization import simd_loops, supported  # noqa: E402
from workbench.session import Session  # noqa: E402


def audit(name: str, size: str, folder: Path, dtype: str = "float32") -> dict:
    m = zoo.build(name, size=size, dtype=dtype)
    try:
        graph = load_onnx(str(zoo.export_onnx(m, folder / f"{name}.onnx")))
    except Exception:   # (an export or import that fails: the model as from_torch has it)
        graph = zoo.import_torch(m)
    s = Session(graph, backend="cpu")
    s.auto("stitch")
    backend = get_backend("cpu")
    kernels = [k for k in lower_plan(s.plan) if k.library is None]
    with ThreadPoolExecutor(2) as pool:   # the compiler is a process of its own
        found = list(pool.map(lambda k: simd_loops(backend.render(k), k.name), kernels))
    loops = [(k, loop) for k, ls in zip(kernels, found) for loop in ls]
    scalar = [{"kernel": k.name, "schedule": k.schedule, "loop": loop.text,
               "reasons": list(loop.reasons)} for k, loop in loops if not loop.vectorized]
    return {"model": name, "kernels": len(kernels), "simd_loops": len(loops),
            "scalar": scalar}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(zoo.MODELS))
    ap.add_argument("--size", default="small", choices=sorted(zoo.SIZES))
    ap.add_argument("--dtype", default="float32", choices=zoo.DTYPES)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    if not supported():
        print("the C compiler is not GCC: its vectorization report cannot be read here")
        return 1
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            print(f"[vectorization] {name} ...", flush=True)
            results.append(audit(name, args.size, Path(tmp), args.dtype))
    day = _dt.date.today().isoformat()
    stem = f"vectorization-{day}" + ("" if args.dtype == "float32" else f"-{args.dtype}")
    cc = find_compiler()[1]
    lines = [f"# SIMD loops GCC left scalar ({day})", "",
             f"Compiler: {cc}; flags: `{' '.join(cflags())}`. Zoo size `{args.size}`, "
             f"{args.dtype}, "
             "ONNX export imported, `stitch` plan; every generated kernel's "
             "`#pragma omp simd` loops (`scripts/vectorization.py`).", "",
             "| model | kernels | SIMD loops | scalar |", "|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['kernels']} | {r['simd_loops']} | {len(r['scalar'])} |"
              for r in results]
    lines += ["", "## The loops left scalar", "",
              "| model | kernel | loop | GCC's reasons |", "|---|---|---|---|"]
    for r in results:
        for s in r["scalar"]:
            why = "; ".join(s["reasons"]) or "(none: too few iterations)"
            lines.append(f"| {r['model']} | {s['kernel']} | `{s['loop']}` | {why} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(
        {"date": day, "compiler": cc, "flags": list(cflags()), "size": args.size,
         "dtype": args.dtype, "models": results}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
