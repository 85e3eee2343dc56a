"""Convolutions as GEMM kernels on the CPU (implicit im2col: each tile's input patches
gathered straight into the micro-kernel's column panels -- or, with ``blas=1``,
row-major for sgemm -- then the product with the filters, then the epilogue; a 1 x 1
convolution's patches are the input itself, packed by every run like a matmul's B):
1-D, 2-D and 3-D, strides, dilations, asymmetric pads, a bias, an epilogue
(BatchNorm's scale and shift, ReLU, a residual), planned by rules and stitch, against
the NumPy reference on fresh random inputs with outputs poisoned, every kernel within
its float32 bound; grouped and depthwise ones as a batch of GEMMs, one per batch item
and group."""
import math
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import workbench as wb
from workbench.errors import FusionRefused
from workbench.fusion.analysis import analyze
from workbench.device import assumed_cpu
from workbench.fusion.gemm import direct as direct_conv, tiles
from workbench.fusion.gemm.conv_rule import CONV_RULE
from workbench.fusion.gemm.direct import DIRECT as DIRECT_CONV
from workbench.fusion.gemm.planes import PLANE_PHASES_MAX
from workbench.fusion.gemm.tiles import PACK_MIN_VECTOR_BYTES, PANEL
from workbench.fusion.mapping import ScheduleKind
from workbench.fusion.gemm_shape import (CONV_DIRECT, DEPTHWISE_LANES, DEPTHWISE_PLANES,
                                         PACK_FILTERS, PACK_PER_RUN, PACK_TILE)
from workbench.session import Session

from plan_checks import check_plan

RNG = np.random.default_rng(5)

CASES = {
    # ViT's patch embedding: strides equal to the kernel, a bias
    "patches": ((2, 3, 32, 32), (24, 3, 8, 8), {"strides": [8, 8]}, "bias"),
    # ResNet's 3x3 with a pad of 1, then BatchNorm (scale, shift) and ReLU
    "same_3x3": ((2, 8, 13, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, "bn_relu"),
    # strided, dilated, asymmetric pads, a bias and a residual
    "odd": ((2, 8, 13, 11), (16, 8, 3, 3),
            {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}, "residual"),
    # Whisper's front end: 1-D, stride 2
    "audio_1d": ((3, 5, 40), (7, 5, 4), {"strides": [2], "pads": [1, 2]}, None),
    "volume_3d": ((1, 4, 5, 6, 7), (3, 4, 2, 2, 3), {"pads": [0, 1, 1, 1, 0, 0]}, "bn_relu"),
    # one image on 2 cores: its positions cut into two column tiles, the second
    # starting in the middle of an output row (13 x 11 positions, tiles of 72)
    "split_rows": ((1, 8, 13, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}, "bn_relu"),
    "split_odd": ((1, 8, 13, 11), (16, 8, 3, 3),
                  {"pads": [2, 0, 1, 3], "strides": [2, 1], "dilations": [1, 2]}, "residual"),
    # MobileNet's depthwise 3x3: a GEMM per batch item and channel
    "depthwise": ((2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}, "bn_relu"),
    # its strided blocks with TensorFlow "same" padding (after the end only), and a
    # dilated 1-D one with a bias: one filter per group, computed tap by tap
    "depthwise_strided": ((1, 8, 11, 10), (8, 1, 3, 3),
                          {"group": 8, "pads": [0, 0, 1, 1], "strides": [2, 2]}, "bn_relu"),
    "depthwise_1d": ((2, 6, 30), (6, 1, 5), {"group": 6, "pads": [2, 3], "dilations": [2]},
                     "bias"),
    # over small planes, the channels in the vectors' lanes (DEPTHWISE_LANES): a
    # channel count no multiple of the lanes, strided over one image (its channels cut
    # into two tiles, the second a partial vector), and dilated; over larger ones a
    # padded plane at a time (DEPTHWISE_PLANES, as "depthwise" and "depthwise_strided"
    # above), dilated too
    "depthwise_lanes": ((2, 21, 4, 4), (21, 1, 3, 3), {"group": 21, "pads": [1, 1, 1, 1]},
                        "bn_relu"),
    "depthwise_lanes_strided": ((1, 40, 5, 5), (40, 1, 3, 3),
                                {"group": 40, "pads": [1, 1, 1, 1], "strides": [2, 2]},
                                "bias"),
    "depthwise_lanes_dilated": ((2, 20, 3, 3), (20, 1, 3, 3),
                                {"group": 20, "pads": [2, 2, 2, 2], "dilations": [2, 2]},
                                "residual"),
    # MobileNetV2's last strided block: TensorFlow "same" pads (after the end only)
    "depthwise_lanes_same": ((2, 24, 4, 4), (24, 1, 3, 3),
                             {"group": 24, "pads": [0, 0, 1, 1], "strides": [2, 2]},
                             "bn_relu"),
    "depthwise_planes_dilated": ((2, 12, 10, 9), (12, 1, 3, 3),
                                 {"group": 12, "pads": [2, 1, 2, 3], "dilations": [2, 2]},
                                 "residual"),
    # a plane's stride phases (codegen/planes.py): EfficientNet's strided 5 x 5 (four
    # phases, rows of 7 past which 2 positions are dropped); strides 3 x 2, dilated,
    # uneven pads and kernel (six phases, some taps' rows starting inside the border)
    "depthwise_planes_5x5_strided": ((1, 20, 14, 14), (20, 1, 5, 5),
                                     {"group": 20, "pads": [2, 2, 2, 2], "strides": [2, 2]},
                                     "bn_relu"),
    "depthwise_planes_phases": ((2, 6, 17, 16), (6, 1, 3, 5),
                                {"group": 6, "pads": [1, 2, 0, 1], "strides": [3, 2],
                                 "dilations": [1, 2]}, "bias"),
    # strides of 5 x 4, twenty phases: tap by tap instead (PLANE_PHASES_MAX)
    "depthwise_many_phases": ((1, 4, 31, 29), (4, 1, 5, 5),
                              {"group": 4, "pads": [2, 2, 2, 2], "strides": [5, 4]}, "bias"),
    # Wav2Vec2's positional convolution: 1-D, groups of channels, a wide kernel, a bias
    "grouped_1d": ((2, 8, 40), (12, 2, 9), {"group": 4, "pads": [4, 4]}, "bias"),
    # ResNet's bottleneck 1 x 1s: the patches are the input, read in place (grouped:
    # a batch item's groups one channel run after another)
    "pointwise": ((2, 24, 7, 9), (40, 24, 1, 1), {}, "bias"),
    "pointwise_grouped": ((2, 12, 5, 6), (8, 6, 1, 1), {"group": 2}, "bn_relu"),
    # more filters than CONV_RULE.pointwise_micro_filters: the micro-kernel's, its input
    # packed by every run; over 63 positions (fewer than CONV_RULE.pointwise_micro_positions,
    # more than CONV_RULE.few_positions) sgemm's
    "pointwise_wide": ((2, 24, 7, 10), (256, 24, 1, 1), {}, "bn_relu"),
    "pointwise_wide_few": ((2, 24, 7, 9), (256, 24, 1, 1), {}, "bn_relu"),
    # MobileNetV2's first expand (8 -> 48 over 32 x 32): shallow over many positions,
    # the micro-kernel's whatever its few filters (CONV_RULE.pointwise_shallow_depth)
    "pointwise_shallow": ((1, 8, 32, 32), (24, 8, 1, 1), {}, "bn_relu"),
    # MobileNetV2's last blocks: a 1 x 1 of many filters over few positions, made
    # transposed (the filters in the vectors' lanes, packed once); and one deeper than
    # a block of k (KC), over positions fewer than a sliver, with a bias and a residual
    "pointwise_few": ((2, 24, 4, 4), (208, 24, 1, 1), {}, "bn_relu"),
    "pointwise_few_deep": ((3, 300, 2, 3), (200, 300, 1, 1), {}, "residual"),
    # deep ones computed directly (CONV_RULE.pointwise_direct_depth): as deep as many (a
    # late stage of ResNet-50 over 7 x 7), and more filters than weights over fewer
    # positions than a panel holds
    "pointwise_deep": ((2, 272, 7, 7), (64, 272, 1, 1), {}, "bn_relu"),
    "pointwise_deep_many": ((1, 256, 5, 6), (600, 256, 1, 1), {}, "bias"),
    # (not where a pair of vectors of filters would be half idle: sgemm)
    "pointwise_deep_few": ((1, 256, 9, 9), (48, 256, 1, 1), {}, "bias"),
    # ResNet-50's last stage in small: deep filters (2880 weights: a panel's width of
    # patches is more than IM2COL_TILE) over few positions
    "deep_few": ((1, 320, 7, 7), (32, 320, 3, 3), {"pads": [1, 1, 1, 1]}, "bn_relu"),
    # few positions, shallow filters: the micro-kernel's
    "few": ((1, 16, 7, 7), (64, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "bn_relu"),
    # computed directly, the filters in the lanes (CONV_DIRECT; "patches", "same_3x3",
    # "odd", "audio_1d", "split_*", "deep_few" and "few" above are too): ResNet's 7 x 7
    # stem (output rows of 11: a block and a part of one); 40 filters over one image (a
    # pair of vectors, then a part of one vector; the rows cut for the cores); a stride
    # of 3 (no specialized block), dilated, asymmetric pads; a strided 1 x 1 (its
    # patches not the input itself)
    "direct_stem": ((2, 3, 23, 21), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]},
                    "bn_relu"),
    "direct_wide": ((1, 5, 9, 14), (40, 5, 3, 3), {"pads": [1, 1, 1, 1]}, "bias"),
    "direct_stride3": ((2, 4, 17, 19), (20, 4, 5, 3),
                       {"strides": [3, 3], "dilations": [2, 1], "pads": [2, 0, 3, 1]},
                       "residual"),
    "direct_1x1_strided": ((2, 8, 9, 9), (16, 8, 1, 1), {"strides": [2, 2]}, None),
    # a strided 1 x 1 copies only the rows and columns it reads (wb_conv_lanes): with
    # pads past either edge, unequal strides, 1-D, and deep as ResNet50 v1's stage
    # entries (Keras: the stride on the 1 x 1)
    "direct_1x1_strided_padded": ((1, 8, 10, 9), (16, 8, 1, 1),
                                  {"strides": [2, 3], "pads": [1, 0, 0, 2]}, "bias"),
    "direct_1x1_strided_1d": ((2, 6, 17), (12, 6, 1), {"strides": [3], "pads": [1, 1]},
                              "bn_relu"),
    "direct_1x1_strided_deep": ((1, 272, 14, 14), (64, 272, 1, 1), {"strides": [2, 2]},
                                "residual"),
    # one filter: its bias a one-element constant, inlined as a literal (it has no
    # buffer; lowering its epilogue failed before)
    "one_filter": ((1, 4, 8, 8), (1, 4, 3, 3), {"pads": [1, 1, 1, 1]}, "bias"),
}
# sums of thousands of products: an output near zero is measured against the sum of
# the products' magnitudes (the kernels' own bound), not against itself
DEEP = ("deep_few", "pointwise_few_deep")


def _graph(name, dtype="float32", magnitudes=False):
    """The case in ``dtype``; a bfloat16 graph's constants (and its float32 twin's,
    ``dtype="bf16_values"``) are bfloat16 values, so the twin computes on them exactly.
    ``magnitudes``: every constant's absolute value (see ``_magnitudes``)."""
    xs, ws, attrs, epi = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    held = "bfloat16" if dtype == "bfloat16" else "float32"
    b = wb.GraphBuilder(f"{name}_{dtype}")

    def const(a, name):
        if dtype != "float32":
            a = a.astype(ml_dtypes.bfloat16)
        return b.constant(np.abs(a) if magnitudes else a.astype(held), name)
    x = b.input("x", xs, held)
    args = [x, const(rng.standard_normal(ws), "w")]
    if epi in ("bias", "residual"):
        args.append(const(rng.standard_normal(ws[0]), "b"))
    y = b.op("conv", *args, **attrs)
    bcast = (ws[0],) + (1,) * (len(xs) - 2)
    if epi == "bn_relu":
        scale = const(rng.uniform(0.5, 1.5, bcast), "scale")
        shift = const(rng.standard_normal(bcast), "shift")
        y = b.relu(y * scale + shift)
    if epi == "residual":
        y = y + b.input("res", tuple(y.shape), held)
    b.output(y, "y")
    return b.build()


def _magnitudes(name):
    """``check_plan``'s scale for a deep case: the output of the case on the absolute
    values of its inputs and constants, at least the magnitudes each output sums."""
    from workbench.runtime import run_reference
    g = _graph(name, magnitudes=True)
    return lambda ins: run_reference(g, {k: np.abs(v) for k, v in ins.items()})


@pytest.mark.parametrize("planner", ["rules", "stitch"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_gemm_matches_reference(name, planner):
    g = _graph(name)
    s = Session(g, backend="cpu")
    s.auto(planner)
    assert len(s.plan.groups) == 1, s.plan.describe()
    sched = s.plan.groups[0].schedule
    t = sched.gemm
    assert sched.kind is ScheduleKind.gemm and t.im2col is not None
    if s.device.vector_bytes >= PACK_MIN_VECTOR_BYTES:
        # the micro-kernel for shallow filters, sgemm for deep ones (CONV_RULE.micro_depth)
        # (a 1 x 1 one with few filters: sgemm on its input in place)
        # (over few positions, one group: made transposed against the filters)
        few = t.n <= CONV_RULE.few_positions and name != "pointwise_grouped"
        # (shallow over many positions, expanding: the micro-kernel whatever its filters)
        shallow = (t.k <= CONV_RULE.pointwise_shallow_depth and t.m > t.k
                   and t.n >= CONV_RULE.pointwise_shallow_positions)
        pointwise = ("" if not shallow and (
            t.m <= CONV_RULE.pointwise_micro_filters
            or CONV_RULE.few_positions < t.n < CONV_RULE.pointwise_micro_positions)
                     else PACK_FILTERS if few else PACK_PER_RUN)
        # (a 2-D depthwise one: over small planes the channels in the lanes, else a
        # padded plane at a time)
        planar = name.startswith("depthwise") and len(t.im2col.out) == 2
        depthwise = (DEPTHWISE_LANES if math.prod(t.im2col.span) <= CONV_RULE.depthwise_lanes_span
                     else DEPTHWISE_PLANES if math.prod(t.im2col.strides) <= PLANE_PHASES_MAX
                     else PACK_TILE)
        # (a 1-D or 2-D one of one group, not a 1 x 1 in place: direct)
        # (a 1 x 1 one in place too, where deep: CONV_RULE.pointwise_direct_depth)
        deep_pointwise = (t.im2col.pointwise and t.n > CONV_RULE.few_positions
                          and t.k >= CONV_RULE.pointwise_direct_depth
                          and (t.k >= t.m or t.n < CONV_RULE.pointwise_micro_positions)
                          and -(-t.m // DIRECT_CONV.align) * DIRECT_CONV.align * 7 <= t.m * 8)
        direct = (len(t.im2col.out) <= 2 and (not t.im2col.pointwise or deep_pointwise)
                  and t.m * t.k <= CONV_RULE.direct_weights
                  and (t.k * CONV_RULE.direct_depth_ratio >= t.m or deep_pointwise)
                  and CASES[name][2].get("group", 1) == 1)
        assert t.packed_b == (CONV_DIRECT if direct else "" if t.k >= CONV_RULE.micro_depth
                              else pointwise if name.startswith("pointwise") else depthwise
                              if planar else PACK_TILE), t
        if direct:
            # whole output rows of one image in each tile, every filter or whole pairs
            # of vectors of them
            src = _kernel_code(s)
            assert "wb_conv_lanes(" in src and "wb_cols" not in src, src
            assert t.tile_n % t.im2col.out[-1] == 0, t
            assert t.tile_m == t.m or t.tile_m % DIRECT_CONV.align == 0, t
            if s.device.units == 2 and name == "direct_wide":
                assert t.col_tiles == 2, t       # (one image: its rows cut for the cores)
        if planar and depthwise != PACK_TILE:
            # an image's channels the rows, whole planes in every tile
            assert (t.batch, t.m, t.tile_n) == (*CASES[name][0][:2], t.n), t
            src = _kernel_code(s)
            assert ("wb_depthwise_lanes(" in src) == (depthwise == DEPTHWISE_LANES)
            assert ("wb_xp[" in src) == (depthwise == DEPTHWISE_PLANES)
        if t.packed_b == PACK_FILTERS:
            assert "wb_gemm_packed_t(" in _kernel_code(s)
    if name.startswith("depthwise") and t.packed_b == PACK_TILE:
        # one filter per group: no patches gathered, no micro-kernel (lower.convolution.direct)
        src = s.program().compiled[0].source
        assert "one filter per group" in src and "wb_gemm_packed(" not in _kernel_code(s), \
            src[-3000:]
    check_plan(s, _magnitudes(name) if name in DEEP else None)


DIRECT = sorted(n for n, (xs, ws, attrs, _) in CASES.items()
                if len(xs) <= 4 and attrs.get("group", 1) == 1
                and math.prod(ws) <= CONV_RULE.direct_weights
                and math.prod(ws[1:]) * CONV_RULE.direct_depth_ratio >= ws[0]
                and not (ws[2:] == (1, 1) and not attrs))


@pytest.mark.parametrize("name", DIRECT)
def test_blas0_gathers_the_patches_of_a_direct_convolution(monkeypatch, name):
    """``blas=0`` on a convolution the rule computes directly: its patches gathered
    into the micro-kernel's panels (``PACK_TILE``) instead, for the tuner to compare:
    the gather's runs starting inside an output row, a panel of positions for a tile
    of few columns."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(_graph(name), backend="cpu")
    s.auto("rules")
    assert s.plan.groups[0].schedule.gemm.packed_b == CONV_DIRECT
    s.set_launch(s.plan.groups[0].id, blas=0)
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == PACK_TILE, t
    if name.startswith("split"):
        # 70 positions, rows of 10: the second panel starts inside an output row
        assert t.n > PANEL and PANEL % t.im2col.out[-1] != 0, t
    if name == "few" and s.device.units in (2, 4):
        # one tile of 25 columns would cost what 64 do: not cut for the cores, the
        # filters are
        assert t.col_tiles == 1 and t.row_tiles == s.device.units, t
    assert "wb_conv_lanes(" not in _kernel_code(s)
    check_plan(s, _magnitudes(name) if name in DEEP else None)


def test_direct_convolution_tiles(monkeypatch):
    """A direct convolution's tiles: ``tile_m`` whole pairs of vectors of filters (or
    all of them), ``tile_n`` taken up to whole output rows; a thread's buffer too small
    for every row cuts them into more tiles, and one too small for a tile_n asked for
    is refused."""
    s = Session(_graph("few"), backend="cpu")         # 64 filters over 7 x 7 positions
    s.auto("rules")
    gid = s.plan.groups[0].id
    if s.plan.groups[0].schedule.gemm.packed_b != CONV_DIRECT:
        pytest.skip("the micro-kernel's vectors are too narrow here")
    s.set_launch(gid, tile_m=DIRECT_CONV.align, tile_n=10)
    t = s.plan.groups[0].schedule.gemm
    assert (t.tile_m, t.tile_n, t.row_tiles, t.col_tiles) == (32, 14, 2, 4), t
    check_plan(s)
    with pytest.raises(FusionRefused, match="multiple of 32 filters"):
        s.set_launch(gid, tile_m=48)
    # a buffer holding three output rows' input
    monkeypatch.setattr(direct_conv, "DIRECT",
                        replace(DIRECT_CONV, scratch=direct_conv.direct_scratch(t.im2col, 3)))
    s2 = Session(_graph("few"), backend="cpu")
    s2.auto("rules")
    t = s2.plan.groups[0].schedule.gemm
    assert t.packed_b == CONV_DIRECT and t.tile_n <= 3 * 7 and t.col_tiles >= 3, t
    check_plan(s2)
    with pytest.raises(FusionRefused, match="thread's buffer"):
        s2.set_launch(s2.plan.groups[0].id, tile_n=28)


def test_direct_convolution_tiles_share_the_work_evenly():
    """The cut of a direct convolution's tiles gives the busiest core the least work:
    ResNet-50's last stage (7 rows, 512 filters) in two tiles of half the filters on
    2 cores, not rows cut 4 and 3; where the rows share out evenly (14 rows, 256
    filters) they are cut, the filters whole; a buffer of 4 rows cuts both."""
    assert direct_conv.direct_split(1, 7, 7, 512, 2) == (7, 256)
    assert direct_conv.direct_split(1, 14, 14, 256, 2) == (7, 256)
    assert direct_conv.direct_split(1, 7, 4, 512, 2) == (4, 256)      # 4 tiles, 7 rows each core
    assert direct_conv.direct_split(2, 7, 7, 512, 2) == (7, 512)      # one image a core
    assert direct_conv.direct_split(1, 1, 1, 64, 1) == (1, 64)
    # schedule(static): runs of consecutive tiles, the first cores one more
    assert direct_conv.static_load([4, 3, 4, 3], 2) == 7
    assert direct_conv.static_load([4, 3, 4], 2) == 7
    assert direct_conv.static_load([5, 1, 1], 2) == 6
    assert direct_conv.static_load([2], 4) == 2


def _random_direct(seed):
    """A seeded random 1-D or 2-D convolution the rule computes directly: 1 to 9
    channels, 1 to 70 filters (as many as the depth allows), kernels 1 to 5, strides
    1 to 3, dilations 1 to 2, pads 0 to 3 before and after each axis, planes 1 to 20
    (as small as the kernel meets)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 3))
    kern = tuple(int(v) for v in rng.integers(1, 6, d))
    dil = tuple(int(v) for v in rng.integers(1, 3, d))
    pads = tuple(int(v) for v in rng.integers(0, 4, 2 * d))
    size = tuple(max(int(rng.integers(1, 21)), (k - 1) * dl + 1 - p0 - p1)
                 for k, dl, p0, p1 in zip(kern, dil, pads[:d], pads[d:]))
    c = int(rng.integers(1, 10))
    m = int(rng.integers(1, min(70, c * math.prod(kern) * CONV_RULE.direct_depth_ratio) + 1))
    if d == 2 and c == m == 1:
        m = 2       # (one channel, one filter: a depthwise convolution, its own path)
    attrs = {"strides": [int(v) for v in rng.integers(1, 4, d)], "dilations": list(dil),
             "pads": list(pads)}
    if all(k == 1 for k in kern) and not any(pads) and attrs["strides"] == [1] * d:
        attrs["strides"][0] = 2     # (a 1 x 1 read in place is no direct convolution)
    b = wb.GraphBuilder(f"direct_{seed}")
    x = b.input("x", (int(rng.integers(1, 3)), c, *size))
    w = b.constant(rng.standard_normal((m, c, *kern)).astype(np.float32), "w")
    y = b.op("conv", x, w, b.constant(rng.standard_normal(m).astype(np.float32), "b"), **attrs)
    b.output(b.relu(y), "y")
    return b.build()


@pytest.mark.parametrize("seed", range(12))
def test_random_direct_convolutions_match_reference(seed):
    """Seeded random shapes through the direct path: every edge (rows past the input,
    blocks past the row's end, partial vectors of filters, unspecialized strides)."""
    s = Session(_random_direct(seed), backend="cpu")
    s.auto("rules")
    t = s.plan.groups[0].schedule.gemm
    if s.device.vector_bytes >= PACK_MIN_VECTOR_BYTES:
        assert t.packed_b == CONV_DIRECT, s.plan.describe()
    check_plan(s)


def _kernel_code(s) -> str:
    """The first kernel's own code, past the prelude of helpers (its function, or its
    team form and the function calling it: codegen/render/c.py)."""
    src = s.program().compiled[0].source
    return src[src.index(f"/* kernel {s.kernels()[0].name}:"):]


def _random_depthwise(seed):
    """A seeded random 2-D depthwise convolution over planes the lanes do not take: 1 to
    20 channels, kernels 1 to 7, strides 1 to 4, dilations 1 to 3, pads 0 to 3 before
    and after each axis, planes 6 to 30 (as small as the kernel meets)."""
    rng = np.random.default_rng(1000 + seed)
    kern = tuple(int(v) for v in rng.integers(1, 8, 2))
    dil = tuple(int(v) for v in rng.integers(1, 4, 2))
    pads = tuple(int(v) for v in rng.integers(0, 4, 4))
    size = tuple(max(int(rng.integers(6, 31)), (k - 1) * dl + 1 - p0 - p1)
                 for k, dl, p0, p1 in zip(kern, dil, pads[:2], pads[2:]))
    c = int(rng.integers(1, 21))
    attrs = {"strides": [int(v) for v in rng.integers(1, 5, 2)], "dilations": list(dil),
             "pads": list(pads), "group": c}
    b = wb.GraphBuilder(f"depthwise_{seed}")
    x = b.input("x", (int(rng.integers(1, 3)), c, *size))
    w = b.constant(rng.standard_normal((c, 1, *kern)).astype(np.float32), "w")
    y = b.op("conv", x, w, b.constant(rng.standard_normal(c).astype(np.float32), "b"), **attrs)
    b.output(b.relu(y), "y")
    return b.build()


@pytest.mark.parametrize("seed", range(12))
def test_random_depthwise_planes_match_reference(seed):
    """Seeded random shapes through a plane's stride phases (codegen/planes.py): every
    phase's edge (rows and columns of a phase that the plane does not reach, taps
    starting inside the border), dropped positions past each row, strides up to 4."""
    s = Session(_random_depthwise(seed), backend="cpu")
    s.auto("rules")
    t = s.plan.groups[0].schedule.gemm
    if s.device.vector_bytes >= PACK_MIN_VECTOR_BYTES and \
            math.prod(t.im2col.span) > CONV_RULE.depthwise_lanes_span:
        assert t.packed_b == DEPTHWISE_PLANES, s.plan.describe()
    check_plan(s)


def _random_vplanes(seed):
    """A seeded random 2-D depthwise convolution whose input and output planes each fit
    in one AVX-512 vector (wb_depthwise_vplanes: at most 16 positions): 1 to 50
    channels (rarely a multiple of a group of them), kernels 1 to 5 (up to 25 taps),
    strides 1 to 3, dilations 1 to 2, pads 0 to 2 before and after each axis (TensorFlow
    "same" pads after the end only among them), planes 1 x 1 to 4 x 4 and 2 x 8."""
    rng = np.random.default_rng(3000 + seed)
    while True:
        kern = tuple(int(v) for v in rng.integers(1, 6, 2))
        dil = tuple(int(v) for v in rng.integers(1, 3, 2))
        strides = [int(v) for v in rng.integers(1, 4, 2)]
        pads = [int(v) for v in rng.integers(0, 3, 4)]
        size = [(1, 1), (2, 2), (3, 3), (4, 4), (2, 8), (3, 5)][int(rng.integers(0, 6))]
        out = [(n + p0 + p1 - (k - 1) * dl - 1) // st + 1 for n, k, dl, st, p0, p1
               in zip(size, kern, dil, strides, pads[:2], pads[2:])]
        if min(out) >= 1 and math.prod(out) <= 16:
            break
    c = int(rng.integers(1, 51))
    attrs = {"strides": strides, "dilations": list(dil), "pads": pads, "group": c}
    b = wb.GraphBuilder(f"vplanes_{seed}")
    x = b.input("x", (int(rng.integers(1, 3)), c, *size))
    w = b.constant(rng.standard_normal((c, 1, *kern)).astype(np.float32), "w")
    y = b.op("conv", x, w, b.constant(rng.standard_normal(c).astype(np.float32), "b"), **attrs)
    b.output(b.relu(y), "y")
    return b.build(), c


@pytest.mark.parametrize("seed", range(16))
def test_random_depthwise_planes_in_one_vector_match_reference(seed):
    """Seeded random shapes whose planes each fit in one vector (``wb_depthwise_vplanes``
    on AVX-512; the lanes' copy loops on narrower vectors): every tap's zero lanes past
    each edge, strides and dilations, groups of channels cut by the tile (a tile of an
    odd number of channels, its last vector loaded and stored lane by lane)."""
    g, c = _random_vplanes(seed)
    s = Session(g, backend="cpu")
    s.auto("rules")
    t = s.plan.groups[0].schedule.gemm
    if t.packed_b != DEPTHWISE_LANES:
        pytest.skip("the micro-kernel's vectors are too narrow here")
    assert "wb_depthwise_lanes(" in s.program().compiled[0].source
    check_plan(s)
    tile = int(np.random.default_rng(seed).integers(1, c + 1))
    s.set_launch(s.plan.groups[0].id, tile_m=tile)
    assert s.plan.groups[0].schedule.gemm.tile_m == tile
    check_plan(s)


def test_deep_filters_on_the_micro_kernel_take_a_panel_of_positions(monkeypatch):
    """``blas=0`` on deep filters (2880 weights: IM2COL_TILE holds 45 positions of
    patches): a tile takes a whole panel of the 49 positions instead, the filters cut
    into row tiles for the cores."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(_graph("deep_few"), backend="cpu")
    s.auto("rules")
    s.set_launch(s.plan.groups[0].id, blas=0)
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == PACK_TILE and t.tile_n == 49 and t.col_tiles == 1
    assert t.row_tiles == (s.device.units if s.device.units in (2, 4) else t.row_tiles)
    check_plan(s, _magnitudes("deep_few"))


@pytest.mark.parametrize("tile_m", [None, 64, 128])
@pytest.mark.parametrize("name", ["pointwise_few", "pointwise_few_deep"])
def test_pointwise_over_few_positions_made_transposed(monkeypatch, name, tile_m):
    """``blas=0`` (or the rule, for shallow filters) on a 1 x 1 convolution over few
    positions: its product made transposed (``wb_gemm_packed_t``) against the filters
    packed once, in tiles of whole panels of filters (``tile_m`` a multiple of PANEL),
    each position's filters stored back as rows; deeper than a block of k
    (``pointwise_few_deep``: 300 weights) the positions' sliver is taken a block at a
    time."""
    monkeypatch.setattr(tiles, "PACK_MIN_VECTOR_BYTES", 0)
    s = Session(_graph(name), backend="cpu")
    s.auto("stitch")
    gid = s.plan.groups[0].id
    s.set_launch(gid, blas=0, **({"tile_m": tile_m} if tile_m else {}))
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == PACK_FILTERS and t.tile_n == t.n <= CONV_RULE.few_positions, t
    assert t.tile_m % PANEL == 0 or t.tile_m == t.m, t
    if tile_m:
        assert t.tile_m == tile_m and t.row_tiles == -(-t.m // tile_m)
    assert "made transposed" in s.plan.groups[0].schedule.describe()
    check_plan(s, _magnitudes(name) if name in DEEP else None)
    with pytest.raises(FusionRefused, match="multiple of 64"):
        s.set_launch(gid, blas=0, tile_m=100)
    with pytest.raises(FusionRefused, match="one tile"):
        s.set_launch(gid, blas=0, tile_n=2)


@pytest.mark.parametrize("name", ["depthwise", "depthwise_lanes_strided"])
def test_depthwise_tiles_of_channels_and_the_tap_by_tap_path(name):
    """A 2-D depthwise convolution (its channels in the lanes, or a padded plane at a
    time) takes tiles of any number of channels (in the lanes, a partial vector at the
    end), never a cut plane; ``blas=0`` gives the tap-by-tap path (``lower.convolution.direct``)
    for the tuner to compare."""
    s = Session(_graph(name), backend="cpu")
    s.auto("rules")
    gid = s.plan.groups[0].id
    how = s.plan.groups[0].schedule.gemm.packed_b
    if how not in (DEPTHWISE_LANES, DEPTHWISE_PLANES):
        pytest.skip("the micro-kernel's vectors are too narrow here")
    s.set_launch(gid, tile_m=5)
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == how and t.tile_m == 5 and t.row_tiles == -(-t.m // 5)
    check_plan(s)
    with pytest.raises(FusionRefused, match="planes are whole"):
        s.set_launch(gid, tile_n=4)
    s.set_launch(gid, blas=0)
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == PACK_TILE and t.m == 1, t
    assert "one filter per group" in s.program().compiled[0].source
    check_plan(s)


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_patches_gathered_row_major_for_sgemm(name):
    """``blas=1``: each tile's patches gathered row-major and multiplied by sgemm (a
    1 x 1 convolution's input read by sgemm in place)."""
    g = _graph(name)
    s = Session(g, backend="cpu")
    s.auto("rules")
    s.set_launch(s.plan.groups[0].id, blas=1)
    t = s.plan.groups[0].schedule.gemm
    assert t.packed_b == "" and t.im2col is not None
    assert t.in_place == name.startswith("pointwise")
    if name.startswith("split") and s.device.units in (2, 4):
        # (2 or 4 cores, as CI and most laptops): the gather's runs start and end
        # inside an output row
        assert t.col_tiles > 1 and t.tile_n % t.im2col.out[-1] != 0, t
    check_plan(s, _magnitudes(name) if name in DEEP else None)


@pytest.mark.parametrize("blas", [None, 1])
@pytest.mark.parametrize("name", sorted(CASES))
def test_bfloat16_convolution_gemm_computes_in_float32_and_rounds_once(name, blas):
    """A bfloat16 convolution is a GEMM kernel too: its patches gathered into the
    micro-kernel's panels two rows to a word (a 1 x 1 one's input packed so, in place)
    and multiplied in pairs with the bfloat16 filters -- or, with ``blas=1``, the
    filters widened into a float32 copy on the first run and the patches as they are
    gathered, for sgemm -- the product finished from the thread's float32 tile and
    rounded once where it stores: within one bfloat16 ulp (of the largest output) of
    the float32 graph on the same values, and every kernel within its bound."""
    from workbench.codegen.render import CRenderer
    from workbench.tolerance import output_error
    from workbench.runtime import random_inputs, run_reference
    g = _graph(name, "bfloat16")
    s = Session(g, backend="cpu")
    s.auto("rules")
    assert len(s.plan.groups) == 1, s.plan.describe()
    if blas:      # (sgemm reads float32: a 1 x 1 convolution's input is gathered too)
        s.set_launch(s.plan.groups[0].id, blas=blas)
    assert s.plan.groups[0].schedule.gemm.im2col is not None
    (k,) = s.kernels()
    src = CRenderer().kernel(k)
    if blas or s.device.vector_bytes < PACK_MIN_VECTOR_BYTES:
        # sgemm: the filters widened once, the patches as they are gathered
        assert "wb_widen_once(" in src and "wb_gemm_packed_pairs(" not in src
    else:         # bfloat16 filters and patches (or input) multiplied in pairs
        assert "wb_gemm_packed_pairs(" in src and "wb_widen_once(" not in src
    check_plan(s)
    ins = random_inputs(g, 4)
    y = s.program().run(ins)["y"]
    assert y.dtype == ml_dtypes.bfloat16
    exact = run_reference(_graph(name, "bf16_values"),
                          {n: v.astype(np.float32) for n, v in ins.items()})["y"]
    assert output_error(g.value("y").dtype, y.astype(np.float32), exact) <= 2.0 ** -8


def test_a_filter_too_deep_for_a_tile_stays_a_library_call():
    # 4096 channels x 3 x 3 taps: 16 positions of patches would be 2.3 MB per thread
    b = wb.GraphBuilder("deep")
    x = b.input("x", (1, 4096, 8, 8))
    b.output(b.relu(b.op("conv", x, b.input("w", (2, 4096, 3, 3)))), "y")
    g = b.build()
    with pytest.raises(FusionRefused, match="weights per filter"):
        analyze(g, ("n0", "n1"), device=assumed_cpu("test cpu", 2))
    # alone, it is the library call
    assert analyze(g, ("n0",), device=assumed_cpu("test cpu", 2)).kind is ScheduleKind.opaque


@pytest.fixture(scope="module")
def resnet_block(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):        # a ResNet basic block, as torchvision has it
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)

        def forward(self, x):
            h = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(h)) + x)

    m = Block().eval()
    for bn in (m.b1, m.b2):       # statistics that are not the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("resnet") / "block.onnx"
    torch.onnx.export(m, (torch.randn(2, 8, 12, 12),), str(path), input_names=["x"],
                      output_names=["y"])
    return path


@pytest.mark.parametrize("planner", ["rules", "stitch"])
def test_resnet_block_through_onnx_has_no_library_call(resnet_block, planner):
    s = Session(str(resnet_block), backend="cpu")
    s.auto(planner)
    kinds = [gr.schedule.kind for gr in s.plan.groups]
    assert ScheduleKind.opaque not in kinds and kinds.count(ScheduleKind.gemm) == 2, kinds
    check_plan(s)
