"""Kernels that take a plane at a time (a depthwise convolution's, a pooling's:
codegen/planes.py): how many stride phases a plane may be copied through, and how
many planes each tile takes. Shared by the GEMM template and the pooling's lowering.

    >>> plane_tile(672, 2)     # 16 tiles, 42 planes each
    42
"""
from __future__ import annotations

# a plane is computed through its stride phases (codegen/planes.py), a copy loop each:
# at most this many (strides of 4 x 4), else tap by tap (a depthwise convolution) or
# the row kernel (a pooling)
PLANE_PHASES_MAX = 16
# a depthwise convolution's planes (and a pooling's, codegen lower/convolution.py's
# pool_planes) dealt out in PLANE_TILES tiles a core (not a tile a plane), so the
# border of a tile's buffer, written once per tile, serves many planes.
# Measured one call at a time against a tile a plane: 672 channels of 14 x 14, 5 x 5
# of stride 2, 0.067 -> 0.058 ms; 96 of 112 x 112, 3 x 3 of stride 2, 0.171 -> 0.154;
# 1152 of 7 x 7, 5 x 5, even within the noise (0.080 against 0.078-0.087)
PLANE_TILES = 8


def plane_tile(planes: int, units: int) -> int:
    """Planes per tile of a kernel taking a plane at a time (a depthwise convolution's,
    a pooling's): PLANE_TILES tiles a core, or a plane each where there are fewer."""
    return -(-planes // min(planes, units * PLANE_TILES))
