"""Composite ops of CNN and audio models, decomposed into primitives the planners fuse:
pooling (a ``window`` and a reduction), transposed convolution (convolutions),
group/instance/mean-variance normalization (reductions and elementwise ops, as
LayerNorm), Resize (``gather`` at constant indices, and a lerp with constant weights),
Einsum (transposes and reshapes around one batched ``matmul``, reductions for
indices summed away), and the classification losses (log-softmax, ``gather_elements``
along the class axis, masks and reductions).

One decomposition per composite serves both frontends; every primitive is tagged with
the composite's origin, as in :mod:`workbench.ir.composites`.
"""
from .contraction import einsum
from .losses import nll_loss, softmax_cross_entropy
from .normalization import group_norm, instance_norm, mean_variance_norm
from .pooling import adaptive_avg_pool, avg_pool, lp_pool, max_pool
from .resampling import COORDINATE_MODES, NEAREST_MODES, resize, source_coordinates
from .transposed_conv import conv_transpose

__all__ = ["COORDINATE_MODES", "NEAREST_MODES", "adaptive_avg_pool", "avg_pool",
           "conv_transpose", "einsum", "group_norm", "instance_norm", "lp_pool",
           "max_pool", "mean_variance_norm", "nll_loss", "resize", "softmax_cross_entropy",
           "source_coordinates"]
