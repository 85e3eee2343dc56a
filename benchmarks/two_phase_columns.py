#!/usr/bin/env python
"""Two-phase column reductions (mapping ``two_phase``) against thread per row, on the
parameter-gradient samples ``layernorm_param_grad`` (dgamma and dbeta in one kernel)
and ``bias_grad``: each sample's column reductions as one kernel under each mapping,
both checked against the NumPy reference, then timed side by side in one run on the
CPU backend (alternating blocks of calls, each after a 0.2 s idle pause; the fastest
block's median) with the cost model's predictions for the CPU and the H100 beside.

    .venv/bin/python benchmarks/two_phase_columns.py [--rounds 6] [--inner 5]

Writes ``benchmarks/results/two-phase-columns-<date>.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import numpy as np

from harness import alternate, machine_line, quiet_ms, rel_error, write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.device import H100  # noqa: E402
from workbench.frontends import load  # noqa: E402
from workbench.fusion import make_group  # noqa: E402
from workbench.fusion.cost import CostModel  # noqa: E402
from workbench.runtime import run_reference  # noqa: E402
from workbench.session import Session  # noqa: E402

SAMPLES = ("layernorm_param_grad", "bias_grad")
# (mapping, splits: None the rule's for the device)
FORMS = (("thread", None), ("two_phase", None), ("two_phase", 16))


def _session(g, mapping: str, splits) -> Session:
    s = Session(g, backend="cpu", seed=0)
    if len(s.plan.groups) > 1:
        s.fuse([n.id for n in g.nodes])
    s.set_mapping("k0", mapping)
    if splits:
        s.set_launch("k0", splits=splits)
    return s


def run_sample(name: str, rounds: int, inner: int) -> dict:
    g = load(str(ROOT / "sample_graphs" / f"{name}.json"))
    sessions, asked = {}, {}
    for m, sp in FORMS:
        s = _session(g, m, sp)
        k = f"{m} x{s.plan.groups[0].schedule.splits}"
        sessions[k], asked[k] = s, sp
    ins = next(iter(sessions.values())).inputs
    want = run_reference(g, ins)
    rec = {"shape": list(g.value(g.inputs[0]).shape), "forms": {}}
    progs = {}
    for k, s in sessions.items():
        rec["forms"][k] = {
            "error": rel_error(s.run(ins), want),
            "predicted_cpu_ms": s.predict().ms,
            "predicted_h100_ms": _h100_ms(g, s.plan.groups[0], asked[k])}
        progs[k] = s.program()
    samples = alternate({k: (lambda p=p: p.run(ins)) for k, p in progs.items()}, rounds, inner)
    for k, t in samples.items():
        rec["forms"][k]["quiet_ms"] = quiet_ms(t, inner)
        rec["forms"][k]["median_ms"] = float(np.median(t)) * 1e3
        rec["forms"][k]["samples_s"] = t
    return rec


def _h100_ms(g, gr, splits) -> float:
    """The cost model's time for the same kernel planned for the H100 (the rule's
    splits for the H100 where the form takes the rule's)."""
    h = make_group(g, gr.nodes, mapping=gr.schedule.mapping, device=H100,
                   launch=(("splits", splits),) if splits else ())
    return CostModel.for_device(H100).estimate(g, h).seconds * 1e3


def markdown(res: dict) -> str:
    out = [f"# Two-phase column reductions, {res['date']}", "", machine_line(res), "",
           "| sample | form | rel. error | quiet ms | median ms | vs thread | "
           "predicted CPU ms | predicted H100 ms |", "|---|---|---|---|---|---|---|---|"]
    for name, rec in res["samples"].items():
        base = rec["forms"]["thread x1"]["quiet_ms"]
        for k, f in rec["forms"].items():
            out.append(f"| {name} {rec['shape']} | {k} | {f['error']:.1e} | "
                       f"{f['quiet_ms']:.2f} | {f['median_ms']:.2f} | "
                       f"{base / f['quiet_ms']:.2f}x | {f['predicted_cpu_ms']:.3f} | "
                       f"{f['predicted_h100_ms']:.4f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--inner", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    date = datetime.date.today().isoformat()
    res = {"date": date, "load_average_at_start": list(os.getloadavg()), "samples": {}}
    stem = Path(a.out) / f"two-phase-columns-{date}"
    for name in SAMPLES:
        res["samples"][name] = run_sample(name, a.rounds, a.inner)
        write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
