"""The op library. Importing this package registers every primitive."""
from . import elementwise, layout, magnitude, opaque, reduce  # noqa: F401  (registration)
from . import bfloat16, indexing, ordering  # noqa: F401  (registration: indexing ops, bf16)
from . import conv, rounding, window  # noqa: F401  (registration: CNN and audio ops)
from . import minifloat  # noqa: F401  (registration: FP8 and FP4 held in float32)
from . import collective  # noqa: F401  (registration: collectives over p ranks)
from . import random  # noqa: F401  (registration: counter-based random numbers)
from . import repeat_node  # noqa: F401  (registration: a repeat as a graph's node)
from .index import Index
from .reduce import reduced_shape
from .registry import (Combiner, Helper, IndexContext, Kind, OpDef, RowRole, all_helpers,
                       all_ops, broadcast_shapes, evaluate_node, get_op, normalize_axes)

__all__ = ["Combiner", "Helper", "Index", "IndexContext", "Kind", "OpDef", "RowRole",
           "all_helpers", "all_ops", "broadcast_shapes", "evaluate_node", "get_op",
           "normalize_axes", "reduced_shape"]
