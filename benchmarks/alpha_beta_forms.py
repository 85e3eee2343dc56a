"""Every collective of the IR on p gloo ranks across message sizes, and the alpha-beta
model of the form each one runs as (issue 45, item 5: "the alpha-beta model within 25%
of measured gloo times across message sizes").

On p gloo ranks (processes on this machine, loopback), for 4 KB .. 64 MB (n: the bytes
of the whole tensor -- an AllReduce's, a ReduceScatter's input, an AllGather's
gathered output, an all_to_all_single's buffer, a send/recv's message), measured by
``workbench.distributed.calibrate.measure``: the runtime's path of each collective, the
five alternating, each after a barrier and an idle pause (``--pause``); the slowest
rank's time, the median of ``--reps`` calls. Then the model
(``workbench.distributed.gloo_forms``): each collective's form, alpha and beta fitted
per form and message-size regime on one rank count's times, the other rank count
predicted (held out) -- fit on 2 ranks predict 4, and the reverse -- beside the
planner's link (``cost.GLOO_LOOPBACK``, fitted on 2-rank runs only).

    python benchmarks/alpha_beta_forms.py [--ranks 2 4] [--reps 5] [--pause 0.2] [--out STEM]
    python benchmarks/alpha_beta_forms.py --render RUN.json     (refit, no measuring)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

from harness import RESULTS, log, machine_line, render_again, write_results

PLANNER = "planner's link"


def model(res):
    """Fit and score (in place): the forms model fitted on each rank count, predicting
    every row; the planner's link beside it."""
    from workbench.distributed.cost import GLOO_LOOPBACK
    from workbench.distributed.gloo_forms import fit_forms
    sm = [(c["op"], c["ranks"], c["bytes"], c["median_s"]) for c in res["rows"]]
    counts = sorted({x[1] for x in sm})
    res["fits"] = {}
    for p in counts:
        m = fit_forms([x for x in sm if x[1] == p], cores=res["cores"],
                      name=f"gloo forms fitted on {p} ranks")
        res["fits"][str(p)] = m.describe()
        for c in res["rows"]:
            c[f"fit{p}_s"] = m.time(c["op"], c["bytes"], c["ranks"])
    for c in res["rows"]:
        c["planner_s"] = GLOO_LOOPBACK.time(c["op"], c["bytes"], c["ranks"])
    ok = lambda m, t: abs(m - t) <= 0.25 * t
    # (how repeatable a median is here: the median of a row's odd calls against that
    # of its even calls -- no model of the size can do better than the run agrees with
    # itself)
    import statistics
    res["repeatable_25pct"] = {f"{q} ranks": sum(
        ok(statistics.median(c["times"][0::2]), statistics.median(c["times"][1::2]))
        for c in res["rows"] if c["ranks"] == q) for q in counts}
    res["within_25pct"] = {
        f"{q} ranks": {**{f"fitted on {p} ranks": sum(ok(c[f"fit{p}_s"], c["median_s"])
                                                      for c in res["rows"] if c["ranks"] == q)
                          for p in counts},
                       "planner's link": sum(ok(c["planner_s"], c["median_s"])
                                             for c in res["rows"] if c["ranks"] == q),
                       "of": sum(c["ranks"] == q for c in res["rows"])}
        for q in counts}


def markdown(res) -> str:
    pct = lambda m, t: f"{(m - t) / t * 100:+.0f}%"
    counts = sorted({c["ranks"] for c in res["rows"]})
    L = [f"# gloo's collectives across message sizes and the alpha-beta model of their "
         f"forms ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}, gloo over loopback; "
         f"median of {res['reps']} calls, the slowest rank's, each after a barrier and a "
         f"{res['pause']} s pause; the five collectives alternating. n: the whole "
         "tensor's bytes (an AllGather's output, a ReduceScatter's input).", "",
         "Predicted by the forms model (`gloo_forms.fit_forms`) fitted on each rank count's "
         "rows; a row of the other rank count is **held out** for that fit. Planner's link: "
         "`cost.GLOO_LOOPBACK` (fitted on 2-rank runs of earlier days). A miss (> 25%) is "
         "marked **bold**.", "",
         "| op | ranks | n | measured ms | " + " | ".join(
             f"fit on {p} ranks ms (err)" for p in counts) + " | planner's link ms (err) |",
         "|---|---|---|---|" + "---|" * (len(counts) + 1)]
    size = lambda n: f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"
    cell = lambda m, t: (f"{m * 1e3:.3g} ({pct(m, t)})" if abs(m - t) <= 0.25 * t
                         else f"**{m * 1e3:.3g} ({pct(m, t)})**")
    for c in sorted(res["rows"], key=lambda c: (c["op"], c["ranks"], c["bytes"])):
        L.append(f"| {c['op']} | {c['ranks']} | {size(c['bytes'])} | {c['median_s'] * 1e3:.3g}"
                 " | " + " | ".join(cell(c[f"fit{p}_s"], c["median_s"]) for p in counts)
                 + f" | {cell(c['planner_s'], c['median_s'])} |")
    L += ["", "Within 25% of the measured median (repeatable: the median of a row's odd "
          "calls within 25% of its even calls' -- how far this run agrees with itself):", "",
          "| ranks measured | " + " | ".join(f"fit on {p} ranks" for p in counts)
          + " | planner's link | repeatable |", "|---|" + "---|" * (len(counts) + 2)]
    for k, v in res["within_25pct"].items():
        L.append(f"| {k} | " + " | ".join(f"{v[f'fitted on {p} ranks']} / {v['of']}"
                                          for p in counts) + f" | {v[PLANNER]} / {v['of']} | "
                 f"{res['repeatable_25pct'][k]} / {v['of']} |")
    for p, f in res["fits"].items():
        L += ["", f"Fitted on {p} ranks (time = share(p) x (messages(p) alpha + "
              "wire_bytes(n, p) beta), per form and message-size regime):", "", *f]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--ops", nargs="+", help="the collectives (default: all five)")
    ap.add_argument("--out", default=str(RESULTS / f"alpha-beta-forms-{dt.date.today()}"))
    ap.add_argument("--render", metavar="JSON", help="fit and write the report again "
                    "from a run's JSON (no measuring)")
    a = ap.parse_args(argv)
    if a.render:
        return render_again(a.render, model, markdown)
    from workbench.distributed.calibrate import OPS, SIZES, measure
    res = {"date": str(dt.date.today()), "reps": a.reps, "pause": a.pause, "rows": [],
           "cores": os.cpu_count(), "load_average_at_start": list(os.getloadavg())}
    for p in a.ranks:
        log(f"{p} ranks ...")
        res["rows"] += measure(p, a.ops or OPS, SIZES, a.reps, a.pause)
        res["load_average_after"] = list(os.getloadavg())
        Path(a.out).with_suffix(".raw.json").write_text(json.dumps(res, indent=1))
    model(res)
    write_results(Path(a.out), res, markdown)
    Path(a.out).with_suffix(".raw.json").unlink()   # (kept only while measuring)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
