"""The training-graph methods of :class:`~workbench.session.Session` (a mixin, so the
session module keeps one job): one step of a graph imported with
``from_torch(..., training=True)`` (:mod:`workbench.training`)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from . import arguments as args


class Training:
    def train_step(self, batch: Mapping[str, np.ndarray], state=None) -> float:
        """One training step of a training graph, parameters updated in place; the
        session keeps the state it was given (:mod:`workbench.training.loop`)."""
        from .training.loop import train_step
        self._train_state = state or getattr(self, "_train_state", None)
        return train_step(self, args.mapping(batch, "batch"), self._train_state)

    def saved(self):
        """The forward values the backward reads, one row each: bytes stored, flops of
        recomputing it, the minimum cut's suggestion (store / recompute) and why a
        value cannot be recomputed (:func:`workbench.training.saved.saved_table`)."""
        import pandas as pd
        from .training.saved import SAVED_COLUMNS, saved_table
        return pd.DataFrame(saved_table(self.graph), columns=list(SAVED_COLUMNS))
