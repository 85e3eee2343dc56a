"""NCCL ranks: each rank one process on its own GPU (``torch.cuda.set_device(rank %
device_count)``), in process group "nccl", its compute segments on the ``cupy``
backend, its arrays CuPy; the collectives post on them through DLPack
(:mod:`.handoff`) and, not being gloo, take torch's own reduce_scatter / all_gather
(:mod:`.collectives`). The inputs are cut into pieces on the host as on gloo and each
piece copied to its rank's GPU once; the outputs come back to the host to be put
together and checked against the NumPy reference.

NCCL needs one GPU per rank (two ranks on one GPU deadlock in its kernels), CuPy and a
torch built with CUDA: :func:`refusal` says which is missing before any process starts.
"""
from __future__ import annotations

from datetime import timedelta

import numpy as np

BACKEND = "cupy"        # the single-device backend each NCCL rank's segments run on
NAMES = ("cupy", "cuda")


def refusal(ranks: int) -> str | None:
    """Why ``ranks`` NCCL ranks cannot run here (None: they can)."""
    from ..runtime.cupy_backend import gpu_available
    if not gpu_available():
        return ("backend 'cupy' with ranks runs each rank on its own GPU under NCCL, "
                "with CuPy arrays: CuPy or a CUDA GPU is missing here; pass "
                "backend='cpu' (gloo ranks) or run on a GPU machine with "
                "fusion-workbench[gpu]")
    import torch
    import torch.distributed as dist
    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return ("backend 'cupy' with ranks needs a torch built with CUDA and NCCL; this "
                f"torch ({torch.__version__}) has none; install a CUDA build of torch, "
                "or pass backend='cpu'")
    n = torch.cuda.device_count()
    if ranks > n:
        return (f"{ranks} NCCL ranks need {ranks} GPUs (one per rank: NCCL does not run "
                f"two ranks on one GPU); this machine has {n}; pass ranks<={n}, or "
                "backend='cpu'")
    return None


def init_nccl(rank: int, p: int, store: str, timeout: float) -> None:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank,
                            world_size=p, timeout=timedelta(seconds=3 * timeout + 30))


def to_device(env: dict, backend) -> dict:
    """The rank's pieces (NumPy) as the cupy backend's arrays on its GPU (its
    ``asarray``: bfloat16 as its bits, as the backend's kernels take it)."""
    return {k: backend.asarray(v) for k, v in env.items()}


def to_host(a) -> np.ndarray:
    import cupy
    return cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else np.asarray(a)
