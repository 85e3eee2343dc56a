"""The cost model a session prices with: the device's model, refitted to every kernel
the session measured or tuned -- or one a user assigned, kept as it is.

Each refit starts again from the device's uncalibrated model, so fits do not compound;
one model prices a plan at any matmul precision (each kernel's schedule says whether
its matmuls run on tensor cores).

    >>> models = FittedModel(H100)                            # doctest: +SKIP
    >>> models.refit(g, [(plan, measurement.per_kernel)], [])     # doctest: +SKIP
    >>> models.model.calibrated_on                             # doctest: +SKIP
    7
"""
from __future__ import annotations

from typing import Iterable

from ..device import Device
from ..ir import Graph
from .cost import CostModel, Sample, samples_from


# how strongly a refit pulls each factor toward the device's prior: as strongly as one
# measured kernel. A session's first measurement is one plan of one graph -- mostly
# memory-bound kernels -- and a weak pull (1e-3) let one erf kernel set the compute
# factor for every later plan: the stitch steps of the 14 samples came out predicted
# up to 2.2x too fast (median factor 1.31 over all steps); at 1, 1.97 and 1.21
# (benchmarks/results/cost_model-2026-12-05-quiet.md)
REFIT_PRIOR = 1.0


class FittedModel:
    def __init__(self, device: Device):
        self.device = device
        self._base: CostModel | None = None      # made on first use
        self._model: CostModel | None = None     # fitted, or assigned
        self.assigned = False

    @property
    def base(self) -> CostModel:
        """The device's uncalibrated model."""
        if self._base is None:
            self._base = CostModel.for_device(self.device)
        return self._base

    @property
    def model(self) -> CostModel:
        return self._model or self.base

    def assign(self, model) -> None:
        """A user's model: kept as it is, no refit replaces it."""
        self._model, self.assigned = model, True

    def refit(self, graph: Graph, measured: Iterable, tuned: Iterable) -> None:
        """Fit the device's model to every kernel of ``graph`` measured -- (plan,
        per-kernel frame) pairs -- and timed by the tuner -- (group, seconds) pairs."""
        if self.assigned:
            return
        base = self.base
        samples = [smp for plan, per_kernel in measured
                   for smp in samples_from(base, plan, per_kernel)]
        # (a group tuned under another step's graph -- a recompute step's -- is left out)
        samples += [Sample(base.features(graph, gr), t) for gr, t in tuned
                    if all(n in graph.node_map for n in gr.nodes)]
        try:
            self._model = base.calibrate(samples, prior_weight=REFIT_PRIOR)
        except ValueError:   # nothing measurable yet (e.g. only empty kernels)
            pass
