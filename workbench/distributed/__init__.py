"""Computation and communication in one program: collectives over p ranks, placements,
the CoCoNet transformations, a runner on torch.distributed and an alpha-beta model
(docs/distributed.md)."""
from .placement import Partial, Placement, Replicate, Shard, parse_placement
from .propagate import PlacementError
from .program import DistProgram, from_json, load_json, save_json, to_json
from .builder import DistBuilder
from .from_export import from_export

__all__ = ["DistBuilder", "DistProgram", "Partial", "from_export", "Placement", "PlacementError",
           "Replicate", "Shard", "from_json", "load_json", "parse_placement", "save_json",
           "to_json"]
