"""The distributed app (issue 45, item 6): how long its actions take, and its
timeline's model row against the measured rows.

On the committed sample ``sample_graphs/distributed/dp_adamw.json`` (the AdamW step
after the gradient AllReduce, 1M parameters) on 2 gloo ranks, through the real app
(``wb.open(Session(path, ranks=2))``), wall time of each action -- each after an idle
pause (``--pause``):

- ``open``: the DistApp built (program verified, drawn by Graphviz, timeline priced);
- ``actions``: the Transformations list (each offer tried on a session copy);
- ``preview``, ``apply``, ``rank``: the first offer drawn, applied, rank 1 chosen;
- ``measure``: the ranks run (checked against the reference), the timeline drawn;
  the first is cold (forkserver, each rank compiles its segments), then ``--repeats``
  warm ones.

For each of the three programs (load; split AllReduce; split + the sharded optimizer)
it sets the model row's step (``distributed/timeline.modelled_bars``) beside each
rank's measured step, compute and communication (the median of the warm measures;
the timeline draws the last).

    python benchmarks/dist_app.py [--repeats 3] [--pause 0.2] [--out STEM]

Writes ``<STEM>.json`` and ``<STEM>.md`` (default benchmarks/results/dist-app-DATE).
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from pathlib import Path

from harness import RESULTS, log, machine_line, write_results

SAMPLE = Path(__file__).resolve().parents[1] / "sample_graphs" / "distributed" / "dp_adamw.json"
KEEP = ["m_out", "v_out"]


def timed(pause: float, fn):
    time.sleep(pause)
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def measure_program(app, pause: float, repeats: int) -> dict:
    from workbench.distributed.timeline import modelled_bars
    runs, walls = [], []
    for _ in range(repeats + 1):
        run, wall = timed(pause, app.measure)
        if run is None:
            raise SystemExit(f"measure refused: {app.message}")
        runs.append(run)
        walls.append(wall)
    warm = runs[1:]
    model = modelled_bars(app.session.program, app.session.link)
    model_ms = max(b.end_s for b in model) * 1e3 if model else 0.0
    ranks = []
    for r in range(app.session.ranks):
        ts = [run.times[r] for run in warm]
        ranks.append({k: statistics.median(getattr(t, k) for t in ts) * 1e3
                      for k in ("step_s", "compute_s", "comm_s")})
    return {"step": app.session.step.action, "measure_cold_s": walls[0],
            "measure_warm_s": statistics.median(walls[1:]), "model_step_ms": model_ms,
            "ranks_ms": ranks, "max_error": max(max(r.errors.values()) for r in runs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"dist-app-{dt.date.today()}"))
    a = ap.parse_args(argv)
    import workbench as wb
    from workbench.session import Session
    res = {"sample": SAMPLE.name, "ranks": 2, "repeats": a.repeats, "pause_s": a.pause,
           "load_average_at_start": list(os.getloadavg()),
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    app, res["open_s"] = timed(a.pause, lambda: wb.open(Session(str(SAMPLE), ranks=2),
                                                         display=False))
    programs = [measure_program(app, a.pause, a.repeats)]
    actions = {}
    for _ in range(2):      # split AllReduce, then shard the optimizer
        offers, t = timed(a.pause, lambda: app.actions(keep_sharded=KEEP))
        actions.setdefault("actions_s", []).append(t)
        _, t = timed(a.pause, lambda: app.preview(0))
        actions.setdefault("preview_s", []).append(t)
        _, t = timed(a.pause, app.apply)
        actions.setdefault("apply_s", []).append(t)
        log(f"{app.message}")
        programs.append(measure_program(app, a.pause, a.repeats))
    _, res["rank_s"] = timed(a.pause, lambda: setattr(app, "rank", 1))
    res["actions"] = actions
    res["programs"] = programs
    write_results(Path(a.out), res, markdown)
    print(Path(a.out).with_suffix(".md").read_text())
    return 0


def markdown(res: dict) -> str:
    acts = res["actions"]
    lines = [f"# The distributed app: actions and the timeline ({res['date'][:10]})", "",
             machine_line(res) + ".", "",
             f"`{res['sample']}` on {res['ranks']} gloo ranks through "
             "`wb.open(Session(path, ranks=2))`; each action after an idle pause of "
             f"{res['pause_s']} s; warm measures: median of {res['repeats']}.", "",
             "| action | s |", "|---|---|",
             f"| open (verify, draw, price the timeline) | {res['open_s']:.2f} |"]
    for k, label in (("actions_s", "Transformations list (offers tried)"),
                     ("preview_s", "preview"), ("apply_s", "apply")):
        lines.append(f"| {label}: split AllReduce; shard the optimizer | "
                     f"{acts[k][0]:.2f}; {acts[k][1]:.2f} |")
    lines.append(f"| choose rank 1 | {res['rank_s']:.2f} |")
    lines += ["", "| step | measure cold / warm s | model step ms | rank: measured step "
              "(compute + communication) ms | max error |", "|---|---|---|---|---|"]
    for p in res["programs"]:
        ranks = "; ".join(f"{i}: {r['step_s']:.3g} ({r['compute_s']:.3g} + "
                          f"{r['comm_s']:.3g})" for i, r in enumerate(p["ranks_ms"]))
        lines.append(f"| {p['step']} | {p['measure_cold_s']:.1f} / "
                     f"{p['measure_warm_s']:.1f} | {p['model_step_ms']:.3g} | {ranks} | "
                     f"{p['max_error']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
