"""The links a session prices collectives with by name (``DistSession(link="gloo")``,
``workbench optimize --link``), and the default one: this machine's gloo as the forms
model (:mod:`.gloo_forms`) fitted on its committed measurements.

Why the forms model, not :data:`.cost.GLOO_LOOPBACK` (the per-op, per-regime fit the
planner used before): GLOO_LOOPBACK was fitted on 2-rank runs with no term for the
cores the ranks share, so at 4 ranks on 2 cores it predicts 8-10 of 40 sizes within
25% (the forms fit on 2 ranks, held out: 21-23), and it priced gloo's AllReduce
below ReduceScatter + AllGather at 64 MB on 2 ranks (84 vs 93 ms) where both runs
measured the pair faster (75 vs 100-106 ms) -- the sharded optimizer step that
ReduceScatter + AllGather serve measured 1.27x AllReduce + torch fused AdamW
(benchmarks/results/collectives-2026-12-05-quiet-s6.md).
"""
from __future__ import annotations

from .cost import INFINIBAND, NVLINK, Link
from .gloo_forms import FORMS, FormLink, GlooForms


def _row(op: str, cut: float, small: tuple[float, float], large: tuple[float, float],
         cores: int) -> tuple[str, FormLink]:
    return op, FormLink(op, FORMS[op], cut, Link(f"{op} <= {cut:g} B a step", *small),
                        Link(f"{op} > {cut:g} B a step", *large), cores)


# gloo over loopback on this machine (AMD EPYC, 2 cores: the share of the cores
# applies from 3 ranks), fitted by gloo_forms.fit_forms(samples, cores=2) on the 80
# 2-rank rows of the two committed runs pooled (5 collectives x 8 sizes, 4 KB .. 64 MB,
# median of 9 calls: benchmarks/results/alpha-beta-forms-2026-12-05-ab45.json and
# -ab45-2.json). Scored on those runs: 39 and 36 of 40 2-rank sizes within 25%, and
# the 4-rank sizes it was not fitted on 21 and 23 of 40 (GLOO_LOOPBACK: 8 and 10).
# (alpha s, beta s/byte) below and above the cut (one step's message: n/p, n a pair's).
_CORES = 2
GLOO_FORMS = GlooForms("gloo loopback (forms fitted on 2 ranks, cores shared)", (
    _row("all_reduce", 512 << 10, (525.7e-6, 1 / 1.268e9), (0.0, 1 / 0.816e9), _CORES),
    _row("reduce_scatter", 512 << 10, (868.2e-6, 1 / 1.090e9), (337.8e-6, 1 / 0.906e9),
         _CORES),
    _row("all_gather", 512 << 10, (855.6e-6, 1 / 1.392e9), (99.0e-6, 1 / 0.889e9), _CORES),
    _row("all_to_all_single", 512 << 10, (831.6e-6, 1 / 1.698e9), (365.2e-6, 1 / 1.083e9),
         _CORES),
    _row("send_recv", 1 << 20, (752.5e-6, 1 / 1.242e9), (0.0, 1 / 1.073e9), _CORES)),
    _CORES)

# what DistSession prices with unless given another link
DEFAULT_LINK = GLOO_FORMS
PRESETS = {"nvlink": NVLINK, "infiniband": INFINIBAND, "gloo": GLOO_FORMS}
