"""Where a row kernel's loads and stores land on the CPU.

A GPU kernel keeps a group input's row in registers (``Scratch.source``) or a computed
row in an output's row (``Scratch.home``, RowLowerer._home); one CPU thread owns the
row, so the C rendering reads the input again (its caches keep the row) and writes
the row array's elements straight into the output. These functions give the access as
the CPU performs it, for the renderer to print and for its loop splits to recognise
(render/c_exp_rows.py, render/c_lanes.py) from the kernel IR rather than from the C
it prints.
"""
from __future__ import annotations

from ..kir import Load, Scratch, Store


def host_load(s: Load) -> Load:
    """``s`` as the CPU performs it: a load from a register copy of an input, or from
    a row array kept in an output's row, reads that memory at ``src_offset``."""
    while isinstance(s.buf, Scratch) and (s.buf.source is not None
                                          or s.buf.home is not None):
        s = Load(s.var, s.buf.source if s.buf.source is not None else s.buf.home,
                 s.src_offset)
    return s


def host_store(s: Store) -> Store | None:
    """``s`` as the CPU performs it, or None where it performs none: a store into a
    register copy of an input is left out (the input is read again), one into a row
    array kept in an output's row lands there, at ``dst_offset``."""
    while isinstance(s.buf, Scratch):
        if s.buf.source is not None:
            return None
        if s.buf.home is None:
            break
        s = Store(s.buf.home, s.dst_offset, s.expr, node=s.node)
    return s
