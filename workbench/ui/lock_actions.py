"""The app's locks (issue 48): lock or unlock the selected kernel or edge, the Lock
toggle in the Transformations panel, and what the status line says about them.

A *kernel* lock keeps the kernel holding the first selected node (``how``: ``kernel``
pins it whole, ``fusion`` keeps its ops together, ``mapping`` / ``launch`` its thread
mapping / launch parameters); with exactly two selected nodes joined by an edge, the
lock is on that edge (kept fused, or cut). Every lock is a Session step (Undo takes it
back) and is drawn on the graph (:mod:`.lock_marks`); Auto plans around them.

:class:`LockActions` is a part of :class:`~.app.WorkbenchApp`.

    >>> app.lock("k0"); app.auto("stitch"); app.message   # doctest: +SKIP
    'stitch: ...; planned around 1 lock'
"""
from __future__ import annotations

from ..errors import WorkbenchError
from .. import arguments as args
from ..fusion.constraints import Cut, FixedScheme
from .describe import plural
from .plan_actions import app_action


def _edge_of(g, sel) -> tuple[str, str] | None:
    """The edge between two selected nodes, either way round, or None."""
    if len(sel) != 2:
        return None
    for a, b in (sel, sel[::-1]):
        if any(o in g.node(b).inputs for o in g.node(a).outputs):
            return a, b
    return None


def touching(cs, plan, ref) -> list:
    """The constraints in force on a kernel (the kernel holding ``ref``: those naming
    any of its ops) or on an edge ``(a, b)``."""
    if isinstance(ref, tuple):
        return [c for c in cs if getattr(c, "edge", None) == ref
                or (not hasattr(c, "edge") and set(ref) <= set(c.nodes))]
    ns = set(plan.group(ref).nodes)
    return [c for c in cs if ns & set(c.edge if isinstance(c, (Cut, FixedScheme))
                                      else c.nodes)]


class LockActions:
    """The app's lock actions (the Lock toggle calls :meth:`toggle_lock`)."""

    def _lock_ref(self, ref):
        if ref is not None:
            if isinstance(ref, str) and "->" in ref:
                a, b = (x.strip() for x in ref.split("->", 1))
                return a, b
            if isinstance(ref, (tuple, list)):
                if len(ref) != 2 or not all(isinstance(n, str) for n in ref):
                    raise WorkbenchError(f"an edge is two node ids ('n3', 'n4'), got "
                                         f"{ref!r:.60}")
                return tuple(ref)
            return args.ref(ref)
        sel = self.selected
        if not sel:
            raise WorkbenchError("nothing selected: select a node of the kernel to lock, "
                                 "or the two nodes of an edge")
        return _edge_of(self.session.graph, sel) or sel[0]

    @app_action
    def lock(self, ref=None, how: str = "kernel"):
        """Lock the kernel holding ``ref`` (default: the selection's; ``how``: kernel,
        fusion, mapping or launch) or the edge ``"n3->n4"`` / ``("n3", "n4")`` as it is
        in the current plan; refused with the reason, changing nothing."""
        ref = self._lock_ref(ref)
        before = self.session.constraints
        cs = self.session.lock(ref if not isinstance(ref, tuple) else f"{ref[0]}->{ref[1]}",
                               how)
        added = [str(c) for c in cs if c not in before]
        self._refresh()
        self._set_message(f"locked {'; '.join(added) or 'nothing new'}; "
                          f"{plural(len(cs), 'lock')} in force: Auto plans around them")
        return cs

    @app_action
    def unlock(self, ref=None):
        """Drop every lock on the kernel holding ``ref`` (or on the edge)."""
        ref = self._lock_ref(ref)
        on = touching(self.session.constraints, self.session.plan, ref)
        if not on:
            what = f"{ref[0]}->{ref[1]}" if isinstance(ref, tuple) else \
                self.session.plan.group(ref).id
            raise WorkbenchError(f"{what} is not locked: nothing to unlock")
        cs = self.session.unconstrain(*on)
        self._refresh()
        self._set_message(f"unlocked {'; '.join(map(str, on))}; "
                          f"{plural(len(cs), 'lock')} in force")
        return cs

    def toggle_lock(self, ref=None, how: str = "kernel"):
        """Unlock the selection's kernel or edge when locked, else lock it."""
        try:
            r = self._lock_ref(ref)
            locked = bool(touching(self.session.constraints, self.session.plan, r))
        except WorkbenchError as e:
            self._set_message(str(e), refused=True)
            self._show_lock()
            return None
        out = self.unlock(ref) if locked else self.lock(ref, how)
        self._show_lock()
        return out

    def _show_lock(self) -> None:
        """The Lock toggle shows whether the selection's kernel or edge is locked."""
        try:
            r = self._lock_ref(None)
            on = bool(touching(self.session.constraints, self.session.plan, r))
        except WorkbenchError:
            r, on = None, False
        self.transforms.show_lock(on, enabled=r is not None)

    def locks_line(self) -> str:
        """What the status line adds after Auto: how many locks it planned around."""
        n = len(self.session.constraints)
        return f"; planned around {plural(n, 'lock')}" if n else ""
