"""The reference backend: each kernel's ops run one by one on NumPy.

It runs the plan's groups in the plan's order, so it measures what an unfused NumPy
program costs and checks that the plan's order is executable; its numbers are the
ground truth other backends are compared with.
"""
from __future__ import annotations

import os

import numpy as np

from ..codegen import render_kernel
from ..codegen.kir import Kernel


class CompiledRefKernel:
    def __init__(self, kernel: Kernel, source: str):
        self.kernel, self.source, self.fn = kernel, source, None


class ReferenceBackend:
    name = "reference"
    xp = np

    def device_name(self) -> str:
        return f"NumPy {np.__version__} ({os.cpu_count()} threads)"

    def compile(self, kernels, progress=None):
        out = [CompiledRefKernel(k, render_kernel(k, "c")) for k in kernels]
        if progress:
            progress(len(out), len(out), "reference")
        return out

    def asarray(self, a):
        return a

    def to_numpy(self, a):
        return a

    def synchronize(self):
        pass
