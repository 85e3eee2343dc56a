"""The artifact manifest: what an exported plan holds, and how to tell it is intact.

``manifest.json`` names the format and its version, the graph (by the SHA-256 of its
canonical JSON, constants included), the inputs and outputs, the plan's groups, the
kernels in execution order (parameters, launch configuration, library call, source
files), the device the exporting session ran on and its measurement, and ``files``:
the SHA-256 and size of every other file. ``digest`` is the SHA-256 of the canonical
JSON of all the other fields, so an edit to the manifest itself is caught too.

These checks catch accidents (a changed, truncated or foreign file, a newer format);
they are not a signature: anyone who can write the files can write a matching
manifest.

Example::

    >>> m = read_manifest(json.loads(text), "model.zip")     # doctest: +SKIP
    >>> m.kernels[0].launch                                   # doctest: +SKIP
    {'grid': 4096, 'block': 256, 'mapping': 'block', ...}
"""
from __future__ import annotations

import enum
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..errors import ArtifactError
from ..ir import Graph
from ..ir.serialize import to_json

FORMAT = "fusion-workbench.artifact"
VERSION = 1
MANIFEST = "manifest.json"
GRAPH_FILE = "graph.json"
CONSTANTS_FILE = "constants.npz"
KERNEL_DIR = "kernels"
SOURCE_SUFFIX = {"c": ".c", "cuda": ".cu"}

# artifact paths are generated (kernel names are sanitized identifiers); anything else
# in a manifest -- an absolute path, "..", a backslash -- is refused before it is read
_SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")


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
    ``launch`` (every ``kir.Launch`` field), ``scratch`` (``kir.Scratch``), ``fields``
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


def _fail(where: str, what: str) -> ArtifactError:
    return ArtifactError(f"artifact {where}: {what}")


def check_path(rel: str, where: str) -> str:
    if not isinstance(rel, str) or not _SAFE_PATH.fullmatch(rel) or ".." in rel.split("/"):
        raise _fail(where, f"manifest.json names an unsafe file path {rel!r}; the artifact "
                           "is corrupt or was not made by the workbench -- re-export it")
    return rel


def read_manifest(d: Any, where: str) -> Manifest:
    """Validate a parsed manifest.json: format, version, digest, then structure.

    Raises :class:`ArtifactError` naming the artifact and the fix."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise _fail(where, f"manifest.json is not a Fusion Workbench artifact manifest "
                           f"(expected \"format\": \"{FORMAT}\"); load a directory or .zip "
                           "written by session.export() or `workbench export`")
    version = d.get("version")
    if not isinstance(version, int) or version < 1:
        raise _fail(where, f"manifest.json has an invalid format version {version!r}; "
                           "re-export the artifact")
    if version > VERSION:
        raise _fail(where, f"made by a newer workbench (artifact format version {version}, "
                           f"this workbench reads up to {VERSION}); upgrade fusion-workbench "
                           "to load it")
    body = {k: v for k, v in d.items() if k != "digest"}
    if d.get("digest") != sha256(canonical_json(body)):
        raise _fail(where, "manifest.json has changed since export (its digest does not "
                           "match its contents); re-export the artifact")
    try:
        return Manifest(
            format=d["format"], version=version, created=str(d["created"]),
            workbench_version=str(d["workbench_version"]), graph_name=str(d["graph_name"]),
            graph_hash=str(d["graph_hash"]), planner=str(d["planner"]),
            inputs=tuple(TensorSpec(t["name"], tuple(int(x) for x in t["shape"]), t["dtype"])
                         for t in d["inputs"]),
            outputs=tuple(TensorSpec(t["name"], tuple(int(x) for x in t["shape"]), t["dtype"])
                          for t in d["outputs"]),
            groups=tuple(GroupSpec(g["id"], tuple(g["nodes"]), g["schedule"],
                                   dict(g["schemes"])) for g in d["groups"]),
            kernels=tuple(_kernel(k, where) for k in d["kernels"]),
            device=dict(d["device"]), measurement=d["measurement"],
            files={check_path(p, where): FileEntry(str(e["sha256"]), int(e["size"]))
                   for p, e in d["files"].items()})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _fail(where, f"manifest.json is malformed ({type(e).__name__}: {e}); "
                           "re-export the artifact") from None


def _kernel(k: dict, where: str) -> KernelSpec:
    lib = k["library"]
    return KernelSpec(
        name=k["name"], group=k["group"], schedule=k["schedule"],
        params=tuple(dict(p) for p in k["params"]), launch=dict(k["launch"]),
        scratch=tuple(dict(x) for x in k["scratch"]), fields=dict(k["fields"]),
        shared_bytes=int(k["shared_bytes"]),
        library=None if lib is None else LibrarySpec(lib["op"], dict(lib["attrs"]),
                                                     tuple(lib["inputs"]),
                                                     tuple(lib["outputs"])),
        sources={t: check_path(p, where) for t, p in k["sources"].items()})
