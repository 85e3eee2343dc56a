#!/usr/bin/env python
"""The ONNX node-test suite's supported share over the op types real models use.

Exports every model of the zoo (``workbench/testing/zoo.py``, size ``tiny``) with torch's
default exporter, collects the op types in those ONNX files, then runs every node test
case of the installed ``onnx`` package whose model uses only those op types exactly as
``tests/test_onnx_conformance.py`` does (same freezing of shape inputs, same
comparison), and reports pass / skip / fail per op type and overall (issue 12: at
least 85% of these cases must run and pass).

    .venv/bin/python scripts/conformance_share.py [--out benchmarks/results]

Writes ``<out>/conformance-zoo-<date>.md``; exits 1 when a case fails (a wrong
result, not a refusal).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def zoo_op_types() -> dict[str, set[str]]:
    """Op types (default domain) per zoo model's ONNX export."""
    import onnx

    from workbench.testing import zoo
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.MODELS:
            path = zoo.export_onnx(zoo.build(name), Path(tmp) / f"{name}.onnx")
            m = onnx.load(str(path))
            ops = {n.op_type for n in m.graph.node if n.domain in ("", "ai.onnx")}
            for f in m.functions:      # the exporter may keep functions: their bodies too
                ops |= {n.op_type for n in f.node if n.domain in ("", "ai.onnx")}
            out[name] = ops
            print(f"{name}: {len(ops)} op types", file=sys.stderr, flush=True)
    return out


def conformance_module():
    spec = importlib.util.spec_from_file_location(
        "_wb_conformance", ROOT / "tests" / "test_onnx_conformance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_case(mod, case) -> tuple[str, str]:
    """("pass" | "skip" | "fail", why) through the conformance test's own function."""
    import pytest
    try:
        mod.test_node_case(case)
    except pytest.skip.Exception as e:
        return "skip", str(e)[:100]
    except Exception as e:       # a wrong result or a crash: both are failures here
        return "fail", f"{type(e).__name__}: {str(e)[:160]}"
    return "pass", ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore")
    per_model = zoo_op_types()
    zoo_ops = set().union(*per_model.values())
    mod = conformance_module()
    results = []
    for case in mod.CASES:
        if case.model is None:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        if not ops or not ops <= zoo_ops:
            continue
        status, why = run_case(mod, case)
        results.append((case.name, sorted(ops), status, why))
    total = Counter(s for _, _, s, _ in results)
    by_op = defaultdict(Counter)
    for _, ops, s, _ in results:
        for op in ops:
            by_op[op][s] += 1
    n = len(results)
    share = total["pass"] / n if n else 0.0
    date = _dt.date.today().isoformat()
    import onnx
    lines = [f"# ONNX node tests over the zoo's op types ({date})", "",
             f"onnx {onnx.__version__}. The zoo's ONNX files (torch.onnx.export, default "
             f"exporter and opset; {', '.join(sorted(per_model))}) use {len(zoo_ops)} op "
             f"types: {', '.join(sorted(zoo_ops))}.", "",
             f"Node test cases using only those op types: **{n}**; pass **{total['pass']}** "
             f"(**{share:.1%}**), skipped {total['skip']}, failed {total['fail']}.", "",
             "| op type | pass | skip | fail |", "|---|---|---|---|"]
    for op in sorted(by_op):
        c = by_op[op]
        lines.append(f"| {op} | {c['pass']} | {c['skip']} | {c['fail']} |")
    lines += ["", "Skipped and failed cases:", ""]
    lines += [f"- {name} ({s}): {why}" for name, _, s, why in results if s != "pass"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"conformance-zoo-{date}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))
    return 1 if total["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
