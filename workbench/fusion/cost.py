"""The cost model: a kernel's latency predicted from bytes moved, launches, occupancy
and arithmetic, priced at the fusion level (a :class:`Group` and its schedule), so
planners can score plans without generating code.

For one group on one :class:`~workbench.device.Device`, :func:`.features.features`
counts what the kernel must do (bytes, launches and barriers, arithmetic with its
recomputation, occupancy: :class:`~.features.KernelFeatures`); this module prices
them.

The latency is additive and linear in a few free factors, which calibration fits::

    t = overhead * launches + m[kind] * memory_s + c * compute_s + l * library_s
        + p * gemm_s + b * barriers

``memory_s`` is bytes over the device's bandwidth scaled by the occupancy and wave
efficiencies, ``compute_s`` flops over peak; ``m[kind]`` (per schedule kind and thread
mapping), ``c``, ``l``, ``p``, ``overhead`` and ``b`` are the :class:`Factors` --
``l`` the library's (cuBLAS, BLAS) and ``p`` the generated GEMM's own, so that what a
device measures of each corrects its own price: whether fusing a matmul with its
epilogue wins rests on the ratio of the two. On a GPU memory and compute add. On a
CPU an elementwise or row kernel's memory and compute come per pass over its data
(``cpu_passes.py``), and ``m * memory_s + c * compute_s`` is instead the sum over its
passes of max(m * pass memory, c * pass compute): a core overlaps a loop's loads with
its arithmetic, not one pass over a row with the next. Once it is known which bound
each pass reaches the model is linear again, so :meth:`CostModel.calibrate` fits by
least squares, settling those bounds in a few rounds, and returns a new model fitted
to measured per-kernel latencies.

Example::

    >>> from workbench.device import H100
    >>> m = CostModel.for_device(H100)                       # doctest: +SKIP
    >>> m.estimate(g, plan.groups[0]).ms                     # doctest: +SKIP
    0.0213
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from ..device import Device
from ..ir import Graph
from .features import MEMORY_KEYS, KernelFeatures, features
from .plan import Group, Plan


@dataclass(frozen=True)
class Factors:
    """The model's free factors (what calibration fits).

    ``memory`` multiplies the spec memory time per schedule kind (1/achieved fraction
    of bandwidth); ``compute`` and ``library`` multiply arithmetic at peak, ``gemm`` a
    gemm kernel's product at the rate its features assume; ``overhead`` is seconds per
    launch, ``barrier`` seconds per grid barrier."""
    overhead: float
    memory: tuple[tuple[str, float], ...]
    compute: float
    library: float
    gemm: float
    barrier: float

    def memory_factor(self, key: str) -> float:
        return dict(self.memory).get(key, dict(self.memory).get("elementwise", 1.0))

    def vector(self) -> list[float]:
        return [self.overhead, *[v for _, v in self.memory], self.compute, self.library,
                self.gemm, self.barrier]

    @staticmethod
    def from_vector(v: Sequence[float]) -> "Factors":
        n = len(MEMORY_KEYS)
        return Factors(float(v[0]), tuple(zip(MEMORY_KEYS, map(float, v[1:1 + n]))),
                       *map(float, v[1 + n:5 + n]))

    @staticmethod
    def default(device: Device) -> "Factors":
        """Uncalibrated: a well-written memory-bound kernel reaches ~85% of a GPU's
        DRAM bandwidth and about half its peak flops on mixed arithmetic, a library
        GEMM ~70%; a CPU's bandwidth and arithmetic are measured by the same kind of
        loop the kernels are, so its factors start at 1 (libraries at 0.7 of the
        probe's rate is a guess that calibration corrects). A gemm kernel's product
        starts at the library's factor (its features carry the generated GEMM's
        assumed efficiency on a GPU: GPU_GEMM_EFFICIENCY)."""
        if device.is_gpu:
            mem, comp, lib = 1 / 0.85, 1 / 0.5, 1 / 0.7
        else:
            mem, comp, lib = 1.0, 1.0, 1 / 0.7
        # a CPU's grid barrier is another OpenMP parallel loop (the C renderer's phases
        # and split rows), forked and joined like the loop of a kernel call: the probe's
        # call cost is that fork/join (the ctypes call itself is ~0.2 us of ~20-40)
        barrier = device.grid_barrier or (0.0 if device.is_gpu else device.launch_overhead)
        return Factors(device.launch_overhead, tuple((k, mem) for k in MEMORY_KEYS),
                       comp, lib, lib, barrier)


@dataclass(frozen=True)
class Estimate:
    """A kernel's predicted latency and where it goes."""
    seconds: float
    overhead_s: float
    memory_s: float
    compute_s: float
    library_s: float          # the products: library calls' and gemm kernels'
    barrier_s: float
    features: KernelFeatures

    @property
    def ms(self) -> float:
        return self.seconds * 1e3

    @property
    def limiter(self) -> str:
        if self.features.infeasible:
            return self.features.infeasible
        parts = {"launch": self.overhead_s, "memory": self.memory_s,
                 "compute": self.compute_s + self.library_s, "barriers": self.barrier_s}
        return max(parts, key=parts.get)


@dataclass(frozen=True)
class PlanEstimate:
    """Per-group estimates of a plan, in the plan's order, and their sum."""
    groups: tuple[tuple[str, Estimate], ...]

    @property
    def seconds(self) -> float:
        return sum(e.seconds for _, e in self.groups)

    @property
    def ms(self) -> float:
        return self.seconds * 1e3

    def by_group(self) -> dict[str, Estimate]:
        return dict(self.groups)


@dataclass(frozen=True)
class Sample:
    """One measured kernel: its features and its measured latency in seconds."""
    features: KernelFeatures
    seconds: float


# -- the model --------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    """Predicts kernel and plan latency on one device. Immutable: calibrating returns a
    new model."""
    device: Device
    factors: Factors
    calibrated_on: int = 0          # measured kernels the factors were fitted to
    _cache: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @staticmethod
    def for_device(device: Device) -> "CostModel":
        return CostModel(device, Factors.default(device))

    def estimate_features(self, f: KernelFeatures) -> Estimate:
        if f.infeasible:
            return Estimate(math.inf, 0.0, math.inf, 0.0, 0.0, 0.0, f)
        k = self.factors
        over = k.overhead * f.launches
        mem, comp = _body(k, f)
        lib = k.library * f.library_s + k.gemm * f.gemm_s
        bar = k.barrier * f.barriers
        # never faster than the device's roofline: a fit may price a kind's bytes below
        # the spec bandwidth (kernels measured with their data in cache), but no
        # prediction may claim more bandwidth or arithmetic than the device has
        floor = max(f.bytes_moved / self.device.dram_bandwidth,
                    f.compute_s + f.library_s + f.gemm_s)
        return Estimate(max(over + mem + comp + lib + bar, floor), over, mem, comp, lib,
                        bar, f)

    def features(self, g: Graph, group: Group) -> KernelFeatures:
        key = (id(g), group.nodes, group.schedule)
        hit = self._cache.get(key)
        if hit is None:   # (the graph is kept with the entry so its id stays unique)
            hit = self._cache[key] = (g, features(g, group, self.device,
                                                  lambda gr: self.features(g, gr)))
        return hit[1]

    def estimate(self, g: Graph, group: Group) -> Estimate:
        """The predicted latency of one group's kernel, with its breakdown."""
        return self.estimate_features(self.features(g, group))

    def predict(self, plan: Plan) -> PlanEstimate:
        """Per-kernel predictions of a plan (kernels run one after another)."""
        return PlanEstimate(tuple((gr.id, self.estimate(plan.graph, gr))
                                  for gr in plan.groups))

    def plan_seconds(self, plan: Plan) -> float:
        return self.predict(plan).seconds

    # -- calibration ------------------------------------------------------------------
    def calibrate(self, samples: Iterable[Sample], prior_weight: float = 1e-3) -> "CostModel":
        """A new model whose factors best fit measured kernel latencies.

        Least squares on *relative* error (a 10 us kernel counts as much as a 10 ms
        one), non-negative, with a weak pull toward the current factors so a factor the
        samples say nothing about (no split kernels measured) keeps its value.
        """
        import numpy as np
        from scipy.optimize import nnls

        samples = [s for s in samples if s.seconds > 0 and not s.features.infeasible]
        if not samples:
            raise ValueError("calibration needs at least one measured kernel")
        theta0 = np.array(self.factors.vector())
        b = np.concatenate([np.ones(len(samples)), math.sqrt(prior_weight)
                            * np.ones(len(theta0))])
        fit = self
        # a CPU pass costs its larger bound, memory or compute, and which one that is
        # depends on the factors: fit, see which bound each pass reaches under the new
        # factors, fit again (linear once the bounds are fixed; a few rounds settle)
        for _ in range(ROOF_ROUNDS):
            rows = [fit._design(s.features) * theta0 / s.seconds for s in samples]
            a = np.vstack(rows + [math.sqrt(prior_weight) * np.eye(len(theta0))])
            scale, _ = nnls(a, b)
            new = replace(self, factors=Factors.from_vector(theta0 * scale))
            settled = all(_bounds(new.factors, s.features) == _bounds(fit.factors,
                                                                       s.features)
                          for s in samples)
            fit = new
            if settled:
                break
        # features depend on the device, not the factors: the fitted model shares the
        # cache (a session refits after every measurement and would recompute them all)
        return replace(self, factors=fit.factors,
                       calibrated_on=self.calibrated_on + len(samples), _cache=self._cache)

    def _design(self, f: KernelFeatures):
        """The feature row the factors multiply (the linear model's x): a CPU kernel's
        passes contribute the bound each reaches under the current factors."""
        import numpy as np
        mem_s, comp_s = _active(self.factors, f)
        mem = [mem_s if k == f.kind else 0.0 for k in MEMORY_KEYS]
        return np.array([f.launches, *mem, comp_s, f.library_s, f.gemm_s, f.barriers])


ROOF_ROUNDS = 4     # refits of which bound each CPU pass reaches (calibrate)


def _bounds(k: Factors, f: KernelFeatures) -> tuple[bool, ...]:
    """Which of a CPU kernel's passes are memory-bound under factors ``k``."""
    m = k.memory_factor(f.kind)
    return tuple(m * pm >= k.compute * pc for pm, pc in f.passes)


def _active(k: Factors, f: KernelFeatures) -> tuple[float, float]:
    """(memory seconds, compute seconds) that set a kernel's time before its factors:
    all of both where they add (a GPU's kernels, a library call, a CPU GEMM), and on a
    CPU, of each pass the bound it reaches (cpu_passes.py: a core overlaps a pass's
    loads with its arithmetic, not one pass with the next)."""
    if not f.passes:
        return f.memory_s, f.compute_s
    mem = comp = 0.0
    for (pm, pc), memory_bound in zip(f.passes, _bounds(k, f)):
        if memory_bound:
            mem += pm
        else:
            comp += pc
    return mem, comp


def _body(k: Factors, f: KernelFeatures) -> tuple[float, float]:
    """A kernel's priced memory and compute seconds (factors applied)."""
    mem, comp = _active(k, f)
    return k.memory_factor(f.kind) * mem, k.compute * comp


def samples_from(model: CostModel, plan: Plan, per_kernel) -> list[Sample]:
    """Calibration samples from a measured plan: ``per_kernel`` is the per-kernel frame
    of a StepMeasurement (columns ``group`` and ``latency_ms``) or its records."""
    records = per_kernel.to_dict("records") if hasattr(per_kernel, "to_dict") else per_kernel
    out = []
    for r in records:
        gr = plan.group(r["group"])
        out.append(Sample(model.features(plan.graph, gr), float(r["latency_ms"]) / 1e3))
    return out


def relative_error(predicted: float, measured: float) -> float:
    """|predicted / measured - 1| (0 is perfect; 1.0 is off by 100%)."""
    return abs(predicted / measured - 1.0) if measured > 0 else math.nan
