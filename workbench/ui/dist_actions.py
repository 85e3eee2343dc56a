"""What the app offers on a distributed program: each transformation of the
``DistSession`` on each collective it applies to, tried on a copy of the session.

A row of :data:`OFFERS` names a ``DistSession`` method, the collective it takes and
the arguments to try; a method the session does not have is skipped, so a new
transformation of the session joins the app's list with one row. Each offer is
*tried* -- the method called on a fresh session over the current program, the real
session untouched -- so the list shows the program it would make and the step's
own notes (what moved, what did not and why), or the session's refusal with its
reason.

Example::

    >>> offers = candidates(session, keep_sharded=("m_out", "v_out"))   # doctest: +SKIP
    >>> [(o.label, o.legal) for o in offers]                            # doctest: +SKIP
    [('split_all_reduce n0 dim 0', True), ('split_all_reduce n0 dim 1', True)]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..distributed.program import DistProgram
from ..errors import WorkbenchError


@dataclass(frozen=True)
class Offer:
    """One row of the list: ``method`` of the session on node ``ref`` with ``kwargs``,
    and what trying it gave (the program and the step's notes, or the refusal)."""
    method: str
    ref: str | None                # None: every such collective (bucket_all_reduces)
    kwargs: tuple
    program: DistProgram | None
    notes: tuple[str, ...]
    reason: str = ""

    @property
    def legal(self) -> bool:
        return self.program is not None

    @property
    def label(self) -> str:
        args = " ".join(f"{k} {','.join(v) if isinstance(v, tuple) else v}"
                        for k, v in self.kwargs if v != ())
        return f"{self.method} {self.ref or 'all'}" + (f" {args}" if args else "")

    def apply(self, session) -> DistProgram:
        return getattr(session, self.method)(self.ref, **dict(self.kwargs))


@dataclass(frozen=True)
class OfferKind:
    method: str                    # the DistSession method
    op: str                        # the collective start it takes
    arguments: Callable = lambda d, n, keep: [()]   # (program, node, keep) -> [kwargs]
    # (whole: offered once over every such collective, ref None, where there are two)
    whole: bool = False


def _dims(d, n, keep):
    return [(("dim", i),) for i in range(len(d.graph.value(n.inputs[0]).shape))]


def _keep(d, n, keep):
    return [(("keep_sharded", tuple(keep)),)]


def _pieces(d, n, keep):
    return [(("k", k),) for k in (2, 4)]


OFFERS = (OfferKind("split_all_reduce", "all_reduce", _dims),
          OfferKind("shard_after", "all_gather", _keep),
          OfferKind("chunk_all_reduce", "all_reduce", _pieces),
          OfferKind("bucket_all_reduces", "all_reduce", whole=True),
          OfferKind("chunk_sharded", "reduce_scatter", _pieces),
          OfferKind("fuse_received", "reduce_scatter"), OfferKind("fuse_received", "all_gather"),
          OfferKind("fuse_received", "all_to_all_single"))


def trial_session(session):
    """A fresh session over ``session``'s current program, its settings the same."""
    from ..distributed.session import DistSession
    return DistSession(session.program, ranks=session.ranks, seed=session.seed,
                       planner=session.planner, link=session.link,
                       timeout=session.timeout, device=session.device)


def candidates(session, keep_sharded=()) -> list[Offer]:
    """Every offer on the current program, tried; legal ones first, in node order."""
    d = session.program
    out = []
    for kind in OFFERS:
        if not hasattr(session, kind.method):
            continue
        nodes = [n for n in d.graph.nodes if n.op == kind.op]
        if kind.whole:
            if len(nodes) > 1:
                out.append(_try(session, kind.method, None, ()))
            continue
        for n in nodes:
            for kwargs in kind.arguments(d, n, keep_sharded):
                out.append(_try(session, kind.method, n.id, kwargs))
    return sorted(out, key=lambda o: not o.legal)


def _try(session, method: str, ref: str | None, kwargs: tuple) -> Offer:
    t = trial_session(session)
    try:
        program = getattr(t, method)(ref, **dict(kwargs))
    except WorkbenchError as e:     # FusionRefused, a PlacementError: the reason
        return Offer(method, ref, kwargs, None, (), str(e))
    return Offer(method, ref, kwargs, program, t.step.decisions)


def effect_line(session, offer: Offer) -> str:
    """What an offer changes, as the list says it: nodes, the modelled step (compute
    + communication) and the compute bytes per rank, before -> after."""
    if not offer.legal:
        reason = offer.reason if len(offer.reason) <= 110 else offer.reason[:107] + "..."
        return f"refused: {offer.label} ({reason})"
    a, b = session.predict(), session.predict(offer.program)
    ca, cb = session.counted(), session.counted(offer.program)
    return (f"{offer.label}: {len(session.graph.nodes)} -> {len(offer.program.graph.nodes)}"
            f" nodes; model {a['total_s'] * 1e3:.3g} -> {b['total_s'] * 1e3:.3g} ms/step; "
            f"compute {ca['compute_bytes'] / 1e3:.4g} -> {cb['compute_bytes'] / 1e3:.4g} "
            "KB/rank")
