"""Do ``auto``'s decisions that changed with the default gloo link hold? For each case,
``DistSession.auto`` under the old link (``cost.GLOO_LOOPBACK``) and the default
(``links.GLOO_FORMS``, the forms model); where the two programs differ, both run on p
gloo ranks (``DistSession.run``: each rank's segments planned by stitch, the outputs
checked against the reference) in alternating rounds, each round the best of
``--repeats`` timed steps, the slowest rank's (issue 45).

    python benchmarks/default_link.py [--rounds 3] [--repeats 3] [--out STEM]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

from harness import RESULTS, log, machine_line, write_results

# (name, sample, shape, ranks, the values kept sharded)
CASES = (("AdamW 16.8M", "adamw", (4096, 4096), 2, ("m_out", "v_out")),
         ("AdamW 16.8M", "adamw", (4096, 4096), 4, ("m_out", "v_out")),
         ("AdamW 1M", "adamw", (1024, 1024), 4, ("m_out", "v_out")),
         ("SGD 2 x 16.8M", "sgd", (4096, 4096), 2, ()))


def _program(sample, shape, p):
    from workbench.distributed import DistBuilder
    from workbench.distributed.samples import dp_adamw
    if sample == "adamw":
        return dp_adamw(*shape, p)
    b = DistBuilder("sgd", p)           # (two parameters, one AllReduce each)
    for i in range(2):
        g = b.input(f"g{i}", shape, placement="P(avg)")
        w = b.input(f"w{i}", shape)
        b.output(w - b.all_reduce(g, "avg") * 0.1, f"w{i}_out")
    return b.build()


def _case(name, sample, shape, p, keep, rounds, repeats, pause):
    from workbench.distributed.cost import GLOO_LOOPBACK
    from workbench.distributed.links import GLOO_FORMS
    from workbench.distributed.session import DistSession
    ss = {}
    for tag, link in (("GLOO_LOOPBACK", GLOO_LOOPBACK), ("GLOO_FORMS", GLOO_FORMS)):
        s = DistSession(_program(sample, shape, p), ranks=p, link=link)
        s.auto("stitch", keep_sharded=list(keep))
        ss[tag] = s
    row = {"case": name, "ranks": p, "shape": list(shape),
           "decisions": {k: [x for x in s.step.decisions if x.startswith("applied")]
                         for k, s in ss.items()},
           "ops": {k: [n.op for n in s.graph.nodes] for k, s in ss.items()}}
    if row["ops"]["GLOO_LOOPBACK"] == row["ops"]["GLOO_FORMS"]:
        row["same"] = True
        return row
    steps = {k: [] for k in ss}
    for _ in range(rounds):
        for k, s in ss.items():
            time.sleep(pause)
            r = s.run(repeats=repeats)
            if not r.ok:
                raise SystemExit(f"{name} on {p} ranks ({k}): {r.errors}")
            steps[k].append({part: max(getattr(t, part) for t in r.times)
                             for part in ("step_s", "compute_s", "comm_s")})
    row["measured"] = {k: {part: statistics.median(x[part] for x in v) * 1e3
                           for part in ("step_s", "compute_s", "comm_s")}
                       | {"min_step_ms": min(x["step_s"] for x in v) * 1e3, "rounds": v}
                       for k, v in steps.items()}
    return row


def markdown(res) -> str:
    L = [f"# auto's decisions under the default gloo link, measured ({res['date']})", "",
         machine_line(res) + f"; torch {res['machine'].get('torch')}, gloo over loopback; "
         f"{res['rounds']} alternating rounds, each the best of {res['repeats']} steps, "
         f"the slowest rank's, after a {res['pause']} s pause.", "",
         "| case | ranks | GLOO_LOOPBACK's program: step ms (compute / comm) | "
         "GLOO_FORMS's: step ms (compute / comm) | x |", "|---|---|---|---|---|"]
    for r in res["rows"]:
        if r.get("same"):
            L.append(f"| {r['case']} | {r['ranks']} | same program | same program | 1 |")
            continue
        a, b = r["measured"]["GLOO_LOOPBACK"], r["measured"]["GLOO_FORMS"]
        cell = lambda m: (f"{m['step_s']:.1f} ({m['compute_s']:.1f} / {m['comm_s']:.1f}; "
                          f"min {m['min_step_ms']:.1f})")
        L.append(f"| {r['case']} | {r['ranks']} | {cell(a)} | {cell(b)} | "
                 f"{a['step_s'] / b['step_s']:.2f} |")
    L += ["", "`x`: the old link's program's step / the default's (medians; > 1: the "
          "default's decision measured faster). Decisions applied:", ""]
    for r in res["rows"]:
        for k, d in r["decisions"].items():
            L.append(f"- {r['case']}, {r['ranks']} ranks, {k}: "
                     + ("; ".join(x.split(" (model")[0] for x in d) or "nothing applied"))
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--out", default=str(RESULTS / f"default-link-{dt.date.today()}"))
    a = ap.parse_args(argv)
    res = {"date": str(dt.date.today()), "rounds": a.rounds, "repeats": a.repeats,
           "pause": a.pause, "load_average_at_start": list(os.getloadavg()), "rows": []}
    for c in CASES:
        log(f"{c[0]} on {c[3]} ranks ...")
        res["rows"].append(_case(*c, a.rounds, a.repeats, a.pause))
        write_results(Path(a.out), res, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
