"""The expert-parallel MoE layer (``samples.moe_ep``: all_to_all_single dispatch, each
rank's expert MLP, all_to_all_single combine, gate and residual) on p gloo ranks:
the workbench's step unfused, with the gate and residual fused into the combine's
arrival (``fuse_received``: each block's kernel as it lands, the own block first),
and the same layer in torch eager on each rank (torch's ``all_to_all_single``,
matmul, GELU) -- in alternating rounds, each call after a barrier and an idle pause,
the slowest rank's step; beside what ``DistSession.auto`` decides on gloo (issue 45).

Every rank's output of each method is checked against the unfused step's.

    python benchmarks/moe_ep.py [--ranks 2] [--capacity 256 --hidden 512 --ffn 1024]
        [--rounds 7] [--pause 0.2] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from harness import (RESULTS, log, machine_line, slowest_rank_steps, spawn_ranks,
                     write_results)


def _programs(c, h, f, p):
    from workbench.distributed.received import fuse_received
    from workbench.distributed.samples import moe_ep
    d = moe_ep(c, h, f, p)
    combine = [n.id for n in d.graph.nodes if n.op == "all_to_all_single"][1]
    return {"workbench unfused": d, "workbench fused into the combine":
            fuse_received(d, combine)[0]}


def _torch_layer(env, p):
    """The layer on this rank in torch eager, on the rank's pieces of the inputs."""
    import torch
    import torch.distributed as dist
    x, gate, w1, w2 = (torch.from_numpy(env[k]) for k in ("x", "gate", "w1", "w2"))
    recv, back = torch.empty_like(x), torch.empty_like(x)

    def step():
        dist.all_to_all_single(recv, x)                       # dispatch
        y = torch.nn.functional.gelu(recv.reshape(1, -1, x.shape[1]) @ w1) @ w2
        dist.all_to_all_single(back, y.reshape(x.shape))      # combine
        return (x + back * gate).numpy()
    return step


def _worker(rank, p, store, cfg, results):
    try:
        import numpy as np
        import torch.distributed as dist

        from workbench.distributed.runner import RankProgram, init_gloo, rank_threads
        rank_threads(p)
        init_gloo(rank, p, store, 600)
        progs = {k: RankProgram(d, rank, "stitch", seed=1)
                 for k, d in _programs(cfg["capacity"], cfg["hidden"], cfg["ffn"],
                                       p).items()}
        torch_step = _torch_layer(progs["workbench unfused"].env, p)
        ref = progs["workbench unfused"].run()[0]["out"].copy()
        err = {k: float(np.max(np.abs(pr.run()[0]["out"] - ref)) / np.max(np.abs(ref)))
               for k, pr in progs.items()}
        err["torch eager"] = float(np.max(np.abs(torch_step() - ref)) / np.max(np.abs(ref)))
        samples = {k: [] for k in (*progs, "torch eager")}
        for _ in range(cfg["rounds"]):
            for k in samples:
                dist.barrier()
                time.sleep(cfg["pause"])
                if k == "torch eager":
                    t = time.perf_counter()
                    torch_step()
                    samples[k].append({"step_s": time.perf_counter() - t})
                    continue
                t = progs[k].run()[1]
                samples[k].append({"step_s": t.step_s, "compute_s": t.compute_s,
                                   "comm_s": t.comm_s, "overlap_s": t.overlap_s})
        results.put((rank, {"samples": samples, "errors": err}))
    except BaseException as e:
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def decide(res):
    from workbench.distributed.samples import moe_ep
    from workbench.distributed.session import DistSession
    s = DistSession(moe_ep(res["capacity"], res["hidden"], res["ffn"], res["ranks"]),
                    ranks=res["ranks"])
    s.auto("stitch")
    res["auto"] = [x for x in s.step.decisions if "fuse the compute" in x]


def markdown(res) -> str:
    m = res["measured"]
    base = m["workbench unfused"]["step_ms"]
    c, h, f, p = res["capacity"], res["hidden"], res["ffn"], res["ranks"]
    L = [f"# Expert-parallel MoE layer on {p} gloo ranks ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}; {p} ranks, one "
         f"expert each, {p * p * c} token slots x {h} (capacity {c}), expert MLP {h} -> "
         f"{f} -> {h}; {res['rounds']} alternating rounds, each call after a barrier and "
         f"a {res['pause']} s pause, the slowest rank's step.", "",
         "| method | step ms median (min) | x unfused | compute / comm / overlap ms | "
         "max rel. error vs unfused |", "|---|---|---|---|---|"]
    for k, r in m.items():
        parts = (f"{r['compute_ms']:.1f} / {r['comm_ms']:.1f} / {r['overlap_ms']:.1f}"
                 if "compute_ms" in r else "")
        L.append(f"| {k} | {r['step_ms']:.1f} ({r['min_step_ms']:.1f}) | "
                 f"{base / r['step_ms']:.2f} | {parts} | {res['errors'][k]:.2g} |")
    L += ["", "`auto` on the unfused program (gloo link, this CPU):", ""] + \
        [f"- {x}" for x in res["auto"]]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--capacity", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"moe-ep-{dt.date.today()}"))
    a = ap.parse_args(argv)
    from pathlib import Path
    res = {"date": str(dt.date.today()), "ranks": a.ranks, "capacity": a.capacity,
           "hidden": a.hidden, "ffn": a.ffn, "rounds": a.rounds, "pause": a.pause,
           "load_average_at_start": list(os.getloadavg())}
    log(f"{a.ranks} ranks ...")
    per_rank = spawn_ranks(_worker, a.ranks, vars(a))
    res["measured"] = slowest_rank_steps(per_rank)
    res["errors"] = {k: max(r["errors"][k] for r in per_rank) for k in res["measured"]}
    decide(res)
    write_results(Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
