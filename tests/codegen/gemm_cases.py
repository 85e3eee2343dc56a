"""What the micro-kernel GEMM tests share: a graph's one GEMM kernel planned and
compiled, or the test skipped where the micro-kernel does not run here."""
import pytest

import workbench as wb
from workbench.fusion.gemm.tiles import micro_kernel_fits


def one_gemm(g):
    """``g``'s one kernel under ``stitch`` on the CPU: (its group, the program, the
    kernel's C source); skips the test where the compiler targets vectors too narrow
    for the micro-kernel (tiles.PACK_MIN_VECTOR_BYTES)."""
    s = wb.Session(g, backend="cpu")
    s.auto("stitch")
    if not micro_kernel_fits(s.device):
        pytest.skip("this CPU's vectors are too narrow for the micro-kernel")
    (gr,) = s.plan.groups
    prog = s.program()
    return gr, prog, prog.compiled[0].source
