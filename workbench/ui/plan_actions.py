"""The app's actions on its Session, one method per control: fuse, split, auto (a
planner), the matmul precision, a stitch scheme, a thread mapping, measure, tune,
export and save the drawing. Each refused action sets the app's message to the reason
(:func:`app_action`), returns None and changes nothing: not the plan, not the drawing.

:class:`PlanActions` is a part of :class:`~.app.WorkbenchApp`; it uses the app's
``session``, selection, controls, message line and ``_refresh``.

Example::

    >>> app.fuse(["n0", "n1"]) or app.message            # doctest: +SKIP
    'fused 2 ops into g0 (...); 5 kernels'
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Iterable

from ..errors import WorkbenchError
from ..fusion import PLANNERS, Plan
from ..measure import StepMeasurement
from .. import arguments as args
from ..fusion.plan import check_precision
from .current_step import taken
from .progress_phases import MEASURE
from .describe import edge_label, planner_summary, plural, precision_summary


def app_action(method):
    """An app action: a WorkbenchError becomes the inline refusal message and the
    action returns None (the session refuses before changing anything, so nothing is
    redrawn; if a step was taken before the error -- the compiler failed -- it is
    shown)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        before = self.session.plan
        try:
            self._check_not_busy()
            return method(self, *args, **kwargs)
        except WorkbenchError as e:
            if self.session.plan is not before:
                self._refresh()
            else:   # the drop-downs back to what the step has (not the refused choice)
                self._update_scheme_controls()
            self._set_message(str(e), refused=True)
            return None
    return run


class PlanActions:
    """The app's actions (each control calls one of these)."""

    @app_action
    def fuse(self, nodes: Iterable[str] | None = None) -> Plan | None:
        """Fuse the given (default: selected) nodes' kernels into one; compiles the new
        kernel and redraws. Refused: ``message`` says why, returns None."""
        refs = list(self.selected if nodes is None else args.refs(nodes, "nodes"))
        # group ids change when groups merge; a node id of the selection does not
        anchor = self.session.plan.group(refs[0]).nodes[0] if refs else None
        plan = self.session.fuse(refs)
        group = plan.group(anchor)
        self._last_group = group.id
        # compiled now (cached by source on the CPU), so a compiler error shows at
        # once and Measure later only loads it
        self.session.compile([group])
        self._refresh()
        self._set_message(f"fused {len(group.nodes)} ops into {group.id} "
                          f"({group.schedule.describe()}); {plural(len(plan.groups), 'kernel')}")
        return plan

    @app_action
    def split(self, ref: str | None = None) -> Plan | None:
        """Split the kernel holding ``ref`` (default: the first selected node)."""
        if ref is None:
            if not self.selected:
                raise WorkbenchError("nothing selected: select a node of the kernel to split")
            ref = self.selected[0]
        gid = self.session.plan.group(ref).id
        plan = self.session.split(ref)
        self._last_group = None
        self._refresh()
        self._set_message(f"split {gid}; {plural(len(plan.groups), 'kernel')}")
        return plan

    @app_action
    def auto(self, planner: str = "rules") -> Plan | None:
        """Replace the plan with ``planner``'s (any name in ``workbench.fusion.PLANNERS``)."""
        position = self.session.position
        plan = self.session.auto(planner)
        if planner in PLANNERS:
            self.planner.value = planner
        if self.session.position == position:   # the session added no identical step
            self._set_message(f"auto {planner}: unchanged, the plan already is the "
                              f"{planner} planner's ({plural(len(plan.groups), 'kernel')}); "
                              "no new step")
            return plan
        self._refresh()
        self._set_message(planner_summary(planner, self.session.graph, plan,
                                          self.session.step.decisions) + self.locks_line())
        return plan

    @app_action
    def set_matmul_precision(self, precision: str) -> Plan | None:
        """Let float32 matmuls run in ``precision``, "float32" (exact) or "tf32"
        (tensor cores, operands rounded to 10 mantissa bits): the current kernels made
        again for it as a new step (Session.set_matmul_precision; Undo goes back). What
        the ``matmuls`` drop-down does."""
        s = self.session
        check_precision(precision)
        if precision == s.matmul_precision:
            self._set_message(f"matmuls: unchanged, already {precision}; no new step")
            return s.plan
        with warnings.catch_warnings():
            # a device without TF32 tensor cores: said in the status line below, where
            # a person looking at the app reads it
            warnings.simplefilter("ignore")
            plan = s.set_matmul_precision(precision)
        self._refresh()
        self._set_message(precision_summary(s, precision))
        return plan

    def _on_matmuls(self, change) -> None:
        # (the drop-down set from the session after undo or redo asks for what is
        # already so: nothing to do)
        if change["new"] != self.session.matmul_precision:
            self.set_matmul_precision(change["new"])
            self.matmuls.value = self.session.matmul_precision   # refused: back to it

    @app_action
    def set_scheme(self, value: str, scheme) -> Plan | None:
        """Stitch scheme of internal edge ``value`` (a value name, as in the ``edge``
        drop-down's values; delegates to Session.set_scheme)."""
        sc = args.name(getattr(scheme, "value", scheme), "scheme")
        if value is not None:
            args.name(value, "value")
        if value is None:
            gr = self._current_group() if self.selected else None
            raise WorkbenchError(
                "select a kernel of two or more ops first: a stitch scheme applies to an "
                "edge inside a kernel" if gr is None else
                f"{gr.id} has no edge inside it ({plural(len(gr.nodes), 'op')}): fuse it "
                "with a neighbour first; a stitch scheme applies to an edge inside a kernel")
        g = self.session.graph
        before = self.session.plan
        gr = before.group_of.get(getattr(g.producer.get(value), "id", None))
        if gr is not None and value in dict(gr.schemes) and gr.scheme(value).value == sc:
            label = edge_label(g, gr, value)
            self._set_message(f"{label}: unchanged, already {sc} stitching; no new step")
            return before
        plan = self.session.set_scheme(value, scheme)
        self._refresh()
        new = plan.group(g.producer[value].id)
        label = edge_label(g, new, value) if value in dict(new.schemes) else value
        self._set_message(f"{label}: {sc} stitching; {new.id} {new.schedule.describe()}"
                          + ("" if plan is not before else " (unchanged; no new step)"))
        return plan

    @app_action
    def set_mapping(self, ref: str | None = None, mapping: str = "auto") -> Plan | None:
        """Thread mapping of the row-reduction kernel holding ``ref`` (default: the
        first selected node): warp, block, split, thread, or auto (the rule)."""
        ref = (self.selected[0] if self.selected else None) if ref is None else args.ref(ref)
        args.name(mapping, "mapping")
        if ref is None:
            raise WorkbenchError("select a node of a row-reduction kernel first")
        before = self.session.plan
        plan = self.session.set_mapping(ref, mapping)
        gr = plan.group(ref)
        launch = self.session.kernel(ref, plan).launch
        if plan is before:
            self._set_message(f"{gr.id}: unchanged, already mapped {mapping} "
                              f"({gr.schedule.describe()}); no new step")
            return plan
        self._refresh()
        self._set_message(f"{gr.id}: mapped {mapping}, {gr.schedule.describe()} ({launch})")
        return plan

    @app_action
    def measure(self) -> StepMeasurement | None:
        """Compile (progress shown), check against NumPy and time the current step;
        updates the plots, the code panel and the overlay."""
        s = self.session
        with self._busy("measuring", MEASURE):
            if s.measured() is None:   # (else cached: nothing runs)
                # each phase on the bar in turn (progress_phases): the compile reports
                # its kernels, then the NumPy reference (once per session), then
                # measure's check and timed runs
                s.program()
                self._enter_phase("NumPy reference")
                s.reference
                self._enter_phase("checking")
            m = s.measure(repeats=self.repeats, counters=self.counters)
        self._refresh()
        state = "all kernels match NumPy" if m.within_tolerance else \
            "SOME KERNELS DIFFER FROM NUMPY"
        dram = ""
        if self.counters:
            dram = (f", DRAM {m.dram_bytes / 1e6:.4g} MB measured ({m.dram_source})"
                    if m.dram_bytes == m.dram_bytes else f"; DRAM counters {m.dram_source}")
        self._set_message(f"step {self.session.position}: {m.latency_ms:.4g} ms, "
                          f"{m.bytes_moved / 1e6:.4g} MB moved{dram}, "
                          f"{plural(m.kernels, 'kernel')} on {m.device}; {state} "
                          f"(max rel. error {m.max_rel_error:.2g})",
                          refused=not m.within_tolerance)
        return m

    @app_action
    def tune(self) -> Plan | None:
        """Search every kernel's launch parameters by measurement (progress shown) and
        show the tuned step; ``session.tuning`` holds every candidate's time."""
        with self._busy("tuning"):
            before = self.session.plan
            plan = self.session.tune()
        self._refresh()
        changed = [f"{r.group}: {r.rule_ms:.3g} -> {r.best_ms:.3g} ms"
                   for r in self.session.tuning if r.chosen is not before.group(r.group)]
        self._set_message(f"tuned {plural(len(self.session.tuning), 'kernel')}; "
                          + ("; ".join(changed[:4]) + ("; ..." if len(changed) > 4 else "")
                             if changed else "the rule's launch parameters were fastest"))
        return plan

    @app_action
    def export(self, path: str | os.PathLike, force: bool = False) -> object | None:
        """Write the current plan as an artifact (delegates to Session.export). A path
        already taken is refused, and the Overwrite button shown (``force=True``)."""
        path = args.path(path, "export path")
        if not force and taken(path):
            self._offer_overwrite(True)
            raise WorkbenchError(f"{os.fspath(path)} already exists: press Overwrite to "
                                 "replace it with this plan, or type another name")
        with self._busy("exporting"):
            result = self.session.export(path, force=force)
        self._offer_overwrite(False)
        self._set_message(f"exported step {self.session.position} to {os.fspath(path)}")
        return result if result is not None else os.fspath(path)

    @app_action
    def save_graph(self, path: str | os.PathLike) -> str | None:
        """Write the graph as drawn now (collapsed boxes, kernels, colours) to ``path``:
        ``.svg`` or ``.png``. The view's "SVG"/"PNG" buttons download the same."""
        out = self.view.save(args.path(path))
        self._set_message(f"saved the graph of step {self.session.position} to {out}")
        return out
