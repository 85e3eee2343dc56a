"""Measure: latency, bytes moved, launches and error against the reference (the bounds
and the error measure: :mod:`workbench.tolerance`)."""
from .step import KERNEL_COLUMNS, StepMeasurement, measure_program
from .verify import KernelCheck, verify_kernels

__all__ = ["KERNEL_COLUMNS", "KernelCheck", "StepMeasurement", "measure_program",
           "verify_kernels"]
