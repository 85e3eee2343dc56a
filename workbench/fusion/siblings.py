"""Kernels that share nothing but a small constant they read: joined after the region
search, where the cost model predicts the one kernel faster (horizontal fusion).

The search (``stitch.py``) runs region by region, and a small constant links no
readers into one region (``moves.SIBLING_CONSTANT_MIN_BYTES``): torch's dynamo exporter
shares one initializer among every layer whose weights are equal -- an untrained
model's zero biases, its LayerNorm weights of ones -- and linking its readers made one
region of every layer of a model (seconds to search, not tenths). What that link was
worth is independent kernels launched as one: the Q, K and V bias-adds of a layer, or
of an encoder and a decoder layer, priced faster together where a launch costs more
than the ops (a GPU). This pass finds those merges directly: for each small constant,
its reader kernels in graph order, each merged into the earliest kernel it is predicted
faster with and that does not make kernels wait on each other in a cycle.

Example::

    >>> part, log = merge_constant_siblings(search, part)     # doctest: +SKIP
"""
from __future__ import annotations

from .beam import move_decision
from .moves import EPS, Move, Search
from .partition import Decision, Partition


def merge_constant_siblings(search: Search, part: Partition,
                            max_readers: int = 64) -> tuple[Partition, list[Decision]]:
    """``part`` with reader kernels of each small constant merged where predicted
    faster, and the decisions that say so. ``max_readers``: a constant read by more
    kernels than this is left alone (the pairs grow as its square)."""
    log: list[Decision] = []
    for readers in search.constant_readers.values():
        gids = [g for g in dict.fromkeys(part.owner[r] for r in readers)
                if not search._opaque(part, g)]
        if not 2 <= len(gids) <= max_readers:
            continue
        alive = list(gids)
        k = 0
        while k < len(alive):
            a = alive[k]
            for b in alive[k + 1:]:
                sa, sb = frozenset(part.members[a]), frozenset(part.members[b])
                gain = search.cost(sa) + search.cost(sb) - search.cost(sa | sb)
                if gain <= EPS:
                    continue
                trial = part.copy()
                (merged,) = trial.replace({a, b}, [sa | sb])
                if trial.cycle({merged}) is not None:
                    continue
                log.append(move_decision(search, Move("merge", sa, sb, "", gain)))
                part = trial
                alive = [merged if x == a else x for x in alive if x != b]
                a = merged
            k += 1
    return part, log
