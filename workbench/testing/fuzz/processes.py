"""A long fuzz run in batches of seeds, each batch in a fresh child process: a kernel
that kills its process (heap corruption, a segfault) fails its seed and the run goes on
from the next one."""
from __future__ import annotations

import os
import time

from .cases import Failure, Report, fuzz


# Seeds per child process of a long run: each distinct kernel's library stayed mapped in
# the process that loaded it, and one process ran out of memory maps (Linux's
# vm.max_map_count, 65530) after ~1800 graphs -- "failed to map segment from shared
# object". The CPU backend now unloads libraries whose kernels are gone
# (runtime/cc.unload_library); a fresh process per batch still confines a crash.
SEEDS_PER_PROCESS = 400


def _print_progress(case, fails):
    mark = "FAIL" if fails else "ok"
    ops = len(case.graph.nodes) if case.graph is not None else 0
    print(f"seed {case.seed}: {ops} ops, {case.plans_checked} plans "
          f"{mark}" + "".join(f"\n  after {f.action}: {f.message}" for f in fails),
          flush=True)


def _mark(marker: str, seed: int) -> None:
    """Note in the marker file the seed this process is about to run (what the parent
    reads if the process dies)."""
    with open(marker, "w") as f:
        f.write(str(seed))


def _batch(first: int, count: int, seconds: float, edits: int, max_ops: int,
           cuda: bool, backend: str, precision: str, family: str, marker: str) -> Report:
    return fuzz(range(first, first + count), seconds, edits, max_ops, _print_progress, cuda,
                backend, precision, family, lambda seed: _mark(marker, seed))


def _in_child(batch, args: tuple, marker: str) -> Report | None:
    """``batch(*args, marker)`` in a fresh (spawned) process: its report, or None when
    the process died. The marker file is emptied first, so that a child dying before
    its first case leaves no stale seed in it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    with open(marker, "w"):
        pass
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
            return ex.submit(batch, *args, marker).result()
    except BrokenProcessPool:
        return None


def fuzz_in_processes(start: int, seconds: float, edits: int = 4, max_ops: int = 10,
                      cuda: bool = False, per_process: int = SEEDS_PER_PROCESS,
                      backend: str = "cpu", precision: str = "float32",
                      family: str = "mixed", batch=None) -> Report:
    """:func:`fuzz` from seed ``start`` for ``seconds``, ``per_process`` seeds in each
    fresh child process (see SEEDS_PER_PROCESS), progress printed as it goes. A case
    that kills its process (heap corruption in a kernel, a segfault) is a failure of
    its seed; the run goes on from the next one (the dead batch's other cases are
    counted, their plans and ops not). ``batch``: what a child runs (``_batch``'s
    arguments), a module-level function."""
    import tempfile
    rep, t0, first = Report(), time.perf_counter(), start
    marker = tempfile.NamedTemporaryFile(prefix="wb-fuzz-", suffix=".seed", delete=False)
    marker.close()
    try:
        while (left := seconds - (time.perf_counter() - t0)) > 0:
            part = _in_child(batch or _batch, (first, per_process, left, edits, max_ops, cuda,
                                               backend, precision, family), marker.name)
            if part is None:        # the process died running the seed the marker holds
                with open(marker.name) as f:
                    dead = int(f.read() or first)
                print(f"seed {dead}: FAIL\n  the process running it died", flush=True)
                rep.failures.append(Failure(dead, "?", "the process running it died (a crash "
                                            "in a kernel: heap corruption, a segfault); run "
                                            "it alone: python -m workbench.testing.fuzz "
                                            f"--start {dead} --seconds 1 --family {family}"))
                rep.cases += dead - first + 1
                first = dead + 1
                continue
            for k in ("cases", "plans", "ops"):
                setattr(rep, k, getattr(rep, k) + getattr(part, k))
            rep.failures += part.failures
            rep.processes |= part.processes
            first += per_process
            if part.cases < per_process:
                break          # the time ran out inside the batch
    finally:
        os.unlink(marker.name)
    rep.seconds = time.perf_counter() - t0
    return rep
