#!/usr/bin/env python
"""How much a Winograd 3 x 3 convolution would save where the direct form
(``CONV_DIRECT``) already runs near the cores' multiply-add peak: ResNet small's 3 x 3
stride-1 convolutions (16 -> 16 over 16 x 16, 32 -> 32 over 8 x 8, batch 2) and two
deeper ones (ResNet-50's first stage, 128 channels over 32 x 32), computed as F(2 x 2, 3 x 3) by a probe in C (not a workbench form) beside
the workbench's own kernel for the same convolution.

    .venv/bin/python benchmarks/winograd_probe.py [--rounds 30] [--tag=-x]

F(2 x 2, 3 x 3) (Lavin and Gray, arXiv 1509.09308) makes each 2 x 2 block of outputs
from a 4 x 4 block of input with 16 multiply-adds per input channel and filter where
the direct form takes 36: the filters transformed once (``G g G^T``), per image each
input tile transformed (``B^T d B``), 16 products of (filters x channels) by
(channels x tiles) -- the tiles in the vectors' lanes, 16 accumulators, each filter a
broadcast operand -- then each output tile transformed back (``A^T m A``). One image
per thread (``omp parallel for`` over the batch), its scratch allocated per call (in the
time). The tiles of a plane must be a multiple of 16 (ResNet-50's 14 x 14 and 28 x 28
stages are not, and are left out).

Checked first: each probe's output against a float64 NumPy convolution of the same
random input and filters (relative error bound 1e-5 of the largest output: the
transforms add a few roundings per output over the direct sum's). Then timed in
alternating blocks (0.2 s pause before each): the workbench's kernel its own
nanoseconds inside the native call (``kernel_ns``; planner ``stitch``, the
convolution alone, no bias), the probe each call timed inside C; per method the
fastest call and the median. Writes ``<out>/winograd-probe-<date><tag>.json`` and
``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, log, machine, machine_line, write_results

# name: (batch, channels, plane, filters) -- every one 3 x 3, stride 1, pad 1
SHAPES = {
    "resnet_small_16": (2, 16, 16, 16),    # zoo ResNet's k4 / k6
    "resnet_small_32": (2, 32, 8, 32),     # zoo ResNet's k11
    "resnet50_l1": (1, 64, 56, 64),        # ResNet-50's first stage (its 3 x 3s)
    "c128_32": (2, 128, 32, 128),
}
REL_BOUND = 1e-5

PROBE = r"""
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef float vf __attribute__((vector_size(64)));

/* filters g (K x C x 3 x 3) -> U (16 x K x C): G g G^T, G = [1 0 0; .5 .5 .5;
   .5 -.5 .5; 0 0 1] */
void wino_filters(const float* g, long long K, long long C, float* U) {
  for (long long k = 0; k < K; k++)
    for (long long c = 0; c < C; c++) {
      const float* w = g + (k * C + c) * 9;
      float t[4][3];
      for (int j = 0; j < 3; j++) {
        t[0][j] = w[j];
        t[1][j] = 0.5f * (w[j] + w[3 + j] + w[6 + j]);
        t[2][j] = 0.5f * (w[j] - w[3 + j] + w[6 + j]);
        t[3][j] = w[6 + j];
      }
      for (int i = 0; i < 4; i++) {
        float u[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]),
                      0.5f * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
        for (int j = 0; j < 4; j++) U[((i * 4 + j) * K + k) * C + c] = u[j];
      }
    }
}

/* M (K x T) = U (K x C) @ V (C x T): KB filters x TB vectors of tiles a block, the
   accumulators in registers, each filter's weight a broadcast operand */
static inline __attribute__((always_inline)) void product(
    const float* U, const float* V, float* M, long long K, long long C, long long T,
    const int KB, const int TB) {
  for (long long k0 = 0; k0 < K; k0 += KB)
    for (long long t0 = 0; t0 < T; t0 += 16 * TB) {
      vf acc[16][4];
      for (int a = 0; a < KB; a++)
        for (int b = 0; b < TB; b++) acc[a][b] = (vf){0};
      for (long long c = 0; c < C; c++) {
        vf v[4];
        for (int b = 0; b < TB; b++) memcpy(&v[b], V + c * T + t0 + 16 * b, sizeof(vf));
        for (int a = 0; a < KB; a++) {
          float u = U[(k0 + a) * C + c];
          for (int b = 0; b < TB; b++) acc[a][b] += u * v[b];
        }
      }
      for (int a = 0; a < KB; a++)
        for (int b = 0; b < TB; b++)
          memcpy(M + (k0 + a) * T + t0 + 16 * b, &acc[a][b], sizeof(vf));
    }
}

/* one image: x (C x H x W) -> y (K x H x W), 3 x 3, stride 1, pad 1; H, W even, the
   tiles (H / 2 x W / 2) a multiple of 16, at most 64 a row, K a multiple of the
   filters a block */
static void wino_image(const float* x, long long C, long long H, long long W,
                       const float* U, long long K, float* y) {
  long long TW = W / 2, T = H / 2 * TW, HP = H + 2, WP = W + 2;
  float* xp = calloc(C * HP * WP, sizeof(float));
  float* V = aligned_alloc(64, 16 * C * T * sizeof(float));
  float* M = aligned_alloc(64, 16 * K * T * sizeof(float));
  for (long long c = 0; c < C; c++)
    for (long long i = 0; i < H; i++)
      memcpy(xp + (c * HP + i + 1) * WP + 1, x + (c * H + i) * W, W * sizeof(float));
  /* each row of tiles at once (their columns the vectors' lanes; TW <= 64) */
  for (long long c = 0; c < C; c++)
    for (long long ty = 0; ty < H / 2; ty++) {
      float d[4][4][64], e[4][4][64];
      for (int r = 0; r < 4; r++)
        for (int q = 0; q < 4; q++) {
          const float* row = xp + (c * HP + ty * 2 + r) * WP + q;
          for (long long tx = 0; tx < TW; tx++) d[r][q][tx] = row[2 * tx];
        }
      for (int q = 0; q < 4; q++)
        for (long long tx = 0; tx < TW; tx++) {
          float a0 = d[0][q][tx], a1 = d[1][q][tx], a2 = d[2][q][tx], a3 = d[3][q][tx];
          e[0][q][tx] = a0 - a2; e[1][q][tx] = a1 + a2;
          e[2][q][tx] = a2 - a1; e[3][q][tx] = a1 - a3;
        }
      for (int r = 0; r < 4; r++) {
        float* v = V + ((r * 4) * C + c) * T + ty * TW;
        long long sq = C * T;       /* (V's next column of the 4 x 4) */
        for (long long tx = 0; tx < TW; tx++) {
          float b0 = e[r][0][tx], b1 = e[r][1][tx], b2 = e[r][2][tx], b3 = e[r][3][tx];
          v[tx] = b0 - b2; v[sq + tx] = b1 + b2; v[2 * sq + tx] = b2 - b1;
          v[3 * sq + tx] = b1 - b3;
        }
      }
    }
  for (int xi = 0; xi < 16; xi++) {
    if (T % 64 == 0 && K % 4 == 0)
      product(U + xi * K * C, V + xi * C * T, M + xi * K * T, K, C, T, 4, 4);
    else
      product(U + xi * K * C, V + xi * C * T, M + xi * K * T, K, C, T, 16, 1);
  }
  for (long long k = 0; k < K; k++)
    for (long long ty = 0; ty < H / 2; ty++) {
      float a[2][4][64];
      const float* m = M + k * T + ty * TW;
      long long sq = K * T;       /* (M's next element of the 4 x 4) */
      for (int q = 0; q < 4; q++)
        for (long long tx = 0; tx < TW; tx++) {
          float m0 = m[q * sq + tx], m1 = m[(4 + q) * sq + tx],
                m2 = m[(8 + q) * sq + tx], m3 = m[(12 + q) * sq + tx];
          a[0][q][tx] = m0 + m1 + m2;
          a[1][q][tx] = m1 - m2 - m3;
        }
      for (int i = 0; i < 2; i++) {
        float* o = y + (k * H + ty * 2 + i) * W;
        for (long long tx = 0; tx < TW; tx++) {
          o[2 * tx] = a[i][0][tx] + a[i][1][tx] + a[i][2][tx];
          o[2 * tx + 1] = a[i][1][tx] - a[i][2][tx] - a[i][3][tx];
        }
      }
    }
  free(xp); free(V); free(M);
}

void wino(const float* x, long long N, long long C, long long H, long long W,
          const float* U, long long K, float* y) {
  #pragma omp parallel for schedule(static)
  for (long long n = 0; n < N; n++)
    wino_image(x + n * C * H * W, C, H, W, U, K, y + n * K * H * W);
}

/* each of calls calls timed: their nanoseconds into ns */
void wino_timed(const float* x, long long N, long long C, long long H, long long W,
                const float* U, long long K, float* y, int calls, long long* ns) {
  for (int i = 0; i < calls; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    wino(x, N, C, H, W, U, K, y);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ns[i] = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
  }
}
"""


def probe_library():
    from workbench.runtime.cc import build_library, load_library
    lib = load_library(str(build_library("wino_probe", PROBE, "benchmarks/winograd_probe.py")))
    p, i64 = ctypes.c_void_p, ctypes.c_longlong
    lib.wino_filters.argtypes = [p, i64, i64, p]
    lib.wino.argtypes = [p, i64, i64, i64, i64, p, i64, p]
    lib.wino_timed.argtypes = [p, i64, i64, i64, i64, p, i64, p, ctypes.c_int, p]
    for f in (lib.wino_filters, lib.wino, lib.wino_timed):
        f.restype = None
    return lib


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The 3 x 3 convolution (stride 1, pad 1) in float64."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd))
    for ky in range(3):
        for kx in range(3):
            y += np.einsum("kc,nchw->nkhw", w[:, :, ky, kx].astype(np.float64),
                           xp[:, :, ky:ky + h, kx:kx + wd])
    return y


def workbench_program(x_shape, w: np.ndarray, folder: Path):
    """The workbench's stitch program of the convolution alone (from an ONNX file)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    import workbench as wb
    n, c, h, wd = x_shape
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, kernel_shape=[3, 3])],
        "conv3x3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, w.shape[0], h, wd])],
        [numpy_helper.from_array(w, "w")])
    path = folder / "conv3x3.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    s = wb.Session(wb.load(str(path)), backend="cpu")
    s.auto("stitch")
    return s.program()


def run_shape(lib, name: str, folder: Path, rounds: int, inner: int) -> dict:
    n, c, hw, k = SHAPES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = (rng.standard_normal((k, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    u = np.empty((16, k, c), np.float32)
    lib.wino_filters(w.ctypes.data, k, c, u.ctypes.data)
    y = np.full((n, k, hw, hw), np.nan, np.float32)       # (poisoned: each written)
    lib.wino(x.ctypes.data, n, c, hw, hw, u.ctypes.data, k, y.ctypes.data)
    want = reference(x, w)
    err = float(np.abs(y - want).max() / np.abs(want).max())
    prog = workbench_program(x.shape, w, folder)
    got = prog.run({"x": x})["y"]
    err_wb = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < REL_BOUND and err_wb < REL_BOUND, (name, err, err_wb)
    feeds, kns = {"x": x}, np.zeros(len(prog.compiled), np.int64)
    ns = np.zeros(inner, np.int64)
    wb_ns, wino_ns = [], []
    for _ in range(3):
        prog.execute(feeds, kernel_ns=kns)
        lib.wino(x.ctypes.data, n, c, hw, hw, u.ctypes.data, k, y.ctypes.data)
    for _ in range(rounds):
        time.sleep(0.2)
        for _ in range(inner):
            prog.execute(feeds, kernel_ns=kns)
            wb_ns.append(int(kns.sum()))
        time.sleep(0.2)
        lib.wino_timed(x.ctypes.data, n, c, hw, hw, u.ctypes.data, k, y.ctypes.data,
                       inner, ns.ctypes.data)
        wino_ns += ns.tolist()
    macs = n * k * hw * hw * c * 9
    return {"model": name, "batch": n, "channels": c, "plane": hw, "filters": k,
            "direct_macs": macs, "rel_error": {"winograd": err, "workbench": err_wb},
            "kernels": [ck.kernel.name for ck in prog.compiled],
            "schedule": str(prog.compiled[0].kernel.schedule),
            "us": {"workbench": [t / 1e3 for t in wb_ns],
                   "winograd probe": [t / 1e3 for t in wino_ns]}}


def markdown(res: dict) -> str:
    lines = [f"# Winograd F(2x2, 3x3) probe beside the direct 3x3 ({res['date']})", "",
             f"{machine_line(res)}. {res['rounds']} alternating rounds of {res['inner']} "
             "calls, 0.2 s pause before each block; us of one call (the workbench's "
             "kernel: its own time inside the native call; the probe: timed inside C). "
             "GFLOP/s counts the direct form's multiply-adds (x 2) for both, so it "
             "compares times. x = workbench / probe (> 1: the probe is faster). The probe "
             "shares out the batch's images only: a batch of 1 runs it on one core, "
             "the workbench's kernel on all of them.", "",
             "| shape | batch x C -> K, plane | workbench fastest | median | probe fastest "
             "| median | x fastest | x median | GFLOP/s workbench / probe | rel. error "
             "wb / probe |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} |" + " |" * 8)
            continue
        a, b = (np.asarray(r["us"][m]) for m in ("workbench", "winograd probe"))
        gf = 2 * r["direct_macs"] / 1e3
        lines.append(
            f"| {r['model']} | {r['batch']} x {r['channels']} -> {r['filters']}, "
            f"{r['plane']}^2 | {a.min():.1f} | {np.median(a):.1f} | {b.min():.1f} | "
            f"{np.median(b):.1f} | {a.min() / b.min():.2f} | "
            f"{np.median(a) / np.median(b):.2f} | {gf / a.min():.0f} / {gf / b.min():.0f} | "
            f"{r['rel_error']['workbench']:.1e} / {r['rel_error']['winograd']:.1e} |")
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.rounds, "inner": a.inner, "notes": a.note,
           "load_average_at_start": list(os.getloadavg()), "machine": machine(),
           "models": []}
    lib = probe_library()
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"winograd-probe-{date}{a.tag}"
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.shapes:
            log(name)
            res["models"].append(run_shape(lib, name, Path(tmp), a.rounds, a.inner))
            write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
