#!/usr/bin/env python
"""Bytes counted as the kernel reads them, on the CPU: kernels that read part of an
input -- embedding lookups of BERT-base's and GPT-2's tables, an attention's Q and V
sliced out of a fused QKV, a 1 x 1 pool of stride 2 -- each measured (``Session.measure``,
its per-kernel latency) beside the bytes and the prediction of the cost model under the
read footprint (``fusion/footprint.py``) and under the rule before it (every input
counted whole), both from the session's own cost model in one run.

    .venv/bin/python benchmarks/read_footprint.py [--repeats 20]

Writes ``<out>/read-footprint-<date>.json`` and ``.md``. The predictions are the
device model's, not refitted to this run's timings (``Session.measure`` predicts before
it learns), so the ratio predicted / measured shows what the count alone changes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from unittest import mock

import numpy as np

from harness import RESULTS, log, machine, machine_line, write_results


def _embedding(rows: int, hidden: int, tokens: int):
    import workbench as wb
    b = wb.GraphBuilder(f"embedding_{rows}x{hidden}_{tokens}")
    table = b.constant(np.random.default_rng(0).standard_normal((rows, hidden))
                       .astype(np.float32), "table")
    ids = b.input("ids", (1, tokens), "int64", range=(0, rows - 1))
    b.output(b.op("gather", table, ids, axis=0), "emb")
    return b.build()


def _qkv_slices(tokens: int, hidden: int):
    import workbench as wb
    b = wb.GraphBuilder(f"qkv_{tokens}x{hidden}")
    qkv = b.input("qkv", (tokens, 3 * hidden))
    q, _, v = b.op("split", qkv, axis=1, sizes=[hidden] * 3)
    b.output(b.op("relu", q) + v, "y")
    return b.build()


def _stride_pool(channels: int, size: int):
    import workbench as wb
    from workbench.ir.composites_nn import max_pool
    b = wb.GraphBuilder(f"pool1x1s2_{channels}x{size}")
    x = b.input("x", (1, channels, size, size))
    b.output(max_pool(b, x, kernel=(1, 1), strides=(2, 2)), "y")
    return b.build()


CASES = {"bert_base_embedding": lambda: _embedding(30522, 768, 128),
         "gpt2_embedding": lambda: _embedding(50257, 768, 128),
         "qkv_q_and_v": lambda: _qkv_slices(512, 768),
         "pool_1x1_stride2": lambda: _stride_pool(256, 56)}


def run_case(name: str, repeats: int) -> dict:
    import workbench as wb
    import workbench.fusion.features as ft
    from workbench.fusion.cost import CostModel
    s = wb.Session(CASES[name](), backend="cpu")
    s.auto("stitch")
    model, g = s.cost_model, s.graph
    with mock.patch.object(ft, "read_bytes",
                           lambda g, nodes, v, outputs, library=False: g.value(v).nbytes):
        # (a fresh copy of the model: its features are cached)
        fresh = CostModel(model.device, model.factors, model.calibrated_on)
        before = {gr.id: (fresh.features(g, gr).bytes_read, fresh.estimate(g, gr).ms,
                          fresh.estimate(g, gr).memory_s * 1e3) for gr in s.plan.groups}
    memory = {gr.id: model.estimate(g, gr).memory_s * 1e3 for gr in s.plan.groups}
    m = s.measure(repeats=repeats)
    kernels = []
    for row in m.per_kernel.to_dict("records"):
        old_bytes, old_ms, old_mem = before[row["group"]]
        kernels.append({"kernel": row["kernel"], "measured_ms": row["latency_ms"],
                        "bytes_read": int(row["bytes_read"]), "bytes_read_before": old_bytes,
                        "predicted_ms": row["predicted_ms"], "predicted_ms_before": old_ms,
                        "memory_ms": memory[row["group"]], "memory_ms_before": old_mem})
    return {"kernels": kernels, "within_tolerance": bool(m.within_tolerance)}


def markdown(res: dict) -> str:
    lines = [f"# Bytes counted as the kernel reads them ({res['date']})", "",
             machine_line(res), "",
             "Predicted: the session's model, whole (a fixed cost per call, then memory) and "
             "its memory term alone (bytes / bandwidth), before (every input counted "
             "whole) and now.", "",
             "| case | kernel | MB read (before) | MB read | predicted ms (before) | "
             "predicted ms | memory term ms (before) | memory term ms | measured ms | "
             "pred/meas before | pred/meas now |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, case in res["cases"].items():
        for k in case["kernels"]:
            lines.append(
                f"| {name} | {k['kernel']} | {k['bytes_read_before'] / 1e6:.3f} | "
                f"{k['bytes_read'] / 1e6:.3f} | {k['predicted_ms_before']:.4f} | "
                f"{k['predicted_ms']:.4f} | {k['memory_ms_before']:.4f} | "
                f"{k['memory_ms']:.4f} | {k['measured_ms']:.4f} | "
                f"{k['predicted_ms_before'] / k['measured_ms']:.2f} | "
                f"{k['predicted_ms'] / k['measured_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    date = dt.date.today().isoformat()
    res = {"date": date, "machine": machine(), "load_average_at_start": list(os.getloadavg()),
           "cases": {}}
    stem = a.out / f"read-footprint-{date}"
    for name in a.cases:
        log(f"{name} ...")
        res["cases"][name] = run_case(name, a.repeats)
        write_results(stem, res, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
