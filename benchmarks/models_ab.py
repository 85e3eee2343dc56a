#!/usr/bin/env python
"""A zoo model's whole calls in two checkouts side by side against onnxruntime: this
checkout and a base one (say ``git worktree add /tmp/base main``), each in a child
process of its own, timed in alternating blocks.

    .venv/bin/python benchmarks/models_ab.py --base /tmp/base [--models mobilenet_v2]

Each child builds the model as ``benchmarks/models.py`` does (its own checkout's
``prepare_model``: zoo ``--size``, dynamo export, planner stitch), then on request times
a block of calls: the workbench's ``Program.execute(x, out=...)`` with each kernel's own
nanoseconds (``kernel_ns``), or onnxruntime's ``InferenceSession.run`` (the child of
this checkout's). Per round, every contender in turn (the order reversed every other
round), a 0.2 s idle pause before each block (onnxruntime's and OpenMP's threads spin
after a call returns), one untimed call, then ``--inner`` timed calls. Reported: the
median of all calls and the fastest block's median, each as x = onnxruntime / it (> 1:
the workbench is faster), the kernels' sum, and the largest difference between the two
checkouts' outputs. Writes ``<out>/models-<date><tag>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, log, machine_line, write_results

# the child: argv = checkout, model, size, outputs file; stdin lines "<wb|ort> <n>"
CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
tree, model, size, outs = sys.argv[1:5]
sys.path.insert(0, str(Path(tree) / "benchmarks"))
import numpy as np
import models
rec, calls = models.prepare_model(model, Path(tempfile.mkdtemp()), [1], size,
                                  planners=("stitch",))
wb = calls["workbench stitch"]
prog, inputs, ort = wb.program, wb.inputs, calls["onnxruntime"]
out = prog.new_outputs()
ns = np.zeros(len(prog.compiled), dtype=np.int64)
np.savez(outs, **{f"o{i}": np.asarray(v) for i, v in enumerate(prog.run(inputs).values())})
for _ in range(10):
    prog.execute(inputs, out=out)
    ort()
print(json.dumps({"kernels": len(prog.compiled)}), flush=True)
for line in sys.stdin:
    how, n = line.split()
    ts, ks = [], []
    if how == "wb":
        prog.execute(inputs, out=out)
        for _ in range(int(n)):
            t0 = time.perf_counter_ns()
            prog.execute(inputs, out=out, kernel_ns=ns)
            ts.append(time.perf_counter_ns() - t0)
            ks.append(int(ns.sum()))
    else:
        ort()
        for _ in range(int(n)):
            t0 = time.perf_counter_ns()
            ort()
            ts.append(time.perf_counter_ns() - t0)
    print(json.dumps({"t": ts, "k": ks}), flush=True)
"""
SETTLE_S = 0.2


class Child:
    """One checkout's model, built in a process of its own, timing blocks on request
    (``program``: the child's source, given the same arguments; ``training_ab.py``
    passes its own)."""

    def __init__(self, tree: Path, model: str, size: str, outs: Path, program: str = CHILD):
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.outs = outs
        self.proc = subprocess.Popen([sys.executable, "-c", program, str(tree), model, size,
                                      str(outs)], cwd=tree, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.info = self._reply()

    def _reply(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the child for {self.outs.name} exited "
                                   f"({self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def block(self, how: str, n: int) -> dict:
        self.proc.stdin.write(f"{how} {n}\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def outputs_difference(kids: dict) -> float:
    """The largest difference between the base child's outputs and this one's, each
    output's relative to its largest magnitude (the children wrote them to ``outs``).
    Outputs whose largest magnitude is 1e-6 or less are rounding noise around zero (a
    key projection's bias gradient: softmax ignores a shift shared by every key), as
    ``training.py``'s gradient check leaves them out too."""
    base, this = np.load(kids["base"].outs), np.load(kids["this"].outs)
    return max((float(np.max(np.abs(base[k] - this[k])) / np.abs(base[k]).max())
                for k in base.files if np.abs(base[k]).max() > 1e-6), default=0.0)


def one_model(model: str, a, tmp: Path) -> dict:
    kids = {"base": Child(a.base, model, a.size, tmp / f"{model}-base.npz"),
            "this": Child(ROOT, model, a.size, tmp / f"{model}-this.npz")}
    order = [("onnxruntime", "this", "ort"), ("base", "base", "wb"), ("this", "this", "wb")]
    samples = {label: [] for label, _, _ in order}
    kernels = {"base": [], "this": []}
    load = [os.getloadavg()]
    try:
        for r in range(a.rounds):
            for label, kid, how in (order if r % 2 == 0 else order[::-1]):
                time.sleep(SETTLE_S)
                got = kids[kid].block(how, a.inner)
                samples[label] += [t * 1e-6 for t in got["t"]]
                if how == "wb":
                    kernels[label] += [k * 1e-6 for k in got["k"]]
    finally:
        for k in kids.values():
            k.close()
    load.append(os.getloadavg())
    diff = outputs_difference(kids)
    rec = {"model": model, "kernels": {k: c.info["kernels"] for k, c in kids.items()},
           "load_average_during": load, "outputs_max_rel_difference": diff, "methods": {}}
    for label, s in samples.items():
        blocks = np.array(s).reshape(-1, a.inner)
        r = {"median_ms": float(np.median(s)),
             "fastest_block_ms": float(np.median(blocks, axis=1).min()),
             "samples_ms": [round(x, 4) for x in s]}
        if label in kernels:
            r["kernels_median_ms"] = float(np.median(kernels[label]))
            r["kernels_fastest_ms"] = float(min(kernels[label]))
        rec["methods"][label] = r
    return rec


def markdown(res: dict) -> str:
    lines = [f"# Whole models, {res['base']} against this checkout, beside onnxruntime "
             f"({res['date']})", "",
             f"{machine_line(res)}. Zoo size `{res['size']}`, dynamo export, planner "
             f"stitch; base `{res['base']}` at {res['base_commit']}, this checkout at "
             f"{res['this_commit']}. {res['rounds']} rounds x {res['inner']} calls per "
             "contender, alternating (order reversed every other round), 0.2 s pause and "
             "one untimed call before each block; each checkout in a child process. x = "
             "onnxruntime / it (> 1: the workbench is faster).", "",
             "| model | contender | median ms | x | fastest block ms | x | kernels ms "
             "(median) | load during |", "|---|---|---|---|---|---|---|---|"]
    for m in res["models"]:
        if "error" in m:
            lines.append(f"| {m['model']} | failed: {m['error']} | | | | | | |")
            continue
        o = m["methods"]["onnxruntime"]
        load = " -> ".join(f"{v[0]:.1f}" for v in m["load_average_during"])
        for label, r in m["methods"].items():
            k = r.get("kernels_median_ms")
            lines.append(
                f"| {m['model']} | {label} | {r['median_ms']:.3f} | "
                f"{o['median_ms'] / r['median_ms']:.2f} | {r['fastest_block_ms']:.3f} | "
                f"{o['fastest_block_ms'] / r['fastest_block_ms']:.2f} | "
                f"{'' if k is None else f'{k:.3f}'} | {load} |")
        lines.append(f"| {m['model']} | outputs, base against this: largest difference "
                     f"{m['outputs_max_rel_difference']:.2e} of the largest magnitude | "
                     "| | | | | |")
    lines += [""] + [f"- {n}" for n in res["notes"]]
    return "\n".join(lines) + "\n"


def _commit(tree: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def ab_arguments(ap: argparse.ArgumentParser, rounds: int, inner: int) -> None:
    """The options every A/B of a base checkout against this one takes (models_ab.py,
    training_ab.py)."""
    ap.add_argument("--base", type=Path, required=True, help="the base checkout")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--inner", type=int, default=inner)
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--out", type=Path, default=RESULTS)


def ab_record(ap: argparse.ArgumentParser, a) -> dict:
    """The result record's common fields, after checking that ``--base`` is a
    checkout (an argparse error naming the fix where it is not); ``--out`` made."""
    if not (a.base / "workbench" / "__init__.py").is_file():
        ap.error(f"--base {a.base} is no workbench checkout (no workbench/__init__.py); "
                 "make one with: git worktree add --detach /tmp/base main")
    a.out.mkdir(parents=True, exist_ok=True)
    return {"date": _dt.date.today().isoformat(), "base": str(a.base),
            "base_commit": _commit(a.base), "this_commit": _commit(ROOT),
            "rounds": a.rounds, "inner": a.inner, "notes": a.note,
            "load_average_at_start": list(os.getloadavg())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2", "efficientnet"])
    ap.add_argument("--size", default="small")
    ab_arguments(ap, rounds=30, inner=5)
    a = ap.parse_args(argv)
    res = {**ab_record(ap, a), "size": a.size, "models": []}
    stem = a.out / f"models-{res['date']}{a.tag}"
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models:
            log(model)
            try:
                res["models"].append(one_model(model, a, Path(tmp)))
            except Exception as e:          # a failure is a result, not a crash
                res["models"].append({"model": model, "error": str(e).splitlines()[0]})
            write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
