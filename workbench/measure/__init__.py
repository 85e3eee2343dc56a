"""Measure: latency, bytes moved, launches and error against the reference."""
from .compare import check_outputs, max_rel_error, tolerance
from .step import KERNEL_COLUMNS, StepMeasurement, measure_program

__all__ = ["KERNEL_COLUMNS", "StepMeasurement", "check_outputs", "max_rel_error",
           "measure_program", "tolerance"]
