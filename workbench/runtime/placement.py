"""One core per thread while a program runs: the calling thread held on the CPU it is
on, each OpenMP thread of the kernels on a CPU of its own.

Why: between two calls of a program the kernels' OpenMP threads sleep (their short
spin, ``cc._OPENMP_WAIT``, is over long before Python calls again). A call wakes them,
and Linux may wake a thread on the CPU of the thread that woke it: on the 2-core
development VM the calling thread and the one OpenMP worker were seen on CPU 0
together, CPU 1 idle, for whole seconds of calls, each call then taking twice as long
(a 3 x 3 convolution of ResNet-50's last stage 2.8 ms a call against 1.2; read from
``/proc/<pid>/task/*/stat``). With every thread held on its own CPU the same calls ran
1.1-1.4 ms throughout; side by side, placed against unplaced, LayerNorm's sample graph
ran 1.33x faster, its parameter gradients 1.66x, the convolution's 90th percentile
1.44 ms against 3.10 (``benchmarks/results/placement-2026-11-25.md``).

So while a program runs (``CpuBackend.running``, where :class:`PlaceRule` says the
program's runs are long enough to repay it), the calling
thread is bound to the CPU it is running on, and each OpenMP thread to another CPU of
the calling thread's own set (a user's ``taskset`` is kept), one each as far as they
go; when the call returns the calling thread gets its own set back, so a user's
thread is never left bound. The OpenMP threads stay where they were put (they run
nothing else) and are moved, by a parallel region of the helper's, only when the
calling thread's CPU (or the team's size) changes. Nested runs bind once.

What it costs (``benchmarks/results/call-sources-*.md``, the 2-core VM under load): a
run placed back to back after another on the same CPU, four system calls and two calls
through ctypes, 11-12 us; a run after an idle pause, when Linux has since moved the
calling thread to the other CPU and the team is moved after it (a parallel region
waking the sleeping worker), 60-130 us -- against MobileNetV2's whole 0.3 ms call. So a
program is placed only while its runs are consistently long (:class:`PlaceRule`: the
fastest of its last ``PLACE_RUNS`` runs took ``PLACE_MIN_S`` or more): one run made
slow by a busy machine does not turn placement on for a short program (with the last
run's time deciding, it did, and MobileNetV2 ran 0.58x onnxruntime against 0.90x
unplaced), and a long program stays placed, a run never being faster than its quiet
cost.

Left alone where the user places threads (``OMP_PROC_BIND``, ``OMP_PLACES``,
``GOMP_CPU_AFFINITY``, ``KMP_AFFINITY`` set), where ``$WB_PLACE_THREADS`` is ``0``, and
off Linux (the helper then does nothing).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from collections import deque
from functools import lru_cache
from typing import Iterator

from .cc import build_library, load_library

ENV = "WB_PLACE_THREADS"
# the shortest run worth placing: placing costs 11-130 us (the module docstring), and a
# run of 16 us (one small kernel) took 30 placed
PLACE_MIN_S = 5e-4
# how many of a program's last runs must all have taken PLACE_MIN_S for it to be placed
PLACE_RUNS = 5
# set by the user: their placement stands
USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")

PLACEMENT_C = r"""/* thread placement for a program's run (runtime/placement.py) */
#define _GNU_SOURCE
#include <omp.h>
#ifdef __linux__
#include <sched.h>

static __thread int wb_depth = 0;        /* runs nested on this calling thread */
static __thread cpu_set_t wb_saved;      /* its own set, given back at the end */
static __thread int wb_cpu = -1;         /* the CPU an OpenMP thread was bound to */
/* the calling thread's CPU and team size its team was last placed around (each thread
   that starts parallel regions has a team of its own): the same again, no region */
static __thread int wb_team_cpu = -1, wb_team_size = 0;

static void wb_bind(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
}

/* bind the calling thread to its CPU and the team's threads to the other CPUs of its
   set (a thread past them shares one, in turn); 1 when bound */
int wb_place_team(void) {
  if (wb_depth++ > 0) return 0;
  if (sched_getaffinity(0, sizeof wb_saved, &wb_saved) != 0) return 0;
  int me = sched_getcpu();
  if (me < 0 || CPU_COUNT(&wb_saved) < 2) return 0;
  wb_bind(me);
  if (me == wb_team_cpu && omp_get_max_threads() == wb_team_size) return 1;
  wb_team_cpu = me;
  wb_team_size = omp_get_max_threads();
  int n = 0, others[CPU_SETSIZE];
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (c != me && CPU_ISSET(c, &wb_saved)) others[n++] = c;
#pragma omp parallel
  {
    int t = omp_get_thread_num();
    if (t > 0) {
      int cpu = others[(t - 1) % n];
      if (wb_cpu != cpu) {
        wb_bind(cpu);
        wb_cpu = cpu;
      }
    }
  }
  return 1;
}

/* the end of a run: the calling thread's own set back (the outermost run's) */
void wb_unplace(int placed) {
  if (--wb_depth == 0 && placed) sched_setaffinity(0, sizeof wb_saved, &wb_saved);
}

/* the team's threads given the calling thread's set (as a process starts them) */
void wb_free_team(void) {
  cpu_set_t own;
  if (sched_getaffinity(0, sizeof own, &own) != 0) return;
  wb_team_cpu = -1;
#pragma omp parallel
  if (omp_get_thread_num() > 0) {
    sched_setaffinity(0, sizeof own, &own);
    wb_cpu = -1;
  }
}
#else
int wb_place_team(void) { return 0; }
void wb_unplace(int placed) { (void)placed; }
void wb_free_team(void) {}
#endif
"""


def enabled() -> bool:
    """Whether runs place their threads (see the module docstring)."""
    if os.environ.get(ENV, "1").strip() == "0":
        return False
    return not any(os.environ.get(v) for v in USER_PLACEMENT)


class PlaceRule:
    """Whether a program's next run is placed, from how long its last runs took: placed
    while it has no run yet (a first run is long: it makes and poisons the reused
    intermediates) and while the fastest of its last ``PLACE_RUNS`` runs took
    ``PLACE_MIN_S`` or more -- not turned on by one run a busy machine made slow, nor
    off by one fast run of a long program. One per program; runs from several threads
    at once only add their times. (Asked on every run: no environment lookup here.)"""

    def __init__(self):
        self.recent: deque = deque(maxlen=PLACE_RUNS)   # seconds of the last runs

    def next_run(self) -> bool:
        recent = tuple(self.recent)     # (another thread's run may append meanwhile)
        return not recent or min(recent) >= PLACE_MIN_S

    def ran(self, seconds: float) -> None:
        self.recent.append(seconds)


@lru_cache(maxsize=None)
def _helper() -> tuple:
    """The compiled helper's functions -- place, unplace, free the team -- (built into
    the kernel cache once, loaded once a process, with the OpenMP runtime the kernels
    use)."""
    lib = load_library(build_library("wb_placement", PLACEMENT_C))
    place, unplace, free = lib.wb_place_team, lib.wb_unplace, lib.wb_free_team
    place.argtypes, place.restype = [], ctypes.c_int
    unplace.argtypes, unplace.restype = [ctypes.c_int], None
    free.argtypes, free.restype = [], None
    return place, unplace, free


def free_team() -> None:
    """Give the OpenMP threads the calling thread's CPU set again, as a process starts
    them (to time runs unplaced, ``benchmarks/placement.py``, and for tests)."""
    _helper()[2]()


@contextlib.contextmanager
def placed() -> Iterator[None]:
    """Run the block with the calling thread and the OpenMP threads each on a CPU of
    their own, the calling thread's own set given back after, also when it raises."""
    if not enabled():
        yield
        return
    place, unplace, _ = _helper()
    bound = place()
    try:
        yield
    finally:
        unplace(bound)
