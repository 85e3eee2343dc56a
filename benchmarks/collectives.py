"""Collectives on gloo ranks: the data-parallel AdamW step, and the alpha-beta model
against measured gloo times (issue 45).

On p gloo ranks (processes on this machine, loopback; 2 and 4), in one run:

1. **Collectives across message sizes**: ``dist.all_reduce`` and the workbench's
   ReduceScatter and AllGather (on gloo: rings of ``isend``/``irecv``,
   ``workbench/distributed/ring.py``) from 4 KB to 64 MB per rank, and beside them
   gloo's own ``reduce_scatter_single`` and ``all_gather_single`` (why the ring: they
   are slower); each call after a barrier and an idle pause (``--pause``), the slowest
   rank's time taken. alpha and beta are fitted (``workbench.distributed.cost.fit``) on
   the 2-rank times of the workbench's three, and the model (ring form) is set beside
   every measurement of them, with its error.
2. **The AdamW step** over ``--rows x --cols`` parameters (default 4096 x 4096 = 16.8M),
   each rank holding the whole parameter and moments and a gradient addend; methods
   timed alternating in rounds, each call after a barrier and a pause:

   - ``torch fused``: ``dist.all_reduce(grad, AVG)`` then ``torch.optim.AdamW(fused=True)``;
   - ``torch foreach``: the same with ``foreach=True``;
   - ``wb unsharded``: the workbench's program (AllReduce, then the AdamW step fused by
     the ``stitch`` planner on each rank, whole);
   - ``wb sharded``: after ``split_all_reduce`` + ``shard_after`` (keeping m and v
     sharded): ReduceScatter, the fused step on each rank's 1/p, AllGather of the
     parameter;
   - ``wb sharded, chunked k``: that step after ``chunk_sharded`` (k pieces, columns:
     piece i's kernel while piece i+1's ReduceScatter and piece i-1's AllGather move);
   - ``wb sharded, fused into the RS``: after ``fuse_received`` (the kernel per ring
     segment inside the ReduceScatter's wait);
   - the compute alone: ``torch fused`` AdamW without the collective, the workbench's
     fused step on the whole and on 1/p.

   The sharded step's parameter is checked against the unsharded one's on each rank.
3. **Simulated scale-out**: the fitted gloo link and the NVLink / InfiniBand presets
   for AllReduce of the gradient at 8-1024 ranks (ring and tree), labelled simulated.

    python benchmarks/collectives.py [--ranks 2 4] [--rows 4096 --cols 4096]
        [--rounds 5] [--pause 0.2] [--k 4] [--out STEM]
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
OPS = ("all_reduce", "reduce_scatter", "all_gather")
NATIVE = ("gloo reduce_scatter_single", "gloo all_gather_single")    # not fitted


def _collective_times(rank, p, pause, reps):
    import torch
    import torch.distributed as dist
    from workbench.distributed.ring import RingAllGather, RingReduceScatter
    out = []
    seq = iter(range(1 << 30))
    for op in OPS + NATIVE:
        for nbytes in SIZES:
            n = nbytes // 4
            x = torch.rand(n)
            small = torch.empty(n // p)
            big = torch.empty(n * p)
            call = {"all_reduce": lambda: dist.all_reduce(x),
                    "reduce_scatter": lambda: RingReduceScatter(
                        x.numpy(), "sum", rank, p, next(seq)).wait(),
                    "all_gather": lambda: RingAllGather(x.numpy(), rank, p, next(seq)).wait(),
                    "gloo reduce_scatter_single": lambda: dist.reduce_scatter_single(small, x),
                    "gloo all_gather_single": lambda: dist.all_gather_single(big, x)}[op]
            call()
            times = []
            for _ in range(reps):
                dist.barrier()
                time.sleep(pause)
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            # all_gather's message is the gathered tensor: n bytes per rank in, p n out
            out.append({"op": op, "ranks": p, "bytes": nbytes * (p if "all_gather" in op
                                                                 else 1), "times": times})
    return out


def _adamw_methods(rank, p, rows, cols, rounds, pause, k=4):
    import numpy as np
    import torch
    import torch.distributed as dist
    from workbench.distributed.chunk_pair import chunk_sharded
    from workbench.distributed.received import fuse_received
    from workbench.distributed.runner import RankProgram
    from workbench.distributed.samples import ADAMW, dp_adamw
    from workbench.distributed.transforms import shard_after, split_all_reduce
    d = dp_adamw(rows, cols, p)
    s = split_all_reduce(d, "n0")
    sharded, _ = shard_after(s, next(n.id for n in s.graph.nodes if n.op == "all_gather"),
                             keep_sharded=["m_out", "v_out"])
    rs = next(n.id for n in sharded.graph.nodes if n.op == "reduce_scatter")
    whole = RankProgram(d, rank, "stitch", seed=1)
    shard = RankProgram(sharded, rank, "stitch", seed=1)
    chunked = RankProgram(chunk_sharded(sharded, rs, k), rank, "stitch", seed=1)
    fused = RankProgram(fuse_received(sharded, rs)[0], rank, "stitch", seed=1)
    # each sharded step's parameter against the unsharded one's (same inputs, same ranks)
    ref = whole.run()[0]["param_out"]
    err = max(float(np.max(np.abs(prog.run()[0]["param_out"] - ref)) / np.max(np.abs(ref)))
              for prog in (shard, chunked, fused))
    seg = lambda prog: next(i for i in prog.programs)     # its one compute segment
    kw = dict(lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
              weight_decay=ADAMW["weight_decay"])
    gen = torch.Generator().manual_seed(rank)
    opts = {}
    for how in ("fused", "foreach"):
        prm = torch.nn.Parameter(torch.rand(rows, cols, generator=gen))
        prm.grad = torch.rand(rows, cols, generator=gen)
        opt = torch.optim.AdamW([prm], **kw, **{how: True})
        opt.step()                   # (allocates the moments)
        opts[how] = (prm, opt)

    def torch_step(how, comm=True):
        prm, opt = opts[how]
        if comm:
            dist.all_reduce(prm.grad, op=dist.ReduceOp.AVG)
        opt.step()

    def compute(prog):
        k = seg(prog)
        step = next(s for s in prog.steps if s.index == k)
        feeds = {n: prog.env.get(n) for n in step.graph.inputs}
        for n, v in feeds.items():     # (a segment's input made by a collective: any data)
            if v is None:
                feeds[n] = np.random.default_rng(0).uniform(
                    -1, 1, step.graph.value(n).shape).astype(np.float32)
        # (into outputs kept from call to call, as the rank's step runs it)
        return lambda: prog.programs[k].run(feeds, out=prog.outs[k])
    methods = {"torch fused": lambda: torch_step("fused"),
               "torch foreach": lambda: torch_step("foreach"),
               "wb unsharded": whole.run, "wb sharded": shard.run,
               f"wb sharded, chunked k={k}": chunked.run,
               "wb sharded, fused into the RS": fused.run,
               "compute: torch fused": lambda: torch_step("fused", False),
               "compute: wb whole": compute(whole), "compute: wb 1/p": compute(shard)}
    samples = {k: [] for k in methods}
    comm_split = {m: [] for m in methods if m.startswith("wb ")}
    for k, fn in methods.items():       # warm-up
        dist.barrier()
        fn()
    for _ in range(rounds):
        for k, fn in methods.items():
            dist.barrier()
            time.sleep(pause)
            t0 = time.perf_counter()
            r = fn()
            samples[k].append(time.perf_counter() - t0)
            if k in comm_split:
                comm_split[k].append({"compute_s": r[1].compute_s, "comm_s": r[1].comm_s,
                                      "overlap_s": r[1].overlap_s})
    return {"samples": samples, "split": comm_split, "sharded_vs_unsharded_error": err}


def _worker(rank, p, store, cfg, results):
    try:
        from workbench.distributed.runner import init_gloo, rank_threads
        rank_threads(p)     # (OpenMP and torch threads: cores / ranks, unpinned)
        init_gloo(rank, p, store, 600)
        out = {"collectives": _collective_times(rank, p, cfg["pause"], cfg["reps"])}
        out["adamw"] = _adamw_methods(rank, p, cfg["rows"], cfg["cols"], cfg["rounds"],
                                      cfg["pause"], cfg.get("k", 4))
        results.put((rank, out))
    except BaseException as e:
        results.put((rank, {"error": f"{type(e).__name__}: {e}"}))


def run_ranks(p, cfg):
    return spawn_ranks(_worker, p, cfg, timeout=3600)


def summarize(p, per_rank):
    """Per collective size and per method: the slowest rank's time of each call."""
    import numpy as np
    coll = []
    for i, row in enumerate(per_rank[0]["collectives"]):
        t = np.max([r["collectives"][i]["times"] for r in per_rank], axis=0)
        coll.append({**{k: row[k] for k in ("op", "ranks", "bytes")},
                     "median_s": float(np.median(t)), "min_s": float(t.min()),
                     "times_s": t.tolist()})
    methods = {}
    for k in per_rank[0]["adamw"]["samples"]:
        t = np.max([r["adamw"]["samples"][k] for r in per_rank], axis=0)
        methods[k] = {"median_ms": float(np.median(t)) * 1e3, "min_ms": float(t.min()) * 1e3,
                      "times_ms": (t * 1e3).tolist()}
    for k in per_rank[0]["adamw"]["split"]:
        parts = [r["adamw"]["split"][k] for r in per_rank]
        for part in ("compute_s", "comm_s", "overlap_s"):
            methods[k][part.replace("_s", "_ms")] = float(np.median(
                [max(pr[i][part] for pr in parts) for i in range(len(parts[0]))])) * 1e3
    err = max(r["adamw"]["sharded_vs_unsharded_error"] for r in per_rank)
    return {"ranks": p, "collectives": coll, "adamw": methods,
            "sharded_vs_unsharded_error": err}


def model(res):
    from workbench.distributed.cost import INFINIBAND, NVLINK, fit, fit_regimes, scale_out
    two = [(c["op"], c["ranks"], c["bytes"], c["median_s"])
           for r in res["runs"] if r["ranks"] == 2 for c in r["collectives"]
           if c["op"] in OPS]
    link = fit(two, "gloo loopback (fitted on 2 ranks)")
    res["fit"] = {"alpha_s": link.alpha, "beta_s_per_byte": link.beta,
                  "bandwidth_GBps": 1 / link.beta / 1e9 if link.beta else None}
    # and one link per collective (gloo's reduce_scatter and all_gather are other
    # algorithms than its all_reduce: one alpha and beta for all three does not hold)
    per_op = {op: fit([x for x in two if x[0] == op], f"gloo {op} (fitted)") for op in OPS}
    res["fit_per_op"] = {op: {"alpha_s": lk.alpha, "beta_s_per_byte": lk.beta}
                         for op, lk in per_op.items()}
    # and per op in two message-size regimes (latency-bound small, bandwidth-bound large)
    regimes = {op: fit_regimes([x for x in two if x[0] == op], f"gloo {op}") for op in OPS}
    res["fit_regimes"] = {op: {"cut_bytes": r.cut_bytes, "small": [r.small.alpha, r.small.beta],
                               "large": [r.large.alpha, r.large.beta]}
                          for op, r in regimes.items()}
    for r in res["runs"]:
        for c in r["collectives"]:
            if c["op"] not in OPS:
                continue
            c["model_s"] = link.time(c["op"], c["bytes"], c["ranks"])
            c["model_error_pct"] = (c["model_s"] - c["median_s"]) / c["median_s"] * 100
            c["op_model_s"] = per_op[c["op"]].time(c["op"], c["bytes"], c["ranks"])
            c["op_model_error_pct"] = (c["op_model_s"] - c["median_s"]) / c["median_s"] * 100
            c["regime_model_s"] = regimes[c["op"]].time(c["op"], c["bytes"], c["ranks"])
            c["regime_model_error_pct"] = (c["regime_model_s"] - c["median_s"]) / \
                c["median_s"] * 100
    n = res["rows"] * res["cols"] * 4
    res["simulated"] = [row for lk in (link, NVLINK, INFINIBAND) for form in ("ring", "tree")
                        for row in scale_out(lk, "all_reduce", n, form=form)]
    # and the planner's default link, the forms model: gloo runs its ring only (no
    # tree form), each step time-shared where the ranks outnumber the cores
    from workbench.distributed.links import DEFAULT_LINK
    res["simulated"] += scale_out(DEFAULT_LINK, "all_reduce", n, form="ring")


def markdown(res) -> str:
    L = [f"# Collectives on gloo: the AdamW step, the alpha-beta model ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}, gloo over loopback; "
         "each rank's torch threads: cores / ranks.", "",
         f"AdamW over {res['rows']} x {res['cols']} = {res['rows'] * res['cols'] / 1e6:.1f}M "
         "parameters (float32), every method timed in alternating rounds, each call after a "
         f"barrier and a {res['pause']} s pause; ms = the slowest rank's, median of "
         f"{res['rounds']} rounds (and the fastest: the host is shared, so the quiet pace). "
         "`x` = torch fused (AllReduce + fused AdamW) / the method; compute and comm: the "
         "workbench step's own split (medians).",
         ""]
    for r in res["runs"]:
        a = r["adamw"]
        L += [f"## {r['ranks']} ranks", "",
              "| method | median ms | min ms | x (medians) | x (mins) | compute ms | comm ms "
              "| overlap ms |", "|---|---|---|---|---|---|---|---|"]
        for k, m in a.items():
            ref = a["compute: torch fused" if k.startswith("compute") else "torch fused"]
            part = lambda key: f"{m[key]:.1f}" if key in m else ""
            L.append(f"| {k} | {m['median_ms']:.1f} | {m['min_ms']:.1f} | "
                     f"{ref['median_ms'] / m['median_ms']:.2f} | "
                     f"{ref['min_ms'] / m['min_ms']:.2f} | {part('compute_ms')} | "
                     f"{part('comm_ms')} | {part('overlap_ms')} |")
        L += ["", "(compute rows: `x` against `compute: torch fused`, the AdamW step without "
              "its collective; the sharded step's parameter against the unsharded one's: "
              f"max relative error {r['sharded_vs_unsharded_error']:.2g})", ""]
    f = res["fit"]
    L += ["## The alpha-beta model against measured gloo", "",
          f"Fitted on the 2-rank times (weighted least squares, relative error): alpha = "
          f"{f['alpha_s'] * 1e6:.1f} us, beta = 1 / {f['bandwidth_GBps']:.2f} GB/s. "
          "Model: ring form.", "",
          "Per op: " + "; ".join(
              f"{op} alpha {v['alpha_s'] * 1e6:.0f} us, 1 / beta "
              f"{(1 / v['beta_s_per_byte'] / 1e9) if v['beta_s_per_byte'] else float('inf'):.2f}"
              " GB/s" for op, v in res["fit_per_op"].items()) + ".", "",
          "Per op in two regimes (`cost.fit_regimes`; ring-step messages up to the cut, "
          "above it): " + "; ".join(
              f"{op} cut {v['cut_bytes'] / 2**10:.0f} KB" for op, v in
              res.get("fit_regimes", {}).items()) + ".", "",
          "| op | ranks | bytes | measured ms (median) | model ms (one link) | error % "
          "| model ms (per op) | error % | model ms (per op, regimes) | error % |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    within = [abs(c["op_model_error_pct"]) <= 25 for r in res["runs"]
              for c in r["collectives"] if "model_s" in c]
    within_r = [abs(c.get("regime_model_error_pct", 1e9)) <= 25 for r in res["runs"]
                for c in r["collectives"] if "model_s" in c and r["ranks"] == 2]
    for r in res["runs"]:
        for c in r["collectives"]:
            if "model_s" in c:
                L.append(f"| {c['op']} | {c['ranks']} | {c['bytes']} | "
                         f"{c['median_s'] * 1e3:.3f} | {c['model_s'] * 1e3:.3f} | "
                         f"{c['model_error_pct']:+.0f} | {c['op_model_s'] * 1e3:.3f} | "
                         f"{c['op_model_error_pct']:+.0f} | "
                         f"{c.get('regime_model_s', float('nan')) * 1e3:.3f} | "
                         f"{c.get('regime_model_error_pct', float('nan')):+.0f} |")
    L += ["", f"Within 25% (per-op links): {sum(within)} of {len(within)} rows; per op "
          f"in two regimes, of the 2-rank rows they are fitted on: {sum(within_r)} of "
          f"{len(within_r)} (held out across runs: `benchmarks/alpha_beta_fit.py`).", "",
          "## The ring against gloo's own ReduceScatter and AllGather", "",
          "`x` = gloo's own call / the ring (medians, same bytes, same run).", "",
          "| op | ranks | bytes | ring ms | gloo's own ms | x |", "|---|---|---|---|---|---|"]
    for r in res["runs"]:
        by = {(c["op"], c["bytes"]): c["median_s"] for c in r["collectives"]}
        for (op, nb), t in by.items():
            own = by.get((f"gloo {op}_single", nb))
            if own is not None:
                L.append(f"| {op} | {r['ranks']} | {nb} | {t * 1e3:.3f} | {own * 1e3:.3f} | "
                         f"{own / t:.2f} |")
    L += ["", "## Simulated scale-out (the model, not a measurement)", "",
          f"AllReduce of the {res['rows'] * res['cols'] * 4 / 2**20:.0f} MB gradient, ms:", "",
          "| link | form | " + " | ".join(str(p) for p in (8, 16, 32, 64, 128, 256, 512, 1024))
          + " |", "|---|---|" + "---|" * 8]
    rows = {}
    for s in res["simulated"]:
        rows.setdefault((s["link"], s["form"]), []).append(s["seconds"] * 1e3)
    for (lk, form), v in rows.items():
        L.append(f"| {lk} | {form} | " + " | ".join(f"{x:.2f}" for x in v) + " |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5, help="calls per collective and size")
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--k", type=int, default=4, help="pieces of the chunked sharded step")
    ap.add_argument("--out", default=str(RESULTS / f"collectives-{dt.date.today()}"))
    ap.add_argument("--render", metavar="JSON",
                    help="fit and write the report again from a run's JSON (no measuring)")
    a = ap.parse_args(argv)
    if a.render:
        return render_again(a.render, model, markdown)
    res = {"date": str(dt.date.today()), "rows": a.rows, "cols": a.cols,
           "rounds": a.rounds, "pause": a.pause, "runs": [],
           "load_average_at_start": list(os.getloadavg())}
    for p in a.ranks:
        log(f"{p} ranks ...")
        cfg = dict(rows=a.rows, cols=a.cols, rounds=a.rounds, reps=a.reps, pause=a.pause,
                   k=a.k)
        res["runs"].append(summarize(p, run_ranks(p, cfg)))
    model(res)
    from pathlib import Path
    write_results(Path(a.out), res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
