"""``workbench optimize GRAPH... --ranks p``: each graph (a distributed program, or a
plain graph every rank runs whole) on p gloo ranks: the load step, then the planner's
step (its distributed transformations; each rank's compute planned by the same
planner), each run and checked against the reference; one row per step."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .session import DistSession

COLUMNS = ("graph", "ranks", "step", "compute KB/rank", "sent KB/rank", "step ms",
           "compute ms", "comm ms", "max err")


def optimize_ranks(args) -> int:
    rows = []
    for path in args.graph:
        s = DistSession(path, ranks=args.ranks, seed=args.seed, planner=args.planner,
                        link=args.link)
        if args.planner != "none":
            s.auto(args.planner, keep_sharded=[k for k in args.keep_sharded.split(",") if k])
            if args.verbose:
                for d in s.step.decisions:
                    print(f"  {s.graph.name}: {d}", file=sys.stderr)
        for i, st in enumerate(s.history):
            s._history.goto(i)
            run = s.run(repeats=args.repeats)
            c = s.counted()
            slow = max(run.times, key=lambda t: t.step_s)
            rows.append({"graph": Path(path).name, "ranks": args.ranks, "step": st.action,
                         "compute KB/rank": c["compute_bytes"] / 1e3,
                         "sent KB/rank": c["sent_bytes"] / 1e3,
                         "step ms": slow.step_s * 1e3, "compute ms": slow.compute_s * 1e3,
                         "comm ms": slow.comm_s * 1e3,
                         "max err": max(run.errors.values(), default=0.0)})
    width = {k: max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in COLUMNS}
    print("  ".join(k.rjust(width[k]) for k in COLUMNS))
    for r in rows:
        print("  ".join(_fmt(r[k]).rjust(width[k]) for k in COLUMNS))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if not r["max err"] <= 1e-4]
    return 1 if bad else 0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
