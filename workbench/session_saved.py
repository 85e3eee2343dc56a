"""Saved activations as steps of a session's history (a mixin of
:class:`~workbench.session.Session`): ``recompute(value)`` makes the backward compute
a forward value again instead of reading it back, ``store(value)`` undoes that choice;
each is a step like a fusion (undo, redo, goto, kept in the history), refused with the
reason where the value cannot be recomputed (:mod:`workbench.training.saved`).

A recomputation adds nodes, and a plan partitions one graph's nodes, so a step here
changes the graph: the session's graph is its current step's (``Session.graph``), the
graph as loaded rewritten by :func:`~workbench.training.saved.rematerialize` for the
set of values recomputed. The step's plan is the current plan's planner run again on
the new graph (``none`` after manual edits), around the locks in force. A graph is made
once per set, so undoing and redoing reuse its kernels.

    >>> s.saved()                        # value, bytes, flops, suggestion, choice  # doctest: +SKIP
    >>> s.recompute("gelu"); s.undo()    # doctest: +SKIP
"""
from __future__ import annotations

from .errors import FusionRefused, WorkbenchError
from .fusion.constrained import plan_constrained
from .fusion.planners import PLANNERS
from .ir import Graph
from . import arguments as args


class SavedSteps:
    # -- the graph of the current step ---------------------------------------------
    @property
    def graph(self) -> Graph:
        """The current step's graph: the graph as loaded, or as a recompute step
        rewrote it."""
        h = self.__dict__.get("_history")
        return self.__dict__["_loaded_graph"] if h is None else h.current.plan.graph

    @graph.setter
    def graph(self, g: Graph) -> None:      # (Session.__init__: the graph as loaded)
        self.__dict__["_loaded_graph"] = g

    @property
    def loaded_graph(self) -> Graph:
        """The graph as loaded, which every recompute step's graph rewrites (a session
        file stores it once, and each step's set of values recomputed)."""
        return self.__dict__["_loaded_graph"]

    def _holds_graph(self, g: Graph) -> bool:
        return any(g is st.plan.graph for st in self.history)

    def _rewritten(self) -> dict:
        """frozenset of recomputed values -> the graph as loaded rewritten for it."""
        return self.__dict__.setdefault(
            "_rewrites", {frozenset(): self.__dict__["_loaded_graph"]})

    @property
    def recomputed(self) -> frozenset[str]:
        """The forward values the current step's backward recomputes."""
        return next((k for k, g in self._rewritten().items() if g is self.graph),
                    frozenset())

    # -- the choices -------------------------------------------------------------------
    def saved(self):
        """The forward values the graph as loaded hands its backward, one row each:
        bytes stored, flops of recomputing it, the minimum cut's suggestion (store /
        recompute), why it cannot be recomputed, and the current step's choice."""
        import pandas as pd
        from .training.saved import SAVED_COLUMNS, saved_table
        rows = saved_table(self.__dict__["_loaded_graph"])
        now = self.recomputed
        for r in rows:
            r["choice"] = "recompute" if r["value"] in now else "store"
        return pd.DataFrame(rows, columns=[*SAVED_COLUMNS, "choice"])

    def recompute(self, *values: str):
        """A step: the backward computes these forward values again (the rest as the
        current step has them). Refused for a value that is not saved or cannot be
        recomputed (a GEMM's, a graph output), naming why."""
        values = self._saved_names(values, "recompute")
        have = [v for v in values if v in self.recomputed]
        if have:
            raise FusionRefused(f"recompute {have[0]}: it is recomputed already "
                                f"(store({have[0]!r}) stores it again)")
        return self._rewrite(f"recompute {' '.join(values)}", self.recomputed | set(values))

    def store(self, *values: str):
        """A step: the forward stores these values again for the backward to read
        (undoing an earlier recompute as a new step)."""
        values = self._saved_names(values, "store")
        missing = [v for v in values if v not in self.recomputed]
        if missing:
            raise FusionRefused(f"store {missing[0]}: it is stored already (recompute "
                                "chooses recomputation)")
        return self._rewrite(f"store {' '.join(values)}", self.recomputed - set(values))

    def price_recompute(self, values, planner: str = "stitch"):
        """The loaded graph and the graph with ``values`` recomputed, each planned by
        ``planner`` in a session of its own: their kernels, counted bytes and predicted
        ms (:class:`~workbench.training.saved.Priced`). A minimum cut in bytes stored is
        a suggestion to price this way, not a rule."""
        from .training.saved import Priced, rematerialize
        g = self.__dict__["_loaded_graph"]
        effects = []
        for graph in (g, rematerialize(g, set(values))):
            s = type(self)(graph, backend=self.backend.name, calibrate=False)
            if planner != "none":
                s.auto(planner)
            effects.append(s.effect())
        return Priced(frozenset(values), tuple(e.kernels for e in effects),
                      tuple(e.bytes_moved for e in effects),
                      tuple(e.predicted_ms for e in effects))

    def saved_actions(self, refs=None) -> list:
        """``recompute <value>`` / ``store <value>`` for the saved values the selected
        nodes or kernels make (every saved value with ``refs`` None), as
        :class:`~workbench.fusion.actions.Action` s that :meth:`apply` takes: the one
        that changes the current choice, refused with the reason where the value
        cannot be recomputed. Unpriced (``plan`` None): the step's graph and plan are
        made when it is applied, as a tuning's measurement is."""
        from .fusion.actions import Action
        from .training.phases import BACKWARD, phase
        from .training.saved import saved_values
        loaded = self.__dict__["_loaded_graph"]
        if not any(phase(n) == BACKWARD for n in loaded.nodes):
            return []                   # (no backward: nothing is saved for one)
        saved = saved_values(loaded)
        if refs is not None and saved:
            plan = self.plan
            picked = {n for r in args.refs(refs) for n in plan.group(r).nodes}
            made = {o: n.id for n in self.graph.nodes for o in n.outputs}
            saved = [x for x in saved if made.get(x.value) in picked]
        now, out = self.recomputed, []
        for x in saved:
            if x.value in now:
                out.append(Action(f"store {x.value}", ("store", (x.value,)), self.plan,
                                  True, "a step: the forward stores it again"))
            elif x.refused:
                out.append(Action(f"recompute {x.value}", ("recompute", (x.value,)),
                                  self.plan, False, f"it cannot be recomputed: {x.refused}"))
            else:
                out.append(Action(f"recompute {x.value}", ("recompute", (x.value,)),
                                  self.plan, True, f"a step: the backward computes it again "
                                  f"({x.recompute_flops:,} flops) instead of reading "
                                  f"{x.stored_bytes:,} B stored"))
        return out

    def _saved_names(self, values, what: str) -> tuple[str, ...]:
        from .training.saved import saved_values
        if not values:
            raise WorkbenchError(f"{what}() takes one or more saved values' names "
                                 "(Session.saved() lists them)")
        saved = {s.value: s for s in saved_values(self.__dict__["_loaded_graph"])}
        for v in values:
            args.name(v, "value")
            if v not in saved:
                raise FusionRefused(f"{what} {v}: not a forward value the backward reads "
                                    f"(Session.saved() lists them: "
                                    f"{', '.join(sorted(saved)[:6])}...)")
            if saved[v].refused:
                raise FusionRefused(f"{what} {v}: it cannot be recomputed: "
                                    f"{saved[v].refused}")
        return tuple(dict.fromkeys(values))

    def _rewrite(self, action: str, recompute: set[str]):
        from .training.saved import rematerialize
        key, graphs = frozenset(recompute), self._rewritten()
        if key not in graphs:
            graphs[key] = rematerialize(self.__dict__["_loaded_graph"], key)
        planner = self.plan.planner if self.plan.planner in PLANNERS else "none"
        plan, log = plan_constrained(planner, graphs[key], self.constraints,
                                     self.cost_model, None, self.matmul_precision)
        return self._push(action, plan, log)
