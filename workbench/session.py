"""A session ties one graph, a history of plans and a backend; every face uses it.

Each transformation (fuse, split, auto, a new matmul precision) appends a step (none
when the plan and its planner come out unchanged); undo and redo move along the
history without losing it (a new step after an undo drops the undone future, as in
an editor). A refused transformation raises :class:`FusionRefused` and changes
nothing. Compiled programs and measurements are cached per plan, so undoing back to a
measured step costs nothing.

Example::

    >>> s = Session("sample_graphs/layernorm.json", backend="cpu")   # doctest: +SKIP
    >>> s.auto("rules"); m = s.measure(); m.kernels                  # doctest: +SKIP
    1
"""
from __future__ import annotations

import functools
import warnings
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from .codegen import Kernel, lower_group, render_kernel
from .errors import FusionRefused, OutOfMemory, WorkbenchError
from .fusion import Decision, Group, Plan
from .history import History, Step
from .session_code import KernelCode
from .session_file import SessionFile
from .session_kinds import other_session
from .session_locks import Locks
from .session_training import Training
from .fusion.constrained import plan_constrained
from .ir import Graph, clip_windows
from .measure import StepMeasurement, measure_program
from .measure.step import DRAM_NOT_REQUESTED
from .runtime import Program, get_backend, random_inputs, run_reference
from .frontends import load
from .fusion.actions import Action, applicable_actions
from .fusion.fitted import FittedModel
from .fusion.plan import check_precision
from .artifact import export_plan
from . import arguments as args
from .measure.counters import with_dram
from .measure.tune import tune_plan
from .measure.verify import graph_magnitudes
from .runtime.backends import backend_names
from .step_table import (STEP_COLUMNS, compare_steps, previewed,  # noqa: F401
                         step_effect, step_table)

def warn_no_tf32(device) -> None:
    # (stacklevel 3: the line that called Session(...) or set_matmul_precision)
    warnings.warn(f"matmul_precision='tf32': {device.name} has no TF32 tensor "
                  "cores, so its matmuls stay float32 (exact)", stacklevel=3)


def in_memory(method):
    """A session method that allocates the graph's values: MemoryError becomes one
    OutOfMemory line saying what the graph needs (the session is left as it was)."""
    @functools.wraps(method)
    def run(self, *a, **kw):
        try:
            return method(self, *a, **kw)
        except MemoryError:
            need = sum(v.nbytes for v in self.graph.values)
            raise OutOfMemory(f"out of memory: graph {self.graph.name!r} holds "
                              f"{need / 2**30:.1f} GiB of values (inputs, intermediates, "
                              "outputs), more than this machine could allocate; use "
                              "smaller shapes") from None
    return run


class Session(Locks, Training, KernelCode, SessionFile):
    """One graph, a plan history with undo/redo, and a backend to run plans on.

    ``matmul_precision``: "float32" (the exact default) or "tf32" -- float32 matmuls on a
    GPU's tensor cores, their operands rounded to TF32 (10 mantissa bits), as
    ``torch.backends.cuda.matmul.allow_tf32`` allows: cuBLAS in TF32 and the generated
    GEMM kernels on tensor cores, checked against NumPy within TF32's bound. A CPU
    computes float32 whatever is asked. It is the first step's: ``set_matmul_precision``
    changes it as a step, and undo goes back."""

    def __new__(cls, graph=None, *a, ranks: int | None = None, **kw):
        # p gloo ranks' DistSession, a repeat's RepeatSession (session_kinds.py)
        other = other_session(graph, ranks, a, kw)
        return other if other is not None else super().__new__(cls)

    def __init__(self, graph: Graph | str, backend: str = "auto", seed: int = 0,
                 progress: Callable[[int, int, str], None] | None = None,
                 calibrate: bool = True, matmul_precision: str = "float32",
                 ranks: None = None):
        # (refused before anything is loaded)
        check_precision(matmul_precision)
        args.name(backend, f"backend ({', '.join(backend_names())})")
        args.count(seed, "seed", 0, 2 ** 63 - 1)
        args.callback(progress, "progress (a function (done, total, name))")
        self.graph = clip_windows(load(graph))   # (a window's taps past its map cut)
        self.backend = get_backend(backend)
        device = self.backend.device
        if matmul_precision == "tf32" and not device.has_tf32:
            warn_no_tf32(device)
        self.progress = progress
        # plans are made for the backend's device (the CPU's is measured once, cached)
        self._history = History(Step("load", Plan.singletons(self.graph, device,
                                                            matmul_precision)))
        self.seed = seed
        self._inputs: dict[str, np.ndarray] | None = None
        self._reference: dict[str, np.ndarray] | None = None
        self._tf32_magnitudes: dict | None = None   # (graph_magnitudes, computed once)
        self._programs: dict[Plan, Program] = {}
        # lowered, built per (graph id, group): recompute steps' graphs share group ids
        self._kernels: dict[tuple, Kernel] = {}
        self._compiled: dict[tuple, object] = {}
        self._measurements: dict[Plan, StepMeasurement] = {}
        self._baseline: StepMeasurement | None = None
        self._tuned: list = []         # (group, seconds) of every candidate timed
        self.tuning: list = []         # the last tune()'s results (measure.tune.TuneResult)
        self._models = FittedModel(self.device)   # the device's, refitted, or assigned
        self._predictions: dict = {}   # each plan's prediction, made once (predict)
        # refit the model after every new measurement -- of the device's own timings
        # (the CUDA emulator's are the CPU's, and would teach the GPU's model nonsense)
        self.calibrate = calibrate and not self.backend.emulated

    # -- the current state -----------------------------------------------------
    @property
    def plan(self) -> Plan:
        return self._history.current.plan

    @property
    def step(self) -> Step:
        return self._history.current

    @property
    def history(self) -> list[Step]:
        """Every step, the undone ones after ``position`` included (see :mod:`.history`)."""
        return self._history.steps

    @property
    def position(self) -> int:
        """The index of the current step in ``history``."""
        return self._history.position

    @property
    def matmul_precision(self) -> str:
        """What float32 matmuls may round to in the current step: "float32" (exact) or
        "tf32" (see the class docstring). The current plan's, so undo and redo carry it
        (a CPU computes float32 whatever it says: :attr:`tf32`)."""
        return self.plan.matmul_precision

    @property
    def tf32(self) -> bool:
        """Whether the current step's float32 matmuls run in TF32: allowed by its
        matmul precision, and the device has TF32 tensor cores."""
        return self._ran_in(self.plan) == "tf32"

    def _push(self, action: str, plan: Plan, decisions: Iterable[Decision] = ()) -> Plan:
        # an action that leaves the plan as it is (Auto again, the same mapping or
        # scheme set twice) adds no step: the history would hold identical steps. The
        # same kernels from another planner are a step (a planner reaching the manual
        # plan is worth comparing)
        if plan == self.plan and plan.planner == self.plan.planner:
            return self.plan
        self._guard(action, plan)      # a lock the current plan keeps is never broken
        self._history.push(Step(action, plan, tuple(decisions), self.constraints))
        self.predict(plan)     # (priced now: by the model that made it, as planned)
        return plan

    # -- transformations ---------------------------------------------------------
    def fuse(self, refs: Iterable[str]) -> Plan:
        """Fuse the kernels holding these node or group ids into one (or refuse)."""
        refs = args.refs(refs)
        return self._push(f"fuse {' '.join(refs)}", self.plan.fuse(refs))

    def split(self, ref: str) -> Plan:
        """Split the kernel holding ref back into one kernel per op."""
        return self._push(f"split {ref}", self.plan.split(args.ref(ref)))

    def set_scheme(self, value: str, scheme) -> Plan:
        """Pass ``value`` (an edge inside a kernel) by a stitch scheme: local, regional
        or global (or refuse with the reason, changing nothing)."""
        args.name(value, "value")
        sc = getattr(scheme, "value", scheme)
        args.name(sc, "scheme")
        return self._push(f"set_scheme {value} {sc}", self.plan.set_scheme(value, scheme))

    def set_mapping(self, ref: str, mapping: str) -> Plan:
        """Map the row-reduction kernel holding ref to threads by warp, block, split,
        thread (or auto, the rule)."""
        args.ref(ref), args.name(mapping, "mapping")
        return self._push(f"set_mapping {ref} {mapping}", self.plan.set_mapping(ref, mapping))

    def set_launch(self, ref: str, **params: int) -> Plan:
        """Launch the kernel holding ref with these parameters in place of the rule's
        (a row kernel's threads, rows_per_block, splits; a GEMM kernel's tile_m,
        tile_n, blas, online, stages, skip: see ``Plan.set_launch``), or refuse with the
        reason."""
        label = " ".join(f"{k}={v}" for k, v in params.items())
        return self._push(f"set_launch {ref} {label}", self.plan.set_launch(ref, **params))

    def auto(self, planner: str = "rules") -> Plan:
        """Replace the plan with a planner's whole-graph plan, planned around the
        constraints in force (:mod:`workbench.fusion.constrained`)."""
        n = len(self.constraints)
        plan, log = plan_constrained(planner, self.graph, self.constraints, self.cost_model,
                                     None, self.matmul_precision, self.plan if n else None)
        around = f" around {n} lock{'s' if n > 1 else ''}" if n else ""
        return self._push(f"auto {planner}{around}", plan, log)

    def set_matmul_precision(self, precision: str) -> Plan:
        """Let float32 matmuls run in ``precision`` -- "float32" (exact) or "tf32"
        (tensor cores, operands rounded to 10 mantissa bits) -- from now on: the current
        plan's kernels made again for the device at that precision, as a new step
        ("matmul precision tf32"; undo goes back). The precision already in use adds no
        step. A device without TF32 tensor cores (a CPU) warns, as ``Session(...,
        matmul_precision="tf32")`` does, and its matmuls stay float32.

        >>> s.set_matmul_precision("tf32"); s.kernel("n0").tf32      # doctest: +SKIP
        True
        """
        check_precision(precision)
        if precision == self.matmul_precision:
            return self.plan
        plan = self.plan.remade(self.device, precision)   # or refused, changing nothing
        if precision == "tf32" and not self.device.has_tf32:
            warn_no_tf32(self.device)
        return self._push(f"matmul precision {precision}", plan)

    @in_memory
    def tune(self, refs: Iterable[str] | None = None, repeats: int = 20,
             use_cache: bool = True, lock: bool = False) -> Plan:
        """Search each kernel's launch parameters (or those of the kernels holding
        ``refs``) by measurement, and take the fastest correct ones as a new step
        (see :mod:`workbench.measure.tune`). Each kernel is timed on the values it
        really receives; ``self.tuning`` holds every candidate's time, and the cost
        model learns from them. Results are cached per device and kernel source.
        ``lock=True`` keeps the chosen launch parameters as constraints (lock_tuned)."""
        if self.backend.emulated:
            raise WorkbenchError(
                f"tuning chooses by measured time, and backend {self.backend.name}'s times "
                "are not the device's (the CUDA emulator's are the CPU's): tune on the "
                "device itself (backend cupy on a GPU)")
        groups = None if refs is None else {self.plan.group(r).id for r in args.refs(refs)}
        groups = self._tunable(groups)     # (a kernel whose launch is locked stays so)
        repeats = args.count(repeats, "repeats", 1)
        args.flag(use_cache, "use_cache"), args.flag(lock, "lock")
        env = self.program().run(self.inputs, keep_all=True)
        plan, results = tune_plan(self.plan, self.backend, env, groups, repeats=repeats,
                                  use_cache=use_cache, progress=self.progress)
        self.tuning = results
        self._tuned += [gr_t for r in results for gr_t in r.timed]
        if self.calibrate and self._tuned:
            self._recalibrate()
        if plan == self.plan:
            return self.plan
        tuned = sum(1 for r in results if r.chosen.forced_launch or r.chosen.forced_mapping)
        plan = self._push(f"tune ({tuned} of {len(results)} kernels retuned)", plan)
        if lock and tuned:
            self.lock_tuned()
        return plan

    def undo(self) -> Plan:
        self._history.undo()
        return self.plan

    def redo(self) -> Plan:
        self._history.redo()
        return self.plan

    def goto(self, index: int) -> Plan:
        """Jump to any step of the history (as many undos or redos at once; nothing is
        dropped)."""
        self._history.goto(index)
        return self.plan

    # -- what applies to a selection ---------------------------------------------
    def actions(self, refs: Iterable[str]) -> list:
        """Every transformation of the current plan on the selected nodes or kernels (fuse,
        with a neighbour, split, each scheme of each internal edge, each mapping, tune;
        recompute/store a saved value: :meth:`saved_actions`), legal ones with the plan they
        would make and its predicted kernels, bytes (counted as a step's: ``previewed``) and
        ms, refused ones with the reason (``fusion.actions``). Changes nothing."""
        acts = applicable_actions(self.plan, args.refs(refs), self.cost_model)
        return previewed(self, acts) + self.saved_actions(refs)

    def apply(self, action) -> Plan:
        """Apply one of :meth:`actions`' results (made for the current plan) as a step."""
        if not isinstance(action, Action):
            raise WorkbenchError(f"apply takes an action from Session.actions(...), got "
                                 f"{type(action).__name__}")
        if not action.legal:
            raise FusionRefused(f"{action.label}: {action.reason}")
        method, args = action.call
        if action.plan is None:                  # tuning: measured, not previewed
            return getattr(self, method)(*args)
        if action.base != self.plan:
            raise WorkbenchError(f"{action.label} was offered for another plan than the "
                                 "current one; ask Session.actions again")
        return self._push(action.label, action.plan)

    def compare(self, a: int, b: int) -> pd.DataFrame:
        """Two steps side by side: kernels, bytes moved (counted), the step's prediction
        and, where measured, its time, its kernels' own and the call overhead; one row
        per quantity, a column per step and the change (:mod:`workbench.step_table`)."""
        return compare_steps(self, a, b)

    def effect(self, plan: Plan | None = None):
        """A plan's kernels, counted bytes and the step's prediction: the numbers every
        face shows for a step (:func:`workbench.step_table.step_effect`)."""
        return step_effect(self, self._plan(plan))

    # -- running ---------------------------------------------------------------
    def program(self, plan: Plan | None = None) -> Program:
        """The compiled program of a plan (the current one by default), cached; built
        from the kernels already compiled for its groups, compiling the rest."""
        plan = self._plan(plan)
        if plan not in self._programs:
            self._programs[plan] = Program(
                plan, self.backend, compiled=self.compile(plan.groups, plan.graph),
                kernels=[self._lower(gr, plan.graph) for gr in plan.groups])
        return self._programs[plan]

    def kernels(self, plan: Plan | None = None) -> list[Kernel]:
        """The kernel IR of every group of a plan (the current one by default)."""
        plan = self._plan(plan)
        return [self._lower(gr, plan.graph) for gr in plan.groups]

    def kernel(self, ref: str, plan: Plan | None = None) -> Kernel:
        """The kernel IR of the group holding a node or group id (cached per group)."""
        plan = self._plan(plan)
        return self._lower(plan.group(args.ref(ref)), plan.graph)

    def compile(self, groups, graph: Graph | None = None) -> list:
        """Build these groups' kernels (of the current graph by default) on the backend
        now (those not built yet, in one batch), so a compiler error shows at once."""
        key = id(self.graph if graph is None else graph)
        todo = [gr for gr in dict.fromkeys(groups) if (key, gr) not in self._compiled]
        if todo:
            built = self.backend.compile([self._lower(g, graph) for g in todo], self.progress)
            self._compiled.update(((key, gr), k) for gr, k in zip(todo, built))
        return [self._compiled[key, gr] for gr in groups]

    def _lower(self, gr: Group, graph: Graph | None = None) -> Kernel:
        # sized for the backend's device (whatever device a user's model planned for)
        graph = self.graph if graph is None else graph
        if (id(graph), gr) not in self._kernels:
            self._kernels[id(graph), gr] = lower_group(graph, gr, self.device)
        return self._kernels[id(graph), gr]

    def source(self, ref: str, target: str = "cuda", plan: Plan | None = None) -> str:
        """Source of the kernel holding a node or group, for target 'cuda' or 'c'."""
        if not isinstance(target, str) or target not in ("cuda", "c"):
            raise WorkbenchError(f"unknown source target {target!r:.40}; choose 'cuda' or 'c'")
        return render_kernel(self.kernel(ref, plan), target)

    @in_memory
    def run(self, inputs: Mapping[str, np.ndarray], out=None) -> dict[str, np.ndarray]:
        """Run the current plan on the backend; returns the graph outputs (written into
        ``out``'s arrays where given: ``Program.run``; nothing is poisoned)."""
        return self.program().run(args.mapping(inputs, "inputs"), out=out)

    @property
    @in_memory
    def inputs(self) -> dict[str, np.ndarray]:
        """The fixed random inputs measurements use (fresh per session seed, never zeros)."""
        if self._inputs is None:
            self._inputs = random_inputs(self.graph, self.seed)
        return self._inputs

    @property
    @in_memory
    def reference(self) -> dict[str, np.ndarray]:
        if self._reference is None:
            self._reference = run_reference(self.graph, self.inputs)
        return self._reference

    def _output_magnitudes(self, plan: Plan) -> dict | None:
        """What a plan's end-to-end error is measured against, where not |ref|: with its
        matmuls in TF32 the whole graph's TF32 bound, as its kernels are held to theirs
        (float32's would call every TF32 plan wrong). It depends on the graph and the
        inputs only, so it is computed once."""
        if self._ran_in(plan) != "tf32":
            return None
        if self._tf32_magnitudes is None:
            self._tf32_magnitudes = graph_magnitudes(self.graph, self.inputs, tf32=True)
        return self._tf32_magnitudes

    @in_memory
    def measure(self, plan: Plan | None = None, warmup: int = 2,
                repeats: int = 10, counters: bool = False) -> StepMeasurement:
        """Run, check against the reference and time a plan (the current by default).

        Cached per plan: undoing back to a measured step costs nothing, and the first
        call's warmup/repeats are the ones that count for that plan. ``counters=True``
        also reads each kernel's DRAM bytes from the GPU's hardware counters (Nsight
        Compute in a child process, once per plan; :mod:`workbench.measure.counters`);
        where they cannot be read, NaN and ``dram_source`` says why."""
        plan = self._plan(plan)
        warmup, repeats = args.count(warmup, "warmup"), args.count(repeats, "repeats", 1)
        args.flag(counters, "counters")
        if plan not in self._measurements:
            # predicted before the model has seen this plan's timings, so the step's
            # predicted_ms is an honest prediction; then the model learns from it
            self._measurements[plan] = measure_program(self.program(plan), self.inputs,
                                                       self.reference, warmup, repeats,
                                                       None, self.progress,
                                                       self._output_magnitudes(plan),
                                                       self.predict(plan))
            if self.calibrate:
                self._recalibrate()
        if counters and self._measurements[plan].dram_source == DRAM_NOT_REQUESTED:
            self._measurements[plan] = with_dram(self._measurements[plan], plan,
                                                 self.inputs, self.backend)
        return self._measurements[plan]

    def measured(self, plan: Plan | None = None) -> StepMeasurement | None:
        """The cached measurement of a plan (the current by default), or None."""
        return self._measurements.get(self._plan(plan))

    # -- the cost model ----------------------------------------------------------
    @property
    def device(self):
        """The Device the backend runs on, which plans are made for (the local CPU's is
        measured once, cached)."""
        return self.backend.device

    @property
    def cost_model(self):
        """The model that predicts latencies and scores the ``stitch`` planner: the
        device's model, refitted to every kernel this session has measured (with
        ``calibrate=True``, the default), or one assigned by the user. It prices a
        plan at any matmul precision (each kernel's schedule says whether its matmuls
        run on tensor cores)."""
        return self._models.model

    @cost_model.setter
    def cost_model(self, model) -> None:
        # an assigned model is kept as it is: automatic refitting stops
        self._models.assign(model)
        self.calibrate = False
        self._predictions.clear()

    def _recalibrate(self) -> None:
        self._models.refit(self.graph, ((plan, m.per_kernel)
                                        for plan, m in self._measurements.items()), self._tuned)

    def predict(self, plan: Plan | None = None):
        """The step's prediction for a plan (the current by default), per kernel and in
        total (``.ms``), without running anything: made once, when the plan is first
        priced (a step: when it is made, by the model a planner planned it with), and
        kept while later measurements refit the model, so every face shows one
        prediction per step (an assigned ``cost_model`` prices them all again)."""
        plan = self._plan(plan)
        if plan not in self._predictions:
            self._predictions[plan] = self.cost_model.predict(plan)
        return self._predictions[plan]

    def export(self, path, measure: bool = False, force: bool = False, sign_with=None):
        """Write the current plan as an artifact: a directory, or a zip if path ends in
        .zip (see :mod:`workbench.artifact`). Its manifest carries this plan's
        measurement when one is cached (``measure=True`` measures first). Refuses a
        non-empty existing path unless ``force`` (which replaces only an artifact).
        ``sign_with``: a key that signs it (``wb.artifact.HmacKey``, ``Ed25519Key``, a
        key file's Path). Returns the path written."""
        path = args.path(path, "export path")
        args.flag(measure, "measure"), args.flag(force, "force")
        m = self.measure() if measure else self._measurements.get(self.plan)
        return export_plan(self.plan, path, backend=self.backend, measurement=m, force=force,
                           sign_with=sign_with)

    def baseline(self, **kw) -> StepMeasurement:
        """The measurement of one kernel per op, which speedups are relative to."""
        return self.measure(self.history[0].plan, **kw)

    def table(self, measure: bool = True, **kw) -> pd.DataFrame:
        """One row per step of the history up to the current one.

        ``matmul_precision`` is what the step's float32 matmuls ran in: "tf32" where the
        step allowed TF32 and the device has tensor cores, else "float32".
        ``predicted_ms`` is the step's one prediction (:meth:`predict`). ``latency_ms``
        is a whole call's time, ``kernels_ms`` a call's kernels' own summed and
        ``overhead_ms`` the rest of it, the call overhead (medians over the timed calls
        of each call's own split). ``dram_MB``: the DRAM traffic the hardware
        counters measured (``table(counters=True)``), else NaN. ``speedup_vs_none`` is
        step 0's latency over the step's: a step at another matmul precision than step
        0's counts what the precision gained too (the ``matmul_precision`` column says
        which; the history holds the switch as a step of its own)."""
        return step_table(self, args.flag(measure, "measure"), **kw)

    def _plan(self, plan) -> Plan:
        """``plan`` (None: the current one), which must be a plan of a step's graph."""
        if plan is None:
            return self.plan
        if not isinstance(plan, Plan) or not self._holds_graph(plan.graph):
            raise WorkbenchError(f"plan must be a Plan of this session's graph (s.plan, "
                                 f"s.history[i].plan), got {type(plan).__name__}")
        return plan

    def _ran_in(self, plan: Plan) -> str:
        return "tf32" if plan.tf32 and self.device.has_tf32 else "float32"
