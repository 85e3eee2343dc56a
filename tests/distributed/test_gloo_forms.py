"""The alpha-beta model of what gloo runs (``distributed.gloo_forms``): each collective's
form and its step count in p, the share of the cores when ranks outnumber them, the fit
per form and regime and its prediction for a rank count it did not see, the refusals;
``distributed.calibrate`` measuring real gloo ranks and fitting it."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from workbench.distributed.calibrate import measure
from workbench.distributed.cost import Link
from workbench.distributed.gloo_forms import (FORMS, FormLink, GlooForms, fit_forms,
                                              held_out, share, within)
from workbench.errors import WorkbenchError

SIZES = [1 << k for k in range(12, 27, 2)]
RESULTS = Path(__file__).parents[2] / "benchmarks/results"


def test_forms_count_the_steps_gloo_takes():
    n = 1 << 20
    ar, rs, a2a, sr = (FORMS[k] for k in ("all_reduce", "reduce_scatter",
                                          "all_to_all_single", "send_recv"))
    # gloo's ring AllReduce: a reduce-scatter pass and an all-gather pass
    assert (ar.name, ar.messages(4), ar.wire_bytes(n, 4)) == ("ring", 6, 1.5 * n)
    assert (rs.name, rs.messages(4), rs.wire_bytes(n, 4)) == ("ring", 3, 0.75 * n)
    assert FORMS["all_gather"] is rs and FORMS["all_to_all"] is a2a
    assert (a2a.name, a2a.messages(4), a2a.message_bytes(n, 4)) == ("direct", 3, n / 4)
    assert (sr.name, sr.messages(4), sr.wire_bytes(n, 4), sr.message_bytes(n, 4)) == \
        ("pair", 1, n, n)
    assert (share(2, 2), share(4, 2), share(8, 16)) == (1.0, 2.0, 1.0)


def _truth(cores=2):
    row = lambda op, cut, a0, g0, a1, g1: (op, FormLink(
        op, FORMS[op], cut, Link("s", a0, 1 / g0), Link("l", a1, 1 / g1), cores))
    # (cuts: a 2-rank step's message, n / 2, as a fit on 2 ranks finds them)
    return GlooForms("truth", (row("all_reduce", 128 << 10, 400e-6, 2e9, 900e-6, 0.8e9),
                               row("reduce_scatter", 512 << 10, 700e-6, 1e9, 0.0, 0.7e9),
                               row("all_gather", 512 << 10, 850e-6, 1.1e9, 300e-6, 1e9),
                               row("all_to_all_single", 32 << 10, 800e-6, 9e9, 1.2e-3, 1.3e9),
                               row("send_recv", 64 << 10, 300e-6, 3e9, 600e-6, 1.1e9)), cores)


def test_fit_on_two_ranks_predicts_four():
    true = _truth()
    sm = [(op, p, n, true.time(op, n, p)) for op, _ in true.rows for p in (2, 4)
          for n in SIZES]
    got = fit_forms([s for s in sm if s[1] == 2], cores=2)
    for (op, a), (_, b) in zip(got.rows, true.rows):
        assert a.form is b.form and a.cut_bytes == b.cut_bytes, op
        for x, y in ((a.small, b.small), (a.large, b.large)):
            assert (x.alpha, x.beta) == pytest.approx((y.alpha, y.beta), rel=1e-6), op
    # 4 ranks on 2 cores: the step counts and the cores' share carry the p
    for op, p, n, t in sm:
        assert got.time(op, n, p) == pytest.approx(t, rel=1e-6)
    ho = held_out(sm, cores=2)
    assert ho["fit on 2, predict 4"] == (40, 40)
    # (fitted on 4 ranks, a cut lies between 4-rank messages: a 2-rank message between
    # them may fall on the other side -- one size per collective at most)
    assert ho["fit on 4, predict 2"][0] >= 35
    # without the share (as many cores as ranks) a 2-rank fit underprices 4 ranks
    assert within(fit_forms([s for s in sm if s[1] == 2], cores=4),
                  [s for s in sm if s[1] == 4]) == 0


def test_refusals():
    ok = [("all_reduce", 2, n, 1e-3 + n * 1e-9) for n in SIZES[:2]]
    for bad, match in (([("matmul", 2, 4096, 1e-3)], "not a collective with a form"),
                       ([("all_reduce", 2, 4096, 1e-3)], "two sizes at least"),
                       ([("all_reduce", 1, 4096, 1e-3)], "2 ranks or more"),
                       ([("all_reduce", 2, 4096, 0.0)], "a time > 0"),
                       ([], "no samples to fit")):
        with pytest.raises(WorkbenchError, match=match):
            fit_forms(bad, cores=2)
    with pytest.raises(WorkbenchError, match="the cores the ranks share"):
        fit_forms(ok, cores=0)
    m = fit_forms(ok, cores=2)
    assert m.time("all_reduce", 4096, 1) == 0.0 and m.time("wait_tensor", 4096, 2) == 0.0
    with pytest.raises(WorkbenchError, match=r"no fit for all_gather .*--ops all_gather"):
        m.time("all_gather", 4096, 2)
    with pytest.raises(WorkbenchError, match="gloo runs ring"):
        m.time("all_reduce", 4096, 2, form="tree")
    # measure refuses before it starts a process
    for kw, match in ((dict(ranks=1), "2 ranks or more"), (dict(ops=("bcast",)), "bcast"),
                      (dict(sizes=(4100,)), "multiple of 4 x ranks")):
        with pytest.raises(WorkbenchError, match=match):
            measure(**kw)


def test_committed_run_scores_as_reported():
    """The committed benchmark's report is what the model says of its measurements."""
    res = json.loads((RESULTS / "alpha-beta-forms-2026-12-05-ab45.json").read_text())
    sm = [(c["op"], c["ranks"], c["bytes"], c["median_s"]) for c in res["rows"]]
    got = held_out(sm, res["cores"])
    for a, b in ((2, 4), (4, 2)):
        assert got[f"fit on {a}, predict {b}"][0] == \
            res["within_25pct"][f"{b} ranks"][f"fitted on {a} ranks"]


@pytest.mark.slow
def test_calibrate_on_two_gloo_ranks():
    """Real gloo: two ranks, two collectives, two sizes, the median of three calls; the
    session then prices with the fit."""
    from workbench.distributed.samples import dp_adamw
    from workbench.distributed.session import DistSession
    s = DistSession(dp_adamw(8, 6, 2), ranks=2)
    m = s.calibrate_link(ops=("all_reduce", "send_recv"), sizes=(4096, 16 << 20), reps=3,
                         pause=0.0)
    assert s.link is m and s.predict()["comm_s"] == m.time("all_reduce", 8 * 6 * 4, 2)
    assert [op for op, _ in m.rows] == ["all_reduce", "send_recv"]
    assert m.shares_cores and "calibrated here on 2 ranks" in m.name
    for op, r in m.rows:
        assert r.form is FORMS[op] and math.isinf(r.cut_bytes)    # (2 sizes: one line)
        # (<=: where a loaded host made 4 KB as slow as 16 MB, beta is clamped at 0)
        assert 0 < m.time(op, 4096, 2) <= m.time(op, 16 << 20, 2) < 10.0


def test_a_session_prices_with_the_fitted_forms():
    from workbench.distributed.samples import dp_adamw
    from workbench.distributed.session import DistSession
    true = _truth()
    s = DistSession(dp_adamw(8, 6, 2), ranks=4, link=true)
    n = 8 * 6 * 4                  # (the gradient's bytes, AllReduced whole)
    assert s.predict()["comm_s"] == pytest.approx(true.time("all_reduce", n, 4))
    s.auto()                       # (priced by it, every candidate listed)
    assert any("not applied" in x or "applied" in x for x in s.step.decisions)
