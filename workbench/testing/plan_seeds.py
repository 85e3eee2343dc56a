"""Does a plan depend on the process it was made in? The stitch planner must give the
same plan, decisions and estimates for the same graph under any ``PYTHONHASHSEED``:
a tie broken by the order of a set of strings (or of ``id()``-keyed dicts) makes the
plan a coin toss per process, and a user's numbers then change between two runs of the
same notebook.

A *graph spec* names a graph a fresh process can rebuild: ``sample:NAME`` (a file of
``sample_graphs/``), ``fuzz:SEED`` (the fuzzer's random graph of that seed),
``zoo:NAME`` (a tiny zoo model through ``from_torch``; torch needed) or ``onnx:PATH``.
:func:`fingerprints` plans each spec in a child process per hash seed and returns the
fingerprint (a SHA-256 of the plan's text, its groups' node tuples and schedules, the
decisions and every kernel's predicted seconds, on two targets) per seed and spec.

    >>> fp = fingerprints(["sample:softmax.json"], seeds=(0, 1))    # doctest: +SKIP
    >>> differing(fp)                                                # doctest: +SKIP
    []
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_spec(spec: str):
    """The graph a spec names (module docstring)."""
    kind, _, arg = spec.partition(":")
    if kind == "sample":
        from ..frontends import load
        return load(ROOT / "sample_graphs" / arg)
    if kind == "onnx":
        from ..frontends import load
        return load(Path(arg))
    if kind == "fuzz":
        from .fuzz.graphs import draw_graph
        return draw_graph(int(arg))
    if kind == "zoo":
        from . import zoo
        return zoo.import_torch(zoo.build(arg))
    raise ValueError(f"unknown graph spec {spec!r}: use sample:, fuzz:, zoo: or onnx:")


def plan_text(g) -> tuple[str, int]:
    """Everything the stitch planner decides about g, as text, on a GPU and a CPU (the
    CPU adds epilogues), and the CPU plan's kernel count."""
    from ..device import H100, assumed_cpu
    from ..fusion import run_planner
    from ..fusion.cost import CostModel
    lines, kernels = [], 0
    for device in (H100, assumed_cpu("seed check cpu", 8)):
        model = CostModel.for_device(device)
        plan, log = run_planner("stitch", g, model=model)
        lines.append(f"== {device.name}")
        lines.append(plan.describe())
        for gr in plan.groups:
            lines.append(f"{gr.id} {gr.nodes} {gr.schedule.describe()}")
        lines.extend(map(str, log))
        for gid, e in model.predict(plan).groups:
            lines.append(f"{gid} {e.seconds!r}")
        kernels = len(plan.groups)
    return "\n".join(lines), kernels


def child(specs: list[str]) -> dict:
    """Per spec: the fingerprint and kernel count of its plans in this process."""
    out = {}
    for spec in specs:
        text, kernels = plan_text(load_spec(spec))
        out[spec] = {"sha": hashlib.sha256(text.encode()).hexdigest()[:16],
                     "kernels": kernels, "text": text}
    return out


def fingerprints(specs: list[str], seeds=(0, 1, 2, 3), timeout: float = 1800,
                 keep_text: bool = False) -> dict[int, dict]:
    """Per hash seed, :func:`child`'s answer from a fresh interpreter (this checkout's
    workbench) run with ``PYTHONHASHSEED`` set to it."""
    out = {}
    for seed in seeds:
        env = dict(os.environ, PYTHONHASHSEED=str(seed),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, "-m", "workbench.testing.plan_seeds", *specs],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise RuntimeError(f"planning under PYTHONHASHSEED={seed} failed:\n{r.stderr[-3000:]}")
        got = json.loads(r.stdout.splitlines()[-1])
        if not keep_text:
            for v in got.values():
                v.pop("text")
        out[seed] = got
    return out


def differing(fp: dict[int, dict]) -> list[str]:
    """The specs whose fingerprint is not the same under every seed."""
    seeds = list(fp)
    return [s for s in fp[seeds[0]]
            if len({fp[k][s]["sha"] for k in seeds}) > 1]


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1:])))
