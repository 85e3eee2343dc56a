"""A session over a repeat: its plan is how many steps each kernel call runs.

The steps are ``unfused`` (the step kernel once per step, the state through memory)
and ``fuse steps xF`` (F steps per call, the state kept in L1 or registers between
them; ``codegen/repeat_c.py``). Every step is kept in a history with undo/redo, as the
graph session's plans are; :meth:`RepeatSession.actions` lists the transformations of
the current step with their predicted time, refused ones with the reason.

Example::

    >>> import workbench as wb
    >>> from workbench.testing.simulators import cartpole
    >>> s = wb.RepeatSession(cartpole(4096, 256))
    >>> s.fuse_steps(16)                       # doctest: +SKIP
    >>> out = s.run(s.inputs())                # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from . import arguments as args
from .errors import FusionRefused, WorkbenchError
from .ir.repeat import Repeat
from .codegen.repeat_c import fused_cuda_source, refusal
from .fusion.repeat_cost import RepeatCost, candidate_steps, plan_steps, repeat_cost

# the planners a repeat takes: the graph session's stitch planner, whose one choice on a
# repeat is F ("rules" and the others plan a graph's kernels, which a repeat's one body
# loop does not have)
AUTO_PLANNERS = ("stitch",)


@dataclass(frozen=True)
class StepAction:
    """One transformation offered for the current step: ``steps_per_call`` None is
    unfused; ``reason`` says why an illegal one is refused."""
    label: str
    steps_per_call: int | None
    legal: bool
    reason: str = ""
    predicted: RepeatCost | None = None


class RepeatSession:
    """Plan, run and check a repeat on the CPU backend."""

    def __init__(self, r: Repeat, seed: int = 0):
        if not isinstance(r, Repeat):
            raise WorkbenchError(f"RepeatSession takes a Repeat (wb.repeat(step, n, state)), "
                                 f"got {type(r).__name__}")
        self.repeat, self.seed = r.verify(), args.count(seed, "seed", 0, 2 ** 63 - 1)
        self._history: list[tuple[str, int | None]] = [("unfused", None)]
        self._position = 0
        self._programs: dict = {}
        self._measured: dict = {}          # F (None: unfused) -> best seconds
        self.decisions: list = []          # the last auto()'s (fusion.Decision)

    # -- the plan and its history ----------------------------------------------------
    @property
    def steps_per_call(self) -> int | None:
        return self._history[self._position][1]

    @property
    def position(self) -> int:
        """The current step's index in :attr:`history`."""
        return self._position

    @property
    def history(self) -> list[str]:
        return [label for label, _ in self._history]

    def _push(self, label: str, f: int | None) -> int | None:
        del self._history[self._position + 1:]
        self._history.append((label, f))
        self._position += 1
        return f

    def fuse_steps(self, f: int) -> int:
        """Run F steps per kernel call (1 <= F <= the trip count); refused with the
        reason where the body mixes environments."""
        f = self._steps(f)
        why = refusal(self.repeat)
        if why:
            raise FusionRefused(f"fuse steps x{f}: {why}")
        return self._push(f"fuse steps x{f}", f)

    def _steps(self, f) -> int:
        return args.count(f, "fuse steps: F (steps per kernel call, at most the trip "
                             "count)", 1, self.repeat.trips)

    def _steps_or_none(self, f) -> int | None:
        """F as given (``...``: the current step's; None: unfused), checked."""
        f = self.steps_per_call if f is ... else f
        return None if f is None else self._steps(f)

    def unfuse(self) -> None:
        return self._push("unfused", None)

    def auto(self, planner: str = "stitch") -> int | None:
        """The stitch planner's step: "fuse steps xF" with the F the cost model picks
        (:func:`plan_steps`), or unfused where fusing is refused; ``decisions`` lists
        every F considered with its predicted time (or the refusal's reason)."""
        planner = args.name(planner, "planner")
        if planner not in AUTO_PLANNERS:
            raise WorkbenchError(f"a repeat's planner is {' or '.join(AUTO_PLANNERS)} (it "
                                 f"chooses F, the steps per kernel call), not {planner!r:.30}")
        f, self.decisions = plan_steps(self.repeat, self.device, refusal(self.repeat))
        return self.steps_per_call if f is None else self.fuse_steps(f)

    def undo(self) -> int | None:
        self._position = max(0, self._position - 1)
        return self.steps_per_call

    def redo(self) -> int | None:
        self._position = min(len(self._history) - 1, self._position + 1)
        return self.steps_per_call

    def actions(self) -> list[StepAction]:
        """Every "fuse steps xF" (F powers of two, and the trip count) and "unfused",
        each with its predicted run; all refused with the reason where fusing is."""
        why = refusal(self.repeat)
        out = [StepAction("unfused", None, True, "", self.predict(None))]
        for f in candidate_steps(self.repeat.trips):
            out.append(StepAction(f"fuse steps x{f}", f, why is None, why or "",
                                  None if why else self.predict(f)))
        return out

    def apply(self, action: StepAction) -> int | None:
        if not isinstance(action, StepAction):
            raise WorkbenchError("apply takes an action from RepeatSession.actions()")
        if not action.legal:
            raise FusionRefused(f"{action.label}: {action.reason}")
        return self.unfuse() if action.steps_per_call is None else \
            self.fuse_steps(action.steps_per_call)

    # -- cost, code, runs --------------------------------------------------------------
    @property
    def device(self):
        from .runtime.calibrate import cpu_device
        return cpu_device()

    def predict(self, f: int | None = ..., device=None) -> RepeatCost:
        return repeat_cost(self.repeat, self._steps_or_none(f), device or self.device)

    def program(self, f: int | None = ...):
        from .runtime.repeat_program import RepeatProgram
        f = self._steps_or_none(f)
        if f not in self._programs:
            self._programs[f] = RepeatProgram(self.repeat, f)
        return self._programs[f]

    def source(self, target: str = "c") -> str:
        """The current step's C, or the fused kernel's CUDA (``target="cuda"``)."""
        target = args.name(target, "target ('c' or 'cuda')")
        if target == "cuda":
            return fused_cuda_source(self.repeat, "wb_repeat_fused")
        if target != "c":
            raise WorkbenchError(f"target is 'c' or 'cuda', got {target!r:.20}")
        return self.program().source

    def measure(self, f: int | None = ..., repeats: int = 5) -> float:
        """Seconds of the fastest of ``repeats`` runs (F steps per call; ``...``: the
        current step's, None: unfused) on :meth:`inputs`, outputs reused from run to
        run, a short pause before each (the runs before leave no pool spinning); kept
        for :meth:`table`."""
        import time
        f = self._steps_or_none(f)
        repeats = args.count(repeats, "repeats", 1, 1000)
        prog, ins = self.program(f), self.inputs()
        out = prog.new_outputs()
        prog.run(ins, out=out, checked=False)            # warm: pages, the pool
        best = math.inf
        for _ in range(repeats):
            time.sleep(0.05)
            t0 = time.perf_counter()
            prog.run(ins, out=out, checked=False)
            best = min(best, time.perf_counter() - t0)
        self._measured[f] = best
        return best

    def table(self, measure: bool = False, repeats: int = 5):
        """One row per form ("unfused", then "fuse steps xF" for every offered F where
        fusing is legal): calls, bytes moved and predicted ms (the cost model), measured
        ms where measured (all of them with ``measure=True``), and both speedups over
        the unfused program: what a plot of speedup against F draws."""
        import pandas as pd
        rows = []
        for a in self.actions():
            if not a.legal:
                continue
            f = a.steps_per_call
            if args.flag(measure, "measure") and f not in self._measured:
                self.measure(f, repeats)
            rows.append({"step": a.label, "steps_per_call": f, "calls": a.predicted.calls,
                         "bytes": a.predicted.bytes, "predicted_ms": a.predicted.ms,
                         "measured_ms": self._measured.get(f, math.nan) * 1e3})
        t = pd.DataFrame(rows)
        t["speedup_predicted"] = t["predicted_ms"].iloc[0] / t["predicted_ms"]
        t["speedup_measured"] = t["measured_ms"].iloc[0] / t["measured_ms"]
        return t

    def run(self, inputs: Mapping[str, np.ndarray], out=None, checked=None) -> dict:
        return self.program().run(inputs, out=out, checked=checked)

    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict:
        return self.repeat.reference(inputs)

    def inputs(self) -> dict[str, np.ndarray]:
        """Random inputs (never zeros) from each body input's range, or [-1, 1);
        integer inputs drawn in their range (actions)."""
        r, rng = self.repeat, np.random.default_rng(self.seed)
        out = {}
        for n in r.inputs:
            v = r.value(n)
            lo, hi = r.body.input_ranges.get(n, (-1.0, 1.0))
            if v.dtype.kind in "iu":
                out[n] = rng.integers(int(lo), int(hi), v.shape).astype(v.dtype.np)
            elif v.dtype.kind == "b":
                out[n] = rng.integers(0, 2, v.shape).astype(bool)
            else:
                out[n] = rng.uniform(lo, hi, v.shape).astype(v.dtype.np)
        return out
