"""Exported artifacts: an optimized plan that runs without the session that made it.

``export_plan`` (``Session.export``, ``workbench export``) writes a directory or
``.zip``: manifest, graph JSON, constants (``.npz``), C and CUDA kernel sources.
``load_artifact`` verifies it (format, version, SHA-256 of every file, graph hash)
before compiling anything, and returns an :class:`ArtifactModel`.

    >>> s.export("ln.zip")                                  # doctest: +SKIP
    >>> model = load_artifact("ln.zip"); model(x)["y"]     # doctest: +SKIP
"""
from .export import export_plan
from .load import ArtifactModel, load_artifact
from .manifest import FORMAT, VERSION, Manifest, TensorSpec
from .verify import read_artifact

__all__ = ["ArtifactModel", "FORMAT", "Manifest", "TensorSpec", "VERSION", "export_plan",
           "load_artifact", "read_artifact"]
