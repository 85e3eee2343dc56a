"""Check a change to the preludes: every kernel's source differs only by helper
definitions removed from its prelude.

``dump`` writes every kernel's whole source (``render_kernel``: prelude + kernel), C and
CUDA, of every sample graph under every planner, one file each; run it with the code
before the change (``PYTHONPATH`` at a checkout of it) and after. ``compare`` then
removes from each source before the change the helper definitions (``Helper.body`` of
the ops' helpers and the renderers' own, as this checkout defines them) that the
source after it lacks, and requires the two to be equal -- so every kernel body, and
everything else in the prelude, is byte-identical.

    PYTHONPATH=OLD python scripts/prelude_diff.py dump BEFORE
    python scripts/prelude_diff.py dump AFTER
    python scripts/prelude_diff.py compare BEFORE AFTER
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANNERS = ("none", "xla", "rules", "stitch")


def dump(out: Path) -> None:
    from workbench.codegen import lower_plan, render_kernel
    from workbench.frontends import load
    from workbench.fusion import run_planner
    out.mkdir(parents=True, exist_ok=True)
    samples = sorted((ROOT / "sample_graphs").glob("*.json")) + sorted(
        (ROOT / "sample_graphs").glob("*.onnx"))
    for path in samples:
        g = load(path)
        for planner in PLANNERS:
            for k in lower_plan(run_planner(planner, g)[0]):
                for target in ("c", "cuda"):
                    (out / f"{path.name}--{planner}--{k.name}.{target}").write_text(
                        render_kernel(k, target))
    print(f"{sum(1 for _ in out.iterdir())} sources from {sys.modules['workbench'].__file__}")


def compare(before: Path, after: Path) -> int:
    from workbench.codegen.render.c import MICRO_KERNEL
    from workbench.ops import all_helpers
    helpers = all_helpers() + (MICRO_KERNEL,)
    names = sorted(p.name for p in before.iterdir())
    if names != sorted(p.name for p in after.iterdir()):
        print("the two dumps hold different kernels")
        return 1
    bad, removed, saved = [], 0, {"c": 0, "cuda": 0}
    for name in names:
        target = name.rsplit(".", 1)[1]
        old, new = (before / name).read_text(), (after / name).read_text()
        stripped = old
        for h in helpers:
            body = h.body(target)
            if body and body in stripped and body not in new:
                stripped = stripped.replace(body, "", 1)
                removed += 1
        if stripped != new:
            bad.append(name)
        saved[target] += len(old) - len(new)
    n = len(names)
    print(f"{n} sources: {removed} helper definitions removed; {n - len(bad)} equal to the "
          f"source before with them removed; {len(bad)} differ otherwise")
    print(f"characters removed: C {saved['c']}, CUDA {saved['cuda']} "
          f"(mean {saved['c'] / max(1, n / 2):.0f} and {saved['cuda'] / max(1, n / 2):.0f} "
          "a source)")
    for name in bad[:20]:
        print("  differs:", name)
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
