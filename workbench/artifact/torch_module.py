"""A loaded artifact as a ``torch.nn.Module``: tensors in, tensors out.

Tensors cross by DLPack, without copies where the layout allows: CPU tensors become
NumPy arrays (``np.from_dlpack``) and run the C kernels, CUDA tensors become CuPy
arrays and run the CUDA kernels; the outputs come back with ``torch.from_dlpack``.
It is inference only: inputs are detached, gradients do not flow through it.

Example::

    >>> m = wb.load_artifact("ln.zip").as_torch_module()   # doctest: +SKIP
    >>> y = m(torch.randn(4096, 1024))                     # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
import torch

from ..dtypes import DType

BF16 = DType.bfloat16.np


def _to_array(t):
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach().contiguous()
    bf16 = t.dtype is torch.bfloat16
    if bf16:        # NumPy and CuPy take no bfloat16 by DLPack: its bits cross
        t = t.view(torch.int16)
    if t.is_cuda:
        import cupy
        a = cupy.from_dlpack(t)
        return a.view(cupy.uint16) if bf16 else a    # (CuPy holds bfloat16 as bits)
    a = np.from_dlpack(t)
    return a.view(BF16) if bf16 else a


def _to_tensor(a, dtype: str) -> torch.Tensor:
    if isinstance(a, np.ndarray) and not a.flags.writeable:
        a = a.copy()        # DLPack cannot mark an export read-only
    if dtype == "bfloat16":
        return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


class ArtifactModule(torch.nn.Module):
    """``forward(*tensors)`` in ``model.inputs`` order (or by name); returns one tensor
    for a single-output model, else a tuple in ``model.outputs`` order."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        outs = self.model(*map(_to_array, args),
                          **{k: _to_array(v) for k, v in kwargs.items()})
        dtypes = {t.name: t.dtype for t in self.model.outputs}
        ts = tuple(_to_tensor(o, dtypes[k]) for k, o in outs.items())
        return ts[0] if len(ts) == 1 else ts

    def extra_repr(self) -> str:
        return repr(self.model)
