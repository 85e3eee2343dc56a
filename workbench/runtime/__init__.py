"""Runtime: backends that compile and launch kernels, and the Program that runs a plan.

Backends (:mod:`.backends`): ``cpu`` (system C compiler + OpenMP), ``cupy`` (CUDA via
NVRTC), ``cuda-emu`` (the CUDA source run on the CPU, :mod:`.cuda_emu`), ``reference``
(NumPy op by op) and ``auto`` (cupy when a GPU is present, else cpu); each implements
:class:`~.backend.Backend`.
"""
from __future__ import annotations

from .backend import Backend, CompiledKernel
from .backends import BACKENDS, backend_names, get_backend, resolve
from .cpu import CpuBackend
from .cupy_backend import CupyBackend, gpu_available
from .program import Program, poison
from .reference import check_inputs, random_inputs, run_reference
from .reference_backend import ReferenceBackend

__all__ = ["BACKENDS", "Backend", "CompiledKernel", "CpuBackend", "CupyBackend", "Program",
           "ReferenceBackend", "backend_names", "check_inputs", "get_backend",
           "gpu_available", "poison", "random_inputs", "resolve", "run_reference"]
