#!/usr/bin/env python
"""Plan graphs under several PYTHONHASHSEEDs and report which plans differ (the stitch
planner must not depend on the process: :mod:`workbench.testing.plan_seeds`).

    python scripts/plan_seeds.py                       # every sample, 4 fuzz graphs, 2 zoo models
    python scripts/plan_seeds.py --seeds 0 1 onnx:/tmp/bart.onnx
    python scripts/plan_seeds.py --diff 0 1 fuzz:12    # and the plans' texts' diff
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.testing.plan_seeds import differing, fingerprints  # noqa: E402

DEFAULT = ([f"sample:{p.name}" for p in sorted((ROOT / "sample_graphs").glob("*.json"))]
           + [f"sample:{p.name}" for p in sorted((ROOT / "sample_graphs").glob("*.onnx"))]
           + [f"fuzz:{s}" for s in range(40)] + ["zoo:bert", "zoo:llama"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", default=DEFAULT)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    ap.add_argument("--diff", nargs=2, type=int, metavar=("SEED_A", "SEED_B"))
    a = ap.parse_args()
    seeds = sorted(set(a.seeds) | set(a.diff or ()))
    fp = fingerprints(a.specs, seeds, keep_text=bool(a.diff))
    for spec in a.specs:
        row = "  ".join(f"{fp[s][spec]['sha'][:8]}/{fp[s][spec]['kernels']}k" for s in seeds)
        print(f"{spec:48s} {row}")
    bad = differing(fp)
    print(f"{len(bad)} of {len(a.specs)} graphs plan differently across seeds {seeds}"
          + (f": {', '.join(bad)}" if bad else ""))
    if a.diff:
        x, y = a.diff
        for spec in bad:
            sys.stdout.writelines(difflib.unified_diff(
                fp[x][spec]["text"].splitlines(True), fp[y][spec]["text"].splitlines(True),
                f"{spec} seed {x}", f"{spec} seed {y}", n=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
