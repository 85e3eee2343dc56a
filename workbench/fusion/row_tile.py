"""How a row kept on chip is cut across a block's threads: each thread's tile of K
steps of V-element vectors, shifted to the row's misalignment where the vector does not
divide its length. Below both the schedule (its ``tile_steps``) and the geometry (the
registers and threads a launch takes).
"""
from __future__ import annotations


def row_shifted(cols: int, vector: int) -> bool:
    """Whether a row's tile starts at the row's misalignment (its length is no
    multiple of the vector): thread t's columns are then (k * threads + t) * vector
    + v - shift, shift = the row's first offset mod vector."""
    return vector > 1 and cols % vector != 0


def row_span(cols: int, vector: int) -> int:
    """Columns a row's tile covers: the row, plus up to vector - 1 before it when the
    tile is shifted."""
    return cols + vector - 1 if row_shifted(cols, vector) else cols


def row_slots(cols: int, threads: int, vector: int) -> int:
    """Register slots per thread one cached value of a row takes (its K x V tile)."""
    return -(-row_span(cols, vector) // (threads * vector)) * vector
