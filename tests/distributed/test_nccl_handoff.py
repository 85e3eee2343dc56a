"""The DLPack hand-off between a rank's arrays and torch tensors (NumPy here; CuPy on a
GPU), the refusal of NCCL ranks where there is no GPU, and -- on a GPU only -- one NCCL
rank running the sharded AdamW step against the reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.distributed.handoff import array_module, to_torch
from workbench.distributed.nccl import refusal
from workbench.distributed.runner import TOLERANCE
from workbench.distributed.samples import dp_adamw
from workbench.errors import WorkbenchError
from workbench.runtime.cupy_backend import gpu_available
from workbench.session import Session

GPU = gpu_available() and torch.cuda.is_available()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.bool_])
def test_the_hand_off_shares_memory_both_ways(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    t = to_torch(a)
    assert t.dtype == torch.from_numpy(a).dtype and tuple(t.shape) == a.shape
    assert np.shares_memory(t.numpy(), a)
    t.view(-1)[7] = 1 if dtype is not np.bool_ else (not a.reshape(-1)[7])
    assert a.reshape(-1)[7] == t.view(-1)[7].item()        # (a write through torch)
    b = array_module(a).from_dlpack(t)                     # (and back, zero copy)
    assert type(b) is np.ndarray and np.shares_memory(a, b)
    b[0, 0] = b[0, 1]                                      # (a write through the array)
    assert t[0, 0].item() == a[0, 1]


def test_a_zero_d_and_a_read_only_array_are_handed_over():
    z = np.array(2.5, np.float32)
    t = to_torch(z)
    assert t.shape == () and np.shares_memory(t.numpy(), z)
    r = np.arange(4.0)
    r.flags.writeable = False
    assert np.shares_memory(to_torch(r).numpy(), r)


def test_a_strided_array_is_refused_not_copied():
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(WorkbenchError, match="strided.*ascontiguousarray"):
        to_torch(a[:, ::2])
    with pytest.raises(WorkbenchError, match="strided"):
        to_torch(a.T)
    assert np.shares_memory(to_torch(a[1:3]).numpy(), a)   # (a contiguous slice: shared)


@pytest.mark.skipif(GPU, reason="the refusal is for machines without a GPU")
def test_nccl_ranks_are_refused_at_once_without_a_gpu():
    assert "CUDA GPU is missing" in refusal(1)
    for name in ("cupy", "cuda"):
        with pytest.raises(WorkbenchError, match="NCCL.*pass backend='cpu'"):
            Session(dp_adamw(8, 4, 1), ranks=1, backend=name)
    with pytest.raises(WorkbenchError, match="pass backend='cpu' or 'cupy'"):
        Session(dp_adamw(8, 4, 1), ranks=1, backend="rocm")


@pytest.mark.skipif(not GPU, reason="NCCL ranks need CuPy and a CUDA GPU")
def test_more_nccl_ranks_than_gpus_are_refused():
    n = torch.cuda.device_count()
    assert f"this machine has {n}" in refusal(n + 1)
    assert refusal(n) is None


@pytest.mark.skipif(not GPU, reason="NCCL ranks need CuPy and a CUDA GPU")
def test_sharded_adamw_on_one_nccl_rank_matches_the_reference():
    s = Session(dp_adamw(64, 32, 1), ranks=1, backend="cupy", link="nvlink")
    s.split_all_reduce("n0")
    s.shard_after("n2", keep_sharded=["m_out", "v_out"])
    run = s.run()
    assert run.ok and max(run.errors.values()) <= TOLERANCE, run.errors
