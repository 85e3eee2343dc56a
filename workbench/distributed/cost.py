"""The alpha-beta model of collectives: a message of n bytes between two ranks costs
``alpha + n * beta`` (alpha: the latency of one message; beta: seconds per byte, the
inverse of the link's bandwidth). The form NCCL's tuning model and Inductor's
``comm_analysis`` use.

Per collective over p ranks, n the bytes of one rank's whole tensor:

* ring: ReduceScatter and AllGather ``(p-1) (alpha + n/p beta)``; AllReduce their sum
  ``2 (p-1) (alpha + n/p beta)``.
* tree (double binary tree, as NCCL): AllReduce ``2 log2(p) alpha + 2 n beta`` -- fewer
  latencies, the whole message per level pipelined; ReduceScatter and AllGather have
  no tree form in NCCL and are priced as the ring.
* AllToAll (and all_to_all_single: p-1 blocks of n/p bytes leave each rank, one
  message per peer) ``(p-1) (alpha + n/p beta)``; send_recv ``alpha + n beta``.

``alpha`` and ``beta`` come from :func:`fit` over measured times (this machine's gloo,
benchmarks/collectives.py) or from a preset link. Times for more ranks than were run
are *simulated*: what the model says, never a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

FORMS = ("ring", "tree")


@dataclass(frozen=True)
class Link:
    """A link's latency ``alpha`` (s) and inverse bandwidth ``beta`` (s/byte).
    ``shares_cores``: the link's transfers run on the cores that run the kernels
    (loopback between processes of one machine: the bytes are copied by the CPU), so a
    collective in flight does not overlap a rank's compute -- it slows it."""
    name: str
    alpha: float
    beta: float
    shares_cores: bool = False

    def time(self, op: str, nbytes: float, p: int, form: str = "ring") -> float:
        """Seconds for collective ``op`` over ``nbytes`` per rank on ``p`` ranks."""
        if form not in FORMS:
            raise ValueError(f"form {form!r}: choose {' or '.join(FORMS)}")
        if p <= 1:
            return 0.0
        a, b, n = self.alpha, self.beta, float(nbytes)
        step = a + n / p * b
        if op == "all_reduce":
            if form == "tree":
                return 2 * math.log2(p) * a + 2 * n * b
            return 2 * (p - 1) * step
        if op in ("reduce_scatter", "all_gather", "all_to_all", "all_to_all_single"):
            return (p - 1) * step
        if op == "send_recv":
            return a + n * b
        return 0.0


@dataclass(frozen=True)
class PerOpLink:
    """A link measured per collective: gloo's ReduceScatter and AllGather are other
    algorithms than its AllReduce (on this machine ~4x and ~2.5x slower per byte), so
    one alpha and beta for all three does not hold. ``links``: op -> Link; others use
    ``default``. A link may be a :class:`SizeRegimes` (anything with ``time``)."""
    name: str
    links: tuple[tuple[str, "Link | SizeRegimes"], ...]
    default: Link
    shares_cores: bool = False      # (as Link's)

    def time(self, op: str, nbytes: float, p: int, form: str = "ring") -> float:
        return dict(self.links).get(op, self.default).time(op, nbytes, p, form)


# preset links (per-GPU figures as published; for the simulated curves, not measured
# here): NVLink 4 (H100 SXM, ~450 GB/s per direction, ~2 us through NCCL) and
# InfiniBand NDR (400 Gb/s = 50 GB/s per port, ~5 us)
NVLINK = Link("NVLink (preset)", 2e-6, 1 / 450e9)
INFINIBAND = Link("InfiniBand NDR (preset)", 5e-6, 1 / 50e9)


def fit(samples: Sequence[tuple[str, int, float, float]], name: str = "fitted",
        coeffs=None) -> Link:
    """alpha and beta by least squares over (op, p, nbytes, seconds) measurements,
    each weighted by 1/seconds (relative error, so small messages count as much as
    large ones); both kept >= 0. ``coeffs(op, nbytes, p)``: the model's
    ``(c_alpha, c_beta)`` with time = c_alpha alpha + c_beta beta (default: the ring
    form of :meth:`Link.time`; :mod:`.gloo_forms` passes gloo's forms)."""
    rows = []
    for op, p, n, t in samples:
        # time = ca * alpha + cb * beta
        unit_a, unit_b = coeffs(op, n, p) if coeffs else (
            Link("", 1.0, 0.0).time(op, n, p), Link("", 0.0, 1.0).time(op, n, p))
        rows.append((unit_a / t, unit_b / t, 1.0))
    saa = sum(r[0] * r[0] for r in rows)
    sbb = sum(r[1] * r[1] for r in rows)
    sab = sum(r[0] * r[1] for r in rows)
    sa = sum(r[0] for r in rows)
    sb = sum(r[1] for r in rows)
    det = saa * sbb - sab * sab
    alpha = (sa * sbb - sb * sab) / det
    beta = (sb * saa - sa * sab) / det
    if alpha < 0 or beta < 0:    # (one of them is noise: fit the other alone)
        alpha, beta = (0.0, sb / sbb) if alpha < 0 else (sa / saa, 0.0)
    return Link(name, alpha, beta)


@dataclass(frozen=True)
class SizeRegimes:
    """One collective's link in two message-size regimes: for a ring step's message
    (``nbytes / p``, one rank's shard) up to ``cut_bytes``, ``small`` (latency-bound:
    the per-call cost of the start, the wait and gloo's handshake dominate), above it
    ``large`` (bandwidth-bound: the ring's segments stream, their reductions
    overlapped with the transfers). One straight line through 4 KB .. 64 MB misfits
    both ends: the small messages' measured cost is flat, the large ones' per-byte cost
    is not the slope between them. (By the message, not the tensor: at many ranks a
    large tensor's ring steps are small messages.)"""
    name: str
    cut_bytes: float
    small: Link
    large: Link

    def time(self, op: str, nbytes: float, p: int, form: str = "ring") -> float:
        return (self.small if nbytes / max(p, 1) <= self.cut_bytes else self.large).time(
            op, nbytes, p, form)


def within(link, samples, pct: float = 25.0) -> int:
    """How many (op, p, nbytes, seconds) samples ``link`` predicts within ``pct``%."""
    return sum(abs(link.time(op, n, p) - t) <= pct / 100 * t for op, p, n, t in samples)


def fit_regimes(samples: Sequence[tuple[str, int, float, float]], name: str = "fitted",
                least: int = 2) -> SizeRegimes:
    """:func:`fit` on each side of a message size (a ring step's, ``nbytes / p``), the
    cut the one (of those between measured sizes, ``least`` sizes a side at least)
    whose two fits put the most samples within 25%, then the smallest squared relative
    error."""
    sizes = sorted({n / p for _, p, n, _ in samples})
    best = None
    for i in range(least, len(sizes) - least + 1):
        cut = sizes[i - 1]
        lo = [x for x in samples if x[2] / x[1] <= cut]
        hi = [x for x in samples if x[2] / x[1] > cut]
        r = SizeRegimes(name, cut, fit(lo, f"{name} <= {cut:g} B"),
                        fit(hi, f"{name} > {cut:g} B"))
        err = sum(((r.time(op, n, p) - t) / t) ** 2 for op, p, n, t in samples)
        key = (-within(r, samples), err)
        if best is None or key < best[0]:
            best = (key, r)
    if best is None:
        raise ValueError(f"{len(sizes)} message sizes: two regimes need {2 * least}")
    return best[1]


# this machine's gloo over loopback on 2 ranks, fitted per op and message-size regime
# (fit_regimes) on four runs pooled (benchmarks/results/collectives-2026-12-05-ring,
# -buffers, -rank-threads and -chunked; host load 6-17; ReduceScatter and AllGather the
# rings of ring.py; benchmarks/alpha_beta_fit.py scores it): what the planner prices
# collectives with unless given another link.
GLOO_LOOPBACK = PerOpLink(
    "gloo loopback (fitted per op and message size)",
    # (cuts: a ring step's message, one rank's shard: 2 ranks' tensor / 2)
    (("all_reduce", SizeRegimes("gloo all_reduce", 512 << 10,
                                Link("<= 512 KB a step", 494e-6, 1 / 1.71e9),
                                Link("> 512 KB a step", 473e-6, 1 / 0.81e9))),
     ("reduce_scatter", SizeRegimes("gloo reduce_scatter (ring)", 2 << 20,
                                    Link("<= 2 MB a step", 790e-6, 1 / 0.99e9),
                                    Link("> 2 MB a step", 0.0, 1 / 0.67e9))),
     ("all_gather", SizeRegimes("gloo all_gather (ring)", 4 << 20,
                                Link("<= 4 MB a step", 840e-6, 1 / 1.02e9),
                                Link("> 4 MB a step", 5.92e-3, 1 / 0.90e9))),
     # (torch's all_to_all_single on gloo, fitted on one 2-rank run at load 5.5:
     # benchmarks/results/all-to-all-2026-12-05; flat below 32 KB a block)
     ("all_to_all_single", SizeRegimes("gloo all_to_all_single", 32 << 10,
                                       Link("<= 32 KB a step", 815e-6, 0.0),
                                       Link("> 32 KB a step", 1.27e-3, 1 / 1.29e9)))),
    Link("gloo (fitted)", 455e-6, 1 / 0.66e9),
    # (loopback: gloo's threads move the bytes on the 2 cores the kernels run on; the
    # chunked sharded step measured 0.5-0.7x the unchunked one here, its compute slowed
    # while its collectives were in flight -- benchmarks/results/chunk-auto-2026-12-05)
    shares_cores=True)
# (the links by name, and the planner's default -- the forms model -- are links.py's)


def scale_out(link: Link, op: str, nbytes: float, ranks: Sequence[int] = (
        8, 16, 32, 64, 128, 256, 512, 1024), form: str = "ring") -> list[dict]:
    """The model's time for ``op`` at each rank count: rows labelled simulated."""
    return [{"ranks": p, "op": op, "bytes": nbytes, "form": form, "link": link.name,
             "seconds": link.time(op, nbytes, p, form), "kind": "simulated"}
            for p in ranks]
