"""The one cycle search: would merging kernels make them depend on each other in a
cycle? Used by ``Plan.fuse`` (on a plan's groups) and by the planners' ``Partition``.

Kernels run as units, so the search walks the kernel graph: from the kernels the
selection feeds, follow consumers; reaching the selection again means some outside
kernel both reads from it and feeds it.

Example::

    >>> succ = {"a": {"b"}, "b": {"c"}, "c": set()}
    >>> cycle_via({"a", "c"}, lambda k: succ[k])
    'b'
"""
from __future__ import annotations

from typing import Callable, Iterable


def cycle_via(selection: set[str], successors: Callable[[str], Iterable[str]],
              skip: Callable[[str], bool] | None = None) -> str | None:
    """The kernel, among those the selection feeds directly, through which a path leads
    back into the selection; None when merging the selection is acyclic.

    ``successors(k)`` gives the kernels reading from kernel k; ``skip(k)`` may say a
    kernel cannot lead back (a planner knows what it has not visited yet)."""
    start = set()
    for k in selection:
        start.update(successors(k))
    start -= selection
    via = {s: s for s in start}
    stack = [s for s in start if skip is None or not skip(s)]
    while stack:
        cur = stack.pop()
        for nxt in successors(cur):
            if nxt in selection:
                return via[cur]
            if nxt not in via:
                via[nxt] = via[cur]
                if skip is None or not skip(nxt):
                    stack.append(nxt)
    return None


def cycle_reason(first_node: str, kernel: str, ops: int) -> str:
    """Why a merge was refused, naming the kernel on the cycle by its first node."""
    return (f"would create a cycle through {first_node}"
            + (f" (kernel {kernel})" if ops > 1 else "")
            + ": it reads from the selection and feeds back into it")
