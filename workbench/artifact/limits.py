"""Limits on what a manifest may say: the largest names, texts, lists, nesting, values,
launches and files an artifact may hold.

(Generous for any real plan; they keep a hostile one from reaching a file name, a C
symbol, an allocation or a launch that is out of range.)
"""
from __future__ import annotations

import re

from .manifest import CONSTANTS_FILE, GRAPH_FILE

MAX_IDENTIFIER = 128                 # kernel and buffer names: C identifiers
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_TEXT = 1 << 16                   # free text (names of graph values, descriptions)
MAX_ITEMS = 1 << 20                  # entries of one list or object
MAX_JSON_DEPTH = 32                  # nesting of a manifest or graph.json
MAX_NUMEL = 1 << 62
MAX_INT = (1 << 63) - 1
MAX_VALUE_BYTES = 1 << 40            # one graph value or workspace buffer: 1 TiB
MAX_GRID = (1 << 31) - 1             # CUDA: gridDim.x
MAX_BLOCK = 1024                     # CUDA: threads per block
MAX_SHARED_BYTES = 227 << 10         # CUDA: shared memory per block (opt-in, sm_90)
MAX_MANIFEST_BYTES = 64 << 20
MAX_GRAPH_BYTES = 1 << 30
MAX_SOURCE_BYTES = 16 << 20
MAX_CONSTANTS_BYTES = 1 << 40


def file_limit(rel: str) -> int:
    """The largest size a manifest may record for an artifact file."""
    if rel == GRAPH_FILE:
        return MAX_GRAPH_BYTES
    if rel == CONSTANTS_FILE:
        return MAX_CONSTANTS_BYTES
    return MAX_SOURCE_BYTES
