"""The op library. Importing this package registers every primitive."""
from . import elementwise, layout, opaque, reduce  # noqa: F401  (registration)
from .reduce import COMBINERS, Combiner, reduced_shape
from .registry import (Kind, Mapping_, OpDef, all_ops, broadcast_shapes, evaluate_node,
                       get_op, normalize_axes)

MappingType = Mapping_

__all__ = ["Kind", "MappingType", "OpDef", "all_ops", "get_op", "broadcast_shapes",
           "normalize_axes", "evaluate_node", "COMBINERS", "Combiner", "reduced_shape"]
