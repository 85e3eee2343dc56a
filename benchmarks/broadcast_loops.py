#!/usr/bin/env python
"""Elementwise kernels with a broadcast operand, as one flat loop and as rows, in one run.

    .venv/bin/python benchmarks/broadcast_loops.py [--rounds 10]

On the CPU an elementwise kernel whose operand broadcasts over its leading axes (a
bias over the rows, a per-row scale) used to be one flat loop reading the bias at
``i % 4096``: a gather in every vector of the loop. It is now a loop over rows with a
contiguous inner loop (``codegen/lower/elementwise.py``, ``_broadcasts``), which reads
the bias with plain loads. ``bias_gelu`` and ``bias_gelu_residual_layernorm`` (the
samples) are planned by each planner and compiled twice in this process, ``before``
(the flat loop: ``_broadcasts`` answering False while they compile) and ``after``
(as the workbench lowers them now); each kernel whose source differs is timed alone
(its own time inside the native call), the two forms alternating, each call after an
idle pause. Beside them the same GELU without a bias (no broadcast: the loop the fused
one should match). Writes ``<out>/broadcast-loops-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import time

import numpy as np

from harness import RESULTS, SETTLE_S, log, machine_line, write_results

SAMPLES = ("bias_gelu", "bias_gelu_residual_layernorm")
PLANNERS = ("none", "rules", "stitch")


@contextlib.contextmanager
def flat_loops():
    """Kernels lowered as before: no row loop for a broadcast operand."""
    from workbench.codegen.lower.elementwise import ElementwiseLowerer
    old = ElementwiseLowerer._broadcasts
    ElementwiseLowerer._broadcasts = lambda self, shape: False
    try:
        yield
    finally:
        ElementwiseLowerer._broadcasts = old


def _program(g, planner: str, before: bool):
    from workbench.session import Session
    with flat_loops() if before else contextlib.nullcontext():
        s = Session(g, backend="cpu", seed=0)
        if planner != "none":
            s.auto(planner)
        return s.program(s.plan)


def _kernels_ms(prog, inputs) -> list[float]:
    """Each kernel's ms in one call, after an idle pause (and one warm-up call)."""
    time.sleep(SETTLE_S)
    return [t * 1e3 for t in prog.time_calls(inputs, warmup=1, repeats=1).per_kernel]


def _gelu_alone(shape):
    from workbench.ir import GraphBuilder
    b = GraphBuilder("gelu_alone")
    b.output(b.gelu(b.input("x", shape)), "y")
    return b.build()


def run(rounds: int) -> dict:
    import make_samples as ms
    from workbench.runtime import random_inputs, run_reference
    res = {"rounds": rounds, "cases": [], "date": dt.date.today().isoformat(),
           "load_average_at_start": list(__import__("os").getloadavg())}
    for name in SAMPLES:
        g = getattr(ms, name)()
        inputs = random_inputs(g, 1)
        want = run_reference(g, inputs)
        for planner in PLANNERS:
            progs = {f: _program(g, planner, f == "before") for f in ("before", "after")}
            for f, p in progs.items():     # both forms right before either is timed
                got = p.run(inputs, checked=True)
                err = max(float(np.max(np.abs(got[o] - want[o]))) for o in want)
                assert err < 1e-4, (name, planner, f, err)
            pairs = [(k, a.kernel.name) for k, (a, b) in enumerate(
                zip(progs["after"].compiled, progs["before"].compiled))
                if a.source != b.source]
            # every changed kernel from the same calls, the forms alternating
            ms_ = {k: {f: [] for f in progs} for k, _ in pairs}
            for _ in range(rounds if pairs else 0):
                for f, p in progs.items():
                    per = _kernels_ms(p, inputs)
                    for k, _ in pairs:
                        ms_[k][f].append(per[k])
            for k, kname in pairs:
                case = {"sample": name, "planner": planner, "kernel": kname,
                        **{f: float(np.median(v)) for f, v in ms_[k].items()},
                        **{f"{f}_min": float(np.min(v)) for f, v in ms_[k].items()},
                        "samples": ms_[k]}
                res["cases"].append(case)
                log(f"{name} {planner} {kname}: before {case['before']:.3f} ms, "
                    f"after {case['after']:.3f} ms")
    g = _gelu_alone((2048, 4096))
    p = _program(g, "stitch", False)
    inputs = random_inputs(g, 1)
    alone = [_kernels_ms(p, inputs)[0] for _ in range(rounds)]
    res["gelu_alone_ms"], res["gelu_alone_min_ms"] = float(np.median(alone)), min(alone)
    return res


def markdown(res: dict) -> str:
    lines = [f"# Broadcast operands in elementwise loops ({res['date']})", "",
             machine_line(res), "",
             f"{res['rounds']} alternating calls per form, each after a {SETTLE_S} s "
             "pause; the kernel's own time inside the native call, median and fastest "
             "(on a loaded host the fastest is the kernel at its quiet pace). before: "
             "one flat loop (bias at `i % cols`); after: rows outer, a contiguous inner "
             "loop.", "",
             "| sample | planner | kernel | before ms (median / min) | after ms "
             "(median / min) | before / after (median, min) |", "|---|---|---|---|---|---|"]
    for c in res["cases"]:
        lines.append(f"| {c['sample']} | {c['planner']} | `{c['kernel']}` | "
                     f"{c['before']:.3f} / {c['before_min']:.3f} | "
                     f"{c['after']:.3f} / {c['after_min']:.3f} | "
                     f"{c['before'] / c['after']:.2f}x, "
                     f"{c['before_min'] / c['after_min']:.2f}x |")
    lines += ["", f"GELU of x[2048, 4096] without a bias (same bytes but the bias's "
                  f"16 KB, no broadcast): {res['gelu_alone_ms']:.3f} ms median, "
                  f"{res['gelu_alone_min_ms']:.3f} ms min.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=__import__("pathlib").Path, default=RESULTS)
    args = ap.parse_args(argv)
    res = run(args.rounds)
    write_results(args.out / f"broadcast-loops-{res['date']}", res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
