"""The artifact manifest: what an exported plan holds, and how to tell it is intact.

``manifest.json`` names the format and its version, the graph (by the SHA-256 of its
canonical JSON, constants included), the inputs and outputs, the plan's groups, the
kernels in execution order (parameters, launch configuration, library call, source
files), the device the exporting session ran on and its measurement, and ``files``:
the SHA-256 and size of every other file. ``digest`` is the SHA-256 of the canonical
JSON of all the other fields, so an edit to the manifest itself is caught too.

These checks catch accidents (a changed, truncated or foreign file, a newer format);
they are not a signature: anyone who can write the files can write a matching
manifest. A signature (:mod:`.sign`) lives beside the manifest in ``signature.json``
and signs its ``digest``.

A manifest read back is untrusted input: :func:`.manifest_check.read_manifest` checks
every field's type and range (within :mod:`.limits`) before anything else reads it.

Example::

    >>> d = manifest.to_json()                                      # doctest: +SKIP
    >>> body = {k: v for k, v in d.items() if k != "digest"}        # doctest: +SKIP
    >>> d["digest"] == sha256(canonical_json(body))                 # doctest: +SKIP
    True
"""
from __future__ import annotations

import enum
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..ir import Graph
from ..ir.serialize import to_json

FORMAT = "fusion-workbench.artifact"
VERSION = 1
MANIFEST = "manifest.json"
GRAPH_FILE = "graph.json"
CONSTANTS_FILE = "constants.npz"
KERNEL_DIR = "kernels"
SOURCE_SUFFIX = {"c": ".c", "cuda": ".cu"}

def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def graph_hash(g: Graph) -> str:
    """SHA-256 of the graph's canonical JSON, constants (base64) included."""
    return sha256(canonical_json(to_json(g)))


def json_safe(x: Any) -> Any:
    """NumPy scalars as Python ones, enums as their values, NaN and infinities as
    None (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, static shape, dtype name."""
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class LibrarySpec:
    """An opaque op run by the host library: op, attributes, argument values."""
    op: str
    attrs: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class KernelSpec:
    """A kernel as run, recorded field by field from ``kir`` so that fields the
    schedules add travel without a format change: ``params`` in call order (every
    ``kir.Buffer`` field: identifier, graph value, dtype, numel, is_output, ...),
    ``launch`` (every ``kernel.Launch`` field), ``scratch`` (``kir.Scratch``), ``fields``
    (the kernel's other scalar fields: reductions, flops, ...), shared memory, a library
    call for opaque ops, and its source files (``{"c": "kernels/k0_exp.c", "cuda":
    "kernels/k0_exp.cu"}``, empty for a library call)."""
    name: str
    group: str
    schedule: str
    params: tuple[Mapping[str, Any], ...]
    launch: Mapping[str, Any]
    scratch: tuple[Mapping[str, Any], ...]
    fields: Mapping[str, Any]
    shared_bytes: int
    library: LibrarySpec | None
    sources: Mapping[str, str]


@dataclass(frozen=True)
class GroupSpec:
    """One group of the plan: its nodes, schedule description and stitch schemes."""
    id: str
    nodes: tuple[str, ...]
    schedule: str
    schemes: Mapping[str, str]


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class Manifest:
    format: str
    version: int
    created: str
    workbench_version: str
    graph_name: str
    graph_hash: str
    planner: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    groups: tuple[GroupSpec, ...]
    kernels: tuple[KernelSpec, ...]
    device: Mapping[str, str]              # {"backend": "cpu", "name": "..."}
    measurement: Mapping[str, Any] | None  # StepMeasurement fields + per_kernel records
    files: Mapping[str, FileEntry] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The manifest as JSON, with its ``digest``."""
        d = json_safe(asdict(self))
        d["digest"] = sha256(canonical_json(d))
        return d
