"""The alpha-beta model in two message-size regimes: the fit finds the cut and both
lines of a two-regime link, and on a committed run of this machine's gloo it puts at
least as many sizes within 25% as one line per collective."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.distributed.cost import GLOO_LOOPBACK, Link, SizeRegimes, fit, fit_regimes, within

RUN = Path(__file__).parents[2] / "benchmarks/results/collectives-2026-12-05-ring.json"


def test_fit_recovers_two_regimes():
    true = SizeRegimes("t", 1 << 20, Link("s", 500e-6, 1 / 2e9), Link("l", 3e-3, 1 / 0.7e9))
    sizes = [1 << k for k in range(12, 27, 2)]
    # (a rank count per regime: the ring form's coefficients differ with p)
    got = fit_regimes([("reduce_scatter", p, n, true.time("reduce_scatter", n, p))
                       for n in sizes for p in (2, 4)])
    assert got.cut_bytes == 1 << 20
    for a, b in ((got.small, true.small), (got.large, true.large)):
        assert a.alpha == pytest.approx(b.alpha, rel=1e-6)
        assert a.beta == pytest.approx(b.beta, rel=1e-6)
    with pytest.raises(ValueError, match="two regimes need 4"):
        fit_regimes([("all_reduce", 2, n, 1e-3) for n in sizes[:3]])


def test_regimes_fit_gloo_at_least_as_well_as_one_line():
    res = json.loads(RUN.read_text())
    two = [(c["op"], 2, c["bytes"], c["median_s"]) for r in res["runs"] if r["ranks"] == 2
           for c in r["collectives"] if c["op"] in ("all_reduce", "reduce_scatter",
                                                    "all_gather")]
    by = lambda op: [x for x in two if x[0] == op]
    ops = {x[0] for x in two}
    line = sum(within(fit(by(op)), by(op)) for op in ops)
    regimes = sum(within(fit_regimes(by(op)), by(op)) for op in ops)
    assert regimes >= line and regimes >= 20, (regimes, line)
    # the planner's link prices each collective in its regime
    assert all(isinstance(lk, SizeRegimes) for _, lk in GLOO_LOOPBACK.links)
