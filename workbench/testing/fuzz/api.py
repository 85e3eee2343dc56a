"""The ``api`` family: junk calls to the public Python API, as a careless user (or an
attacker) would make them -- wrong types, out-of-range counts, NUL bytes in paths,
huge integers -- each of which must end in a :class:`WorkbenchError` (one line) or
succeed, never in another exception, a hang or a dead process.

The calls are drawn from a seed over the faces a user holds: ``Session`` (built on a
small graph, on the CPU), the notebook app's methods (``WorkbenchApp``, never
displayed), ``load_artifact`` and an artifact model's call, ``onnx_backend.prepare``,
``load``, and ``GraphBuilder``. :func:`call_failures` returns what broke the rule.
"""
from __future__ import annotations

import math
import signal
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import WorkbenchError

# what a careless caller passes: each kind of wrong, and a few right values
JUNK = (None, True, 0, -1, 3, 2 ** 70, -2 ** 63, 1.5, math.nan, math.inf, "", "n0", "k0",
        "y", "rules", "tf32", "float32", "auto", "warp", "global", "\x00", "a\x00b",
        "x" * 5000, b"n0", [], [None], ["n0", 3], ["n0", "n1"], ("n0",), {}, {"a": 1},
        object(), np.int64(-5), np.float32(2.5), np.array([1, 2]), Path("/nonexistent/x"),
        Path(""), slice(None), type)
# a call must end within this (a loop bounded by nothing the caller passed hangs)
CALL_SECONDS = 60.0


@dataclass(frozen=True)
class CallFailure:
    target: str
    call: str
    error: str


def _draw(rng, n: int) -> list:
    return [JUNK[int(rng.integers(len(JUNK)))] for _ in range(n)]


def _calls(rng, session, app, artifact) -> list[tuple[str, str, object, tuple, dict]]:
    """(target, method name, callable, args, kwargs) of one drawn call per face."""
    import workbench as wb
    from ... import onnx_backend
    from ...ir import GraphBuilder
    a = lambda n: tuple(_draw(rng, n))     # noqa: E731
    kw = lambda *names: {k: _draw(rng, 1)[0] for k in names  # noqa: E731
                         if rng.random() < 0.5}
    out = []
    session_methods = {
        "fuse": (1, ()), "split": (1, ()), "set_scheme": (2, ()), "set_mapping": (2, ()),
        "set_launch": (1, ("threads", "tile_m", "stages")), "auto": (1, ()),
        "set_matmul_precision": (1, ()), "goto": (1, ()), "actions": (1, ()),
        "apply": (1, ()), "compare": (2, ()), "program": (1, ()), "kernels": (1, ()),
        "kernel": (2, ()), "source": (3, ()), "run": (1, ()),
        "measure": (0, ("plan", "warmup", "repeats", "counters")), "measured": (1, ()),
        "predict": (1, ()), "export": (1, ("measure", "force", "sign_with")),
        "table": (0, ("measure", "warmup", "repeats")),
        "tune": (0, ("refs", "repeats", "use_cache")),
        "constrain": (1, ()), "unconstrain": (1, ()), "lock": (2, ())}
    for name, (n, kws) in session_methods.items():
        out.append(("Session", name, getattr(session, name), a(n), kw(*kws)))
    out.append(("Session", "Session", wb.Session, a(1), kw("backend", "seed", "progress",
                                                           "matmul_precision")))
    if app is not None:
        for name, n in {"select": 1, "fuse": 1, "split": 1, "auto": 1,
                        "set_matmul_precision": 1, "set_scheme": 2, "set_mapping": 2,
                        "goto": 1, "compare": 2, "actions": 1, "preview": 1,
                        "export": 1, "save_graph": 1, "lock": 1, "unlock": 1}.items():
            out.append(("app", name, getattr(app, name), a(n), {}))
        out.append(("app", "selected=", lambda v: setattr(app, "selected", v), a(1), {}))
    out.append(("artifact", "load_artifact", wb.load_artifact, a(1),
                kw("backend", "trusted_keys", "require_signature")))
    if artifact is not None:
        out.append(("artifact", "model(...)", artifact, a(int(rng.integers(3))),
                    kw("x", "y", "gamma")))
    out.append(("onnx_backend", "prepare", onnx_backend.prepare, a(1),
                kw("device", "planner", "backend")))
    out.append(("load", "load", wb.load, a(1), {}))
    b = GraphBuilder("junk")
    out.append(("GraphBuilder", "input", b.input, a(2), kw("dtype")))
    out.append(("GraphBuilder", "op", b.op, a(3), kw("axes", "keepdims", "to")))
    return out


class _Overtime(Exception):
    pass


def _timed(fn, args, kwargs):
    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)

    def expire(signum, frame):
        raise _Overtime()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call_failures(seed: int, rounds: int, session, app=None, artifact=None
                  ) -> list[CallFailure]:
    """``rounds`` rounds of junk calls (one per face a round), drawn from ``seed``;
    the calls that raised anything but a WorkbenchError, or ran past CALL_SECONDS."""
    rng = np.random.default_rng(seed)
    fails = []
    for _ in range(rounds):
        for target, name, fn, args, kwargs in _calls(rng, session, app, artifact):
            shown = f"{name}{tuple(_short(x) for x in args)} {_short(kwargs)}"
            try:
                _timed(fn, args, kwargs)
            except WorkbenchError as e:
                if "\n" in str(e) and not str(e).startswith(("the C compiler", "NVRTC")):
                    fails.append(CallFailure(target, shown, f"a message of many lines: "
                                             f"{str(e)[:200]!r}"))
            except _Overtime:
                fails.append(CallFailure(target, shown, f"ran past {CALL_SECONDS:g} s"))
            except Exception as e:     # noqa: BLE001 -- a stray exception is the finding
                tb = traceback.extract_tb(e.__traceback__)[-1]
                fails.append(CallFailure(target, shown, f"{type(e).__name__}: "
                                         f"{str(e)[:200]} ({tb.filename}:{tb.lineno})"))
    return fails


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."
