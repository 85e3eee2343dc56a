"""This machine's gloo, measured: each collective of the IR on p gloo ranks across
message sizes, run on the runtime's own path (:func:`.collectives.start` on the
collective's node, then its wait -- what a rank of :mod:`.runner` runs), and the
forms model (:mod:`.gloo_forms`) fitted on it.

Each call follows a barrier and an idle pause (what came before -- another
collective's copies, a page fault -- does not spill into it); the collectives of one
size alternate, so a load that changes during the run falls on all of them; a rank's
buffers are kept from call to call, as the runner keeps them; the first call of each
is a warm-up. A call's time is its slowest rank's (the collective ends when the last
rank has its result); a sample is the median of ``reps`` calls.

    calibrate(ranks=2, sizes=(4096, 1 << 20, 1 << 24))   # -> gloo_forms.GlooForms
"""
from __future__ import annotations

import os
import queue as queue_mod
import shutil
import tempfile
import time
from typing import Sequence

from ..errors import RankFailure, WorkbenchError
from .gloo_forms import GlooForms, fit_forms

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all_single", "send_recv")
SIZES = tuple(1 << k for k in range(12, 27, 2))     # 4 KB .. 64 MB
_ATTRS = {"all_reduce": {"reduce_op": "sum"}, "reduce_scatter": {"reduce_op": "sum", "dim": 0},
          "all_gather": {"dim": 0}, "all_to_all_single": {}, "send_recv": {"shift": 1}}


def input_bytes(op: str, nbytes: int, p: int) -> int:
    """A rank's input for a collective over an n-byte tensor (an AllGather's input is
    one rank's shard of the n bytes it gathers)."""
    return nbytes // p if op == "all_gather" else nbytes


def _worker(rank, p, store, ops, sizes, reps, pause, timeout, results):
    try:
        import numpy as np
        import torch.distributed as dist

        from ..ir.graph import Node
        from .collectives import start
        from .runner import init_gloo, rank_threads
        rank_threads(p)
        init_gloo(rank, p, store, timeout)
        nodes = {op: Node.make("n0", op, ["x"], ["y"], {"group_size": p, **_ATTRS[op]})
                 for op in ops}
        out = []
        for nbytes in sizes:
            xs = {op: np.random.default_rng(rank).random(input_bytes(op, nbytes, p) // 4,
                                                         dtype=np.float32) for op in ops}
            kept = {op: {} for op in ops}
            times = {op: [] for op in ops}
            for rep in range(reps + 1):
                for op in ops:
                    dist.barrier()
                    time.sleep(pause)
                    t0 = time.perf_counter()
                    start(nodes[op], xs[op], rank, p, kept[op]).wait()
                    if rep:
                        times[op].append(time.perf_counter() - t0)
            out += [(op, nbytes, times[op]) for op in ops]
        results.put((rank, out))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:      # (the parent names the rank and stops every one)
        results.put((rank, f"{type(e).__name__}: {str(e)[:300]}"))


def measure(ranks: int = 2, ops: Sequence[str] = OPS, sizes: Sequence[int] = SIZES,
            reps: int = 5, pause: float = 0.2, timeout: float = 600.0) -> list[dict]:
    """Rows ``{"op", "ranks", "bytes", "median_s", "min_s", "times"}`` (n: the whole
    tensor's bytes), measured on ``ranks`` gloo processes."""
    bad = [op for op in ops if op not in _ATTRS]
    if bad:
        raise WorkbenchError(f"cannot measure {', '.join(map(str, bad))}: choose among "
                             f"{', '.join(OPS)}")
    if ranks < 2:
        raise WorkbenchError(f"ranks={ranks}: a collective moves bytes between 2 ranks or "
                             "more")
    odd = [n for n in sizes if n % (4 * ranks * ranks) or n <= 0]
    if odd:
        raise WorkbenchError(f"sizes {odd[:3]} bytes: each must be a positive multiple of "
                             f"4 x ranks^2 = {4 * ranks * ranks} (float32 elements cut in "
                             "p blocks of p pieces); round them")
    import numpy as np
    import torch.multiprocessing as mp

    from .runner import _stop
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", "workbench.distributed.collectives"])
    results = ctx.Queue()
    tmp = tempfile.mkdtemp(prefix="wb-calib-")
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(r, ranks, os.path.join(tmp, "store"), tuple(ops),
                               tuple(sizes), reps, pause, timeout, results))
             for r in range(ranks)]
    got: dict = {}
    try:
        for pr in procs:
            pr.start()
        end = time.monotonic() + timeout
        while len(got) < ranks:
            try:
                r, msg = results.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [r for r, pr in enumerate(procs) if not pr.is_alive() and r not in got]
                if dead and results.empty() or time.monotonic() > end:
                    what = f"rank {dead[0]} died" if dead else f"no result in {timeout:g} s"
                    raise RankFailure(f"measuring gloo on {ranks} ranks: {what}; every rank "
                                      "was stopped (raise timeout= for slow sizes)")
                continue
            if isinstance(msg, str):
                raise RankFailure(f"measuring gloo: rank {r} of {ranks} failed: {msg}; every "
                                  "rank was stopped")
            got[r] = msg
    finally:
        _stop(procs)
        results.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for i, (op, nbytes, _) in enumerate(got[0]):
        t = np.max([got[r][i][2] for r in range(ranks)], axis=0)
        rows.append({"op": op, "ranks": ranks, "bytes": nbytes, "median_s": float(np.median(t)),
                     "min_s": float(t.min()), "times": [float(x) for x in t]})
    return rows


def samples(rows: Sequence[dict]) -> list[tuple[str, int, float, float]]:
    """``measure``'s rows as :func:`.gloo_forms.fit_forms` samples."""
    return [(r["op"], r["ranks"], r["bytes"], r["median_s"]) for r in rows]


def calibrate(ranks: int = 2, ops: Sequence[str] = OPS, sizes: Sequence[int] = SIZES,
              reps: int = 5, pause: float = 0.2) -> GlooForms:
    """This machine's gloo as a link: ``measure`` on ``ranks``, then ``fit_forms``."""
    return fit_forms(samples(measure(ranks, ops, sizes, reps, pause)), os.cpu_count() or 1,
                     f"gloo loopback (calibrated here on {ranks} ranks)")


