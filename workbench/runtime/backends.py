"""The backend registry: every backend by name, and ``auto``.

The session, the CLI, the app and the artifact loader all read this one table.

    >>> backend_names()
    ('auto', 'cpu', 'cupy', 'reference', 'cuda-emu')
"""
from __future__ import annotations

from ..errors import BackendUnavailable, WorkbenchError
from .backend import Backend
from .cpu import CpuBackend
from .cuda_emu import CudaEmuBackend
from .cupy_backend import CupyBackend
from .reference_backend import ReferenceBackend

BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (CpuBackend, CupyBackend,
                                                          ReferenceBackend, CudaEmuBackend)}
# what ``auto`` picks: the first of these that can run here
AUTO_ORDER = ("cupy", "cpu")


def backend_names() -> tuple[str, ...]:
    """Every name ``get_backend`` takes, ``auto`` first."""
    return ("auto",) + tuple(BACKENDS)


def resolve(name: str) -> str:
    """The backend ``name`` stands for (``auto``: cupy with a GPU, else cpu)."""
    if name == "auto":
        return next(n for n in AUTO_ORDER if BACKENDS[n].unavailable() is None)
    if name not in BACKENDS:
        raise WorkbenchError(f"unknown backend {name!r}; choose one of "
                             f"{', '.join(backend_names())}")
    return name


def get_backend(name: str = "auto") -> Backend:
    """A backend instance by name, or BackendUnavailable saying why it cannot run."""
    cls = BACKENDS[resolve(name)]
    why = cls.unavailable()
    if why is not None:
        raise BackendUnavailable(why)
    return cls()
