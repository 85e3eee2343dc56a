"""The numbers the app shows for a step, read from its Session: the overlay that
colours the drawing, the history the charts plot, the current kernels' rows, and a
kernel's measured figures for the code panel's header.

What is known without running (bytes counted from the kernel IR, the step's
prediction) fills in where nothing was measured yet, so the charts are full before
anything runs. Every number comes from the one source the session's tables use
(:mod:`workbench.step_table`): the step's one prediction (``Session.predict``), the
kernel IR's bytes, and each kernel's own measured time (timed inside the call, so
what the notebook does meanwhile lands in the step's call overhead, not on a kernel).

Example::

    >>> kernel_rows(app.session)[0]                      # doctest: +SKIP
    KernelRow(group='g0', bytes_moved=4194304.0, flops=..., predicted_ms=..., ...)
"""
from __future__ import annotations

import math

import pandas as pd

from ..fusion import Plan
from ..session import Session
from .charts import KernelRow
from .dot import Overlay


def kernel_info(session: Session, plan: Plan, gid: str) -> dict:
    """Kernel ``gid``'s measured latency, prediction and bandwidth in ``plan``, where
    that plan was measured (else empty)."""
    m = session.measured(plan)
    if m is None:
        return {}
    rows = m.per_kernel[m.per_kernel["group"] == gid]
    if rows.empty:
        return {}
    r = rows.iloc[0]
    return {k: float(r[k]) for k in ("latency_ms", "predicted_ms", "bandwidth_GBps")
            if k in r and r[k] == r[k]}


def overlay(session: Session, metric: str) -> Overlay | None:
    """The drawing's colours by ``metric`` (one of ``controls.OVERLAYS``)."""
    if metric == "none":
        return None
    m = session.measured()
    if m is not None:
        col = m.per_kernel.set_index("group")
        vals = (col["latency_ms"] if metric == "latency"
                else (col["bytes_read"] + col["bytes_written"]) / 1e6)
        return Overlay(metric, vals.to_dict())
    if metric == "bytes":   # counted from the kernel IR: no run needed
        return Overlay(metric, {gr.id: (k.bytes_read + k.bytes_written) / 1e6
                                for gr in session.plan.groups
                                for k in [session.kernel(gr.id)]})
    # latency before Measure: the cost model's prediction, and the status line
    # says so (before, the drawing stayed as it was with no word why)
    pred = session.predict().by_group()
    return Overlay("predicted latency", {gid: e.ms for gid, e in pred.items()})


def plotted_history(session: Session) -> pd.DataFrame:
    """The history with each unmeasured step's bytes counted, so the bytes chart
    is full before anything runs."""
    h = session.table(measure=False).copy()
    s = session
    for i, st in enumerate(s.history[:s.position + 1]):
        if math.isnan(h.at[i, "bytes_moved_MB"]):
            h.at[i, "bytes_moved_MB"] = s.effect(st.plan).bytes_moved / 1e6
    return h


def kernel_rows(session: Session) -> list[KernelRow]:
    """The current step's kernels: counted bytes, arithmetic and predicted time
    (known without running), measured time and DRAM bytes where measured."""
    s = session
    plan, model = s.plan, s.cost_model
    pred = s.predict(plan).by_group()
    kernels = {k.group: k for k in s.kernels(plan)}
    m = s.measured()
    meas = {} if m is None else m.per_kernel.set_index("group").to_dict("index")
    rows = []
    for gr in plan.groups:
        f, k = model.features(s.graph, gr), kernels[gr.id]
        r = meas.get(gr.id, {})
        dram = r.get("dram_read", math.nan) + r.get("dram_written", math.nan)
        rows.append(KernelRow(gr.id, float(k.bytes_read + k.bytes_written),
                              float(f.flops + f.library_flops), pred[gr.id].ms,
                              float(r.get("latency_ms", math.nan)), float(dram)))
    return rows
