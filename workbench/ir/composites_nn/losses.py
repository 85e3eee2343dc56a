"""Classification losses as composites: ONNX's NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss (what ``F.cross_entropy`` exports as), opset 13's semantics.

The class axis is axis 1 of an input [N, C, d1, ...]; labels are [N, d1, ...]. The loss
of a position is minus its log-probability at its label (``gather_elements`` along the
class axis), times the label's weight when weights are given; a position whose label
is ``ignore_index`` contributes 0 and weighs 0. ``mean`` divides the sum by the summed
weights of the positions counted (their count without weights), so a batch whose every
label is ignored is 0 / 0 = NaN, as in onnxruntime and torch.
"""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ..composites import _widened, log_softmax

REDUCTIONS = ("none", "sum", "mean")


def check_class_operands(kind: str, source: str, logp, labels, reduction: str) -> None:
    """The operands a loss over classes (or its gradient) takes: a known reduction,
    labels the shape of the input [N, C, d...] without its class axis 1."""
    if reduction not in REDUCTIONS:
        raise GraphError(f"{kind} {source!r}: reduction {reduction!r} is not one of "
                         f"{', '.join(REDUCTIONS)}")
    if len(logp.shape) < 2 or tuple(labels.shape) != tuple(logp.shape[:1] + logp.shape[2:]):
        raise GraphError(f"{kind} {source!r}: labels {list(labels.shape)} must be the "
                         f"input {list(logp.shape)} without its class axis 1 (input of "
                         "rank >= 2)")


def nll_loss(b, logp, labels, weight=None, reduction: str = "mean",
             ignore_index: int | None = None, source: str = "",
             kind: str = "NegativeLogLikelihoodLoss"):
    """The negative log-likelihood of ``labels`` under ``logp`` (log-probabilities,
    classes on axis 1), reduced ``none``, ``sum`` or ``mean``.

    >>> loss = nll_loss(b, logp, labels, reduction="mean", ignore_index=-100)  # doctest: +SKIP
    """
    check_class_operands(kind, source, logp, labels, reduction)
    if weight is not None and tuple(weight.shape) != (logp.shape[1],):
        raise GraphError(f"{kind} {source!r}: weights {list(weight.shape)} must hold one "
                         f"value per class ({logp.shape[1]})")
    with b.composite(kind, source):
        logp, (weight,), narrow = _widened(b, logp, weight)
        zero = b.constant(np.asarray(0, logp.dtype.np))
        keep = idx = labels
        if ignore_index is not None:
            keep = b.ne(labels, b.constant(np.asarray(ignore_index, labels.dtype.np)))
            # (an ignored label may be no class at all, such as -100: read class 0)
            idx = b.where(keep, labels, b.constant(np.asarray(0, labels.dtype.np)))
        picked = b.gather_elements(logp, b.unsqueeze(idx, axes=[1]), axis=1)
        loss = b.neg(b.squeeze(picked, axes=[1]))
        if ignore_index is not None:       # 0, not 0 * (-log p), which may be NaN
            loss = b.where(keep, loss, zero)
        w = None
        if weight is not None:
            w = b.gather(weight, idx, axis=0)
            if ignore_index is not None:
                w = b.where(keep, w, zero)
            loss = loss * w
        elif ignore_index is not None:
            w = b.cast(keep, to=logp.dtype)
        if reduction == "none":
            return narrow(loss)
        axes = list(range(len(loss.shape)))
        if reduction == "mean" and w is None:
            return narrow(b.reduce_mean(loss, axes=axes, keepdims=False))
        total = b.reduce_sum(loss, axes=axes, keepdims=False)
        if reduction == "sum":
            return narrow(total)
        return narrow(total / b.reduce_sum(w, axes=axes, keepdims=False))


def softmax_cross_entropy(b, scores, labels, weight=None, reduction: str = "mean",
                          ignore_index: int | None = None, source: str = ""):
    """SoftmaxCrossEntropyLoss: (the NLL loss of log_softmax(scores, axis 1), that
    log-probability), the second for ONNX's optional ``log_prob`` output."""
    with b.composite("SoftmaxCrossEntropyLoss", source):
        if len(scores.shape) < 2:
            raise GraphError(f"SoftmaxCrossEntropyLoss {source!r}: scores "
                             f"{list(scores.shape)} need rank >= 2 (classes on axis 1)")
        logp = log_softmax(b, scores, axis=1, source=source)
        return nll_loss(b, logp, labels, weight, reduction, ignore_index, source,
                        kind="SoftmaxCrossEntropyLoss"), logp
