"""gloo's ``all_to_all_single`` (the IR's ``all_to_all_single``, equal splits) across
message sizes on p ranks, and the alpha-beta model against it (issue 45).

On p gloo ranks (processes on this machine, loopback), for 4 KB .. 64 MB per rank:
the workbench's runtime path of the collective (``distributed.collectives.start`` on
an ``all_to_all_single`` node, then its wait: torch's ``all_to_all_single``) and, in
the same loop, gloo's AllReduce of the same buffer for scale. Each call after a
barrier and an idle pause (``--pause``); the slowest rank's time taken, the median of
``--reps`` calls. Then the model: ``cost.GLOO_LOOPBACK`` as it prices the collective,
and a fit of this run's 2-rank times in two message-size regimes
(``cost.fit_regimes``), each with its error per size; the fitted row is what
``GLOO_LOOPBACK`` carries for ``all_to_all_single``.

    python benchmarks/all_to_all.py [--ranks 2 4] [--reps 5] [--pause 0.2] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from harness import (RESULTS, log, machine_line, render_again, spawn_ranks,
                     write_results)

SIZES = [1 << k for k in range(12, 27, 2)]      # 4 KB .. 64 MB per rank
OPS = ("all_to_all_single", "all_reduce")


def _worker(rank, p, store, cfg, results):
    try:
        import numpy as np
        import torch.distributed as dist

        from workbench.distributed.collectives import start
        from workbench.distributed.runner import init_gloo, rank_threads
        from workbench.ir.graph import Node
        rank_threads(p)
        init_gloo(rank, p, store, 600)
        nodes = {op: Node.make("n0", op, ["x"], ["y"], {"group_size": p, "reduce_op": "sum"}
                               if op == "all_reduce" else {"group_size": p}) for op in OPS}
        out = []
        for nbytes in SIZES:
            x = np.random.default_rng(rank).random(nbytes // 4, dtype=np.float32)
            stores = {op: {} for op in OPS}      # (buffers kept, as the runner keeps them)
            times = {op: [] for op in OPS}
            for rep in range(cfg["reps"] + 1):
                for op in OPS:                   # (alternating, each after a pause)
                    dist.barrier()
                    time.sleep(cfg["pause"])
                    t0 = time.perf_counter()
                    start(nodes[op], x, rank, p, stores[op]).wait()
                    if rep:                      # (the first call is the warm-up)
                        times[op].append(time.perf_counter() - t0)
            out += [{"op": op, "ranks": p, "bytes": nbytes, "times": times[op]} for op in OPS]
        results.put((rank, {"collectives": out}))
    except BaseException as e:
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def summarize(p, per_rank):
    import numpy as np
    rows = []
    for i, row in enumerate(per_rank[0]["collectives"]):
        t = np.max([r["collectives"][i]["times"] for r in per_rank], axis=0)
        rows.append({"op": row["op"], "ranks": p, "bytes": row["bytes"],
                     "median_s": float(np.median(t)), "min_s": float(t.min())})
    return rows


def model(res):
    from workbench.distributed.cost import GLOO_LOOPBACK, fit_regimes, within
    a2a = [(c["op"], c["ranks"], c["bytes"], c["median_s"]) for c in res["rows"]
           if c["op"] == "all_to_all_single"]
    two = [x for x in a2a if x[1] == 2]
    fitted = fit_regimes(two, "gloo all_to_all_single")
    res["fit"] = {"cut_bytes": fitted.cut_bytes,
                  "small": [fitted.small.alpha, fitted.small.beta],
                  "large": [fitted.large.alpha, fitted.large.beta]}
    for c in res["rows"]:
        # (the planner's link as it is now -- it carries this fit -- and the one gloo
        # line it priced all_to_all_single with before)
        c["planner_model_s"] = GLOO_LOOPBACK.time(c["op"], c["bytes"], c["ranks"])
        c["default_model_s"] = GLOO_LOOPBACK.default.time(c["op"], c["bytes"], c["ranks"])
        if c["op"] == "all_to_all_single":
            c["fitted_model_s"] = fitted.time(c["op"], c["bytes"], c["ranks"])
    res["within_25pct"] = {
        f"{p} ranks": {"planner link": within(GLOO_LOOPBACK, [x for x in a2a if x[1] == p]),
                       "one gloo line": within(GLOO_LOOPBACK.default,
                                               [x for x in a2a if x[1] == p]),
                       "fitted on 2 ranks": within(fitted, [x for x in a2a if x[1] == p]),
                       "of": len([x for x in a2a if x[1] == p])}
        for p in sorted({x[1] for x in a2a})}


def markdown(res) -> str:
    pct = lambda m, t: f"{(m - t) / t * 100:+.0f}%"
    L = [f"# gloo all_to_all_single and the alpha-beta model ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}, gloo over loopback; "
         f"median of {res['reps']} calls, the slowest rank's, each after a barrier and a "
         f"{res['pause']} s pause; the two collectives alternating.", "",
         "| ranks | MB per rank | all_to_all_single ms | all_reduce ms | a2a / all_reduce "
         "| one gloo line ms (err) | fitted ms (err) | planner link ms (err) |",
         "|---|---|---|---|---|---|---|---|"]
    by = {(c["op"], c["ranks"], c["bytes"]): c for c in res["rows"]}
    for (op, p, n), c in by.items():
        if op != "all_to_all_single":
            continue
        ar = by[("all_reduce", p, n)]
        L.append(f"| {p} | {n / 2**20:.3g} | {c['median_s'] * 1e3:.3g} | "
                 f"{ar['median_s'] * 1e3:.3g} | {c['median_s'] / ar['median_s']:.2f} | "
                 f"{c['default_model_s'] * 1e3:.3g} ({pct(c['default_model_s'], c['median_s'])})"
                 f" | {c['fitted_model_s'] * 1e3:.3g} "
                 f"({pct(c['fitted_model_s'], c['median_s'])}) | "
                 f"{c['planner_model_s'] * 1e3:.3g} ({pct(c['planner_model_s'], c['median_s'])})"
                 " |")
    f = res["fit"]
    rate = lambda beta: f"{1 / beta / 1e9:.2f} GB/s" if beta else "no per-byte term (flat)"
    L += ["", f"Fitted on the 2-rank times (`fit_regimes`): ring-step messages up to "
          f"{f['cut_bytes'] / 1024:.0f} KB alpha {f['small'][0] * 1e6:.0f} us, "
          f"{rate(f['small'][1])}; above alpha {f['large'][0] * 1e6:.0f} us, "
          f"{rate(f['large'][1])}.", "",
          "Within 25% of the measured median: " + "; ".join(
              f"{k}: one gloo line {v['one gloo line']}/{v['of']}, fitted "
              f"{v['fitted on 2 ranks']}/{v['of']}, planner link {v['planner link']}/{v['of']}"
              for k, v in res["within_25pct"].items()),
          "", "One gloo line: `GLOO_LOOPBACK.default`, what the planner priced "
          "all_to_all_single with before this run; planner link: `GLOO_LOOPBACK` now, "
          "which carries a fit of 2-rank times as its all_to_all_single row. The 4-rank "
          "rows are held out (the fits saw 2 ranks only)."]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"all-to-all-{dt.date.today()}"))
    ap.add_argument("--render", metavar="JSON", help="fit and write the report again "
                    "from a run's JSON (no measuring)")
    a = ap.parse_args(argv)
    if a.render:
        return render_again(a.render, model, markdown)
    res = {"date": str(dt.date.today()), "reps": a.reps, "pause": a.pause, "rows": [],
           "load_average_at_start": list(os.getloadavg())}
    for p in a.ranks:
        log(f"{p} ranks ...")
        res["rows"] += summarize(p, spawn_ranks(_worker, p, {"reps": a.reps,
                                                             "pause": a.pause}))
    model(res)
    from pathlib import Path
    write_results(Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
