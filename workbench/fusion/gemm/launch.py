"""What a user or the tuner may set on a GEMM kernel in place of the rule's choice
(``Plan.set_launch``, ``Session.tune``): :class:`GemmLaunch`, checked as it is parsed,
and :func:`set_tile`, a tile size it sets checked against the extent it cuts.

    >>> GemmLaunch.parse((("tile_m", 64), ("blas", 1)))
    GemmLaunch(tile_m=64, tile_n=0, blas=1, online=-1, stages=0, skip=-1)
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import FusionRefused
from ..gemm_shape import PACK_ONCE


@dataclass(frozen=True)
class GemmLaunch:
    """What a user or the tuner may set on a GEMM kernel in place of the rule's choice
    (``Plan.set_launch``, ``Session.tune``; 0 or -1 leaves it to the rule):

    - ``tile_m`` / ``tile_n``: rows and columns per output tile (a packed B's tiles
      start on a panel, so ``tile_n`` is then a multiple of PANEL; tiles of whole rows,
      an epilogue reducing rows, take no ``tile_n``; a convolution's rows are its
      filters, and each of its tiles gathers the patches of its columns);
    - ``blas``: 1 multiplies by sgemm per tile where the rule packs B for the
      micro-kernel (a convolution's patches: gathered row-major for it), 0 keeps the
      micro-kernel (where it runs: ``packs``);
    - ``online``: a fused attention's softmax a block of keys at a time (1) or over
      whole rows of scores (0), where its epilogue has the online form;
    - ``stages``: a GPU tile's panels in 1 stage (the rule) or 2 (the next panels'
      elements loaded into registers while the current ones are multiplied:
      ``BlockTile.stages``);
    - ``skip``: a fused attention under a causal mask skips the blocks of keys past
      each tile's diagonal (1, the rule, where its mask has a key limit:
      fusion/key_limit.py) or takes every block (0: the same kernel otherwise, for the
      tuner -- on a GPU the run-time checks' reads may cost what the skip saves -- and
      for comparing).

    ``blas``, ``online`` and ``skip`` are 0 or 1; any one ``-1`` is the rule's.
    """
    tile_m: int = 0
    tile_n: int = 0
    blas: int = -1
    online: int = -1
    stages: int = 0
    skip: int = -1

    @staticmethod
    def parse(launch) -> "GemmLaunch":
        """From (name, value) pairs; FusionRefused naming an unknown parameter or a
        value out of range."""
        launch = dict(launch)
        bad = [k for k in launch if k not in GEMM_LAUNCH]
        if bad:
            raise FusionRefused(f"a GEMM kernel has no launch parameter {bad[0]!r}; it takes "
                                f"{', '.join(GEMM_LAUNCH)}")
        for k, v in launch.items():
            allowed = {"blas": (0, 1), "online": (0, 1), "stages": (1, 2),
                       "skip": (0, 1)}.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or (
                    v not in allowed if allowed else v < 1):
                raise FusionRefused(f"{k}={v!r} is out of range for a GEMM kernel "
                                    + (f"({allowed[0]} or {allowed[1]})" if allowed
                                       else "(a positive count)"))
        return GemmLaunch(**launch)

    def packs(self, can: str, what: str, per_run: bool = False) -> str:
        """How B (``what``) is multiplied, given how it can be packed (``can``, see
        ``tiles.packs``): the rule packs a constant once, and an activation by every
        run only where the caller asks (``per_run``: a fused attention's K and V from
        ``CpuAttention.pack_min_keys`` keys); ``blas`` overrides either way."""
        if self.blas == 1:
            return ""
        if self.blas == 0:
            if not can:
                raise FusionRefused(f"blas=0: {what} is multiplied by sgemm here (the "
                                    "micro-kernel needs wide vectors and B packed per batch "
                                    "item); there is no micro-kernel to choose")
            return can
        return can if can == PACK_ONCE or per_run else ""


# the launch parameters of a GEMM kernel (GemmLaunch's fields)
GEMM_LAUNCH = ("tile_m", "tile_n", "blas", "online", "stages", "skip")


def set_tile(name: str, value: int, extent: int, align: int) -> int:
    """A tile size a launch sets: at most the extent (a larger one is the extent), and
    a multiple of ``align`` unless it spans the whole extent."""
    value = min(value, max(extent, 1))
    if value % align and value < extent:
        raise FusionRefused(f"{name}={value}: B is packed into panels of {align} columns "
                            f"for the micro-kernel, so tiles are a multiple of {align} wide "
                            f"(or all {extent} columns)")
    return value
