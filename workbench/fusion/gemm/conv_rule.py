"""Which way a convolution's GEMM kernel computes it, by its shape: the tuned
thresholds (one frozen :class:`ConvRule`, ``CONV_RULE``) and the rule that reads them
(:func:`conv_form`, and :func:`micro_kernel_wins` for how each tile's product is made).

A convolution is a GEMM per image and group: its filters ``[k, channels x taps]``
times its input's patches ``[channels x taps, positions]``. The forms, in the order the
rule tries them: a 2-D depthwise one with its channels in the vectors' lanes or a
padded plane at a time (DEPTHWISE_LANES, DEPTHWISE_PLANES); one of few filters computed
directly, the filters in the lanes (CONV_DIRECT); a 1 x 1 one over few positions made
transposed against the filters packed once (PACK_FILTERS); a 1 x 1 one's input read in
place (IN_PLACE); else the patches gathered by each tile (IM2COL).

    >>> conv_form(Im2col("x", 64, (56, 56), (3, 3), (56, 56), (1, 1), (1, 1), (1, 1)),
    ...           64, 1, half=False, can="per tile", packed="per tile", micro=False,
    ...           constant=True, blas=-1)
    'direct, filters in lanes'
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..gemm_shape import CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES, PACK_FILTERS, Im2col
from .direct import DIRECT, direct_fits
from .planes import PLANE_PHASES_MAX
from .tiles import round_up

# the forms besides the packed_b ones: a 1 x 1 convolution's input read in place (by
# sgemm, or packed by every run), and the patches gathered by each tile
IN_PLACE = "in place"
IM2COL = "im2col"


@dataclass(frozen=True)
class ConvRule:
    """The tuned thresholds of a convolution's form (``CONV_RULE``; a test or a
    benchmark replaces it there to try others)."""

    # the deepest filters (weights each: channels x taps) whose products the rule gives the
    # micro-kernel rather than sgemm per tile. Measured kernel by kernel on 2 cores (Zen 4,
    # OpenBLAS 0.3.30 SkylakeX; benchmarks/results/conv-gemm-2026-11-24.md): below 256
    # weights the micro-kernel won or tied (ResNet-50's 1 x 1 convolutions of 64 channels
    # 174 GFLOP/s against 139, its 7 x 7 stem 148 against 143, ViT's patches 101 against
    # 93, Wav2Vec2's front end 43-102 against 34-72); from 256 sgemm won by 5-25% on most
    # (ResNet-50's 3 x 3 and 1 x 1 convolutions of its later stages: 113-142 GFLOP/s
    # against 135-174), the whole of ResNet-50's convolutions 63.6 ms against 57.5
    micro_depth: int = 256
    # ...except a 1 x 1 convolution with at most this many filters per group, or over
    # more than few_positions and fewer than this many positions: its input, read in place
    # by sgemm, would be packed by every run for the micro-kernel, an extra pass that few
    # filters do not repay, into panels of 64 positions that 49 fill three quarters of
    # (benchmarks/results/conv-gemm-2026-11-24*.md: ResNet-50's 64-filter 1 x 1 0.221 ms
    # by sgemm against 0.241; MobileNetV2's 1 x 1s of 8-32 filters 0.007-0.016 against
    # 0.011-0.019. Kernels alone, 2026-11-25: MobileNetV3's 72, 120 and 184 filters 0.066,
    # 0.046 and 0.037 ms by sgemm against 0.089, 0.072 and 0.041, its 960 over 7 x 7
    # positions 0.074 against 0.108; 672 filters tied, ResNet-50's 256 and 512 were 7% and
    # 4% faster on the micro-kernel. Whole, in one process: MobileNetV3 5.27 -> 4.98 ms,
    # EfficientNet-B0 10.78 -> 10.35, ShuffleNetV2 4.09 -> 3.86, SqueezeNet even)
    pointwise_micro_filters: int = 192
    pointwise_micro_positions: int = 64
    # ...but a 1 x 1 convolution that expands (more filters than weights each) at most
    # pointwise_shallow_depth deep over at least pointwise_shallow_positions positions
    # takes the micro-kernel whatever its filters: sgemm's call per tile with k = 8 ran
    # at ~60 GFLOP/s. MobileNetV2's first expand (8 -> 48 over 32 x 32; benchmarks/
    # results/mbv2-layers-2026-12-05*.md, kernels alternating in one process, fastest of
    # 150 calls each) 23.6 -> 19.2 us; it lost on its 8 -> 48 over 16 x 16 (5.3 -> 5.8,
    # 5.1 -> 5.7 us), on 16 -> 8 over 32 x 32 (3.9 -> 6.7: few filters) and over 8 x 8 and
    # fewer positions (16 -> 96: 4.7 -> 7.4, 24 -> 144: 3.0 -> 4.8)
    pointwise_shallow_depth: int = 16
    pointwise_shallow_positions: int = 1024
    # a 1 x 1 convolution the rule gives the micro-kernel (more than
    # pointwise_micro_filters filters, fewer than micro_depth weights each) over
    # at most this many positions (one vector's lanes on AVX-512) is multiplied transposed
    # (PACK_FILTERS): the filters in the lanes, packed once. Positions in the lanes filled
    # a quarter of each vector over 4 of them, and the filters' sliver was packed again by
    # every tile (MobileNetV2's last blocks, 2 x 2 and 4 x 4 positions: 1280 filters 72 ->
    # 22 us; fewer filters measured faster by sgemm, deeper ones no faster transposed)
    few_positions: int = 16
    # A 2-D depthwise convolution (float32, on the micro-kernel's vectors) is computed with
    # an image's channels as the GEMM's rows, each tile whole planes, one of two ways:
    # - where its taps meet at most depthwise_lanes_span input positions per plane (its
    #   zero border included), the channels in the vectors' lanes (DEPTHWISE_LANES): a
    #   plane per channel walks loops a few positions long (and where every plane fits
    #   in one vector, that form holds a few channels' planes per vector instead,
    #   codegen wb_depthwise_vplanes);
    # - else, up to depthwise_plane_span positions (a 126 x 126 plane, 64 KiB of a
    #   thread's stack), a padded plane at a time, each output's taps summed in a register
    #   (DEPTHWISE_PLANES).
    # Measured on MobileNetV2 (small, one process, alternating): against the tap-by-tap
    # loops (codegen lower/convolution.py's direct_taps, which add each tap into the
    # tile in memory) 4 x 4 planes 24 -> 11 us in the lanes, 16 x 16 35 -> 10 and
    # 32 x 32 25 -> 12 as planes, strided 41 -> 22; lanes against planes: 2 x 2 (16
    # positions with the border) 7.1 against 13.5 us, 4 x 4 (36) 6.4 against 8.5, 8 x 8
    # (100) 11.4 against 7.8
    depthwise_lanes_span: int = 64
    depthwise_plane_span: int = 16384
    # A 1-D or 2-D float32 convolution of one group with constant filters of at most
    # direct_weights weights in all, not a 1 x 1 read in place (but see
    # pointwise_direct_depth), is computed directly
    # (CONV_DIRECT, codegen wb_conv_lanes): each tap's input a broadcast operand of
    # multiply-adds into vectors of filters, no patches gathered; tiles whole output rows
    # of one image, their input rows copied with their zero border into a thread's buffer
    # of at most DirectConv.scratch floats. Gathering the patches wrote each input element
    # once per tap meeting it before the product read it (benchmarks/results/
    # conv-gemm-2026-11-24-direct*.md, kernels timed alternating in one process: the small
    # ResNet's 7 x 7 stem 0.147 -> 0.069 ms, its 3 x 3s 0.041 -> 0.025 and 0.051 -> 0.021;
    # ResNet-50's 3 x 3s of 64 to 512 filters 1.71 -> 1.34, 1.93 -> 1.45, 2.04 -> 1.56 and
    # 2.40 -> 1.74 ms against the micro-kernel, all faster than sgemm too). Its filters,
    # a pair of vectors at a time, are read from the cache every block of a tile shares;
    # up to 16 MiB of them (ResNet-50's last stage: 2.4 million weights) measured faster,
    # when each block streamed all the filters they lost there (2.70 against 2.14 ms). It
    # also stores each block transposed, element by element: a cost per output that the
    # depth amortizes, where the gather's per input element is amortized over the
    # filters. So it takes filters at least 1 / direct_depth_ratio as deep as they are
    # many: Whisper's first convolution (256 filters of 48 weights) ran 0.153 ms against
    # 0.137, Wav2Vec2's (32 of 10) 0.104 against 0.037; MobileNetV2's stem (16 of 27) 0.032
    # against 0.046; at the ratio, ResNet-50's strided 1 x 1s of 2 weights per filter
    # were 11% slower to 9% faster
    direct_weights: int = 1 << 22
    direct_depth_ratio: int = 2
    # ...and a 1 x 1 convolution read in place (the micro-kernel's or sgemm's otherwise)
    # of filters at least pointwise_direct_depth deep, over more than few_positions
    # positions, where they are at least as deep as they are many, or where the positions
    # are fewer than pointwise_micro_positions (a GEMM tile of 49 columns fills 49 of a
    # panel's 64; the direct blocks of 7 positions fill a row of 7 whole). Kernels alone,
    # the three ways alternated in one process (2 cores, Zen 4): ResNet-50's 1024 -> 256
    # and 1024 -> 512 over 14 x 14 216 and 218 GFLOP/s against 196-197 (the rule's sgemm),
    # 512 -> 128 over 28 x 28 210 against 180, 2048 -> 512 and 512 -> 2048 over 7 x 7 217
    # and 213 against 170-172; GoogLeNet's 832 -> 384 over 7 x 7 207 against 149;
    # EfficientNet-B0's 1152 -> 320 206 against 142, 672 -> 112 177 against 160;
    # MobileNetV3's 960 -> 160 175 against 165; 256 deep over 56 x 56 even. Shallower, or
    # more filters than weights each, it lost: 256 -> 1024 over 14 x 14 115 against 181,
    # 128 -> 512 over 28 x 28 173 against 201, 64 -> 64 over 56 x 56 150 against 204,
    # MobileNetV3's 160 -> 960 over 7 x 7 193 against 208. So did filters that leave more
    # than an eighth of the last pair of vectors' lanes idle: SqueezeNet's 384 -> 48 and
    # 256 -> 48 over 27 x 27 130-137 against 166-177 (EfficientNet's 112 filters, an
    # eighth idle, still won)
    pointwise_direct_depth: int = 256


CONV_RULE = ConvRule()


def micro_kernel_wins(cols: Im2col, filters: int) -> bool:
    """Whether the rule gives the product of ``filters`` filters (per group) and the
    patches ``cols`` to the micro-kernel rather than sgemm per tile: filters shallower
    than ``micro_depth``, unless a 1 x 1 convolution's few filters or positions leave
    the packing unpaid (not where it is shallow over many positions: sgemm's k too
    short)."""
    r, positions = CONV_RULE, math.prod(cols.out)
    shallow_many = (cols.rows <= r.pointwise_shallow_depth and filters > cols.rows
                    and positions >= r.pointwise_shallow_positions)
    return cols.rows < r.micro_depth and not (cols.pointwise and not shallow_many and (
        filters <= r.pointwise_micro_filters
        or r.few_positions < positions < r.pointwise_micro_positions))


def conv_form(cols: Im2col, filters: int, groups: int, *, half: bool, can: str, packed: str,
              micro: bool, constant: bool, blas: int) -> str:
    """The form the rule computes a convolution in (see the module docstring): ``groups``
    groups of ``filters`` filters over the patches ``cols``; ``half`` a bfloat16 one;
    ``can`` how its patches can meet the micro-kernel ("" where it does not run),
    ``packed`` how they do, ``micro`` whether the rule gives it the micro-kernel;
    ``constant`` its filters a constant; ``blas`` the launch's (-1: the rule's; 0 keeps
    the patches gathered for the micro-kernel, 1 sgemm, for the tuner to compare)."""
    r = CONV_RULE
    d, positions, depth = len(cols.out), math.prod(cols.out), cols.rows
    span = math.prod(cols.span)
    lanes = span <= r.depthwise_lanes_span
    if (d == 2 and filters == 1 and cols.channels == 1 and not half and can and blas == -1
            and (lanes or (span <= r.depthwise_plane_span
                           and math.prod(cols.strides) <= PLANE_PHASES_MAX))):
        return DEPTHWISE_LANES if lanes else DEPTHWISE_PLANES
    # a deep 1 x 1 convolution directly too (pointwise_direct_depth)
    deep_pointwise = (cols.pointwise and positions > r.few_positions
                      and depth >= r.pointwise_direct_depth
                      and (depth >= filters or positions < r.pointwise_micro_positions)
                      and round_up(filters, DIRECT.align) * 7 <= filters * 8)
    if (d <= 2 and groups == 1 and not half and can and (not cols.pointwise or deep_pointwise)
            and constant and blas == -1
            and filters * depth <= r.direct_weights
            and (depth * r.direct_depth_ratio >= filters or deep_pointwise)
            and direct_fits(cols)):
        return CONV_DIRECT
    if (cols.pointwise and groups == 1 and not half and can and positions <= r.few_positions
            and constant and (micro if blas == -1 else blas == 0)):
        return PACK_FILTERS
    if cols.pointwise and (packed or not half):
        return IN_PLACE
    return IM2COL
