"""Chunking a tensor-parallel matmul and its AllReduce into k pipelined pieces: per
rank, the step, its compute, the time it spent starting and waiting for collectives,
and the overlap (compute while a collective was in flight), measured (issue 45).

The Megatron MLP block (``tp_mlp``: column-parallel matmul, GELU, row-parallel matmul,
AllReduce, bias, residual, LayerNorm) on p gloo ranks, unchunked and chunked into k
pieces (``chunk_all_reduce``), every variant's step timed in alternating rounds after
a barrier and an idle pause; each rank's segments planned by ``stitch``. Reported:
medians over the rounds of the slowest rank's step, and per rank the medians of
compute, communication (not hidden) and overlap (``RankTimes.overlap_s``).

    python benchmarks/tp_overlap.py [--ranks 2] [--tokens 512 --hidden 1024 --ffn 4096]
        [--ks 2 4] [--rounds 7] [--pause 0.2] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

from harness import RESULTS, log, machine_line, spawn_ranks, write_results


def _worker(rank, p, store, cfg, results):
    try:
        import numpy as np
        import torch.distributed as dist
        from workbench.distributed.chunk import chunk_all_reduce
        from workbench.distributed.runner import RankProgram, init_gloo, rank_threads
        from workbench.distributed.samples import tp_mlp
        rank_threads(p)     # (OpenMP and torch threads: cores / ranks, unpinned)
        init_gloo(rank, p, store, 600)
        d = tp_mlp(cfg["tokens"], cfg["hidden"], cfg["ffn"], p)
        ar = next(n for n in d.graph.nodes if n.op == "all_reduce")
        variants = {"unchunked": d}
        variants.update({f"k={k}": chunk_all_reduce(d, ar.id, k) for k in cfg["ks"]})
        progs = {name: RankProgram(v, rank, "stitch", seed=1) for name, v in variants.items()}
        outs = {name: pr.run()[0]["out"].copy() for name, pr in progs.items()}
        err = max(float(np.max(np.abs(o - outs["unchunked"]))) for o in outs.values())
        rows = {name: [] for name in progs}
        for _ in range(cfg["rounds"]):
            for name, pr in progs.items():
                dist.barrier()
                time.sleep(cfg["pause"])
                t = pr.run()[1]
                rows[name].append({"step_s": t.step_s, "compute_s": t.compute_s,
                                   "comm_s": t.comm_s, "overlap_s": t.overlap_s})
        results.put((rank, {"rows": rows, "max_abs_diff": err}))
    except BaseException as e:
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def run(p, cfg):
    return spawn_ranks(_worker, p, cfg, timeout=1800)


def summarize(p, per_rank):
    import numpy as np
    out = {"ranks": p, "max_abs_diff": max(r["max_abs_diff"] for r in per_rank),
           "variants": {}}
    for name in per_rank[0]["rows"]:
        step = np.max([[x["step_s"] for x in r["rows"][name]] for r in per_rank], axis=0)
        out["variants"][name] = {
            "step_ms": float(np.median(step)) * 1e3, "step_min_ms": float(step.min()) * 1e3,
            "per_rank": [{k: float(np.median([x[k] for x in r["rows"][name]])) * 1e3
                          for k in ("compute_s", "comm_s", "overlap_s")}
                         for r in per_rank]}
    return out


def markdown(res) -> str:
    L = [f"# Chunked matmul + AllReduce on gloo: overlap per rank ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}, gloo over loopback, "
         "each rank's torch threads: cores / ranks.", "",
         f"`tp_mlp` (tokens {res['tokens']}, hidden {res['hidden']}, ffn {res['ffn']}), "
         f"median of {res['rounds']} alternating rounds (each after a barrier and a "
         f"{res['pause']} s pause); step = the slowest rank's; compute / comm (started "
         "and waited, not hidden) / overlap (compute while a collective was in flight) "
         "per rank, medians. `x` = unchunked / variant (step medians).", ""]
    for r in res["runs"]:
        base = r["variants"]["unchunked"]["step_ms"]
        L += [f"## {r['ranks']} ranks (chunked outputs vs unchunked: max |diff| "
              f"{r['max_abs_diff']:.2g})", "",
              "| variant | step ms | min ms | x | " + " | ".join(
                  f"rank {i} compute / comm / overlap ms" for i in range(r["ranks"])) + " |",
              "|---|---|---|---|" + "---|" * r["ranks"]]
        for name, v in r["variants"].items():
            L.append(f"| {name} | {v['step_ms']:.1f} | {v['step_min_ms']:.1f} | "
                     f"{base / v['step_ms']:.2f} | " + " | ".join(
                         f"{x['compute_s']:.1f} / {x['comm_s']:.1f} / {x['overlap_s']:.1f}"
                         for x in v["per_rank"]) + " |")
        L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"tp-overlap-{dt.date.today()}"))
    a = ap.parse_args(argv)
    res = {"date": str(dt.date.today()), "tokens": a.tokens, "hidden": a.hidden,
           "ffn": a.ffn, "rounds": a.rounds, "pause": a.pause, "runs": [],
           "load_average_at_start": list(os.getloadavg())}
    cfg = dict(tokens=a.tokens, hidden=a.hidden, ffn=a.ffn, ks=a.ks, rounds=a.rounds,
               pause=a.pause)
    for p in a.ranks:
        log(f"{p} ranks ...")
        res["runs"].append(summarize(p, run(p, cfg)))
    write_results(Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
