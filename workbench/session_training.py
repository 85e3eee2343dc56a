"""The training-graph methods of :class:`~workbench.session.Session` (a mixin, so the
session module keeps one job): one step of a graph imported with
``from_torch(..., training=True)`` (:mod:`workbench.training`); saved activations
stored or recomputed as steps (:mod:`workbench.session_saved`)."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from . import arguments as args
from .session_saved import SavedSteps


class Training(SavedSteps):
    def train_step(self, batch: Mapping[str, np.ndarray], state=None) -> float:
        """One training step of a training graph, parameters updated in place; the
        session keeps the state it was given (:mod:`workbench.training.loop`)."""
        from .training.loop import train_step
        self._train_state = state or getattr(self, "_train_state", None)
        return train_step(self, args.mapping(batch, "batch"), self._train_state)
