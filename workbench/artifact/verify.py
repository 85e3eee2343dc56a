"""Reading an artifact and proving it intact before anything is compiled.

Order of checks: the path is a directory or a regular zip file; it has a
``manifest.json`` (a regular file of bounded size) of this format and a version this
workbench reads; the manifest's digest matches; its signature verifies when one is
asked for (``trusted_keys``, ``require_signature``; :mod:`.sign`); every field of the
manifest has its type and range (:func:`.manifest_check.read_manifest`); every entry
of the artifact is a regular file (no symlink, FIFO or device is ever opened:
:mod:`.container`); every listed file is there with its size and SHA-256 and no file
is there that the manifest does not list; the graph rebuilt from ``graph.json`` +
``constants.npz`` (read without pickle, each ``.npy`` header checked before its data:
:mod:`.rebuild`) has the recorded graph hash; and what the manifest says about the
graph -- inputs and outputs, the plan's groups, each kernel's buffers and workspace,
the order kernels run in -- matches the graph (:func:`.plan_check.check_plan`). The
first failure raises one :class:`ArtifactError` (one line) naming the file and the fix.

Example::

    >>> art = read_artifact("ln.zip")              # doctest: +SKIP
    >>> art.manifest.kernels[0].name, art.graph.name   # doctest: +SKIP
    ('k0_reduce_mean_sub_mul_etc', 'layernorm')
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ArtifactError
from ..ir import Graph
from .container import REGULAR_ONLY, open_container, read_entry
from .limits import MAX_MANIFEST_BYTES, file_limit
from .manifest import CONSTANTS_FILE, GRAPH_FILE, MANIFEST, Manifest, graph_hash, sha256
from .manifest_check import check_header, read_manifest
from .messages import show
from .plan_check import check_plan
from .rebuild import rebuild_graph
from .sign import MAX_SIGNATURE_BYTES, SIGNATURE_FILE, verify_signature
from .strict_json import parse_json


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: its manifest, the rebuilt graph and every file's bytes."""
    where: str
    manifest: Manifest
    graph: Graph
    files: Mapping[str, bytes]
    signed_by: str | None = None       # the trusted key id that verified its signature


def read_artifact(path: str | Path, trusted_keys: tuple = (),
                  require_signature: bool = False) -> Artifact:
    """Open, verify and read an artifact; raises ArtifactError at the first problem.

    ``trusted_keys`` (key objects, :func:`.sign.trusted`): a signed artifact's signature
    must verify with one of them; ``require_signature``: an unsigned one is refused."""
    path = Path(path)
    where = str(path)
    src = open_container(path, where)
    signed_by = None
    try:
        text = read_entry(src, MANIFEST, MAX_MANIFEST_BYTES, where)
        if text is None:           # before listing: a foreign tree may be huge
            raise ArtifactError(f"{where} is not a Fusion Workbench artifact: it has no "
                                f"{MANIFEST}; give the directory or .zip written by "
                                "session.export() or `workbench export`")
        raw = parse_json(text, MANIFEST, where)
        digest = check_header(raw, where)
        if trusted_keys or require_signature:      # before anything else is read
            sig = read_entry(src, SIGNATURE_FILE, MAX_SIGNATURE_BYTES, where)
            signed_by = verify_signature(sig, digest, tuple(trusted_keys), where,
                                         require_signature)
        m = read_manifest(raw, where)
        present = src.scan()
        odd = sorted(rel for rel, (_, kind) in present.items() if kind)
        if odd:
            raise ArtifactError(f"artifact {where}: {odd[0]} is not a regular file "
                                f"({present[odd[0]][1]}); " + REGULAR_ONLY)
        missing = sorted(set(m.files) - set(present))
        if missing:
            raise ArtifactError(f"artifact {where}: {missing[0]} is missing"
                                + (f" (and {len(missing) - 1} more)" if len(missing) > 1
                                   else "") + "; re-export the artifact or restore the file")
        extra = sorted(set(present) - set(m.files) - {MANIFEST, SIGNATURE_FILE})
        if extra:
            raise ArtifactError(f"artifact {where}: {show(extra[0])[1:-1]} is not listed in "
                                "its manifest"
                                + (f" (nor are {len(extra) - 1} more)" if len(extra) > 1
                                   else "") + "; remove it or re-export the artifact")
        files = {}
        for rel, entry in sorted(m.files.items()):
            if present[rel][0] != entry.size:
                raise ArtifactError(f"artifact {where}: {rel} has {present[rel][0]} bytes, "
                                    f"the manifest records {entry.size} (truncated or "
                                    "changed); re-export the artifact")
            data = read_entry(src, rel, min(entry.size, file_limit(rel)), where)
            if data is None or len(data) != entry.size or sha256(data) != entry.sha256:
                raise ArtifactError(f"artifact {where}: {rel} has changed since export "
                                    "(SHA-256 mismatch); re-export the artifact")
            files[rel] = data
    finally:
        src.close()
    g = rebuild_graph(files, where)
    if graph_hash(g) != m.graph_hash:
        raise ArtifactError(f"artifact {where}: the graph in {GRAPH_FILE} and "
                            f"{CONSTANTS_FILE} does not match the recorded graph hash; "
                            "re-export the artifact")
    check_plan(m, g, where)
    return Artifact(where, m, g, files, signed_by)
