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
    kernel cannot lead back (a planner knows what it has not visited yet). Which
    kernel is named must not depend on the hash order of the sets of names (it differs
    per process): the walk that finds a cycle is redone in kernel order to name it
    (only then: the search asks mostly whether there is one, and sorting at every step
    of every check would cost the planner's hot loop)."""
    if _walk(selection, successors, skip, None) is None:
        return None
    return _walk(selection, successors, skip, _kernel_order)


def _kernel_order(k: str):
    """Kernel ids are ``k<graph position of the first op>``: by length, then text, is by
    position (and is some fixed order for any other names)."""
    return len(k), k


def _walk(selection, successors, skip, order) -> str | None:
    arrange = (lambda ks: ks) if order is None else (lambda ks: sorted(ks, key=order))
    start = set()
    for k in selection:
        start.update(successors(k))
    start -= selection
    via = {s: s for s in start}
    # (reversed in kernel order: the stack pops the first kernel first)
    stack = [s for s in arrange(start) if skip is None or not skip(s)][::-1]
    while stack:
        cur = stack.pop()
        nexts = arrange(successors(cur))
        for nxt in nexts:
            if nxt in selection:
                return via[cur]
        for nxt in (nexts if order is None else nexts[::-1]):
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
