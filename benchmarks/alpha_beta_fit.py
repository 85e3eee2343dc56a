"""The alpha-beta model of gloo's collectives against the measured times of every
ring-era run of ``benchmarks/collectives.py`` (issue 45): how many of each run's 24
two-rank sizes (3 collectives x 8 sizes, 4 KB .. 64 MB) a model puts within 25%.

Models, per collective (``workbench.distributed.cost``):

- ``planner's link``: ``cost.GLOO_LOOPBACK``, what ``DistSession`` prices with;
- ``one line``: ``fit`` (alpha + n beta, weighted least squares on relative error);
- ``two regimes``: ``fit_regimes`` -- one line up to a message size, another above it
  (latency-bound small messages, bandwidth-bound large), the cut chosen from the data.

Each is scored **in-sample** (fitted on the run it is scored on) and **held out**
(fitted on the other runs pooled, scored on this one), beside a ceiling no model of
the message size can pass: the other runs' median time at the same collective and
size used as the prediction (the runs differ by the host's load from other jobs).
Nothing is measured here: it reads the runs' JSON.

    python benchmarks/alpha_beta_fit.py [RUN.json ...] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from pathlib import Path

from harness import RESULTS, machine_line, write_results

OPS = ("all_reduce", "reduce_scatter", "all_gather")
# the runs whose ReduceScatter and AllGather are ring.py's rings (the first run's were
# gloo's own calls: another algorithm)
RUNS = [RESULTS / f"collectives-2026-12-05-{k}.json"
        for k in ("ring", "buffers", "rank-threads", "chunked", "chunked-2", "kept-outputs",
                  "kept-outputs-2")]
# the runs cost.GLOO_LOOPBACK was fitted on (pooled): the others are held out for it
PLANNER_FIT_ON = ("2026-12-05-ring", "2026-12-05-buffers", "2026-12-05-rank-threads",
                  "2026-12-05-chunked")


def samples(path: Path) -> list[tuple]:
    res = json.loads(path.read_text())
    return [(c["op"], c["ranks"], c["bytes"], c["median_s"]) for r in res["runs"]
            if r["ranks"] == 2 for c in r["collectives"] if c["op"] in OPS]


def score(runs: dict) -> list[dict]:
    from workbench.distributed.cost import GLOO_LOOPBACK, fit, fit_regimes, within
    rows = []
    for name, sm in runs.items():
        rest = [x for k, s in runs.items() if k != name for x in s]
        by = lambda xs, op: [x for x in xs if x[0] == op]
        row = {"run": name + ("" if name in PLANNER_FIT_ON else " (held out for the "
                              "planner's link)"),
               "sizes": len(sm), "planner's link": within(GLOO_LOOPBACK, sm)}
        for label, how in (("one line", fit), ("two regimes", fit_regimes)):
            row[f"{label}, in-sample"] = sum(within(how(by(sm, op)), by(sm, op))
                                             for op in OPS)
            if rest:
                row[f"{label}, held out"] = sum(within(how(by(rest, op)), by(sm, op))
                                                for op in OPS)
        if rest:
            row["ceiling, held out"] = sum(
                abs(statistics.median(x[3] for x in rest if x[:3] == (op, p, n)) - t)
                <= 0.25 * t for op, p, n, t in sm)
        rows.append(row)
    return rows


def pooled(runs: dict) -> dict:
    from workbench.distributed.cost import fit_regimes
    allsm = [x for s in runs.values() for x in s]
    out = {}
    for op in OPS:
        r = fit_regimes([x for x in allsm if x[0] == op], f"gloo {op}")
        out[op] = {"cut_bytes": r.cut_bytes,
                   **{f"{k}_{q}": v for k, lk in (("small", r.small), ("large", r.large))
                      for q, v in (("alpha_s", lk.alpha), ("beta_s_per_byte", lk.beta))}}
    return out


def markdown(res) -> str:
    cols = [k for k in res["rows"][0] if k not in ("run", "sizes")]
    L = [f"# The alpha-beta model of gloo, per collective and message-size regime "
         f"({res['date']})", "", machine_line(res) + " (this script measures nothing: it "
         "reads the runs' JSON).", "",
         "Two-rank sizes of each run within 25% of the measured median (3 collectives x 8 "
         "sizes, 4 KB .. 64 MB). In-sample: fitted on that run; held out: fitted on the "
         "other runs pooled; ceiling: the other runs' median at the same size as the "
         "prediction (what no model of the size alone can beat: the runs differ by the "
         "host's load). The planner's link (`cost.GLOO_LOOPBACK`) is the two-regime fit "
         f"on {', '.join(PLANNER_FIT_ON)} pooled; a run not among them is held out for it.",
         "",
         "| run | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for r in res["rows"]:
        L.append(f"| {r['run']} | " + " | ".join(f"{r.get(c, '')} / {r['sizes']}"
                                                   for c in cols) + " |")
    L += ["", "Two regimes fitted on every run pooled (per collective; the cut is the "
          "largest ring-step message -- one rank's shard, the tensor / 2 -- of the small "
          "regime):", "",
          "| op | cut | small: alpha us | small: GB/s | large: alpha us | large: GB/s |",
          "|---|---|---|---|---|---|"]
    gb = lambda b: f"{1 / b / 1e9:.2f}" if b else "inf"
    for op, f in res["pooled"].items():
        L.append(f"| {op} | {f['cut_bytes'] / 2**10:.0f} KB | {f['small_alpha_s'] * 1e6:.0f} | "
                 f"{gb(f['small_beta_s_per_byte'])} | {f['large_alpha_s'] * 1e6:.0f} | "
                 f"{gb(f['large_beta_s_per_byte'])} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--out", default=str(RESULTS / f"alpha-beta-{dt.date.today()}"))
    a = ap.parse_args(argv)
    paths = [p for p in (a.runs or RUNS) if p.exists()]
    runs = {p.stem.replace("collectives-", ""): samples(p) for p in paths}
    res = {"date": str(dt.date.today()), "runs_read": [str(p.name) for p in paths],
           "load_average_at_start": list(os.getloadavg()),
           "rows": score(runs), "pooled": pooled(runs)}
    write_results(Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
