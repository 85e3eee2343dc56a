"""Run a distributed program on p ranks: p processes (``torch.multiprocessing``,
forkserver)
under ``torch.distributed`` with gloo, each running its own sub-program
(:mod:`.local`): compute segments compiled by the CPU backend on its local pieces (with
``backend="cupy"``: NCCL, one GPU per rank, CuPy arrays -- :mod:`.nccl`),
collectives through :mod:`.collectives`. The ranks' outputs are put together by their
placements and compared with the single-process NumPy reference of the whole program.

A rank that raises is reported with its rank, step and message; a run that makes no
progress for ``timeout`` seconds is reported with every unfinished rank and the step
it stopped at. Either way every rank's process is stopped and joined before the error
is raised: none is left behind.
"""
from __future__ import annotations

import os
import queue as queue_mod
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from ..errors import RankFailure, WorkbenchError
from ..runtime.reference import random_inputs, run_reference
from ..tolerance import relative_to_largest
from .local import Comm, local_steps
from .placement import Replicate, Shard, assemble, piece
from .program import DistProgram

# the largest error accepted against the reference, relative to the output's largest
# element: float32 rounding of a p-way reduction (whose addends are O(1)) and of
# kernels that sum in another order than NumPy
TOLERANCE = 1e-4


@dataclass(frozen=True)
class RankTimes:
    """One rank's step, best of the timed repeats: the whole step, the compute
    segments, the time spent starting and waiting for collectives (communication not
    hidden behind compute), all in seconds; bytes sent by its collectives (counted);
    ``overlap_s``: compute time during which a collective was in flight (hidden
    communication); ``spans``: the step's timeline (:mod:`.timeline`)."""
    rank: int
    step_s: float
    compute_s: float
    comm_s: float
    sent_bytes: int
    overlap_s: float = 0.0
    spans: tuple = ()


@dataclass(frozen=True)
class RankRun:
    """A run on ``ranks`` ranks: the outputs put together, their errors against the
    reference, each rank's times."""
    ranks: int
    outputs: dict = field(repr=False)
    errors: dict
    times: tuple[RankTimes, ...]

    @property
    def ok(self) -> bool:
        return all(e <= TOLERANCE for e in self.errors.values())


def describe(step) -> str:
    if isinstance(step, Comm):
        return f"{step.node.op} {step.node.name}"
    return f"compute {step.graph.name} ({len(step.nodes)} nodes)"


def sent_bytes(node, nbytes: int, p: int) -> int:
    """Bytes one rank sends in ``node``'s collective over ``nbytes`` of local input, in
    the ring algorithms gloo runs (reduce-scatter then all-gather for all_reduce)."""
    if p == 1:
        return 0
    if node.op == "all_reduce":
        return 2 * (p - 1) * nbytes // p
    if node.op in ("reduce_scatter", "all_to_all", "all_to_all_single"):
        return (p - 1) * nbytes // p
    if node.op == "all_gather":
        return (p - 1) * nbytes
    return nbytes if node.op == "send_recv" else 0


def run_ranks(d: DistProgram, inputs: dict | None = None, seed: int = 0,
              planner: str = "rules", repeats: int = 1, timeout: float = 120.0,
              check: bool = True, fault: tuple | None = None,
              backend: str = "cpu") -> RankRun:
    """Run ``d`` on ``d.ranks`` processes; ``inputs`` (global arrays; default random by
    ``seed``), each rank planning its segments with ``planner``. ``repeats`` timed runs
    follow one untimed; ``check`` compares with the reference. ``fault`` = (rank, step,
    "raise" | "hang") makes that rank fail there -- how the tests show a failure and a
    hang are reported and cleaned up."""
    import torch.multiprocessing as mp
    d.verify()
    p = d.ranks
    # forkserver: a clean process (no threads, nothing of the caller's state) that
    # imports torch and the workbench once and forks each rank from there -- as safe
    # as spawn, without every rank of every run paying ~5 s of imports
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch.distributed", "workbench.runtime",
                                "workbench.fusion", "workbench.distributed.runner"])
    results = ctx.Queue()
    progress = ctx.Array("i", [-1] * p)
    tmp = tempfile.mkdtemp(prefix="wb-dist-")
    procs = [ctx.Process(target=_rank_main, daemon=True,
                         args=(r, d, inputs, seed, planner, repeats, timeout,
                               os.path.join(tmp, "store"), results, progress, fault,
                               backend))
             for r in range(p)]
    steps = local_steps(d)
    got: dict[int, tuple] = {}
    try:
        for pr in procs:
            pr.start()
        last, seen = time.monotonic(), list(progress[:])
        while len(got) < p:
            try:
                msg = results.get(timeout=0.5)
            except queue_mod.Empty:
                msg = None
            now = time.monotonic()
            if msg is not None:
                if msg[0] == "error":
                    _, r, k, text = msg
                    where = f"step {k} ({describe(steps[k])})" if 0 <= k < len(steps) \
                        else "start-up"
                    raise RankFailure(f"rank {r} of {p} failed at {where}: {text}; every "
                                      "rank was stopped")
                got[msg[1]] = msg[2:]
                last = now
                continue
            dead = [r for r, pr in enumerate(procs) if not pr.is_alive() and r not in got]
            if dead and results.empty():
                time.sleep(0.5)     # (its last message may still be in the pipe)
                if results.empty():
                    r = dead[0]
                    k = progress[r]
                    where = f"step {k} ({describe(steps[k])})" if 0 <= k < len(steps) else \
                        ("start-up (a script that runs ranks needs `if __name__ == "
                         "'__main__':` around its code: each rank imports it)")
                    raise RankFailure(f"rank {r} of {p} died (exit code "
                                      f"{procs[r].exitcode}) at {where}; every rank was "
                                      "stopped")
            if list(progress[:]) != seen:
                seen, last = list(progress[:]), now
            # (start-up -- importing torch, compiling the segments -- may take minutes)
            elif now - last > (timeout if max(seen) >= 0 else max(timeout, 600)):
                stuck = sorted((progress[r], r) for r in range(p) if r not in got)
                what = "; ".join(
                    f"rank {r} at step {k} ({describe(steps[k]) if 0 <= k < len(steps) else 'start-up'})"
                    for k, r in stuck)
                raise RankFailure(f"no progress for {timeout:g} s ({what}): rank "
                                  f"{stuck[0][1]} hangs; every rank was stopped. Raise "
                                  "timeout= if a step is that slow")
    finally:
        _stop(procs)
        results.close()
        shutil.rmtree(tmp, ignore_errors=True)
    outputs, errors = {}, {}
    g = d.graph
    for o in g.outputs:
        outputs[o] = assemble([got[r][0][o] for r in range(p)], d.placements[o])
    if check:
        ref = run_reference(g, inputs if inputs is not None else random_inputs(g, seed))
        errors = {o: relative_to_largest(outputs[o], ref[o]) for o in g.outputs}
        for o in g.outputs:     # a replicated output is taken from rank 0: all must agree
            if isinstance(d.placements[o], Replicate):
                errors[o] = max([errors[o]] + [relative_to_largest(got[r][0][o], ref[o])
                                               for r in range(1, p)])
    return RankRun(p, outputs, errors, tuple(got[r][1] for r in range(p)))


def _stop(procs) -> None:
    for pr in procs:        # (after a run that finished, each rank is leaving on its own)
        pr.join(2)
    for pr in procs:
        if pr.is_alive():
            pr.terminate()
    for pr in procs:
        pr.join(5)
        if pr.is_alive():
            pr.kill()
            pr.join(5)


class RankProgram:
    """One rank's sub-program, ready to run: its compute segments planned with
    ``planner`` and compiled, its pieces of the inputs (``inputs``: global arrays, else
    random by ``seed``). Call it inside a process whose gloo group is set up."""

    def __init__(self, d: DistProgram, rank: int, planner: str = "rules",
                 inputs: dict | None = None, seed: int = 0, backend: str = "cpu"):
        # (planned and compiled as a session would, without one: the session sits a
        # floor above this package, which it delegates ranks=p to)
        from ..fusion import run_planner
        from ..fusion.fitted import FittedModel
        from ..runtime import Program, get_backend
        backend = get_backend(backend)
        model = FittedModel(backend.device).model
        self.d, self.rank, self.p = d, rank, d.ranks
        glob = inputs if inputs is not None else random_inputs(d.graph, seed)
        pl = d.placements
        self.env = {k: piece(np.asarray(v), pl[k], self.p, rank, k) for k, v in glob.items()}
        self.gpu = backend.name == "cupy"     # (NCCL: the pieces live on the GPU)
        # a step's clock is read once its work is done: on the GPU a kernel launch and
        # an NCCL wait return at once (the wait only orders the streams), so the host
        # waits for the device before each reading (a no-op on the CPU backend)
        self.settle = backend.synchronize
        self.steps = local_steps(d)
        self.programs = {}
        # each collective's buffers, reused step after step (its results are valid until
        # the next step: fresh 64 MB buffers cost ~15 ms of page faults each)
        self.buffers: dict[str, dict] = {}
        self.fused: dict[str, _Fused] = {}     # received value -> the work fused into it
        self.outs: dict[int, dict] = {}
        self.waits = {n.inputs[0]: n.outputs[0] for n in d.graph.nodes
                      if n.op == "wait_tensor"}    # a start's value -> its wait's
        for s in self.steps:
            if isinstance(s, Comm):
                continue
            for k in s.graph.inputs:    # sharded constants are inputs: their slices
                if k in d.graph.constants:
                    self.env[k] = piece(np.asarray(d.graph.constants[k]), pl[k], self.p,
                                        rank, k)
            plan, _ = run_planner(planner, s.graph, model=model)
            self.programs[s.index] = Program(plan, backend)
            # (its outputs kept from step to step, as the collectives' buffers are: fresh
            # 32 MB outputs cost page faults every step -- valid until the next step)
            self.outs[s.index] = self.programs[s.index].new_outputs()
            if s.on_arrival and self.gpu:
                raise WorkbenchError("compute fused into a received value runs on gloo "
                                     "ranks only (its ring is gloo's); undo "
                                     "fuse_received, or pass backend='cpu'")
            if s.on_arrival:
                self.fused[s.on_arrival] = _Fused(s, d, lambda g: Program(
                    run_planner(planner, g, model=model)[0], backend))
        if self.gpu:
            from .nccl import to_device
            self.env = to_device(self.env, backend)

    def run(self, progress=None, fault=None) -> tuple[dict, RankTimes]:
        """One step: every value it made (a collective's result lives in its buffer,
        valid until the next step), and its times."""
        from .collectives import start
        from .timeline import Span, overlap
        rank, p = self.rank, self.p
        vals, pending = dict(self.env), {}
        compute = comm = 0.0
        sent = 0
        spans, began = [], {}       # (the timeline; a collective's value -> its start)
        t0 = time.perf_counter()
        for s in self.steps:
            if progress is not None:
                progress[rank] = s.index
            if fault is not None and fault[0] == rank and fault[1] == s.index:
                if fault[2] == "hang":
                    time.sleep(1e6)
                raise RuntimeError("fault injected by the caller")
            t = time.perf_counter()
            if isinstance(s, Comm):
                n = s.node
                if n.op == "wait_tensor":
                    f = self.fused.get(n.outputs[0])
                    if f is None:
                        vals[n.outputs[0]] = pending.pop(n.inputs[0]).wait()
                    else:   # (its consumer's kernels run inside, per arriving segment)
                        vals[n.outputs[0]] = f.wait(pending.pop(n.inputs[0]), vals, spans,
                                                    t0)
                        compute += f.compute_s
                        comm -= f.compute_s
                    self.settle()
                    end = time.perf_counter() - t0
                    name, since = began.pop(n.inputs[0])
                    spans += [Span("comm", name, since, end), Span("wait", name, t - t0, end)]
                elif n.op == "shard_local":
                    vals[n.outputs[0]] = piece(vals[n.inputs[0]], Shard(n.attr("dim")), p,
                                               rank)
                else:
                    x = vals[n.inputs[0]]
                    sent += sent_bytes(n, x.nbytes, p)
                    f = self.fused.get(self.waits.get(n.outputs[0], ""))
                    pending[n.outputs[0]] = start(n, x, rank, p,
                                                  self.buffers.setdefault(n.id, {}),
                                                  f.segment if f else None)
                    began[n.outputs[0]] = (n.name, t - t0)
                if n.op != "wait_tensor":   # (time inside a start or a local slice)
                    spans.append(Span("call", n.name, t - t0, time.perf_counter() - t0))
                comm += time.perf_counter() - t
            elif s.on_arrival:      # (run inside its collective's wait)
                continue
            else:
                vals.update(self.programs[s.index].run({k: vals[k] for k in s.graph.inputs},
                                                       out=self.outs[s.index]))
                self.settle()
                compute += time.perf_counter() - t
                spans.append(Span("compute", s.graph.name, t - t0, time.perf_counter() - t0))
        return vals, RankTimes(rank, time.perf_counter() - t0, compute, comm, sent,
                               overlap(spans), tuple(spans))


def rank_threads(p: int) -> None:
    """Share the cores among the p ranks of this machine: each rank's OpenMP kernels and
    torch get cores / p threads, and the kernels' threads are not pinned (placement.py
    pins a run's threads to the cores it finds; p ranks each doing so pin their
    threads onto each other's cores). Call first thing in a rank's process, before a
    kernel is loaded (OpenMP reads its thread count once)."""
    import torch
    n = max(1, (os.cpu_count() or 1) // p)
    os.environ["OMP_NUM_THREADS"] = str(n)
    os.environ["WB_PLACE_THREADS"] = "0"
    torch.set_num_threads(n)


def init_gloo(rank: int, p: int, store: str, timeout: float) -> None:
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=p,
                            # (longer than the parent's: it names the hung rank)
                            timeout=timedelta(seconds=3 * timeout + 30))


def _rank_main(rank, d, inputs, seed, planner, repeats, timeout, store, results,
               progress, fault, backend="cpu"):
    step = -1
    try:
        import torch.distributed as dist
        rank_threads(d.ranks)
        if backend == "cupy":
            from .nccl import init_nccl
            init_nccl(rank, d.ranks, store, timeout)
        else:
            init_gloo(rank, d.ranks, store, timeout)
        prog = RankProgram(d, rank, planner, inputs, seed, backend)
        best = None
        for rep in range(repeats + 1):
            dist.barrier()
            vals, times = prog.run(progress, fault)
            if rep and (best is None or times.step_s < best.step_s) or repeats == 0:
                best = times
        step = len(prog.steps)
        progress[rank] = step
        from .nccl import to_host
        results.put(("done", rank, {o: to_host(vals[o]) if prog.gpu else vals[o]
                                    for o in d.graph.outputs}, best))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:      # (reported to the parent, which stops every rank)
        step = progress[rank]
        line = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        if "fault injected" not in str(e):
            line += " | " + traceback.format_exc().strip().splitlines()[-3][:200]
        results.put(("error", rank, step, line))


class _Fused:
    """A segment fused into the collective whose result it reads (:mod:`.received`):
    compiled for one ring segment's length (and the shorter last ones, as they come),
    run on each flat piece of the result as the ring finishes it, writing its outputs'
    pieces in place."""

    def __init__(self, seg, d: DistProgram, compile_):
        from .received import Cut, chunk_graph, pieces
        self.seg, self.segment, self.compile = seg, seg.fuse_segment, compile_
        self.size = int(np.prod(d.local_shape(seg.on_arrival)))
        self.cut = Cut.of(seg.graph, self.size)
        self.programs: dict[int, object] = {}
        self.outputs = {o: np.empty(seg.graph.value(o).shape, seg.graph.value(o).dtype.np)
                        for o in seg.graph.outputs}
        self._chunk = lambda n: chunk_graph(seg.graph, self.size, n)
        lengths = {b - a for a, b in pieces(self.size, self.segment)}
        node = d.graph.producer[d.graph.producer[seg.on_arrival].inputs[0]]
        if node.op in ("all_gather", "all_to_all_single"):  # (segments lie within
            # each shard, each block)
            lengths |= {b - a for a, b in pieces(self.size // d.ranks, self.segment)}
        for n in lengths:
            self._program(n)
        self.compute_s = 0.0

    def _program(self, n: int):
        if n not in self.programs:
            self.programs[n] = self.compile(self._chunk(n))
        return self.programs[n]

    def wait(self, pending, vals: dict, spans: list, t0: float) -> np.ndarray:
        from .received import pieces
        from .timeline import Span
        g, size = self.seg.graph, self.size
        self.compute_s = 0.0
        flat: dict = {}
        names = [k for k in g.inputs if k != self.seg.on_arrival]

        cut = self.cut

        def on_chunk(a, b):
            if not flat:    # (the received buffer: known once the ring holds it)
                for k in names:
                    flat[k] = np.ascontiguousarray(vals[k])
            for x, y in pieces(b - a, self.segment):
                t = time.perf_counter()
                lo, hi = a + x, a + y
                ins = {k: cut.part(v, lo, hi) for k, v in flat.items()}
                ins[self.seg.on_arrival] = cut.part(recv, lo, hi)
                self._program(hi - lo).run(ins, out={o: cut.part(o_, lo, hi) for o, o_
                                                     in self.outputs.items()})
                done = time.perf_counter()
                self.compute_s += done - t
                spans.append(Span("compute", f"{g.name}[{lo}:{hi}]", t - t0, done - t0))

        if pending.ring is None:    # (no ring: the whole result at once)
            out = pending.wait()
            recv = out.reshape(-1)
            on_chunk(0, size)
        else:                       # (the ring's flat buffer, filled as it goes)
            recv = pending.ring.out.reshape(-1)
            out = pending.wait(on_chunk)
        vals.update(self.outputs)
        return out
