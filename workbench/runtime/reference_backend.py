"""The reference backend: each kernel's ops run one by one on NumPy.

It runs the plan's groups in the plan's order, so it measures what an unfused NumPy
program costs and checks that the plan's order is executable; its numbers are the
ground truth other backends are compared with. It needs no compiler.
"""
from __future__ import annotations

import os
import numpy as np

from ..codegen.kernel import Kernel
from ..errors import WorkbenchError
from ..device import Device, assumed_cpu
from ..ops import evaluate_node
from .backend import Backend, CompiledKernel
from ..codegen import render_kernel
from .calibrate import cpu_device
from .cc import cpu_model


class ReferenceBackend(Backend):
    name = "reference"
    target = ""          # nothing is compiled: the C rendering is kept for display
    xp = np

    def describe_device(self) -> Device:
        try:
            return cpu_device()
        except WorkbenchError:
            cores = os.cpu_count() or 1
            return assumed_cpu(f"{cpu_model()} ({cores} threads)", cores)

    def device_name(self) -> str:
        return f"NumPy {np.__version__} ({os.cpu_count()} threads)"

    def render(self, kernel: Kernel) -> str:
        return render_kernel(kernel, "c")

    def compile_source(self, kernel: Kernel, source: str, origin: str = "") -> CompiledKernel:
        return CompiledKernel(kernel, source)

    def run_kernel(self, seq, ck: CompiledKernel, env: dict) -> None:
        graph = seq.graph
        for nid in seq.group_nodes[ck.kernel.group]:
            n = graph.node(nid)
            env.update(zip(n.outputs, evaluate_node(
                n, [env[i] for i in n.inputs], [graph.value(o) for o in n.outputs])))

    def launch(self, ck: CompiledKernel, args: list) -> None:
        raise WorkbenchError("internal: the reference backend runs ops, not kernels")

    def asarray(self, a):
        return a

    def to_numpy(self, a, dtype=None):
        return a
