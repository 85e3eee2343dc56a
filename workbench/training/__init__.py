"""Training: optimizer steps as graph ops (:mod:`.optim`) and the training loop that
runs a compiled training graph step after step (:mod:`.loop`). The graphs come from
``workbench.from_torch(module, args, training=True, ...)``
(:mod:`workbench.frontends.torch.training`)."""
from .loop import TrainState
from .optim import AdamW, SGD

__all__ = ["AdamW", "SGD", "TrainState"]
