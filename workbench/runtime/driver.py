"""The plan driver: one native call runs every kernel of a CPU program in order.

Why: launching a kernel from Python costs a few microseconds -- its outputs looked up
and poisoned, its arguments' addresses gathered, a ctypes call -- against kernels that
run for 5-20 us in a small CNN. MobileNetV2 (small) is 53 kernels: the launches were
64-147 us of a 470-710 us call (a run with every kernel a no-op). The driver is a small
C function compiled once (:data:`DRIVER_C`): it takes the kernels' function pointers
and one array of every argument, and calls each kernel with its own, so a run is a
single ctypes call.

The arguments that are the same run after run -- constants, workspaces, the
intermediates a sequence reuses (``program.KernelSequence``), the BLAS routine a GEMM
kernel calls -- are written into the array once, on the driver's first run; a run
writes only the addresses of the graph's inputs and of its outputs.

Given an array for them, the driver also times each kernel (``clock_gettime`` between
the calls): the kernels' own times, taken inside the call, where no other Python thread
can come between a timer and its kernel. A program
with a library call (NumPy's matmul, which no C function can call) or a kernel of
more than :data:`MAX_ARGS` arguments runs kernel by kernel as before.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .cc import build_library, load_library

MAX_ARGS = 64     # arguments of the widest kernel the driver calls


def _driver_source(max_args: int = MAX_ARGS) -> str:
    # a kernel of k arguments (every one a pointer: buffers, then a BLAS routine) is
    # called through a pointer to a function of k void* -- the same call, on every ABI
    # a C compiler here targets, as one through its own prototype
    cases = []
    for k in range(max_args + 1):
        params = ", ".join(["void*"] * k) or "void"
        args = ", ".join(f"a[{i}]" for i in range(k))
        cases.append(f"    case {k}: ((void (*)({params}))f)({args}); break;")
    return "\n".join([
        "/* the plan driver (runtime/driver.py): kernel i called with its nargs[i]",
        "   arguments, the next ones in args; its nanoseconds in ns[i] where ns is",
        "   not NULL. A run of consecutive kernels with a team form (team[i] not NULL:",
        "   codegen/render/c.py) runs inside one parallel region, every thread calling",
        "   each kernel's team function, whose worksharing loops end in barriers */",
        "#define _POSIX_C_SOURCE 199309L",
        "#include <time.h>",
        "#include <omp.h>",
        "static long long wb_now_ns(void) {",
        "  struct timespec t;",
        "  clock_gettime(CLOCK_MONOTONIC, &t);",
        "  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;",
        "}",
        "static void wb_call(void* f, int nargs, void* const* a) {",
        "  switch (nargs) {",
        *cases,
        "  }",
        "}",
        "void wb_run_plan(long long n, void* const* fns, const int* nargs,",
        "                 void* const* args, long long* ns, void* const* team) {",
        "  long long i = 0;",
        "  while (i < n) {",
        "    long long j = i;",
        "    while (j < n && team[j]) j++;",
        "    if (j - i >= 2) {",
        "      /* kernels i..j-1 in one region: the master times each from the barrier",
        "         ending the one before (the fork is no kernel's) to its own */",
        "      #pragma omp parallel",
        "      {",
        "        void* const* a = args;",
        "        int master = omp_get_thread_num() == 0;",
        "        for (long long k = i; k < j; k++) {",
        "          long long t0 = ns && master ? wb_now_ns() : 0;",
        "          wb_call(team[k], nargs[k], a);",
        "          a += nargs[k];",
        "          if (ns && master) ns[k] = wb_now_ns() - t0;",
        "        }",
        "      }",
        "      for (long long k = i; k < j; k++) args += nargs[k];",
        "      i = j;",
        "      continue;",
        "    }",
        "    if (j == i) j = i + 1;   /* a kernel without a team form, or a lone one */",
        "    for (; i < j; i++) {",
        "      long long t0 = ns ? wb_now_ns() : 0;",
        "      wb_call(fns[i], nargs[i], args);",
        "      args += nargs[i];",
        "      if (ns) ns[i] = wb_now_ns() - t0;",
        "    }",
        "  }",
        "}", ""])


DRIVER_C = _driver_source()


@lru_cache(maxsize=None)
def _driver():
    """The compiled driver (built into the kernel cache once, loaded once a process)."""
    fn = load_library(build_library("wb_run_plan", DRIVER_C)).wb_run_plan
    fn.argtypes = [ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    return fn


def applies(compiled) -> bool:
    """Whether a sequence's kernels can all be called by the driver: every one a
    generated C function of at most MAX_ARGS arguments."""
    return bool(compiled) and all(
        ck.kernel.library is None and getattr(ck, "fn", None) is not None
        and len(ck.kernel.params) + len(ck.extra) <= MAX_ARGS for ck in compiled)


class PlanDriver:
    """Runs the kernels of one ``KernelSequence`` in a single native call, on the
    environment and reused intermediates its run loop keeps (see the module
    docstring). One driver is used by one thread at a time: the caller holds the
    sequence's reused intermediates while it runs."""

    def __init__(self, seq):
        self.seq = seq
        compiled = seq.compiled
        self._fns = np.array([ctypes.cast(ck.fn, ctypes.c_void_p).value for ck in compiled],
                             dtype=np.uint64)
        # each kernel's team form (codegen/render/c.py), 0 where it has none
        self._team = np.array([ctypes.cast(ck.team_fn, ctypes.c_void_p).value
                               if getattr(ck, "team_fn", None) is not None else 0
                               for ck in compiled], dtype=np.uint64)
        self._nargs = np.array([len(ck.kernel.params) + len(ck.extra) for ck in compiled],
                               dtype=np.int32)
        self._args = np.zeros(int(self._nargs.sum()), dtype=np.uint64)
        # per run: (slot, value) of each argument that is a graph input or a fresh
        # output; the other slots are written by the first run
        self._per_run: list[tuple[int, str]] | None = None
        self._fresh = [spec for ck in compiled for spec in seq._output_specs[id(ck)]
                       if not spec[3]]
        # the native call's arguments but the last (the kernels' times), read once: an
        # array's address costs ~1 us to read, and these arrays live as long as the
        # driver (benchmarks/results/call-sources-*.md: the Python path of a call)
        self._call = (_driver(), len(self._fns), self._fns.ctypes.data,
                      self._nargs.ctypes.data, self._args.ctypes.data,
                      self._team.ctypes.data)

    def run(self, env: dict, pool: dict, made, kernel_ns: np.ndarray | None = None
            ) -> None:
        """Run every kernel on ``env`` (the constants and the graph's inputs): the
        reused intermediates from ``pool`` (made there on the first run), the graph's
        outputs from ``made(name, shape, dtype)`` (the sequence's: the caller's arrays,
        poisoned ones for a checked run, new ones), as the kernel-by-kernel loop makes
        them. ``kernel_ns`` (int64, one per kernel): each kernel's own nanoseconds."""
        seq = self.seq
        if self._per_run is None:
            for ck in seq.compiled:
                seq._alloc_outputs(ck, env, pool, made)
            self._fill(env)
        else:
            env.update(pool)
            for name, shape, dtype, _ in self._fresh:
                env[name] = made(name, shape, dtype)
        args = self._args
        for slot, value in self._per_run:
            args[slot] = env[value].ctypes.data
        fn, n, fns, nargs, argv, team = self._call
        if kernel_ns is None:
            fn(n, fns, nargs, argv, None, team)
            return
        assert kernel_ns.dtype == np.int64 and kernel_ns.size >= n
        fn(n, fns, nargs, argv, kernel_ns.ctypes.data, team)

    def _fill(self, env: dict) -> None:
        """The first run: every argument's address, and which change from run to run
        (the graph's inputs and the outputs made fresh by every run)."""
        seq, per_run, slot = self.seq, [], 0
        fresh = {spec[0] for spec in self._fresh}
        inputs = set(seq.graph.inputs)
        for ck in seq.compiled:
            ws = seq.workspace(ck) if ck.kernel.workspace else {}
            for b in ck.kernel.params:
                if b.workspace:
                    self._args[slot] = ws[b.name].ctypes.data
                else:
                    if b.value in fresh or b.value in inputs:
                        per_run.append((slot, b.value))
                    self._args[slot] = env[b.value].ctypes.data
                slot += 1
            for address in ck.extra:     # (the BLAS routine's)
                self._args[slot] = address
                slot += 1
        self._per_run = per_run
