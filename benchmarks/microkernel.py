#!/usr/bin/env python
"""The CPU GEMM micro-kernel alone (``codegen/microkernel.py``), one thread: GFLOP/s of
one tile's product against a packed B, over tile widths that end in a partial block
of columns (16, 48, 49, 65, 196 ...) and ones that do not (64, 256), next to NumPy's
sgemm on the same operands (one BLAS thread), and the bfloat16 product in pairs of
rows (``wb_gemm_packed_pairs``) on the operands rounded to bfloat16.

    .venv/bin/python benchmarks/microkernel.py
    .venv/bin/python benchmarks/microkernel.py --checkout /tmp/old --tag=-before

The micro-kernel is compiled as the kernels are (``CRenderer().prelude()``, the
backend's flags) with a C loop timing ``wb_gemm_packed`` (best of ``--repeats``
batches, so that ctypes' call is not in the time). ``--checkout`` compiles the
prelude of another checkout of the workbench (the commit before a change) for
comparison; sgemm is timed the same way in both. Writes
``<out>/microkernel-<date><tag>.json`` and ``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

from harness import RESULTS, ROOT, machine_info

# (m, n, k): a tile of 128 rows over widths with and without a partial block of
# columns at the edge, at depths of a BERT layer (256, 1024) and a deep convolution
SHAPES = [(128, n, k) for k in (256, 1024) for n in (16, 48, 49, 64, 65, 196, 256)]

TIMER = r"""
#include <time.h>
/* seconds of calls products of a (float32, or bfloat16 with pairs) by the packed bp */
double t_seconds(int pairs, long long m, long long n, long long k, const void* a,
                 const float* bp, float* c, int calls) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < calls; i++) {
    if (pairs) wb_gemm_packed_pairs(m, n, k, (const unsigned short*)a, k, 1, bp, c, n);
    else wb_gemm_packed(m, n, k, (const float*)a, k, 1, bp, c, n);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
}
void t_pack(const void* b, int kind, long long k, long long n, float* bp) {
  wb_pack_b_once(b, kind, k, n, n, 1, bp);
}
"""
F32, PAIRS = 0, 2       # the pack's kind (WB_B_F32, WB_B_PAIRS in the micro-kernel)


def _library(checkout: Path):
    """The micro-kernel of ``checkout`` compiled with a timing loop (in a child
    process's import of that checkout, so two versions never share a module)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from workbench.codegen.render import CRenderer; "
            "from workbench.runtime import cc; "
            "print(cc.build_library('t_microbench', CRenderer().prelude() + sys.argv[2]))")
    out = subprocess.run([sys.executable, "-c", code, str(checkout), TIMER],
                         capture_output=True, text=True, check=True)
    from workbench.runtime import cc
    lib = cc.load_library(out.stdout.strip().splitlines()[-1])
    P, LL = ctypes.c_void_p, ctypes.c_longlong
    lib.t_seconds.argtypes = [ctypes.c_int, LL, LL, LL, P, P, P, ctypes.c_int]
    lib.t_seconds.restype = ctypes.c_double
    lib.t_pack.argtypes = [P, ctypes.c_int, LL, LL, P]
    lib.t_pack.restype = None
    return lib


def _best(f, repeats: int) -> float:
    return min(f() for _ in range(repeats))


def run(checkout: Path, repeats: int) -> list[dict]:
    from threadpoolctl import threadpool_limits
    from workbench.codegen.microkernel import packed_numel
    lib = _library(checkout)
    rows = []
    rng = np.random.default_rng(0)
    for m, n, k in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        calls = max(1, int(2e8 // (2 * m * n * k)))

        def micro(a, b, kind):
            """(seconds per product, relative error against float32's product of the
            operands as given) of the micro-kernel on a and b, packed as kind."""
            bp = np.zeros(packed_numel(k, n, pairs=kind == PAIRS), np.float32)
            lib.t_pack(b.ctypes.data, kind, k, n, bp.ctypes.data)
            args = (int(kind == PAIRS), m, n, k, a.ctypes.data, bp.ctypes.data,
                    c.ctypes.data, calls)
            lib.t_seconds(*args)
            want = a.astype(np.float32) @ b.astype(np.float32)
            err = float(np.abs(c - want).max() / max(np.abs(want).max(), 1e-30))
            return _best(lambda: lib.t_seconds(*args), repeats) / calls, err

        def sgemm():
            t0 = time.perf_counter()
            for _ in range(calls):
                np.matmul(a, b, out=c)
            return time.perf_counter() - t0
        t32, err = micro(a, b, F32)
        # bfloat16 A and B, B packed in pairs of rows (the same values rounded)
        t16, err16 = micro(a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), PAIRS)
        with threadpool_limits(1, user_api="blas"):
            blas = _best(sgemm, repeats) / calls
        flops = 2.0 * m * n * k
        rows.append({"m": m, "n": n, "k": k, "micro_gflop_s": flops / t32 / 1e9,
                     "sgemm_gflop_s": flops / blas / 1e9, "rel_error": err,
                     "pairs_gflop_s": flops / t16 / 1e9, "pairs_rel_error": err16})
    return rows


def markdown(res: dict) -> str:
    lines = [f"# The GEMM micro-kernel alone, one thread ({res['date']})", "",
             f"Machine: {res['cpu']}; checkout `{res['checkout']}` "
             f"({res['commit']}); best of {res['repeats']} batches. sgemm: NumPy's, one "
             "BLAS thread (with Python's loop in its time).", "",
             "| m x n x k | micro-kernel GFLOP/s | sgemm GFLOP/s | error | bfloat16 pairs "
             "GFLOP/s | its error |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['m']}x{r['n']}x{r['k']} | {r['micro_gflop_s']:.1f} | "
                     f"{r['sgemm_gflop_s']:.1f} | {r['rel_error']:.1e} | "
                     f"{r['pairs_gflop_s']:.1f} | {r['pairs_rel_error']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", type=Path, default=ROOT,
                    help="the workbench checkout whose micro-kernel is compiled")
    ap.add_argument("--repeats", type=int, default=7, help="batches; the best is kept")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tag", default="", help="appended to the result file names")
    a = ap.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(a.checkout), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    date = _dt.date.today().isoformat()
    res = {"date": date, "checkout": str(a.checkout), "commit": commit,
           "repeats": a.repeats, "cpu": machine_info()["cpu"],
           "load_average_at_start": list(os.getloadavg()),
           "rows": run(a.checkout.resolve(), a.repeats)}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"microkernel-{date}{a.tag}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=1))
    stem.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
