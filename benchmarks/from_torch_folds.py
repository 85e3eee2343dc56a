#!/usr/bin/env python
"""Models imported with ``from_torch``, with and without the import's rewrites, one
added at a time, beside the same model exported to ONNX and imported from that file:
each planned by ``stitch`` and timed side by side in one run.

The rewrites (all in ``from_torch``): ops on constants alone computed once
(``ir/constant_folding.py``), attention's batched matmuls folded into matmuls over
batch x heads (``ir/batched_matmul.py``) and linear layers over flattened rows done
over their leading axes (``ir/matmul_rows.py``).

    .venv/bin/python benchmarks/from_torch_folds.py
    .venv/bin/python benchmarks/from_torch_folds.py --models bert wav2vec2

Per zoo model (size ``small``): nodes, kernels and fused attention kernels of each
plan, median ms of one ``Program.run`` (all timed in alternation, as
``benchmarks/models.py`` does), and the largest difference of each output from the
full import's. Writes ``<out>/from-torch-folds-<date>.json`` and ``.md``;
never exits non-zero for a timing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from harness import (alternate, log, machine_line, model_timing_args, rel_error,
                     write_results)

MODELS = ("bert", "distilbert", "gpt2", "llama", "t5_encoder", "vit", "whisper_encoder",
          "wav2vec2", "resnet")


VARIANTS = ("as exported", "constants", "+ bmm", "+ rows", "ONNX export")
FULL = "+ rows"          # what from_torch does


def _imports(m) -> dict:
    """The model's graph each way (``VARIANTS``)."""
    import workbench as wb
    import workbench.frontends.torch.importer as importer
    from workbench.testing import zoo

    rewrites = ("fold_constants", "fold_batch_reshapes", "fold_row_reshapes")

    def imported(n: int):
        """The import with its first ``n`` rewrites."""
        keep = {r: getattr(importer, r) for r in rewrites}
        for r in rewrites[n:]:
            setattr(importer, r, lambda g: g)
        try:
            return zoo.import_torch(m)
        finally:
            for r, f in keep.items():
                setattr(importer, r, f)

    with tempfile.TemporaryDirectory() as tmp:
        onnx_graph = wb.load(zoo.export_onnx(m, Path(tmp) / "model.onnx"))
    return {**{v: imported(n) for n, v in enumerate(VARIANTS[:-1])},
            "ONNX export": onnx_graph}


def run_model(name: str, rounds: int, inner: int) -> dict:
    import workbench as wb
    from workbench.testing import zoo
    m = zoo.build(name, size="small")
    ins = m.numpy_inputs()
    rec: dict = {"model": name}
    calls, outs = {}, {}
    for label, g in _imports(m).items():
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        prog = s.program()
        outs[label] = prog.run(ins)
        rec[label] = {"nodes": len(g.nodes), "kernels": len(prog.compiled),
                      "fused_attention": sum(gr.schedule.then is not None
                                             for gr in s.plan.groups)}
        calls[label] = (lambda p: lambda: p.run(ins))(prog)
    for label in VARIANTS:
        rec[label]["max_rel_difference"] = rel_error(outs[label], outs[FULL])
    samples = alternate(calls, rounds, inner)
    for label, v in samples.items():
        rec[label]["ms"] = float(np.median(v) * 1e3)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Models imported from PyTorch, folded or not ({res['date']})", "",
             f"{machine_line(res)}; torch {mi['torch']}, transformers "
             f"{mi['transformers']}. Zoo size small, `stitch`; median ms of one call, "
             f"{res['rounds']} alternating rounds of {res['inner']} calls. Each cell: "
             "nodes / kernels (fused attention kernels) / ms; x = as exported / "
             "method. Columns: no rewrite, then one added at a time (constants folded, "
             "attention's bmm, linear layers' rows: `+ rows` is what `from_torch` does). "
             "Largest difference of any output from the full import's: "
             f"{res.get('max_difference', 0):.1e}.", "",
             "| model | " + " | ".join(VARIANTS) + " |",
             "|---|" + "---|" * len(VARIANTS)]
    for r in res["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} |" + " |" * (len(VARIANTS) - 1))
            continue
        base = r["as exported"]["ms"]
        cells = [f"{v['nodes']} / {v['kernels']} ({v['fused_attention']}) / "
                 f"{v['ms']:.3f} ({base / v['ms']:.2f}x)" for v in map(r.get, VARIANTS)]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS)
    a = ap.parse_args(argv)
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.repeats, "inner": a.inner,
           "load_average_at_start": list(os.getloadavg()), "models": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"from-torch-folds-{date}"
    for name in a.models:
        log(f"{name}: import five ways, plan, compile, time")
        try:
            res["models"].append(run_model(name, a.repeats, a.inner))
        except Exception as e:     # (reported, not raised: the other models still run)
            res["models"].append({"model": name, "error": str(e).splitlines()[0]})
        res["max_difference"] = max([v["max_rel_difference"] for r in res["models"]
                                     for k, v in r.items() if k in VARIANTS] or [0.0])
        write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
