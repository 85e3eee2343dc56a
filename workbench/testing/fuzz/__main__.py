"""``python -m workbench.testing.fuzz``: cases from a seed for a time budget, a fresh
child process per batch of seeds (a kernel that kills its process fails its seed), a
markdown report."""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

from ...runtime.cc import cpu_model
from ...version import __version__
from . import __doc__ as FUZZ_DOC
from .cases import Failure, Report, fuzz
from .graphs import FAMILIES

# Seeds per child process of a long run: each distinct kernel's library stayed mapped in
# the process that loaded it, and one process ran out of memory maps (Linux's
# vm.max_map_count, 65530) after ~1800 graphs -- "failed to map segment from shared
# object". The CPU backend now unloads libraries whose kernels are gone
# (runtime/cc.unload_library); a fresh process per batch still confines a crash.
SEEDS_PER_PROCESS = 400


def _print_progress(case, fails):
    mark = "FAIL" if fails else "ok"
    print(f"seed {case.seed}: {len(case.graph.nodes)} ops, {case.plans_checked} plans "
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
                                            f"it alone: python -m workbench.testing.fuzz --start {dead} "
                                            f"--seconds 1 --family {family}"))
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


def _markdown(rep: Report, args) -> str:
    lines = [f"# Differential fuzz run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "",
             f"- machine: {cpu_model()} ({os.cpu_count()} threads), {platform.platform()}; "
             f"Python {sys.version.split()[0]}, NumPy {np.__version__}, "
             f"workbench {__version__}",
             f"- command: `python -m workbench.testing.fuzz --seconds {args.seconds} --start "
             f"{args.start} --edits {args.edits} --max-ops {args.max_ops}"
             f"{' --cuda' if args.cuda else ''}"
             f"{f' --backend {args.backend}' if args.backend != 'cpu' else ''}"
             f"{' --matmul-precision tf32' if args.matmul_precision == 'tf32' else ''}"
             f"{f' --family {args.family}' if args.family != 'mixed' else ''}`",
             f"- {rep.cases} graphs ({rep.ops} ops), {rep.plans} plans compiled, run and "
             f"checked kernel by kernel, in {rep.seconds:.0f} s",
             f"- failures: {len(rep.failures)}", ""]
    for f in rep.failures:
        lines.append(f"  - seed {f.seed}, after `{f.action}`: {f.message}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.testing.fuzz", description=FUZZ_DOC.split("\n")[0])
    p.add_argument("--seconds", type=float, default=300.0, help="time budget (default 300)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--edits", type=int, default=4, help="random plan edits per graph")
    p.add_argument("--max-ops", type=int, default=10, help="ops per graph, at most")
    p.add_argument("--cuda", action="store_true",
                   help="also compile every plan's CUDA kernels with NVRTC (no GPU needed)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda-emu"],
                   help="where the plans run: cpu (default), or cuda-emu: the GPU's plans, "
                        "their CUDA kernels run in the CUDA emulator (no GPU needed)")
    p.add_argument("--matmul-precision", default="float32", choices=["float32", "tf32"],
                   help="the sessions' matmul precision (tf32: the GPU's tensor-core "
                        "kernels, with --backend cuda-emu)")
    p.add_argument("--family", default="mixed", choices=FAMILIES,
                   help="the graphs drawn: mixed (default: any dtypes and ops, boundary "
                        "values), blocks (transformer blocks: GEMMs with epilogues, "
                        "attention, norms, masks), convs (convolutional networks: "
                        "convolutions of every form, poolings, BatchNorm, heads) or rows "
                        "(softmax, norms, logsumexp... at every row mapping's lengths)")
    p.add_argument("--out", help="write a markdown report here")
    a = p.parse_args(argv)

    rep = fuzz_in_processes(a.start, a.seconds, a.edits, a.max_ops, a.cuda,
                            backend=a.backend, precision=a.matmul_precision,
                            family=a.family)
    text = _markdown(rep, a)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
