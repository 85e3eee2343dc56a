"""Does ``auto``'s choice on chunking the sharded step hold? The sharded AdamW step
(after ``split_all_reduce`` + ``shard_after``) unchunked and chunked into k = 2, 4, 8
pieces (``chunk_sharded``) measured on p gloo ranks beside what the model
(``distributed/chunk_price.py``: the fusion cost model per compute segment on this
CPU, the link carrying one collective at a time) predicts for each, and what
``DistSession.auto`` decides (issue 45).

Each program is one rank's ``RankProgram`` (the runner's own step: segments planned
by ``stitch``, compiled by the cpu backend, collectives on gloo), timed in alternating
rounds, each call after a barrier and an idle pause; the slowest rank's time taken.
Every chunked step's parameter is checked against the unchunked one's.

    python benchmarks/chunk_auto.py [--ranks 2] [--rows 4096 --cols 4096]
        [--rounds 5] [--pause 0.2] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from harness import (RESULTS, log, machine_line, slowest_rank_steps, spawn_ranks,
                     write_results)

KS = (2, 4, 8)


def _programs(rows, cols, p):
    from workbench.distributed.chunk_pair import chunk_sharded
    from workbench.distributed.samples import dp_adamw
    from workbench.distributed.transforms import shard_after, split_all_reduce
    s = split_all_reduce(dp_adamw(rows, cols, p), "n0")
    sharded, _ = shard_after(s, next(n.id for n in s.graph.nodes if n.op == "all_gather"),
                             keep_sharded=["m_out", "v_out"])
    rs = next(n.id for n in sharded.graph.nodes if n.op == "reduce_scatter")
    return {"unchunked": sharded, **{f"k={k}": chunk_sharded(sharded, rs, k) for k in KS}}


def _worker(rank, p, store, cfg, results):
    try:
        import numpy as np
        import torch.distributed as dist

        from workbench.distributed.runner import RankProgram, init_gloo, rank_threads
        rank_threads(p)
        init_gloo(rank, p, store, 600)
        progs = {k: RankProgram(d, rank, "stitch", seed=1)
                 for k, d in _programs(cfg["rows"], cfg["cols"], p).items()}
        ref = progs["unchunked"].run()[0]["param_out"].copy()
        err = max(float(np.max(np.abs(pr.run()[0]["param_out"] - ref)) / np.max(np.abs(ref)))
                  for pr in progs.values())
        samples = {k: [] for k in progs}
        for _ in range(cfg["rounds"]):
            for k, pr in progs.items():
                dist.barrier()
                time.sleep(cfg["pause"])
                t = pr.run()[1]
                samples[k].append({"step_s": t.step_s, "compute_s": t.compute_s,
                                   "comm_s": t.comm_s, "overlap_s": t.overlap_s})
        results.put((rank, {"samples": samples, "param_error": err}))
    except BaseException as e:
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def model(res):
    from workbench.distributed.chunk_price import segment_pricer, step_seconds
    from workbench.distributed.cost import GLOO_LOOPBACK
    from workbench.distributed.session import DistSession
    from workbench.runtime.calibrate import cpu_device
    price = segment_pricer("stitch", cpu_device())
    progs = _programs(res["rows"], res["cols"], res["ranks"])
    for k, d in progs.items():
        res["measured"][k]["model_ms"] = step_seconds(d, GLOO_LOOPBACK, price) * 1e3
    s = DistSession(progs["unchunked"], ranks=res["ranks"])
    s.auto("stitch", keep_sharded=["m_out", "v_out"])
    res["auto"] = [x for x in s.step.decisions if "chunk" in x]


def markdown(res) -> str:
    m = res["measured"]
    base = m["unchunked"]
    L = [f"# Chunking the sharded AdamW step: the model against gloo ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}; {res['ranks']} gloo "
         f"ranks, AdamW over {res['rows']} x {res['cols']} parameters after split + "
         f"shard_after; {res['rounds']} alternating rounds, each call after a barrier and "
         f"a {res['pause']} s pause, the slowest rank's step.", "",
         "| program | step ms median (min) | x unchunked | compute / comm / overlap ms | "
         "model ms | model x unchunked |", "|---|---|---|---|---|---|"]
    for k, r in m.items():
        L.append(f"| {k} | {r['step_ms']:.1f} ({r['min_step_ms']:.1f}) | "
                 f"{base['step_ms'] / r['step_ms']:.2f} | {r['compute_ms']:.1f} / "
                 f"{r['comm_ms']:.1f} / {r['overlap_ms']:.1f} | {r['model_ms']:.1f} | "
                 f"{base['model_ms'] / r['model_ms']:.2f} |")
    L += ["", "model: `chunk_price.step_seconds`, each compute segment as the fusion cost "
          "model predicts stitch's plan of it on this CPU (`cpu_device`), each collective "
          "by `GLOO_LOOPBACK`, whose transfers share the cores (`shares_cores`): nothing "
          "overlaps in the model.", "",
          f"Parameters of every chunked step against the unchunked one's: max relative "
          f"error {res['param_error']:.2g}.", "", "`auto` on the unchunked program (gloo "
          "link, this CPU):", ""] + [f"- {x}" for x in res["auto"]]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"chunk-auto-{dt.date.today()}"))
    ap.add_argument("--render", metavar="JSON", help="price and write the report again "
                    "from a run's JSON (no measuring)")
    a = ap.parse_args(argv)
    from pathlib import Path
    if a.render:
        import json
        res = json.loads(Path(a.render).read_text())
    else:
        res = {"date": str(dt.date.today()), "ranks": a.ranks, "rows": a.rows,
               "cols": a.cols, "rounds": a.rounds, "pause": a.pause,
               "load_average_at_start": list(os.getloadavg())}
        log(f"{a.ranks} ranks ...")
        per_rank = spawn_ranks(_worker, a.ranks, vars(a))
        res["measured"] = slowest_rank_steps(per_rank)
        res["param_error"] = max(r["param_error"] for r in per_rank)
    model(res)
    write_results(Path(a.render).with_suffix("") if a.render else Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
