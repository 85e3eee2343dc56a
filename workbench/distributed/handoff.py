"""The hand-off between a rank's arrays and the torch tensors its collectives post:
DLPack, zero copy, the same memory. A rank's arrays are NumPy on gloo ranks and CuPy on
NCCL ranks (:mod:`.nccl`); both export ``__dlpack__`` (NumPy >= 1.22 on the CPU, CuPy on
the GPU), so one path serves both: ``torch.from_dlpack``. Nothing comes back: a collective
writes its result into the tensor, which is the array's own memory.

Only C-contiguous arrays are handed over: a collective writes its result into the
tensor (a receive, a reduction in place), and gloo and NCCL take contiguous buffers
only -- a copy made here would receive into memory the caller never sees, so a strided
array is refused rather than copied (the callers make their buffers contiguous first).
"""
from __future__ import annotations

import numpy as np

from ..errors import WorkbenchError


def array_module(a):
    """The array module ``a`` belongs to: CuPy for a CuPy array, else NumPy (CuPy is
    imported only when such an array is passed: a gloo rank never imports it)."""
    mod = type(a).__module__
    if mod.startswith("cupy"):
        import cupy
        return cupy
    return np


def to_torch(a):
    """A torch tensor on ``a``'s memory (CPU for NumPy, ``a``'s GPU for CuPy)."""
    import torch
    if not a.flags.c_contiguous:
        raise WorkbenchError(f"a strided array (shape {tuple(a.shape)}, strides "
                             f"{tuple(a.strides)}) handed to a collective: its result "
                             "would land in a copy; pass xp.ascontiguousarray(a)")
    return torch.from_dlpack(a)
