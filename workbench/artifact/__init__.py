"""Exported artifacts: an optimized plan that runs without the session that made it.

``export_plan`` (``Session.export``, ``workbench export``) writes a directory or
``.zip``: manifest, graph JSON, constants (``.npz``), C and CUDA kernel sources, and a
signature when given a key (``sign_with``). ``load_artifact`` verifies it (format,
version, SHA-256 of every file, every manifest field, graph hash, the signature when
``trusted_keys`` are given) before compiling anything, and returns an
:class:`ArtifactModel`.

An artifact is code: loading it compiles and runs its shipped kernels, so trust it as
you would a pickle, or sign it and load it with ``trusted_keys``.

    >>> key = HmacKey(secret)                                       # doctest: +SKIP
    >>> s.export("ln.zip", sign_with=key)                           # doctest: +SKIP
    >>> model = load_artifact("ln.zip", trusted_keys=[key]); model(x)["y"]  # doctest: +SKIP
"""
from .export import export_plan
from .load import ArtifactModel, load_artifact
from .manifest import FORMAT, VERSION, Manifest, TensorSpec
from .sign import SIGNATURE_FILE, Ed25519Key, HmacKey, load_key
from .verify import read_artifact

__all__ = ["ArtifactModel", "Ed25519Key", "FORMAT", "HmacKey", "Manifest", "SIGNATURE_FILE",
           "TensorSpec", "VERSION", "export_plan", "load_artifact", "load_key",
           "read_artifact"]
