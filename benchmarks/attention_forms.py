"""The CPU's fused attention taken three ways, side by side: whole rows of scores,
the online softmax over every block of keys, and the online softmax skipping the
blocks a causal mask hides -- the measurements behind ``fusion/gemm/attention.py``'s
thresholds (``CpuAttention``'s ``online`` and ``causal`` blocks' ``min_keys``) for float32
and bfloat16.

Each case is ``softmax(q kᵀ x 1/8 + mask) v`` over one batch item of 8 heads of 64, as
an exported model writes it: the mask a padding input (``[1, 1, 1, keys]``) or a
constant causal mask (0 and the dtype's lowest); in bfloat16 the logits widened to
float32 for the softmax and the probabilities cast back (LLaMA's
``softmax(..., dtype=float32).to(bfloat16)``). The forms are the launch parameters
``online=0``, ``online=1, skip=0`` and ``online=1`` (the skip, causal cases only) of the
one stitch kernel, timed in alternation (models.py's loop) after each is checked
against the NumPy reference.

    .venv/bin/python benchmarks/attention_forms.py                  # 2 dtypes x 3 lengths
    .venv/bin/python benchmarks/attention_forms.py --keys 1024 --dtypes bfloat16
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from pathlib import Path

import numpy as np

from harness import RESULTS, ROOT, alternate, log, machine_line, write_results

FORMS = {"whole rows": dict(online=0), "online, every key": dict(online=1, skip=0),
         "online, skip": dict(online=1)}


def attention(keys: int, dtype: str, causal: bool, heads: int = 8, d: int = 64):
    """The case's graph (see the module docstring)."""
    import workbench as wb
    from workbench.fusion.key_limit import causal_mask
    b = wb.GraphBuilder(f"{'causal_' if causal else ''}attention_{keys}_{dtype}")
    q, kt = b.input("q", (1, heads, keys, d), dtype), b.input("kt", (1, heads, d, keys), dtype)
    v = b.input("v", (1, heads, keys, d), dtype)
    z = b.matmul(q, kt) * b.constant(np.array(1 / np.sqrt(d), dtype))
    if causal:
        z = z + b.constant(causal_mask(keys, keys, dtype), "mask")
    else:
        z = z + b.input("mask", (1, 1, 1, keys), dtype, range=(-1.0, 0.0))
    if dtype != "float32":
        z = b.cast(z, to="float32")
    p = b.softmax(z, axis=-1)
    b.output(b.matmul(p if dtype == "float32" else b.cast(p, to=dtype), v), "o")
    return b.build()


def run_case(keys: int, dtype: str, causal: bool, rounds: int, inner: int) -> dict:
    from workbench.session import Session
    g = attention(keys, dtype, causal)
    rec: dict = {"keys": keys, "dtype": dtype, "causal": causal}
    methods = {}
    s = Session(g, backend="cpu")
    s.auto("stitch")           # (planned once; each form is a launch of its one kernel)
    (gid,) = [gr.id for gr in s.plan.groups if gr.schedule.then is not None]
    for form, launch in FORMS.items():
        if form == "online, skip" and not causal:
            continue
        plan = s.plan.set_launch(gid, **launch)
        m = s.measure(plan, warmup=1, repeats=1)
        rec.setdefault("within_tolerance", {})[form] = bool(m.within_tolerance)
        rec.setdefault("schedule", {})[form] = plan.group(gid).schedule.describe()
        prog = s.program(plan)
        methods[form] = lambda prog=prog: prog.run(s.inputs)
    samples = alternate(methods, rounds, inner)
    rec["latency_ms"] = {k: float(np.median(v) * 1e3) for k, v in samples.items()}
    return rec


def markdown(res: dict) -> str:
    lines = [f"# The CPU's fused attention, three ways ({res['date']})", "",
             machine_line(res) + f"; workbench at {res['commit']}.", "",
             "One batch item, 8 heads of 64; median ms of one call, "
             f"{res['rounds']} alternating rounds of {res['inner']} calls; each form checked "
             "against the NumPy reference first. `x` = whole rows / the form.", "",
             "| dtype | keys | mask | whole rows | online, every key | online, skip | "
             "all within tolerance |", "|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        lat = r["latency_ms"]
        base = lat["whole rows"]
        cells = [f"{lat[f]:.2f}" + ("" if f == "whole rows" else f" ({base / lat[f]:.2f}x)")
                 if f in lat else "-" for f in FORMS]
        lines.append(f"| {r['dtype']} | {r['keys']} | {'causal' if r['causal'] else 'padding'} "
                     f"| " + " | ".join(cells) + f" | {all(r['within_tolerance'].values())} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", nargs="+", type=int, default=[1024, 2048, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                    choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=6, help="alternating rounds")
    ap.add_argument("--inner", type=int, default=3, help="timed calls per form per round")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip() or "unknown"
    date = _dt.date.today().isoformat()
    res = {"date": date, "commit": commit, "rounds": a.rounds, "inner": a.inner,
           "load_average_at_start": list(os.getloadavg()), "cases": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"attention-forms-{date}{a.tag}"
    for dtype in a.dtypes:
        for keys in a.keys:
            for causal in (False, True):
                log(f"{dtype} {keys} keys {'causal' if causal else 'padding'}")
                res["cases"].append(run_case(keys, dtype, causal, a.rounds, a.inner))
                write_results(stem, res, markdown)
    print(markdown(res))
    log(f"wrote {stem}.json and {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
