#!/usr/bin/env python
"""Thread placement (``runtime/placement.py``) on the CPU, side by side in one run: each
program called with its threads placed and unplaced (``$WB_PLACE_THREADS=0`` for those
calls), as a user calls it -- blocks of back-to-back calls with a pause between blocks.

    .venv/bin/python benchmarks/placement.py
    .venv/bin/python benchmarks/placement.py --rounds 40

Unplaced blocks start with the OpenMP threads given the calling thread's whole set
again (``placement.free_team``), as a fresh process has them.

Programs (``stitch``): the sample graphs (``sample_graphs/*.json``, their own inputs)
and one 3 x 3 convolution of ResNet-50's last stage (``benchmarks/conv_direct.py``'s
``resnet50_l4``, a call of ~1 ms). Each round runs a block of ``--inner`` calls of every
program placed, then unplaced (the order alternating by round), after a pause of 0.2 s;
the first call of a block is not timed. Reported per program and method: the median
and the 90th percentile ms of one call (``Program.run``), and how many blocks ran at
least 1.5x their program's fastest block median -- the slow mode in which the calling
thread and the OpenMP worker share one CPU. Writes ``<out>/placement-<date>.json`` and
``.md``; never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np

from harness import RESULTS, ROOT, SETTLE_S, log, machine_line, write_results

METHODS = ("placed", "unplaced")


def programs(folder: Path) -> dict:
    """name -> (program, inputs) of every program this benchmark calls."""
    import conv_direct

    import workbench as wb
    out = {}
    for path in sorted((ROOT / "sample_graphs").glob("*.json")):
        s = wb.Session(wb.load(path), backend="cpu")
        s.auto("stitch")
        out[path.stem] = (s.program(), s.inputs)
    g = wb.load(conv_direct.onnx_file("resnet50_l4", folder))
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    x = np.random.default_rng(1).standard_normal(g.value("x").shape).astype(np.float32)
    out["conv3x3_resnet50_l4"] = (s.program(), {"x": x})
    return out


def _calls(method: str):
    """The environment of a block of calls made ``method``; unplaced, the OpenMP
    threads are first given the whole set again (a placed block left them bound)."""
    if method != "unplaced":
        return mock.patch.dict(os.environ, {})
    from workbench.runtime.placement import free_team
    free_team()
    return mock.patch.dict(os.environ, {"WB_PLACE_THREADS": "0"})


def run(progs: dict, rounds: int, inner: int) -> dict:
    blocks = {name: {m: [] for m in METHODS} for name in progs}
    for r in range(rounds):
        order = METHODS if r % 2 == 0 else METHODS[::-1]
        for name, (prog, feeds) in progs.items():
            for m in order:
                with _calls(m):
                    time.sleep(SETTLE_S)
                    prog.run(feeds)
                    block = []
                    for _ in range(inner):
                        t0 = time.perf_counter()
                        prog.run(feeds)
                        block.append((time.perf_counter() - t0) * 1e3)
                blocks[name][m].append(block)
        log(f"round {r + 1}/{rounds}")
    res = {}
    for name, per in blocks.items():
        fastest = min(float(np.median(b)) for bs in per.values() for b in bs)
        res[name] = {}
        for m, bs in per.items():
            calls = [t for b in bs for t in b]
            res[name][m] = {
                "median_ms": float(np.median(calls)), "p90_ms": float(np.percentile(calls, 90)),
                "slow_blocks": sum(float(np.median(b)) >= 1.5 * fastest for b in bs),
                "blocks": len(bs), "samples_ms": calls}
    return res


def markdown(res: dict) -> str:
    lines = [f"# Thread placement on the CPU ({res['date']})", "",
             f"{machine_line(res)}. Per program, {res['rounds']} rounds of a block of "
             f"{res['inner']} back-to-back calls per method (0.2 s pause before each "
             "block, its first call untimed); ms of one call. Slow blocks: block medians "
             "at least 1.5x the program's fastest block median.", "",
             "| program | method | median ms | p90 ms | slow blocks | unplaced / placed "
             "(median) |", "|---|---|---|---|---|---|"]
    for name, per in res["programs"].items():
        ratio = per["unplaced"]["median_ms"] / per["placed"]["median_ms"]
        for m, r in per.items():
            lines.append(f"| {name} | {m} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} | "
                         f"{r['slow_blocks']}/{r['blocks']} | "
                         f"{f'{ratio:.2f}x' if m == 'placed' else ''} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.rounds, "inner": a.inner,
           "load_average_at_start": list(os.getloadavg())}
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        log("plan and compile")
        progs = programs(Path(tmp))
        res["programs"] = run(progs, a.rounds, a.inner)
    stem = a.out / f"placement-{date}"
    write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
