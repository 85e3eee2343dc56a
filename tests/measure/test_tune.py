"""Tuning on the CPU backend (measure/tune.py): the candidates each kernel kind is
searched over -- a GEMM kernel's implementation (micro-kernel or sgemm per tile), its
tiles and a fused attention's softmax form among them -- timed on the values the kernel
really receives, the fastest kept only when it is confirmed faster in alternation with
the rule and matches the reference, and cached per kernel source."""
from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.fusion.gemm import tiles
from workbench.fusion.mapping import ScheduleKind
from workbench.fusion.gemm_shape import DEPTHWISE_LANES
from workbench.ir import GraphBuilder
from workbench.measure import tune
from workbench.session import Session

from plan_checks import check_plan

RNG = np.random.default_rng(3)


def _ffn():
    b = wb.GraphBuilder("ffn")
    x = b.input("x", (2, 96, 128))
    w = b.constant(RNG.standard_normal((128, 320)).astype(np.float32), "w")
    b.output(b.gelu(b.matmul(x, w)), "y")
    return b.build()


def _attention(keys=100):        # short rows: K and V sgemm's by the rule
    b = wb.GraphBuilder("attention")
    q, kt = b.input("q", (1, 2, 64, 16)), b.input("kt", (1, 2, 16, keys))
    v = b.input("v", (1, 2, keys, 32))
    b.output(b.matmul(b.softmax(b.matmul(q, kt) * 0.25, axis=-1), v), "o")
    return b.build()


def _conv():
    b = wb.GraphBuilder("conv")
    x = b.input("x", (1, 4, 20, 20))
    w = b.constant(RNG.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    b.output(b.relu(b.op("conv", x, w, pads=[1, 1, 1, 1])), "y")
    return b.build()


def _gemm_group(make):
    s = Session(make(), backend="cpu")
    s.auto("rules")
    (gr,) = [gr for gr in s.plan.groups if gr.schedule.kind is ScheduleKind.gemm]
    return s, gr


def _labels(gr):
    return [c.label for c in tune.candidates(gr)]


def test_gemm_candidates_by_kind(monkeypatch):
    """The micro-kernel's kernels offer sgemm; every matmul offers tiles of half and
    twice the rule's rows and columns; a fused attention the other softmax form and
    rows only (its tiles are whole rows); a convolution sgemm (its patches gathered
    row-major), and its filters and columns."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    _, gr = _gemm_group(_ffn)
    t = gr.schedule.gemm
    assert _labels(gr)[:2] == ["rule", "blas=1"]
    assert f"tile_m={t.tile_m // 2}" in _labels(gr)
    assert f"tile_n={min(t.tile_n * 2, t.n)}" in _labels(gr)
    _, gr = _gemm_group(_attention)      # K and V sgemm's by the rule (no online form)
    labels = _labels(gr)
    assert "blas=0" in labels and "online=1" in labels
    assert not any(x.startswith("tile_n") for x in labels)
    _, gr = _gemm_group(_conv)
    labels = _labels(gr)
    assert labels[:2] == ["rule", "blas=1"] and any(x.startswith("tile_m") for x in labels)
    assert any(x.startswith("tile_n") for x in labels), labels
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 1 << 30)     # sgemm per tile
    _, gr = _gemm_group(_ffn)
    assert "blas=1" not in _labels(gr)      # (blas=0 is offered, and refused when made)


def test_a_depthwise_convolution_offers_its_tap_by_tap_path_and_sgemm(monkeypatch, tmp_path):
    """A depthwise convolution in the lanes (or a plane at a time) offers both other
    ways: blas=0 (tap by tap into the tile) and blas=1 (sgemm on gathered patches);
    tuning times all three and keeps a correct one."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))     # no earlier answers
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    b = GraphBuilder("dw")
    x = b.input("x", (2, 32, 4, 4))
    w = b.constant(np.random.default_rng(0).standard_normal((32, 1, 3, 3), np.float32))
    b.output(b.relu(b.op("conv", x, w, group=32, pads=[1, 1, 1, 1])), "y")
    s = Session(b.build(), backend="cpu")
    s.auto("rules")
    (gr,) = s.plan.groups
    assert gr.schedule.gemm.packed_b == DEPTHWISE_LANES
    assert {"rule", "blas=0", "blas=1"} <= set(_labels(gr))
    s.tune(repeats=2)
    (r,) = s.tuning
    assert {"rule", "blas=0", "blas=1"} <= set(r.table.candidate) and r.table.ok.all()
    check_plan(s)


@pytest.mark.parametrize("make", [_ffn, _attention])
def test_tune_searches_gemm_kernels_and_caches(make, tmp_path, monkeypatch):
    """Session.tune times every candidate of a GEMM kernel on its real inputs, keeps a
    correct one, and a second search of the same kernel source is answered from the
    cache; the tuned plan matches the reference either way."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))     # no earlier answers
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(make(), backend="cpu")
    s.auto("rules")
    s.tune(repeats=3)
    (r,) = [r for r in s.tuning if r.chosen.schedule.kind is ScheduleKind.gemm]
    table = r.table
    assert {"rule", "blas=1" if make is _ffn else "blas=0"} <= set(table.candidate)
    assert len(table) >= 4
    assert table.chosen.sum() == 1 and (table.ms > 0).all() and not r.cached
    chosen = table[table.chosen].iloc[0]
    assert chosen.candidate == "rule" or chosen.ok
    assert (", ".join(f"{k}={v}" for k, v in r.chosen.forced_launch) or "rule"
            ) == chosen.candidate
    check_plan(s, scale=_attention_scale if make is _attention else None)
    again = Session(make(), backend="cpu")
    again.auto("rules")
    again.tune(repeats=3)
    (r2,) = [r for r in again.tuning if r.chosen.schedule.kind is ScheduleKind.gemm]
    assert r2.cached and r2.chosen.forced_launch == r.chosen.forced_launch


def _attention_scale(ins):
    """|softmax(scores)| @ |v|: what the attention output's rounding is bounded by."""
    z = (ins["q"] @ ins["kt"]).astype(np.float64) * 0.25
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    return {"o": (p / p.sum(axis=-1, keepdims=True)) @ np.abs(ins["v"])}


class _Timed:
    """A kernel sequence whose timings are given: what the host's load makes of a
    kernel's time is the input of the decision tested here."""

    def __init__(self, seconds):
        self.seconds = list(seconds)

    def time_env(self, env, warmup, repeats):
        return [self.seconds.pop(0)], 0.0


def test_a_candidate_faster_once_is_not_taken_unconfirmed():
    """Timed again in alternation with the rule, a candidate must still win by
    MIN_GAIN: one lucky timing is not cached for good."""
    n = tune.CONFIRM_ROUNDS
    rule = (1.0, None, None, _Timed([1.0] * n), {})
    lucky = (0.5, None, None, _Timed([1.0] * n), {})
    faster = (0.5, None, None, _Timed([0.9] * n), {})
    assert not tune._confirmed(rule, lucky, 0, 1)
    rule = (1.0, None, None, _Timed([1.0] * n), {})
    assert tune._confirmed(rule, faster, 0, 1)


def test_climb_changes_one_more_parameter_of_the_fastest(monkeypatch):
    """From a GEMM candidate, its neighbours are its launch with one parameter more
    set or changed, as the schedule it makes offers them (tiles halved and doubled from
    its own)."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s, gr = _gemm_group(_ffn)
    best = tune.Candidate(None, (("blas", 1),))
    made = tune._make(s.plan, gr, best)
    near = [dict(c.launch) for c in tune.climb(best, made)]
    t = made.schedule.gemm
    assert {"blas": 1, "tile_m": t.tile_m // 2} in near
    assert {"blas": 1, "tile_n": min(t.tile_n * 2, t.n)} in near
    for d in near:      # one parameter more set, or the one it has changed
        assert len(set(d.items()) - {("blas", 1)}) == 1, d


def test_gemm_parameters_are_searched_together(monkeypatch, tmp_path):
    """Where two parameters each win alone, their combination is timed too, and kept
    when it is faster still (the kernel's times given, as the host's load would; each
    candidate compiled, run and checked against the reference as tuning does)."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s, gr = _gemm_group(_ffn)
    half = gr.schedule.gemm.tile_m // 2
    real = tune._time

    def seconds(group):
        lc = dict(group.forced_launch)
        return 1.0 - 0.2 * (lc.get("blas") == 1) - 0.2 * (lc.get("tile_m") == half)

    def given(backend, plan, group, env, warmup, repeats):
        k, ck, seq, dev_env, _ = real(backend, plan, group, env, 0, 1)
        seq.time_env = lambda *a: ([seconds(group)], 0.0)
        return k, ck, seq, dev_env, seconds(group)
    monkeypatch.setattr(tune, "_time", given)
    s.tune(repeats=1)
    (r,) = [r for r in s.tuning if r.chosen.schedule.kind is ScheduleKind.gemm]
    assert dict(r.chosen.forced_launch) == {"blas": 1, "tile_m": half}
    assert "blas=1, tile_m=%d" % half in set(r.table.candidate)
    assert r.table[r.table.chosen].iloc[0].ok
    check_plan(s)
