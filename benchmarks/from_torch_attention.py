#!/usr/bin/env python
"""Models imported with ``from_torch``: their attention's batched matmuls folded into
matmuls over batch x heads (``ir/batched_matmul.py``, what ``from_torch`` does) or left
as ``torch.export`` decomposed them (reshape -> bmm -> reshape), planned by ``stitch``
and timed side by side in one run.

    .venv/bin/python benchmarks/from_torch_attention.py
    .venv/bin/python benchmarks/from_torch_attention.py --models bert wav2vec2

Per zoo model (size ``small``): kernels and fused attention kernels of each plan,
median ms of one ``Program.run`` (the two timed in alternation, as
``benchmarks/models.py`` does), and the largest difference between their outputs.
Writes ``<out>/from-torch-attention-<date>.json`` and ``.md``; never exits non-zero
for a timing.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from models import (alternate, log, machine_line, model_timing_args,  # noqa: E402
                    rel_error, write_results)

MODELS = ("bert", "distilbert", "gpt2", "llama", "t5_encoder", "vit", "whisper_encoder",
          "wav2vec2")


def run_model(name: str, rounds: int, inner: int) -> dict:
    import workbench as wb
    import workbench.frontends.torch.importer as importer
    from workbench import zoo
    m = zoo.build(name, size="small")
    folded = zoo.import_torch(m)
    keep = importer.fold_batch_reshapes
    importer.fold_batch_reshapes = lambda g: g       # the import as it was before
    try:
        unfolded = zoo.import_torch(m)
    finally:
        importer.fold_batch_reshapes = keep
    ins = m.numpy_inputs()
    rec: dict = {"model": name}
    calls, outs = {}, {}
    for label, g in (("bmm as exported", unfolded), ("folded", folded)):
        s = wb.Session(g, backend="cpu")
        s.auto("stitch")
        prog = s.program()
        outs[label] = prog.run(ins)
        rec[label] = {"nodes": len(g.nodes), "kernels": len(prog.compiled),
                      "fused_attention": sum(gr.schedule.then is not None
                                             for gr in s.plan.groups)}
        calls[label] = (lambda p: lambda: p.run(ins))(prog)
    rec["max_rel_difference"] = rel_error(outs["folded"], outs["bmm as exported"])
    samples = alternate(calls, rounds, inner)
    for label, v in samples.items():
        rec[label]["ms"] = float(np.median(v) * 1e3)
    return rec


def markdown(res: dict) -> str:
    mi = res["machine"]
    lines = [f"# Attention imported from PyTorch, folded or not ({res['date']})", "",
             f"{machine_line(res)}; torch {mi['torch']}, transformers "
             f"{mi['transformers']}. Zoo size small, `stitch`; median ms of one call, "
             f"{res['rounds']} alternating rounds of {res['inner']} calls.", "",
             "| model | bmm as exported: kernels (fused attention), ms | folded: kernels "
             "(fused attention), ms | speedup | max rel. difference |",
             "|---|---|---|---|---|"]
    for r in res["models"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | |")
            continue
        u, f = r["bmm as exported"], r["folded"]
        lines.append(f"| {r['model']} | {u['kernels']} ({u['fused_attention']}), "
                     f"{u['ms']:.3f} | {f['kernels']} ({f['fused_attention']}), "
                     f"{f['ms']:.3f} | {u['ms'] / f['ms']:.2f}x | "
                     f"{r['max_rel_difference']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model_timing_args(ap, MODELS)
    a = ap.parse_args(argv)
    date = _dt.date.today().isoformat()
    res = {"date": date, "rounds": a.repeats, "inner": a.inner,
           "load_average_at_start": list(os.getloadavg()), "models": []}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"from-torch-attention-{date}"
    for name in a.models:
        log(f"{name}: import twice, plan, compile, time")
        try:
            res["models"].append(run_model(name, a.repeats, a.inner))
        except Exception as e:     # (reported, not raised: the other models still run)
            res["models"].append({"model": name, "error": str(e).splitlines()[0]})
        write_results(stem, res, markdown)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
