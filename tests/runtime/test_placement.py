"""Thread placement while a CPU program runs (runtime/placement.py): the calling thread
held on its CPU and the OpenMP threads each on another, the calling thread's own set
given back after the run (also when it raises, and after nested runs); left alone
where the user places threads or turns it off. What the calling thread is allowed is
read inside a real library call of a real compiled program (the matmul op's library
implementation wrapped by a spy that then runs the real one); where the OpenMP
threads are, from ``/proc/self/task``."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import Session
from workbench.ops import registry
from workbench.runtime import placement

sys.path.insert(0, str(Path(__file__).parent))
from test_threads import mlp_graph  # noqa: E402

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="thread placement needs Linux and at least two CPUs to place threads on")


@pytest.fixture
def seen_in_matmul(monkeypatch):
    """Each matmul library call appends the calling thread's allowed CPUs, then runs
    ``during`` (if set) and computes the real product."""
    seen: list = []
    hooks: dict = {}
    real = registry.get_op("matmul")

    def spy(xp, xs, attrs):
        seen.append(frozenset(os.sched_getaffinity(0)))
        if "during" in hooks:
            hooks["during"]()
        return real.library(xp, xs, attrs)

    monkeypatch.setitem(registry._REGISTRY, "matmul", dataclasses.replace(real, library=spy))
    for v in (placement.ENV, *placement.USER_PLACEMENT):
        monkeypatch.delenv(v, raising=False)
    return seen, hooks


def _program():
    g = mlp_graph()
    s = Session(g, backend="cpu")
    s.auto("stitch")
    x = np.random.default_rng(3).standard_normal(g.value("x").shape).astype(np.float16)
    return s.program(), {"x": x}


def _bound_threads() -> dict[int, set[int]]:
    """Each thread of this process other than the caller bound to one CPU: its CPU."""
    me, out = os.gettid() if hasattr(os, "gettid") else None, {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == me:
            continue
        try:
            text = Path(f"/proc/self/task/{tid}/status").read_text()
        except OSError:        # (the thread ended)
            continue
        cpus = next(line.split(":")[1].strip() for line in text.splitlines()
                    if line.startswith("Cpus_allowed_list"))
        if cpus.isdigit():
            out[int(tid)] = int(cpus)
    return out


def test_a_run_places_its_threads_and_gives_the_caller_its_set_back(seen_in_matmul):
    seen, _ = seen_in_matmul
    own = frozenset(os.sched_getaffinity(0))
    prog, feeds = _program()
    prog.run(feeds)
    assert seen and all(len(s) == 1 and s <= own for s in seen), seen
    assert frozenset(os.sched_getaffinity(0)) == own
    # the OpenMP worker(s) on CPUs of the set other than the caller's in the run
    held = set(seen[-1])
    workers = _bound_threads()
    assert workers and any(c in own and c not in held for c in workers.values()), workers


def test_the_callers_set_is_given_back_when_the_run_raises(seen_in_matmul):
    seen, hooks = seen_in_matmul
    own = frozenset(os.sched_getaffinity(0))
    prog, feeds = _program()

    def fail():
        raise RuntimeError("a library call failed")
    hooks["during"] = fail
    with pytest.raises(RuntimeError, match="library call failed"):
        prog.run(feeds)
    assert seen and len(seen[0]) == 1
    assert frozenset(os.sched_getaffinity(0)) == own


def test_nested_runs_bind_once_and_the_outermost_gives_the_set_back(seen_in_matmul):
    seen, hooks = seen_in_matmul
    own = frozenset(os.sched_getaffinity(0))
    outer, feeds = _program()
    inner, _ = _program()
    after_inner = []

    def nested():
        hooks.pop("during")       # (the inner run's matmuls record, not recurse)
        inner.run(feeds)
        after_inner.append(frozenset(os.sched_getaffinity(0)))
    hooks["during"] = nested
    outer.run(feeds)
    assert after_inner and len(after_inner[0]) == 1     # still the outer run's binding
    assert all(s == seen[0] for s in seen), seen
    assert frozenset(os.sched_getaffinity(0)) == own


@pytest.mark.parametrize("env", [("OMP_PROC_BIND", "close"), ("GOMP_CPU_AFFINITY", "0-1"),
                                 (placement.ENV, "0")])
def test_left_alone_where_the_user_places_threads_or_turns_it_off(seen_in_matmul,
                                                                  monkeypatch, env):
    seen, _ = seen_in_matmul
    monkeypatch.setenv(*env)
    own = frozenset(os.sched_getaffinity(0))
    prog, feeds = _program()
    prog.run(feeds)
    assert seen and all(s == own for s in seen), seen


def test_a_caller_held_to_one_cpu_keeps_it(seen_in_matmul):
    """A user's ``taskset`` of one CPU: nothing to place, the set unchanged."""
    seen, _ = seen_in_matmul
    own = os.sched_getaffinity(0)
    one = {min(own)}
    prog, feeds = _program()
    os.sched_setaffinity(0, one)
    try:
        out = prog.run(feeds)
        assert os.sched_getaffinity(0) == one
    finally:
        os.sched_setaffinity(0, own)
    assert seen and all(s == frozenset(one) for s in seen), seen
    np.testing.assert_allclose(out["y"].astype(np.float32),
                               prog.run(feeds)["y"].astype(np.float32))


def test_a_program_is_placed_only_while_its_runs_are_consistently_long(seen_in_matmul):
    """Placing costs 11-130 us: a program is placed while it has no run yet and while
    the fastest of its last ``PLACE_RUNS`` runs took ``PLACE_MIN_S`` or more; one slow
    run among short ones (a busy machine) does not turn it on, one fast run among long
    ones does not turn it off. Runs are real; their recorded times are set by the
    test."""
    seen, _ = seen_in_matmul
    own = frozenset(os.sched_getaffinity(0))
    prog, feeds = _program()
    want = prog.run(feeds)["y"]
    short, long = placement.PLACE_MIN_S / 2, placement.PLACE_MIN_S

    def placed_run(times) -> bool:
        rule = prog.place_rule
        rule.recent.clear()
        rule.recent.extend(times)
        seen.clear()
        y = prog.run(feeds)["y"]
        np.testing.assert_array_equal(y, want)
        assert seen and (all(s == own for s in seen) or all(len(s) == 1 for s in seen))
        return len(seen[0]) == 1

    n = placement.PLACE_RUNS
    assert placed_run([])                                  # no run yet
    assert not placed_run([short] * n)
    assert not placed_run([short] * (n - 1) + [1.0])       # one slow run under load
    assert placed_run([long] * n)
    assert not placed_run([long] * (n - 1) + [short])
    # the rule keeps PLACE_RUNS runs: an old short run forgotten
    assert placed_run([short] + [long] * n)
    # each run records its own time
    prog.place_rule.recent.clear()
    prog.run(feeds)
    assert len(prog.place_rule.recent) == 1 and 0 < prog.place_rule.recent[0] < 60
