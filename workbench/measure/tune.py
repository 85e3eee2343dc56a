"""Autotuning (DeepCuts, TVM): a measured search over each kernel's launch parameters.

For each kernel of a plan, the candidates are its schedule under other launch
parameters and row mappings -- threads of a block-mapped row (each thread then owns
more or fewer columns in registers), rows per block of the warp mapping, blocks per row
of the split mapping, the block size of a flat loop -- and for a GEMM kernel the
implementation of its products (the generated micro-kernel or BLAS sgemm per tile:
which wins depends on the shape), its tile sizes, on a GPU its panels in 1 or 2
stages (software pipelining), and for a fused attention whether
the softmax goes a block of keys at a time (online) or over whole rows of scores (see
``fusion.gemm.launch.GemmLaunch``) -- one parameter at a time from the rule, then together:
from the fastest so far, its neighbours with one more parameter changed, for up to
CLIMB_ROUNDS rounds (``climb``). Each candidate is compiled and
timed on the values the kernel really receives (the plan run once); the fastest is
checked against the NumPy reference, and kept when it is correct and faster than the
rule's choice by more than the noise. Results are cached per device and kernel source
(``<cache>/tuning/<device>.json``), so a kernel met again -- in another session, graph
or process -- is not searched again.

Example::

    >>> plan, results = tune_plan(plan, backend, env)            # doctest: +SKIP
    >>> results[0].table[["candidate", "ms", "ok"]]               # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from ..codegen import lower_group, render_kernel
from ..errors import FusionRefused
from ..fusion import Group, Plan, make_group
from ..fusion.mapping import ScheduleKind
from ..fusion.gemm.gpu_tiles import GPU_GEMM_TILES
from ..fusion.gemm_shape import CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES
from ..runtime.program import KernelSequence
from .verify import check_kernel
from ..runtime.cache import cache_subdir
from ..runtime.cc import extra_cflags

# the kernels tuning searches (stitched kernels and library calls have no parameters)
TUNED = (ScheduleKind.elementwise, ScheduleKind.row_reduce, ScheduleKind.gemm)
# keep the rule's choice unless a candidate is this much faster (timing noise), first
# measured and again in CONFIRM_ROUNDS alternating rounds with the rule
MIN_GAIN = 0.03
CONFIRM_ROUNDS = 4
# rounds of a GEMM kernel's search from its fastest candidate (``climb``)
CLIMB_ROUNDS = 2
TUNER_VERSION = 7      # part of the cache key: a new search invalidates old answers
TUNE_COLUMNS = ["candidate", "mapping", "threads", "rows_per_block", "splits", "ms",
                "GBps", "ok", "chosen"]


@dataclass(frozen=True)
class Candidate:
    """One way to run a kernel: a row mapping (None: keep the group's) and launch
    parameters (empty: the rule's)."""
    mapping: str | None
    launch: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.launch) or "rule"
        return f"{self.mapping}: {params}" if self.mapping else params


@dataclass(frozen=True)
class TuneResult:
    """What tuning one kernel found: the group chosen, its time against the rule's,
    every candidate's time (``table``), and whether it came from the cache."""
    group: str
    chosen: Group
    rule_ms: float
    best_ms: float
    table: pd.DataFrame
    cached: bool = False
    timed: tuple[tuple[Group, float], ...] = ()   # every candidate and its seconds

    @property
    def speedup(self) -> float:
        return self.rule_ms / self.best_ms if self.best_ms > 0 else float("nan")


def candidates(group: Group) -> list[Candidate]:
    """The launch parameters and mappings worth timing for one group, the rule's first."""
    s = group.schedule
    out = [Candidate(None, ())]
    if s.kind is ScheduleKind.elementwise:
        out += [Candidate(None, (("threads", t),)) for t in (128, 512, 1024)]
    elif s.kind is ScheduleKind.row_reduce and s.innermost:
        cols = s.cols
        for t in (32, 64, 128, 256, 512, 1024):      # 2..64 columns per thread
            if 2 * t <= cols <= 64 * t and t != s.threads:
                out.append(Candidate("block", (("threads", t),)))
        if cols <= 2048:
            out += [Candidate("warp", (("rows_per_block", r),)) for r in (1, 2, 4, 8, 16)]
        if s.rows < 512 and cols >= 4096:
            out += [Candidate("split", (("splits", k),)) for k in (2, 4, 8, 16)
                    if cols // k >= 1024]
    elif s.kind is ScheduleKind.gemm:
        out += [Candidate(None, launch) for launch in _gemm_candidates(s)]
    return out


def climb(best: Candidate, group: Group) -> list[Candidate]:
    """The neighbours of a GEMM kernel's candidate (``group``: the kernel made with
    it): its launch with one of the parameters its own schedule offers changed too
    (tiles halved and doubled again from its tiles, the other product or softmax)."""
    out = []
    for launch in _gemm_candidates(group.schedule):
        merged = {**dict(best.launch), **dict(launch)}
        if merged != dict(best.launch):
            out.append(Candidate(best.mapping, tuple(sorted(merged.items()))))
    return out


def _gemm_candidates(s) -> list[tuple[tuple[str, int], ...]]:
    """A GEMM kernel's alternatives to the rule: sgemm per tile where the micro-kernel
    multiplies, the micro-kernel (B packed) where sgemm does, both for a depthwise
    convolution computed in the lanes or a plane at a time (blas=0 its tap-by-tap
    path) and for one computed directly (blas=0 its patches for the micro-kernel); the
    other form of a fused attention's softmax, and a causal one taking every block of
    keys (skip=0); tiles of half and twice the rule's
    rows, and of half and twice its columns (whole-row tiles: rows only); on a GPU,
    its panels in the other number of stages (BlockTile.stages) and the other block
    tiles (fusion.gemm.gpu_tiles.GPU_GEMM_TILES). What
    the kernel refuses (no micro-kernel here, a packed B's tiles not in whole panels,
    no online form) is dropped when the group is made."""
    t = s.gemm
    # a causal fused attention taking every block too: the skip's checks read the
    # skipped keys, which a GPU's tensor cores may take about as fast
    skip = [(("skip", 0),)] if s.key_limit is not None else []
    if t.block is not None:     # a GPU's: its other stages; its other tiles (attention: none)
        stages = [(("stages", 3 - t.block.stages),)]
        return stages + skip if s.then is not None else stages + [
            (("tile_m", m), ("tile_n", n)) for m, n in GPU_GEMM_TILES
            if (m, n) != (t.tile_m, t.tile_n)]
    out = [(("blas", 1 if t.packed_b else 0),)]
    if t.packed_b in (DEPTHWISE_LANES, DEPTHWISE_PLANES, CONV_DIRECT):
        # (a depthwise convolution's tap-by-tap path; a direct one's patches gathered
        # for the micro-kernel)
        out.append((("blas", 0),))
    if s.then is not None:
        out += [(("online", 0 if s.then.online else 1),)] + skip
    for name, size, extent, ok in (("tile_m", t.tile_m, t.m, True),
                                   ("tile_n", t.tile_n, t.n, s.epilogue is None)):
        if not ok:
            continue
        for v in (size // 2, size * 2):
            if 1 <= v and v != size and (v <= extent or size < extent):
                out.append(((name, min(v, extent)),))
    return out


# -- the cache -------------------------------------------------------------------------
def _cache_path(device_name: str) -> Path:
    slug = "".join(c if c.isalnum() else "-" for c in device_name.lower()).strip("-")
    return cache_subdir("tuning") / f"{slug[:80]}.json"


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save(path: Path, key: str, entry: dict) -> None:
    data = _load(path)       # (re-read: another process may have tuned meanwhile)
    data[key] = entry
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def tuning_key(source: str, backend_name: str) -> str:
    """A kernel's identity for the cache: its source under the rule's parameters (on
    the CPU with $WB_EXTRA_CFLAGS, which change its timings: sanitizers)."""
    if backend_name == "cpu":
        if extra_cflags():
            backend_name += "\0" + " ".join(extra_cflags())
    return hashlib.sha256(f"{TUNER_VERSION}\0{backend_name}\0{source}".encode()
                          ).hexdigest()[:24]


# -- timing ------------------------------------------------------------------------------
def _time(backend, plan: Plan, group: Group, env: dict, warmup: int, repeats: int):
    """(kernel, compiled, seconds) of one group's kernel on the values in env."""
    k = lower_group(plan.graph, group, plan.device)
    ck = backend.compile([k])[0]
    seq = KernelSequence(plan.graph, backend, [ck], {group.id: group.nodes})
    dev_env = {b.value: backend.asarray(env[b.value]) for b in k.inputs}
    per, _ = seq.time_env(dev_env, warmup, repeats)
    return k, ck, seq, dev_env, per[0]


def tune_group(plan: Plan, group: Group, backend, env: dict, warmup: int = 2,
               repeats: int = 20, use_cache: bool = True) -> TuneResult:
    """Search one group's candidates (see the module docstring)."""
    g = plan.graph
    rule = lower_group(g, group, plan.device)
    key = tuning_key(render_kernel(rule, backend.target or "c"), backend.name)
    path = _cache_path(plan.device.name)
    hit = _load(path).get(key) if use_cache else None
    if hit is not None:
        try:
            chosen = _make(plan, group, Candidate(hit["mapping"], tuple(map(tuple,
                                                                             hit["launch"]))))
            return TuneResult(group.id, chosen, hit["rule_ms"], hit["best_ms"],
                              pd.DataFrame(hit["table"], columns=TUNE_COLUMNS), True)
        except (FusionRefused, KeyError, TypeError, ValueError):
            pass              # a stale entry: search again
    rows, timed, seen = [], [], set()

    def measure(cand: Candidate) -> bool:
        """Time one candidate (unless the kernel refuses it or its code was timed)."""
        try:
            gr = _make(plan, group, cand)
        except FusionRefused:
            return False
        code = _code(lower_group(g, gr, plan.device), backend)
        if code in seen:
            return False      # the same code for this backend (the CPU ignores threads)
        seen.add(code)
        k, ck, seq, dev_env, t = _time(backend, plan, gr, env, warmup, repeats)
        timed.append((t, cand, gr, seq, dev_env))
        moved = k.bytes_read + k.bytes_written
        s = gr.schedule
        rows.append({"candidate": cand.label,
                     "mapping": s.mapping.value if s.mapping else s.kind.value,
                     "threads": s.threads, "rows_per_block": s.rows_per_block,
                     "splits": s.splits, "ms": t * 1e3,
                     "GBps": moved / t / 1e9 if t > 0 else float("nan"),
                     "ok": None, "chosen": False})
        return True

    for cand in candidates(group):
        measure(cand)
    if group.schedule.kind is ScheduleKind.gemm:
        # a GEMM kernel's parameters together: from the fastest candidate so far, each
        # of its neighbours (one more parameter changed, on top of its own), for up to
        # CLIMB_ROUNDS rounds while the fastest moves
        for _ in range(CLIMB_ROUNDS):
            _, c_best, g_best = min(timed, key=lambda e: e[0])[:3]
            if not c_best.launch or not any(
                    [measure(c) for c in climb(c_best, g_best)]):
                break
    rule_t = timed[0][0]
    best = timed[0]
    for entry in sorted(timed, key=lambda e: e[0]):
        if entry[0] >= rule_t * (1 - MIN_GAIN) or entry is timed[0]:
            break
        if not _confirmed(timed[0], entry, warmup, repeats):
            continue
        ok = _correct(g, entry, env, backend)
        rows[timed.index(entry)]["ok"] = ok
        if ok:
            best = entry
            break
    rows[timed.index(best)]["chosen"] = True
    table = pd.DataFrame(rows, columns=TUNE_COLUMNS)
    result = TuneResult(group.id, best[2], rule_t * 1e3, best[0] * 1e3, table, False,
                        tuple((e[2], e[0]) for e in timed))
    _save(path, key, {"mapping": best[1].mapping, "launch": [list(x) for x in best[1].launch],
                      "rule_ms": result.rule_ms, "best_ms": result.best_ms,
                      "table": json.loads(table.to_json(orient="records"))})
    return result


def _confirmed(rule, entry, warmup: int, repeats: int) -> bool:
    """Whether a candidate that timed faster than the rule still is, by MIN_GAIN, when
    the two are timed again in alternation (CONFIRM_ROUNDS rounds, the median of each;
    which goes first swaps every round, so a bias of the first or second slot cancels):
    a host's load moves single timings by more than that (2 CPU cores shared with other
    jobs: 10-20%), and a candidate that won once by luck would be cached for good."""
    times = ([], [])
    for r in range(CONFIRM_ROUNDS):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            _, _, _, seq, dev_env = (rule, entry)[i]
            times[i].append(seq.time_env(dev_env, warmup, repeats)[0][0])
    return float(np.median(times[1])) < float(np.median(times[0])) * (1 - MIN_GAIN)


def _code(k, backend) -> str:
    """What the backend would compile for k, without its comments (which name the
    launch even where the target ignores it)."""
    return re.sub(r"/\*.*?\*/", "", render_kernel(k, backend.target or "c"), flags=re.S)


def _make(plan: Plan, group: Group, cand: Candidate) -> Group:
    mapping = cand.mapping or group.forced_mapping or None
    if not cand.launch and cand.mapping is None:
        return group
    return make_group(plan.graph, group.nodes, True, mapping, group.forced, device=plan.device,
                      launch=cand.launch, tf32=plan.tf32)


def _correct(g, entry, env: dict, backend) -> bool:
    """The candidate's outputs on these inputs against the reference."""
    _, _, gr, seq, dev_env = entry
    run_env = dict(dev_env)
    for ck in seq.compiled:
        seq._alloc_outputs(ck, run_env)
        seq._launch(ck, run_env)
    backend.synchronize()
    host = {k: np.asarray(backend.to_numpy(v, g.value(k).dtype)) for k, v in run_env.items()}
    host.update({k: v for k, v in env.items() if k not in host})
    return check_kernel(g, seq.compiled[0].kernel, gr.nodes, host).within_tolerance


def tune_plan(plan: Plan, backend, env: dict, groups: Iterable[str] | None = None,
              warmup: int = 2, repeats: int = 20, use_cache: bool = True,
              progress: Callable[[int, int, str], None] | None = None
              ) -> tuple[Plan, list[TuneResult]]:
    """The plan with each (or each named) generated kernel launched as tuning found
    fastest, and what was found. ``env`` holds every value the plan's kernels read
    (a run of the plan with keep_all)."""
    todo = [gr for gr in plan.groups if gr.schedule.kind in TUNED
            and (groups is None or gr.id in set(groups))]
    results, new = [], plan
    for i, gr in enumerate(todo):
        r = tune_group(plan, gr, backend, env, warmup, repeats, use_cache)
        results.append(r)
        if r.chosen is not gr:
            new = new._replace({gr.id}, [r.chosen], "tuned")
        if progress:
            progress(i + 1, len(todo), f"tuned {gr.id}")
    return Plan(new.graph, new.groups, "tuned" if new is not plan else plan.planner,
                plan.device, plan.matmul_precision), results


__all__ = ["Candidate", "TUNE_COLUMNS", "TuneResult", "candidates", "climb", "tune_group",
           "tune_plan", "tuning_key"]
