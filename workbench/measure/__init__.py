"""Measure: latency, bytes moved, launches and error against the reference."""
from .compare import check_outputs, max_rel_error, tolerance
from .step import KERNEL_COLUMNS, StepMeasurement, measure_program
from .verify import KernelCheck, verify_kernels

__all__ = ["KERNEL_COLUMNS", "KernelCheck", "StepMeasurement", "check_outputs",
           "max_rel_error", "measure_program", "tolerance", "verify_kernels"]
