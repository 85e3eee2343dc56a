"""The alpha-beta model of what gloo runs: each collective of the IR in the form its
runtime path takes on gloo (:mod:`.collectives`), with that form's step count in p,
alpha and beta fitted per form and message-size regime from this machine's own
measurements, and the cores the ranks share priced.

The forms (n: the whole tensor's bytes -- an AllReduce's, a ReduceScatter's input, an
AllGather's gathered output; p ranks):

* ``all_reduce`` -- **ring, two passes**. torch's ProcessGroupGloo calls
  ``gloo::allreduce`` without naming an algorithm, and gloo runs its ring for that
  (bcube only where asked): a reduce-scatter pass then an all-gather pass, each p-1
  steps of one n/p chunk (cut in >= 2 segments, so a segment's reduction overlaps the
  next one's transfer). Messages 2(p-1), bytes through a rank 2(p-1) n/p.
* ``reduce_scatter``, ``all_gather`` -- **ring, one pass**: the runtime's own rings over
  gloo's isend/irecv (:mod:`.ring`). Messages p-1, bytes (p-1) n/p.
* ``all_to_all_single`` (and ``all_to_all``, which runs through it) -- **direct**: gloo's
  alltoall posts one block of n/p to every other rank at once. Messages p-1 (on
  loopback each is the CPU's work, so they are counted, not overlapped), bytes
  (p-1) n/p.
* ``send_recv`` -- **pair**: one message of n to rank+shift beside one from rank-shift.

time = share(p) x (messages(p) alpha + bytes(n, p) beta), with alpha and beta per form
in two regimes of the message one step moves (n/p; n for a pair): latency-bound small
messages, bandwidth-bound large ones (:class:`.cost.SizeRegimes`' reason), the cut
chosen from the data. ``share(p) = max(1, p / cores)``: on loopback gloo's transfers
are copies the ranks' own processes make, so ranks beyond the cores time-share them
and every part of a step takes that much longer -- 4 ranks on this machine's 2 cores
run each at half a core.

Fitted on one rank count it predicts another: the step counts and the share carry
the p, alpha and beta do not (``benchmarks/alpha_beta_forms.py`` fits on 2 ranks and
scores 4, and the reverse).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..errors import WorkbenchError
from ..ops.collective import COLLECTIVES
from .cost import Link, fit, within  # (within: how many samples a link puts in 25%)

Sample = tuple[str, int, float, float]      # (op, ranks, nbytes, seconds)


@dataclass(frozen=True)
class Form:
    """An algorithm form: ``name`` (ring / direct / pair), ``passes`` over the buffer
    (a ring AllReduce: two), ``how`` (what runs it, for the report)."""
    name: str
    passes: int
    how: str

    def messages(self, p: int) -> int:
        """Messages on a rank's critical path."""
        return 1 if self.name == "pair" else self.passes * (p - 1)

    def wire_bytes(self, nbytes: float, p: int) -> float:
        """Bytes a rank sends (and receives)."""
        return float(nbytes) if self.name == "pair" else self.passes * (p - 1) * nbytes / p

    def message_bytes(self, nbytes: float, p: int) -> float:
        """One step's message: the regime's measure."""
        return float(nbytes) if self.name == "pair" else nbytes / p


RING2 = Form("ring", 2, "gloo::allreduce's ring: reduce-scatter then all-gather, "
             "2(p-1) steps of n/p")
RING = Form("ring", 1, "the runtime's ring over gloo isend/irecv (ring.py): p-1 steps of n/p")
DIRECT = Form("direct", 1, "gloo's alltoall: p-1 blocks of n/p posted at once")
PAIR = Form("pair", 1, "one isend of n beside one irecv")
FORMS = {"all_reduce": RING2, "reduce_scatter": RING, "all_gather": RING,
         "all_to_all_single": DIRECT, "all_to_all": DIRECT, "send_recv": PAIR}


def share(p: int, cores: int) -> float:
    """How many times slower each rank's copies and messages run where p ranks share
    ``cores`` cores (1 while each rank has a core)."""
    return max(1.0, p / cores)


@dataclass(frozen=True)
class FormLink:
    """One collective's fitted model: its form, the regime cut (a step's message
    bytes), and alpha/beta (a :class:`.cost.Link`) on each side."""
    op: str
    form: Form
    cut_bytes: float
    small: Link
    large: Link
    cores: int

    def time(self, nbytes: float, p: int) -> float:
        if p <= 1:
            return 0.0
        f = self.form
        lk = self.small if f.message_bytes(nbytes, p) <= self.cut_bytes else self.large
        return share(p, self.cores) * (f.messages(p) * lk.alpha
                                       + f.wire_bytes(nbytes, p) * lk.beta)


@dataclass(frozen=True)
class GlooForms:
    """A link (``time(op, nbytes, p)``, as :class:`.cost.Link`'s) of gloo's collectives
    on loopback, one :class:`FormLink` per collective; ``shares_cores`` as
    :class:`.cost.Link`'s (loopback's bytes are copied on the kernels' cores)."""
    name: str
    rows: tuple[tuple[str, FormLink], ...]
    cores: int
    shares_cores: bool = True

    def time(self, op: str, nbytes: float, p: int, form: str = "ring") -> float:
        if op not in COLLECTIVES or p <= 1:
            return 0.0          # (a wait, or one rank: nothing moves)
        if form != "ring":
            raise WorkbenchError(f"form {form!r:.20} for {op} on {self.name}: gloo runs "
                                 f"{FORMS.get(op, RING).name}, priced as what it runs; "
                                 "pass form='ring' (a tree form is a cost.Link's)")
        rows = dict(self.rows)      # (the IR's all_to_all runs as all_to_all_single)
        row = rows.get(op) or (rows.get("all_to_all_single") if op == "all_to_all" else None)
        if row is None:
            raise WorkbenchError(
                f"{self.name} has no fit for {op} (fitted: "
                f"{', '.join(k for k, _ in self.rows)}); measure it "
                f"(benchmarks/alpha_beta_forms.py --ops {op}) and fit_forms the rows")
        return row.time(nbytes, p)

    def describe(self) -> list[str]:
        """The fit as a markdown table."""
        rate = lambda b: f"{1 / b / 1e9:.2f}" if b else "no per-byte term"
        L = ["| op | form | messages | cut (a step's message) | small: alpha us | small: "
             "GB/s | large: alpha us | large: GB/s |", "|---|---|---|---|---|---|---|---|"]
        for op, r in self.rows:
            msgs = "1" if r.form.name == "pair" else f"{r.form.passes}(p-1)".replace("1(", "(")
            cut = "-" if math.isinf(r.cut_bytes) else f"{r.cut_bytes / 1024:.0f} KB"
            L.append(f"| {op} | {r.form.name} | {msgs} | {cut} | {r.small.alpha * 1e6:.0f} | "
                     f"{rate(r.small.beta)} | {r.large.alpha * 1e6:.0f} | {rate(r.large.beta)} |")
        return L


def _coeffs(cores: int):
    def c(op: str, n: float, p: int) -> tuple[float, float]:
        f, s = FORMS[op], share(p, cores)
        return s * f.messages(p), s * f.wire_bytes(n, p)
    return c


def _fit_op(op: str, sm: list[Sample], cores: int, least: int) -> FormLink:
    form, c = FORMS[op], _coeffs(cores)
    sizes = sorted({form.message_bytes(n, p) for _, p, n, _ in sm})
    if len(sizes) < 2:
        raise WorkbenchError(f"{op}: {len(sizes)} message size measured; alpha and beta "
                             "need two sizes at least (measure more sizes)")
    line = FormLink(op, form, math.inf, *[fit(sm, f"{op} ({form.name})", c)] * 2, cores)
    err = lambda r: sum(((r.time(n, p) - t) / t) ** 2 for _, p, n, t in sm)
    best = ((-within(_Only(line), sm), err(line)), line)
    # (two regimes where each side keeps ``least`` sizes: the cut whose fits put the
    # most samples within 25%, then the least squared relative error)
    for i in range(least, len(sizes) - least + 1):
        cut = sizes[i - 1]
        lo = [x for x in sm if form.message_bytes(x[2], x[1]) <= cut]
        hi = [x for x in sm if form.message_bytes(x[2], x[1]) > cut]
        r = FormLink(op, form, cut, fit(lo, f"{op} <= {cut:g} B", c),
                     fit(hi, f"{op} > {cut:g} B", c), cores)
        key = (-within(_Only(r), sm), err(r))
        if key < best[0]:
            best = (key, r)
    return best[1]


@dataclass(frozen=True)
class _Only:        # (one FormLink as a model of its own op, for within())
    row: FormLink

    def time(self, op, n, p):
        return self.row.time(n, p)


def fit_forms(samples: Sequence[Sample], cores: int, name: str = "gloo (fitted forms)",
              least: int = 3) -> GlooForms:
    """Each collective's form fitted on its (op, ranks, nbytes, seconds) samples (any
    rank counts, the share divided out): alpha and beta per message-size regime."""
    if cores < 1:
        raise WorkbenchError(f"cores={cores}: the cores the ranks share (os.cpu_count())")
    by: dict[str, list[Sample]] = {}
    for s in samples:
        if s[0] not in FORMS:
            raise WorkbenchError(f"{s[0]!r:.30} is not a collective with a form (forms: "
                                 f"{', '.join(FORMS)}); drop its samples")
        if s[3] <= 0 or s[1] < 2:
            raise WorkbenchError(f"sample {s!r:.80}: a time > 0 on 2 ranks or more is "
                                 "needed (one rank moves nothing)")
        by.setdefault(s[0], []).append(s)
    if not by:
        raise WorkbenchError("no samples to fit: measure (benchmarks/alpha_beta_forms.py)")
    return GlooForms(name, tuple((op, _fit_op(op, sm, cores, least))
                                 for op, sm in by.items()), cores)


def held_out(samples: Sequence[Sample], cores: int) -> dict[str, tuple[int, int]]:
    """Fit on each rank count's samples, score every other's: ``"fit on a, predict b"``
    -> (within 25%, of)."""
    counts = sorted({s[1] for s in samples})
    out = {}
    for a in counts:
        m = fit_forms([s for s in samples if s[1] == a], cores)
        for b in counts:
            if b != a:
                test = [s for s in samples if s[1] == b]
                out[f"fit on {a}, predict {b}"] = (within(m, test), len(test))
    return out
