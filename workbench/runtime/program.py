"""A compiled plan: kernels in order, ready to run on one backend.

A *checked* run poisons what its kernels write (NaN for floats, a sentinel for
integers, 0xAB bytes for bool) before they write it, so an element a kernel forgets to
write shows up as a mismatch against the reference instead of passing by luck: the
checkers' run (``keep_all``), ``run(..., checked=True)``, and the first run of a
sequence's reused intermediates. A kernel writes the same elements whatever the data
(its loops do not depend on values), so what a checked run proved written stays
written, and the other runs -- production calls, timed calls -- poison nothing: their
graph outputs are the caller's arrays (``run(inputs, out=...)``, reused call after
call) or new ones left unfilled (runtime/outputs.py).

The values between kernels are allocated and poisoned on a sequence's first run and
reused by the runs after it, so a call no longer pays an allocation and a poisoning
pass over every intermediate (GPT-2 small: about 15% of a call). A run that keeps every
value (``keep_all``) and a run beside another in a second thread allocate afresh.

``WB_CHECKED_RUNS=1`` in the environment makes every run a checked one (the test
suite sets it: a test comparing ``run``'s outputs with the reference then catches an
unwritten element too, whatever run it makes).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..codegen import lower_plan
from ..codegen.kernel import Kernel
from ..fusion import Plan
from ..dtypes import DType
from ..ir import Graph
from ..ops.bfloat16 import QUIET_NAN
from .backend import Progress
from .memory_plan import MEMORY_PLAN_ENV, plan_memory
from .outputs import Recycler, aligned_bytes, check_out, empty
from .placement import PlaceRule
from .reference import check_inputs

CHECKED_ENV = "WB_CHECKED_RUNS"    # "1": every run poisons (see the module docstring)


def poison(xp, shape, dtype: DType):
    """A new array as :func:`outputs.empty` makes one, poisoned (:func:`_poisoned`)."""
    return _poisoned(empty(xp, shape, dtype), dtype)


def poison_in(arena: np.ndarray, offset: int, shape, dtype: DType) -> np.ndarray:
    """A NumPy array of ``shape`` and ``dtype`` at byte ``offset`` of ``arena``,
    poisoned as :func:`poison` makes one."""
    return _poisoned(np.ndarray(shape, dtype.np, buffer=arena, offset=offset), dtype)


def _poisoned(a, dtype: DType):
    """``a`` filled with the poison of ``dtype``: NaN for floats, 0xAB bytes for bool,
    a sentinel near the smallest integer for integers (a device's bfloat16 bits: its
    quiet NaN)."""
    if dtype is DType.bfloat16 and a.dtype == np.uint16:
        a[...] = QUIET_NAN
    elif dtype.kind == "b":
        a.view(np.uint8)[...] = 0xAB
    else:
        a[...] = np.nan if dtype.is_float else np.iinfo(dtype.np).min + 7
    return a


class _Pool(dict):
    """A sequence's reused intermediates by value name, and the arena the memory plan
    lays them out in (made with the first of them)."""
    arena: np.ndarray | None = None


class KernelSequence:
    """Compiled kernels of one graph, run in order on one backend.

    The run loop shared by :class:`Program` (a plan lowered and compiled here) and a
    loaded artifact (its shipped sources compiled on load): poison each kernel's
    outputs, launch it (or its library call), keep the values in an environment.
    ``group_nodes`` maps each kernel's group id to its node ids (the reference backend
    evaluates them op by op). Subclasses may override :meth:`check_inputs`.
    """

    def __init__(self, graph: Graph, backend, compiled: list,
                 group_nodes: Mapping[str, tuple[str, ...]]):
        self.graph, self.backend, self.compiled = graph, backend, compiled
        self.group_nodes = dict(group_nodes)
        # whether a run may call BLAS: a library call (NumPy's matmul...) or a GEMM
        # kernel's sgemm per tile
        self.calls_blas = any(ck.kernel.library is not None or ck.kernel.blas
                              for ck in compiled)
        # each kernel's outputs: (value, shape, dtype, whether a run may reuse its
        # array: an intermediate a generated kernel writes), asked for on every run
        outs = graph.outputs
        self._output_specs = {id(ck): tuple(
            (b.value, v.shape, v.dtype, b.value not in outs and ck.kernel.library is None)
            for b in ck.kernel.outputs for v in (graph.value(b.value),)) for ck in compiled}
        # values a library call returns (it makes their arrays itself)
        self._library_values = {b.value for ck in compiled if ck.kernel.library is not None
                                for b in ck.kernel.outputs}
        self._consts = {k: backend.asarray(v) for k, v in graph.constants.items()}
        # the reused intermediates share one arena where their lifetimes allow
        # (memory_plan.py; the CPU's, where arrays are NumPy's)
        self._memory = None
        if getattr(backend, "plans_memory", False) and os.environ.get(
                MEMORY_PLAN_ENV, "1") != "0":
            sizes = {name: int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                     for specs in self._output_specs.values()
                     for name, shape, dtype, poolable in specs if poolable}
            order = [(tuple(b.value for b in ck.kernel.inputs),
                      tuple(b.value for b in ck.kernel.outputs)) for ck in compiled]
            self._memory = plan_memory(order, sizes) if sizes else None

    # -- running ---------------------------------------------------------------
    def check_inputs(self, inputs: Mapping[str, np.ndarray]) -> dict:
        return check_inputs(self.graph, inputs)

    def _env(self, inputs: Mapping[str, np.ndarray]) -> dict:
        env = dict(self._consts)
        fast = self._host_inputs(inputs)
        if fast is not None:
            env.update(fast)
            return env
        for k, v in self.check_inputs(inputs).items():
            env[k] = self.backend.asarray(v)
        return env

    def _host_inputs(self, inputs) -> dict | None:
        """On a host backend, the inputs as given where every one is already what the
        full check would hand on unchanged (a NumPy array of the declared shape and
        dtype, C-contiguous, not 0-d: the CPU backend copies those); else None, and
        the full check runs (with its messages). Why: a training step's 20 inputs
        took ~0.1 ms of a call through the full check and the backend's asarray, after
        the step's kernels had flushed the interpreter from the caches."""
        specs = self._held("_input_specs", self._host_input_specs)
        if not specs or type(inputs) is not dict:
            return None
        out = {}
        for name, shape, dt in specs:
            a = inputs.get(name)
            if (type(a) is not np.ndarray or a.shape != shape or a.dtype != dt
                    or not shape or not a.flags.c_contiguous):
                return None
            out[name] = a
        return out

    def _host_input_specs(self) -> tuple:
        """(name, shape, NumPy dtype) of each graph input, as :meth:`_host_inputs`
        checks them; none where it may not hand them on (a device backend, whose arrays
        the check makes, or a subclass with a check of its own)."""
        host = self.backend.xp is np and type(self).check_inputs is KernelSequence.check_inputs
        return tuple((i, self.graph.value(i).shape, np.dtype(self.graph.value(i).dtype.np))
                     for i in self.graph.inputs) if host else ()

    def new_outputs(self) -> dict:
        """New arrays, one per graph output, for ``run(inputs, out=...)`` (unfilled)."""
        xp = self.backend.xp
        return {o: empty(xp, self.graph.value(o).shape, self.graph.value(o).dtype)
                for o in self.graph.outputs}

    def kept_outputs(self) -> dict:
        """One set of :meth:`new_outputs` this program keeps and hands out again on
        every call, for a caller that copies each call's values out before the next
        (a training step copies the new parameters into its state): arrays already
        touched cost no page faults, which for BERT-base's layer with AdamW (85 MB
        written a step) measured 27 ms fresh against 11 ms reused. The next call
        overwrites them, so a caller that keeps values uses ``new_outputs``."""
        return self._held("_kept_outputs", self.new_outputs)

    def _alloc_outputs(self, ck, env, pool: dict | None = None, made=None) -> None:
        """Arrays for the kernel's outputs: from ``pool`` (made and poisoned there on
        first use) for the intermediates a generated kernel writes, the others from
        ``made(name, shape, dtype)`` (None: new and poisoned, as a checked run makes
        them; ``made`` may leave a library call's result, which the call makes, out)."""
        xp = self.backend.xp
        for name, shape, dtype, poolable in self._output_specs[id(ck)]:
            if pool is not None and poolable:
                if name not in pool:
                    pool[name] = self._pooled(pool, name, shape, dtype)
                env[name] = pool[name]
            elif made is None:
                env[name] = poison(xp, shape, dtype)
            else:
                a = made(name, shape, dtype)
                if a is not None:
                    env[name] = a

    def _pooled(self, pool: _Pool, name: str, shape, dtype: DType):
        """A reused intermediate's array, poisoned: its place in the pool's arena, as
        the memory plan lays it out (the arena made with the first), else one of its
        own. Made as its kernel is about to run (a pool's first run goes kernel by
        kernel), so memory it shares with a value that died before it is poisoned after
        that value's last use."""
        mp = self._memory
        if mp is None:
            return poison(self.backend.xp, shape, dtype)
        if pool.arena is None:
            raw, at = aligned_bytes(mp.size)
            pool.arena = raw[at:at + mp.size]
        return poison_in(pool.arena, mp.offsets[name], shape, dtype)

    def _maker(self, out: dict, checked: bool):
        """How a run makes the outputs its pool does not hold (the graph's, a library
        call's): the caller's array from ``out``, poisoned if ``checked``; else new,
        poisoned if ``checked``, unfilled if not (a library call's left to the call)."""
        xp = self.backend.xp
        library = self._library_values
        # (host arrays in memory an earlier call's outputs held, once the caller let
        # them go: no page faults on a step's gradients, see outputs.Recycler)
        recycler = self._held("_recycler", Recycler) if xp is np else None

        def made(name, shape, dtype):
            if name in out:
                return _poisoned(out[name], dtype) if checked else out[name]
            if checked:
                return poison(xp, shape, dtype)
            if name in library:
                return None
            return empty(xp, shape, dtype) if recycler is None \
                else recycler.empty(shape, dtype.np)
        return made

    def _held(self, name: str, make):
        """This sequence's ``name``, made by ``make()`` on first use and kept (runs from
        several threads keep the first one made); on every later run a lookup, with
        nothing made to be thrown away."""
        held = self.__dict__.get(name)
        return held if held is not None else self.__dict__.setdefault(name, make())

    def _take_pool(self) -> _Pool | None:
        """The reused intermediates, or None while another thread's run holds them."""
        lock = self._held("_pool_lock", threading.Lock)
        if not lock.acquire(blocking=False):
            return None
        return self._held("_pool", _Pool)

    def _driver(self):
        """The backend's plan driver for this sequence (the CPU's runs every kernel in
        one native call, runtime/driver.py), made on first use; None where there is
        none and kernels are launched one by one."""
        if "_plan_driver" not in self.__dict__:
            self._plan_driver = self.backend.plan_driver(self)
        return self._plan_driver

    def _launch(self, ck, env) -> None:
        self.backend.run_kernel(self, ck, env)

    def workspace(self, ck) -> dict:
        """The kernel's own global memory (values between stitched phases, partials of
        a split row, operands packed by every run), allocated once per kernel and
        poisoned, so a phase reading what no earlier phase wrote fails the comparison.
        A run that does not hold the reused intermediates (another thread's run does,
        or a checked run) gets workspaces of its own, so two runs at once never write
        one buffer; persistent ones (a constant packed once, by compare-and-swap) are
        shared."""
        cache = self.__dict__.setdefault("_workspaces", {})
        if id(ck) not in cache:
            cache[id(ck)] = {b.name: poison(self.backend.xp, (b.numel,), b.dtype)
                             for b in ck.kernel.workspace}
        own = getattr(self._run_local(), "workspaces", None)
        if own is None:
            return cache[id(ck)]
        if id(ck) not in own:
            own[id(ck)] = {b.name: cache[id(ck)][b.name] if b.persistent
                           else poison(self.backend.xp, (b.numel,), b.dtype)
                           for b in ck.kernel.workspace}
        return own[id(ck)]

    def _run_local(self) -> threading.local:
        """This thread's run's state: ``workspaces``, its own (see ``workspace``)."""
        return self._held("_local", threading.local)

    def execute(self, inputs: Mapping[str, np.ndarray], keep_all: bool = False,
                out: Mapping | None = None, checked: bool = False,
                kernel_ns: np.ndarray | None = None) -> dict:
        """Run every kernel in order; returns the environment of backend arrays (with
        ``keep_all`` every one its own, none shared with a later run). ``out``: graph
        output name -> the array to write it into (runtime/outputs.py); ``checked``
        (implied by ``keep_all``): poison the outputs first. ``kernel_ns``: an int64
        array the run writes each kernel's own nanoseconds into."""
        env = self._env(inputs)
        out = {} if out is None else check_out(
            self.graph, out, self.backend.xp, {i: env[i] for i in self.graph.inputs})
        made = self._maker(out, checked or keep_all
                           or os.environ.get(CHECKED_ENV) == "1")
        pool = None if keep_all else self._take_pool()
        # (a run without the pool writes workspaces of its own: see workspace; a run
        # holding it finds None there, as every run leaves it)
        if pool is None:
            self._run_local().workspaces = {}
        # threads placed for a run only where the program's runs are consistently long
        # enough to repay it (placement.PlaceRule)
        rule = self._held("place_rule", PlaceRule)
        place = rule.next_run()
        try:
            t0 = time.perf_counter()
            with self.backend.running(self.calls_blas, place):
                # the first pooled run goes kernel by kernel: each reused intermediate
                # made and poisoned just before its kernel (see _pooled)
                ready = pool is not None and self.__dict__.get("_pool_made", False)
                driver = self._driver() if ready else None
                if driver is not None:      # every kernel in one native call
                    driver.run(env, pool, made, kernel_ns)
                else:
                    for i, ck in enumerate(self.compiled):
                        self._alloc_outputs(ck, env, pool, made)
                        t = time.perf_counter_ns()
                        self._launch(ck, env)
                        if kernel_ns is not None:
                            kernel_ns[i] = time.perf_counter_ns() - t
                self.backend.synchronize()
            rule.ran(time.perf_counter() - t0)
            if pool is not None:
                self._pool_made = True
        finally:
            if pool is None:
                self._run_local().workspaces = None
            else:
                self._pool_lock.release()
        for name, a in out.items():
            if env[name] is not a:     # a library call's result, made by the call
                a[...] = env[name]
                env[name] = a
        return env

    def run(self, inputs: Mapping[str, np.ndarray], keep_all: bool = False,
            out: Mapping | None = None, checked: bool = False) -> dict[str, np.ndarray]:
        """Run every kernel in order; returns the graph outputs (with keep_all, every
        value that crossed a kernel boundary) as NumPy arrays.

        ``out`` (graph output name -> array, as :meth:`new_outputs` makes them): the
        outputs are written there and returned, and a caller reusing them call after
        call pays no allocation (on the CPU the returned arrays *are* ``out``'s).
        ``checked=True`` poisons the outputs before the kernels write them (what the
        checkers' runs do); a run that is not checked leaves an output a kernel did not
        write as the memory held it.
        """
        env = self.execute(inputs, keep_all, out, checked)
        keys = env.keys() if keep_all else self.graph.outputs
        return {o: self.backend.to_numpy(env[o], self.graph.value(o).dtype) for o in keys}

    # -- timing ----------------------------------------------------------------
    def time(self, inputs: Mapping[str, np.ndarray], warmup: int = 2,
             repeats: int = 10, progress: Progress | None = None
             ) -> tuple[list[float], float]:
        """Median seconds of each kernel, and of the whole plan, after warm-up runs
        (:meth:`time_calls`' ``per_kernel`` and ``step``)."""
        t = self.time_calls(inputs, warmup, repeats, progress)
        return t.per_kernel, t.step

    def time_calls(self, inputs: Mapping[str, np.ndarray], warmup: int = 2,
                   repeats: int = 10, progress: Progress | None = None) -> "CallTimes":
        """Each kernel's time, the whole plan's, and how the plan's splits into its
        kernels' own and the call overhead, after warm-up runs (medians of the timed
        runs).

        Buffers are allocated once and nothing is poisoned, so the numbers are kernel
        time (plus call overhead), not allocation. The GPU is timed with CUDA events.
        ``progress`` is called after each timed run (done, repeats, "timed run").

        Where the backend runs a whole call in one (the CPU's plan driver) the whole
        plan's time is that of a call -- ``run(inputs, out=...)``, its inputs taken,
        its outputs the same arrays every call: what a caller waits for -- and each
        kernel's is its own, timed inside that native call between the kernels (no
        Python, so another thread holding the interpreter, a notebook's front end
        answering, say, lands in the call's overhead, never on a kernel). Elsewhere the
        kernels are launched one by one with a timer around each and around them all.
        """
        if self._driver() is None:
            per, calls = self._env_samples(self._env(inputs), warmup, repeats, progress)
            return CallTimes.of(per, calls)
        timer = self.backend.timer()
        out = self.new_outputs()
        for _ in range(max(1, warmup)):
            self.execute(inputs, out=out)
        ns = np.zeros(len(self.compiled), dtype=np.int64)
        per = [[] for _ in self.compiled]
        calls = []
        for r in range(repeats):
            t0 = timer.start()
            self.execute(inputs, out=out, kernel_ns=ns)
            calls.append(timer.stop(t0))
            for p, t in zip(per, ns.tolist()):
                p.append(t * 1e-9)
            if progress:
                progress(r + 1, repeats, "timed run")
        return CallTimes.of(per, calls)

    def time_env(self, env: dict, warmup: int = 2, repeats: int = 10,
                 progress: Progress | None = None) -> tuple[list[float], float]:
        """:meth:`time` on an environment of backend arrays already holding every value
        the kernels read (the tuner times one kernel on the values it really gets). The
        kernels' intermediates are laid out as a run lays them out (the memory plan),
        in an arena of the timing's own."""
        t = CallTimes.of(*self._env_samples(env, warmup, repeats, progress))
        return t.per_kernel, t.step

    def _env_samples(self, env: dict, warmup: int, repeats: int,
                     progress: Progress | None) -> tuple[list[list[float]], list[float]]:
        """Each timed run's seconds per kernel, and of all of them (see time_env)."""
        timing = _Pool()
        for ck in self.compiled:
            self._alloc_outputs(ck, env, timing)
        timer = self.backend.timer()
        with self.backend.running(self.calls_blas):
            for _ in range(max(1, warmup)):
                for ck in self.compiled:
                    self._launch(ck, env)
            self.backend.synchronize()
            per = [[] for _ in self.compiled]
            totals = []
            for _ in range(repeats):
                t_all = timer.start()
                for i, ck in enumerate(self.compiled):
                    t0 = timer.start()
                    self._launch(ck, env)
                    per[i].append(timer.stop(t0))
                totals.append(timer.stop(t_all))
                if progress:
                    progress(len(totals), repeats, "timed run")
        return per, totals


@dataclass(frozen=True)
class CallTimes:
    """A plan's timed runs, in seconds (medians over the runs): each kernel's, the whole
    run's (``step``), and per run its kernels' own summed (``kernels``) and the rest of
    it (``overhead``: inputs checked, arguments bound, threads placed and woken). The
    last two are medians of each run's own split, not differences of medians: on a
    busy machine the sum of the kernels' medians misses the one slow kernel most runs
    have, and would read as overhead."""
    per_kernel: list
    step: float
    kernels: float
    overhead: float

    @classmethod
    def of(cls, per: list[list[float]], calls: list[float]) -> "CallTimes":
        sums = [sum(ts) for ts in zip(*per)] if per else [0.0] * len(calls)
        return cls([float(np.median(p)) for p in per], float(np.median(calls)),
                   float(np.median(sums)),
                   float(np.median([c - k for c, k in zip(calls, sums)])))


class Program(KernelSequence):
    """Lowered, rendered and compiled kernels of one plan on one backend.

    ``kernels`` / ``compiled`` may be given (a session keeps them per group, so a
    program is assembled from what was already built). ``plan_driver=False`` launches
    the kernels one by one on every run (to compare with the backend's plan driver)."""

    def __init__(self, plan: Plan, backend, progress: Progress | None = None,
                 kernels: Sequence[Kernel] | None = None, compiled: list | None = None,
                 plan_driver: bool = True):
        self.plan = plan
        if not plan_driver:
            self._plan_driver = None
        self.kernels = list(kernels) if kernels is not None else lower_plan(plan)
        if compiled is None:
            compiled = backend.compile(self.kernels, progress)
        super().__init__(plan.graph, backend, compiled,
                         {gr.id: gr.nodes for gr in plan.groups})
