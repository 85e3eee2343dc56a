#!/usr/bin/env python
"""A training step in two checkouts side by side: the step of ``training.py``'s model
(BERT-base layer by default, forward + backward, planner stitch) built by this checkout
and by a base one (say ``git worktree add --detach /tmp/base main``), each in a child
process of its own (``models_ab.Child``), timed in alternating blocks.

    .venv/bin/python benchmarks/training_ab.py --base /tmp/base [--kernels k96_]

Per round each checkout in turn (the order reversed every other round), a 0.2 s idle
pause and one untimed call before each block, then ``--inner`` timed calls of
``Program.execute(feeds, out=...)`` with each kernel's own nanoseconds (``kernel_ns``).
Reported per checkout: the step's median and its fastest block's median, the kernels'
sum, and per kernel (matched by name) the median and fastest time of the kernels named
by ``--kernels`` (name prefixes) and of those whose median changed most; the largest
difference between the two checkouts' outputs. Writes
``<out>/training-ab-<date><tag>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import ROOT, log, machine_line, write_results
from models_ab import SETTLE_S, Child, ab_arguments, ab_record, outputs_difference

# the child: argv = checkout, model, batch x seq, outputs file; stdin lines "wb <n>"
CHILD = r"""
import json, sys, time
from pathlib import Path
tree, model, size, outs = sys.argv[1:5]
sys.path.insert(0, str(Path(tree) / "benchmarks"))
import numpy as np
import torch
import workbench as wb
from training import D, _models
batch, seq = map(int, size.split("x"))
m = _models(model)
x, t = torch.randn(batch, seq, D), torch.randn(batch, seq, D)
s = wb.Session(wb.from_torch(m, (x, t), training=True), backend="cpu")
s.auto("stitch")
prog = s.program()
feeds = {"x": x.numpy(), "target": t.numpy(),
         **{k: p.detach().numpy().copy() for k, p in m.named_parameters()}}
out = prog.new_outputs()
ns = np.zeros(len(prog.compiled), dtype=np.int64)
np.savez(outs, **{f"o{i}": np.asarray(v) for i, v in enumerate(prog.run(feeds).values())})
for _ in range(5):
    prog.execute(feeds, out=out)
names = [ck.kernel.name for ck in prog.compiled]
print(json.dumps({"kernels": names}), flush=True)
for line in sys.stdin:
    n = int(line.split()[1])
    ts, ks = [], []
    prog.execute(feeds, out=out)
    for _ in range(n):
        t0 = time.perf_counter_ns()
        prog.execute(feeds, out=out, kernel_ns=ns)
        ts.append(time.perf_counter_ns() - t0)
        ks.append(ns.tolist())
    print(json.dumps({"t": ts, "k": ks}), flush=True)
"""
SHOWN = 6     # kernels shown beside those asked for: the largest changes of the median


def run(a, tmp: Path) -> dict:
    size = f"{a.batch}x{a.seq}"
    kids = {"base": Child(a.base, a.model, size, tmp / "base.npz", CHILD),
            "this": Child(ROOT, a.model, size, tmp / "this.npz", CHILD)}
    steps = {k: [] for k in kids}
    per_kernel = {k: {n: [] for n in c.info["kernels"]} for k, c in kids.items()}
    sums = {k: [] for k in kids}
    load = [os.getloadavg()]
    try:
        for r in range(a.rounds):
            for label in (("base", "this") if r % 2 == 0 else ("this", "base")):
                time.sleep(SETTLE_S)
                got = kids[label].block("wb", a.inner)
                steps[label] += [t * 1e-6 for t in got["t"]]
                for call in got["k"]:
                    sums[label].append(sum(call) * 1e-6)
                    for n, v in zip(kids[label].info["kernels"], call):
                        per_kernel[label][n].append(v * 1e-6)
    finally:
        for k in kids.values():
            k.close()
    load.append(os.getloadavg())
    diff = outputs_difference(kids)
    res = {"outputs_max_rel_difference": diff, "load_average_during": load,
           "kernels": {k: len(c.info["kernels"]) for k, c in kids.items()}, "steps": {}}
    for label, s in steps.items():
        blocks = np.array(s).reshape(-1, a.inner)
        res["steps"][label] = {"median_ms": float(np.median(s)),
                               "fastest_block_ms": float(np.median(blocks, axis=1).min()),
                               "kernels_median_ms": float(np.median(sums[label])),
                               "samples_ms": [round(x, 4) for x in s]}
    both = [n for n in per_kernel["this"] if n in per_kernel["base"]]
    med = {k: {n: float(np.median(per_kernel[k][n])) for n in per_kernel[k]} for k in kids}
    asked = [n for n in both if any(n.startswith(p) for p in a.kernels)]
    moved = sorted((n for n in both if n not in asked),
                   key=lambda n: -abs(med["base"][n] - med["this"][n]))[:SHOWN]
    res["per_kernel"] = [{"kernel": n, "asked": n in asked,
                          **{f"{k}_median_ms": med[k][n] for k in kids},
                          **{f"{k}_fastest_ms": float(min(per_kernel[k][n])) for k in kids},
                          # the spread: a kernel disturbed in some calls only (a thread
                          # descheduled on a loaded host) moves its median, not these
                          **{f"{k}_quartiles_ms": np.percentile(per_kernel[k][n],
                                                                [25, 75]).tolist()
                             for k in kids}}
                         for n in asked + moved]
    res["only_in"] = {k: [n for n in per_kernel[k] if n not in both] for k in kids}
    return res


def markdown(res: dict) -> str:
    r = res["result"]
    b, t = r["steps"]["base"], r["steps"]["this"]
    load = " -> ".join(f"{v[0]:.1f}" for v in r["load_average_during"])
    lines = [f"# Training step ({res['model']}, {res['batch']}x{res['seq']}), base "
             f"against this checkout ({res['date']})", "",
             f"{machine_line(res)}; during: {load}. Base `{res['base']}` at "
             f"{res['base_commit']}, this checkout at {res['this_commit']}. "
             f"{res['rounds']} rounds x {res['inner']} calls per checkout, alternating "
             "(order reversed every other round), 0.2 s pause and one untimed call before "
             "each block; each checkout in a child process. x = base / this (> 1: this "
             "checkout is faster).", "",
             "| step | base ms | this ms | x |", "|---|---|---|---|"]
    for key, what in (("median_ms", "median of all calls"),
                      ("fastest_block_ms", "fastest block's median"),
                      ("kernels_median_ms", "kernels' sum (median)")):
        lines.append(f"| {what} | {b[key]:.3f} | {t[key]:.3f} | {b[key] / t[key]:.2f} |")
    lines += ["", "| kernel | base median ms | this median ms | x | base fastest | "
              "this fastest | x | base quartiles | this quartiles |",
              "|---|---|---|---|---|---|---|---|---|"]
    for k in r["per_kernel"]:
        bm, tm, bf, tf = (k["base_median_ms"], k["this_median_ms"], k["base_fastest_ms"],
                          k["this_fastest_ms"])
        name = f"**{k['kernel']}**" if k["asked"] else k["kernel"]
        q = {side: "-".join(f"{x:.3f}" for x in k[f"{side}_quartiles_ms"])
             for side in ("base", "this")}
        lines.append(f"| {name} | {bm:.4f} | {tm:.4f} | {bm / tm:.2f} | {bf:.4f} | "
                     f"{tf:.4f} | {bf / tf:.2f} | {q['base']} | {q['this']} |")
    lines += ["", f"Kernels: base {r['kernels']['base']}, this {r['kernels']['this']}; "
              f"only in base: {r['only_in']['base'] or 'none'}; only in this: "
              f"{r['only_in']['this'] or 'none'}. Outputs, base against this: largest "
              f"difference {r['outputs_max_rel_difference']:.2e} of the largest magnitude."]
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert", choices=("bert", "gpt2"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--kernels", nargs="*", default=[], help="kernel name prefixes")
    ab_arguments(ap, rounds=20, inner=5)
    a = ap.parse_args(argv)
    res = {**ab_record(ap, a), "model": a.model, "batch": a.batch, "seq": a.seq}
    log(f"{a.model} {a.batch}x{a.seq}")
    with tempfile.TemporaryDirectory() as tmp:
        res["result"] = run(a, Path(tmp))
    write_results(a.out / f"training-ab-{res['date']}{a.tag}", res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
