"""A session's steps as numbers: the step table, two steps compared, and each step's
one prediction.

Why one module: the step table, the Compare table, the app's panels and charts showed
a step with numbers from different sources -- the prediction made before it was
measured beside the model refitted since (144.7 vs 56.7 ms for one step), bytes the
cost model counts beside the kernel IR's (62.96 vs 71.35 MB). Here each step has one
of each: its prediction is made once, when the session first prices the plan (a
planner's step: by the model that planned it, as its decisions say), and kept while
later measurements refit the model (``Session.predict``); its bytes are the kernel
IR's, what a measurement reports. Times are three, never one folded into another:
the step's (a whole call), the kernels' own summed, and the call overhead.

Example::

    >>> step_table(session, measure=False).columns[:4].tolist()   # doctest: +SKIP
    ['step', 'action', 'planner', 'matmul_precision']
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from .errors import WorkbenchError
from .fusion.actions import Effect

STEP_COLUMNS = ["step", "action", "planner", "matmul_precision", "kernels", "bytes_moved_MB",
                "dram_MB", "latency_ms", "kernels_ms", "overhead_ms", "predicted_ms",
                "speedup_vs_none", "max_rel_error", "end_to_end_error", "ok"]
# the Compare table's rows
COMPARE_ROWS = ["kernels", "bytes_moved_MB", "predicted_ms", "latency_ms", "kernels_ms",
                "overhead_ms"]


def counted_bytes(session, plan) -> int:
    """The bytes a plan's kernels move, as the kernel IR counts them (what a
    measurement reports; each group lowered once per session)."""
    return sum(k.bytes_read + k.bytes_written for k in session.kernels(plan))


def step_effect(session, plan) -> Effect:
    """A plan's kernels, counted bytes (the kernel IR's) and the step's prediction."""
    return Effect(len(plan.groups), counted_bytes(session, plan), session.predict(plan).ms)


def previewed(session, actions: list) -> list:
    """``actions`` with each priced one's bytes counted as a step's are (the kernel
    IR's), so a preview's change is the change the step table will show; its
    prediction is the model's now, the one the step gets when applied."""
    return [replace(a, effect=replace(a.effect, bytes_moved=counted_bytes(session, a.plan)))
            if a.effect is not None and a.plan is not None else a for a in actions]


def step_table(session, measure: bool = True, **kw) -> pd.DataFrame:
    """``Session.table``: one row per step of the history up to the current one."""
    unknown = set(kw) - {"warmup", "repeats", "counters"}
    if unknown:
        raise WorkbenchError(f"table takes measure, warmup, repeats and counters, not "
                             f"{', '.join(sorted(map(str, unknown)))[:80]}")
    s = session
    base = s.baseline(**kw) if measure else s.measured(s.history[0].plan)
    rows = []
    for i, st in enumerate(s.history[:s.position + 1]):
        m = s.measure(st.plan, **kw) if measure else s.measured(st.plan)
        rows.append({
            "step": i, "action": st.action, "planner": st.plan.planner,
            "matmul_precision": s._ran_in(st.plan),
            "kernels": len(st.plan.groups),
            "bytes_moved_MB": m.bytes_moved / 1e6 if m else np.nan,
            "dram_MB": m.dram_bytes / 1e6 if m else np.nan,   # counters: NaN unless read
            **{k: getattr(m, k, np.nan) for k in ("latency_ms", "kernels_ms",
                                                   "overhead_ms")},
            "predicted_ms": s.predict(st.plan).ms,
            "speedup_vs_none": base.latency_ms / m.latency_ms if m and base else np.nan,
            "max_rel_error": m.max_rel_error if m else np.nan,
            "end_to_end_error": m.end_to_end_error if m else np.nan,
            "ok": m.within_tolerance if m else None})
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def compare_steps(session, a: int, b: int) -> pd.DataFrame:
    """``Session.compare``: steps ``a`` and ``b`` side by side, a row per quantity
    (:data:`COMPARE_ROWS`; NaN where a step is not measured) and the change."""
    cols = {}
    for i in map(session._history.index, (a, b)):
        st = session.history[i]
        e = step_effect(session, st.plan)
        m = session.measured(st.plan)
        cols[f"step {i}: {st.action}"] = [
            e.kernels, e.bytes_moved / 1e6, e.predicted_ms,
            *(getattr(m, k, np.nan) for k in ("latency_ms", "kernels_ms", "overhead_ms"))]
    df = pd.DataFrame(cols, index=COMPARE_ROWS)
    df["change"] = df.iloc[:, -1] - df.iloc[:, 0] if len(df.columns) == 2 else 0.0
    return df


__all__ = ["COMPARE_ROWS", "STEP_COLUMNS", "compare_steps", "counted_bytes", "previewed",
           "step_effect", "step_table"]
