"""Measuring one plan: per-kernel and per-step latency, bytes moved, launches, error.

Three times, never one folded into another: the step's (``latency_ms``: a whole call,
what a caller waits for), a call's kernels' own summed (``kernels_ms``: each kernel
timed inside the call, runtime/program.py ``time_calls``) and the rest of the call, the
*call overhead* (``overhead_ms``: inputs checked, arguments bound, threads placed and
woken, the interpreter); the last two are medians over the timed calls of each call's
own split.

Bytes are counted from the kernel IR as compulsory global-memory traffic: every
input buffer read once and every output written once. Latency is the median of
repeated runs after warm-up (CUDA events on the GPU, wall clock on the CPU). Given a
cost model, each kernel's predicted latency stands beside its measured one
(``predicted_ms``), and the step's is their sum. DRAM bytes *measured* by the
hardware counters (``dram_read``/``dram_written``) are NaN here; ``counters.with_dram``
fills them (``Session.measure(counters=True)``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ..fusion.cost import CostModel
from ..runtime import Program
from ..tolerance import check_outputs, max_rel_error
from .verify import KernelCheck, verify_kernels

KERNEL_COLUMNS = ["kernel", "group", "nodes", "schedule", "launch", "bytes_read",
                  "bytes_written", "dram_read", "dram_written", "latency_ms", "predicted_ms",
                  "bandwidth_GBps", "max_rel_error", "ok"]
# dram_source of a measurement taken without counters (measure(counters=True) fills it:
# "ncu", or "unavailable: <reason>"; see measure/counters.py)
DRAM_NOT_REQUESTED = "not requested"


@dataclass(frozen=True)
class StepMeasurement:
    """What one plan costs on one backend, and how far its outputs are from NumPy."""
    kernels: int
    launches: int
    bytes_read: int
    bytes_written: int
    latency_ms: float
    max_rel_error: float          # worst kernel, each checked on its own inputs
    within_tolerance: bool        # every kernel within its dtype's bound
    per_kernel: pd.DataFrame
    device: str
    # graph outputs vs a whole-graph reference run (TF32 plans: against the whole graph's
    # TF32 bound, verify.graph_magnitudes)
    end_to_end_error: float = float("nan")
    predicted_ms: float = float("nan")       # the cost model's sum over kernels
    # DRAM bytes read + written by the kernels the hardware counters measured (NaN if
    # none), and where they came from: "ncu", "unavailable: <reason>" (counters.py)
    dram_bytes: float = float("nan")
    dram_source: str = DRAM_NOT_REQUESTED
    # a call's kernels' own times summed, and the rest of the call: the call overhead
    # (medians over the timed calls of each call's own split: runtime CallTimes)
    kernels_ms: float = float("nan")
    overhead_ms: float = float("nan")

    @property
    def model_error(self) -> float:
        """|predicted / measured - 1| of the whole step (nan without a prediction)."""
        if math.isnan(self.predicted_ms) or self.latency_ms <= 0:
            return float("nan")
        return abs(self.predicted_ms / self.latency_ms - 1.0)

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


def measure_program(prog: Program, inputs: dict, reference: dict, warmup: int = 2,
                    repeats: int = 10, model: CostModel | None = None,
                    progress=None, magnitudes: dict | None = None,
                    prediction=None) -> StepMeasurement:
    """Run once keeping every boundary value, check each kernel on its own inputs,
    then time the plan. ``model`` (a CostModel for the backend's device) adds the
    predicted latency of each kernel and of the step. ``progress(done, total, label)``
    hears of each stage, ``done`` counting up to ``total`` once: the checked run
    ("checked run", at its start and end), each kernel checked ("checked K against
    NumPy"), then every timed run ("timed run"). ``magnitudes``: the
    magnitude each graph output's error is bounded by where it is not |ref| (a plan
    whose matmuls run in TF32: ``verify.graph_magnitudes``), for the end-to-end error.
    ``prediction`` (the plan's ``PlanEstimate``: a session's one prediction of the
    step, ``Session.predict``) stands in for ``model``'s."""
    if prediction is None and model is not None:
        prediction = model.predict(prog.plan)
    predicted = prediction.by_group() if prediction is not None else {}
    # one unit for the checked run, one per kernel checked, one per timed run: the
    # check of a large graph takes seconds, and reported as one unit at its end a
    # progress bar sat still (at 100% of the compile before it) all that time
    nk = len(prog.compiled)
    total_steps = 1 + nk + repeats
    if progress:
        progress(0, total_steps, "checked run")
    env = prog.run(inputs, keep_all=True)
    e2e, _ = check_outputs(prog.graph, env, reference, magnitudes)
    if progress:
        progress(1, total_steps, "checked run")
    checks = verify_kernels(prog, env, progress and (
        lambda i, name: progress(1 + i, total_steps, f"checked {name} against NumPy")))
    times = prog.time_calls(inputs, warmup, repeats, progress and (
        lambda i, n, what: progress(1 + nk + i, total_steps, what)))
    per, total = times.per_kernel, times.step
    rows = []
    for ck, t, chk in zip(prog.compiled, per, checks):
        k = ck.kernel
        moved = k.bytes_read + k.bytes_written
        pred = predicted[k.group].ms if k.group in predicted else float("nan")
        rows.append({"kernel": k.name, "group": k.group,
                     "nodes": len(prog.plan.group(k.group).nodes), "schedule": k.schedule,
                     "launch": str(k.launch) if k.library is None else "library",
                     "bytes_read": k.bytes_read, "bytes_written": k.bytes_written,
                     "dram_read": float("nan"), "dram_written": float("nan"),
                     "latency_ms": t * 1e3, "predicted_ms": pred,
                     "bandwidth_GBps": moved / t / 1e9 if t > 0 else float("nan"),
                     "max_rel_error": chk.max_rel_error, "ok": chk.within_tolerance})
    frame = pd.DataFrame(rows, columns=KERNEL_COLUMNS)
    return StepMeasurement(len(prog.kernels), len(prog.kernels),
                           int(frame.bytes_read.sum()), int(frame.bytes_written.sum()),
                           total * 1e3, max(c.max_rel_error for c in checks),
                           all(c.within_tolerance for c in checks), frame,
                           prog.backend.device_name(), e2e,
                           prediction.ms if prediction is not None else float("nan"),
                           kernels_ms=times.kernels * 1e3, overhead_ms=times.overhead * 1e3)


__all__ = ["DRAM_NOT_REQUESTED", "KERNEL_COLUMNS", "KernelCheck", "StepMeasurement",
           "max_rel_error", "measure_program", "verify_kernels"]
