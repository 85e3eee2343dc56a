"""Runtime: backends that compile and launch kernels, and the Program that runs a plan.

Backends: ``cpu`` (system C compiler + OpenMP), ``cupy`` (CUDA via NVRTC),
``reference`` (NumPy op by op) and ``auto`` (cupy when a GPU is present, else cpu).
"""
from __future__ import annotations

from ..errors import WorkbenchError
from .cpu import CpuBackend
from .cupy_backend import CupyBackend, gpu_available
from .program import Program, poison
from .reference import check_inputs, random_inputs, run_reference
from .reference_backend import ReferenceBackend

BACKENDS = ("auto", "cpu", "cupy", "reference")


def get_backend(name: str = "auto"):
    """A backend instance by name; 'auto' picks cupy when a GPU is present, else cpu."""
    if name == "auto":
        name = "cupy" if gpu_available() else "cpu"
    if name == "cpu":
        return CpuBackend()
    if name == "cupy":
        return CupyBackend()
    if name == "reference":
        return ReferenceBackend()
    raise WorkbenchError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "CpuBackend", "CupyBackend", "Program", "ReferenceBackend",
           "check_inputs", "get_backend", "gpu_available", "poison", "random_inputs",
           "run_reference"]
