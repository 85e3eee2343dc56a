"""Schedule kinds and thread mappings: typed values with one table of their properties.

A schedule *kind* is the template a kernel is built from (see :mod:`.schedule`); a
*thread mapping* says how a row reduction's rows meet the hardware (AStitch's adaptive
thread mapping). Both are string-valued enums, so a notebook may still write
``schedule.mapping == "warp"``, but the code asks the table (``mapping.info.on_chip``,
``mapping.info.col_bind``...) instead of comparing names. Adding a mapping is one row of
:data:`MAPPING_TABLE` plus its lowering (``codegen/lower/rows.py``, the row template
``codegen.lower.LOWERERS`` gives a row kernel).

Example::

    >>> Mapping.parse("warp").info.on_chip, Mapping.split.info.grid_barrier_per_reduction
    (True, True)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..device import CUDA_WARP
from ..errors import FusionRefused


class _Named(str, enum.Enum):
    """A string-valued enum that prints as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class ScheduleKind(_Named):
    """The template a kernel is built from."""
    opaque = "opaque"             # one library call (matmul, conv)
    elementwise = "elementwise"   # flat loops over outputs
    row_reduce = "row_reduce"     # reductions over rows with their neighbours
    stitched = "stitched"         # phases of the above joined by grid barriers
    gemm = "gemm"                 # one matmul by tiles, its elementwise epilogue per tile


@dataclass(frozen=True)
class MappingInfo:
    """What one thread mapping means, read by analysis, lowering, the cost model and
    the view."""
    label: str                # the graph view's name ("warp/row")
    launch: str               # the launch line ("warp/row x{rpb} rows/block")
    describe_fmt: str         # the schedule's description ("warp per row x{rpb} ...")
    row_bind: str             # the kernel IR's binding of the loop over rows
    col_bind: str             # how a row's columns meet threads: lane | block | serial
    reduce_width: str         # block-wide combine of a row's partials: warp | block | ""
    on_chip: bool             # a row lives in one block: its values may stay on chip
    innermost: bool           # coalesced when the reduced axes are innermost (else not)
    shared_slot: bool         # the combine needs shared-memory reduction slots ...
    slots_per_reduction: bool  # ... one per reduction (else one, reused)
    grid_barrier_per_reduction: bool   # partials meet in global memory (split)
    # threads that combine one row's partials (the cost model's combine term): a fixed
    # width, or None for all of the row's blocks' threads
    combine_threads: int | None
    # the reduced axis cut into blocks of rows: their partial sums meet in global
    # memory after one grid barrier (a two-phase column reduction)
    partials_by_rows: bool = False

    def describe(self, rows_per_block: int, splits: int) -> str:
        """How a schedule's description names it ("warp per row x8 rows/block")."""
        return self.describe_fmt.format(rpb=rows_per_block, splits=splits)

    def launch_text(self, rows_per_block: int, splits: int) -> str:
        return self.launch.format(rpb=rows_per_block, splits=splits)


class Mapping(_Named):
    """How a row reduction's rows meet threads (AStitch)."""
    warp = "warp"       # one warp per row, several short rows per block
    block = "block"     # one thread block per row
    split = "split"     # a long row cut across blocks, partials combined after a barrier
    thread = "thread"   # one thread per row (the column-reduction template)
    two_phase = "two_phase"   # thread per row over blocks of the reduced axis, then
    #                           the blocks' partials summed (a two-phase column reduction)

    @property
    def info(self) -> MappingInfo:
        """This mapping's row of :data:`MAPPING_TABLE`."""
        return MAPPING_TABLE[self]

    @staticmethod
    def parse(text: "str | Mapping | None") -> "Mapping | None":
        """A mapping from its name; ``auto`` (or None) is None: the rule decides."""
        if text is None or isinstance(text, Mapping):
            return text
        if text == "auto":
            return None
        try:
            return Mapping(text)
        except ValueError:
            raise FusionRefused(f"unknown mapping {text!r}; choose one of "
                                f"{', '.join(m.value for m in Mapping)} or auto") from None


MAPPING_TABLE: dict[Mapping, MappingInfo] = {
    Mapping.warp: MappingInfo(
        label="warp/row", launch="warp/row x{rpb} rows/block",
        describe_fmt="warp per row x{rpb} rows/block", row_bind="warp", col_bind="lane",
        reduce_width="warp", on_chip=True, innermost=True, shared_slot=False,
        slots_per_reduction=False, grid_barrier_per_reduction=False,
        combine_threads=CUDA_WARP),
    Mapping.block: MappingInfo(
        label="block/row", launch="block/row", describe_fmt="block per row",
        row_bind="grid", col_bind="block", reduce_width="block", on_chip=True,
        innermost=True, shared_slot=True, slots_per_reduction=True,
        grid_barrier_per_reduction=False, combine_threads=None),
    Mapping.split: MappingInfo(
        label="split/row", launch="split x{splits} blocks/row",
        describe_fmt="row split over {splits} blocks", row_bind="grid", col_bind="block",
        reduce_width="block", on_chip=False, innermost=True, shared_slot=True,
        slots_per_reduction=False, grid_barrier_per_reduction=True, combine_threads=None),
    Mapping.thread: MappingInfo(
        label="thread/row", launch="thread/row x{rpb} rows/block",
        describe_fmt="thread per row", row_bind="flat", col_bind="serial", reduce_width="",
        on_chip=False, innermost=False, shared_slot=False, slots_per_reduction=False,
        grid_barrier_per_reduction=False, combine_threads=0),
    Mapping.two_phase: MappingInfo(
        label="2-phase/col", launch="two-phase x{splits} blocks of rows",
        describe_fmt="thread per row over {splits} blocks of its columns, then the partials",
        row_bind="flat", col_bind="serial", reduce_width="", on_chip=False,
        innermost=False, shared_slot=False, slots_per_reduction=False,
        grid_barrier_per_reduction=False, combine_threads=0, partials_by_rows=True),
}

MAPPINGS: tuple[Mapping, ...] = tuple(Mapping)

# The mapping rule's thresholds (AStitch): rows up to this long get one warp each;
# rows at least this long, too few to give every SM a block, are split across blocks.
WARP_ROW_MAX_COLS = 1024
SPLIT_MIN_COLS = 8192


def choose_mapping(rows: int, cols: int, innermost: bool, units: int) -> Mapping:
    """The mapping rule for a row reduction on a device with ``units`` SMs (or cores).

    Reduced axes not innermost -> ``thread`` (coalesced column reduction); short rows
    -> ``warp``; too few long rows to give every unit a block -> ``split``; else
    ``block``.

    >>> choose_mapping(4096, 768, True, 132), choose_mapping(16, 65536, True, 132)
    (<Mapping.warp: 'warp'>, <Mapping.split: 'split'>)
    """
    if not innermost:
        return Mapping.thread
    if cols <= WARP_ROW_MAX_COLS:
        return Mapping.warp
    if rows < units and cols >= SPLIT_MIN_COLS:
        return Mapping.split
    return Mapping.block
