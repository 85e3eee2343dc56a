"""How much of the long checks the suite runs.

CI (a 2-core machine, a 30-minute aim) runs a bounded, seeded sample of the long
sweeps -- fuzz seeds, emulated plan variants, sanitized samples, hostile artifacts --
and the scripts that own those sweeps run them whole (their results are recorded under
``benchmarks/results/``). ``WB_FULL_TESTS=1`` makes the suite run them whole too;
``WB_TEST_SEED=N`` draws another sample (the seed is in each test's id or message, so a
failure names what ran). Cases that once found a bug are kept in every sample."""
from __future__ import annotations

import os
import random
from typing import Iterable, Sequence, TypeVar

T = TypeVar("T")

FULL = os.environ.get("WB_FULL_TESTS", "") not in ("", "0")
SEED = int(os.environ.get("WB_TEST_SEED", "0") or 0)


def sample(items: Iterable[T], k: int, salt: str, keep: Sequence[T] = ()) -> list[T]:
    """``k`` of ``items`` (all of them under ``WB_FULL_TESTS``), ``keep`` always among
    them, drawn by ``WB_TEST_SEED`` and ``salt`` (one draw per sweep), in their order."""
    items = list(items)
    if FULL or len(items) <= k:
        return items
    kept = [x for x in items if x in keep]
    rest = [x for x in items if x not in keep]
    drawn = set(random.Random(f"{SEED}:{salt}").sample(range(len(rest)),
                                                         max(0, k - len(kept))))
    chosen = set(kept) | {rest[i] for i in drawn}
    return [x for x in items if x in chosen]


def limit(full: int, ci: int) -> int:
    """A count: ``full`` under ``WB_FULL_TESTS``, else ``ci``."""
    return full if FULL else ci
