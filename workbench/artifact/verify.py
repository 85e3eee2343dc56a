"""Reading an artifact and proving it intact before anything is compiled.

Order of checks: the path is a directory or a zip; it has a ``manifest.json`` of this
format and a version this workbench reads; the manifest's digest matches; every
listed file is there with its size and SHA-256; no file is there that the manifest
does not list; the graph rebuilt from ``graph.json`` + ``constants.npz`` has the
recorded graph hash. The first failure raises one :class:`ArtifactError` naming the
file and the fix.

Example::

    >>> art = read_artifact("ln.zip")              # doctest: +SKIP
    >>> art.manifest.kernels[0].name, art.graph.name   # doctest: +SKIP
    ('k0_reduce_mean_sub_mul_etc', 'layernorm')
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ArtifactError, WorkbenchError
from ..ir import DType, Graph
from ..ir.serialize import from_json
from .manifest import (CONSTANTS_FILE, GRAPH_FILE, MANIFEST, Manifest, graph_hash,
                       read_manifest, sha256)


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: its manifest, the rebuilt graph and every file's bytes."""
    where: str
    manifest: Manifest
    graph: Graph
    files: Mapping[str, bytes]


class _Dir:
    def __init__(self, root: Path):
        self.root = root

    def names(self) -> dict[str, int]:
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for f in filenames:
                p = Path(dirpath) / f
                out[p.relative_to(self.root).as_posix()] = p.lstat().st_size
        return out

    def has(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def read(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def close(self) -> None:
        pass


class _Zip:
    def __init__(self, path: Path):
        self.z = zipfile.ZipFile(path)

    def names(self) -> dict[str, int]:
        return {i.filename: i.file_size for i in self.z.infolist() if not i.is_dir()}

    def has(self, rel: str) -> bool:
        try:
            return not self.z.getinfo(rel).is_dir()
        except KeyError:
            return False

    def read(self, rel: str) -> bytes:
        return self.z.read(rel)

    def close(self) -> None:
        self.z.close()


def _open(path: Path):
    if path.is_dir():
        return _Dir(path)
    if not path.exists():
        raise ArtifactError(f"no artifact at {path}: the path does not exist; give the "
                            "directory or .zip written by session.export()")
    if zipfile.is_zipfile(path):
        try:
            return _Zip(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise ArtifactError(f"artifact {path}: unreadable zip ({e}); re-export "
                                "it") from None
    raise ArtifactError(f"{path} is not an artifact: neither a directory nor a .zip file; "
                        "give the directory or .zip written by session.export()")


def read_artifact(path: str | Path) -> Artifact:
    """Open, verify and read an artifact; raises ArtifactError at the first problem."""
    path = Path(path)
    where = str(path)
    src = _open(path)
    try:
        if not src.has(MANIFEST):      # before listing: a foreign tree may be huge
            raise ArtifactError(f"{where} is not a Fusion Workbench artifact: it has no "
                                f"{MANIFEST}; give the directory or .zip written by "
                                "session.export() or `workbench export`")
        try:
            raw = json.loads(src.read(MANIFEST))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ArtifactError(f"artifact {where}: {MANIFEST} is not valid JSON ({e}); "
                                "re-export the artifact") from None
        m = read_manifest(raw, where)
        present = src.names()
        missing = sorted(set(m.files) - set(present))
        if missing:
            raise ArtifactError(f"artifact {where}: {missing[0]} is missing"
                                + (f" (and {len(missing) - 1} more)" if len(missing) > 1
                                   else "") + "; re-export the artifact or restore the file")
        extra = sorted(set(present) - set(m.files) - {MANIFEST})
        if extra:
            raise ArtifactError(f"artifact {where}: {extra[0]} is not listed in its manifest"
                                + (f" (nor are {len(extra) - 1} more)" if len(extra) > 1
                                   else "") + "; remove it or re-export the artifact")
        files = {}
        for rel, entry in sorted(m.files.items()):
            if present[rel] != entry.size:
                raise ArtifactError(f"artifact {where}: {rel} has {present[rel]} bytes, the "
                                    f"manifest records {entry.size} (truncated or changed); "
                                    "re-export the artifact")
            data = src.read(rel)
            if len(data) != entry.size or sha256(data) != entry.sha256:
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
    return Artifact(where, m, g, files)


def rebuild_graph(files: Mapping[str, bytes], where: str) -> Graph:
    """The graph from graph.json, its constants from constants.npz (no pickle)."""
    try:
        d = json.loads(files[GRAPH_FILE])
        with np.load(io.BytesIO(files[CONSTANTS_FILE]), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        consts = {}
        for name, spec in d.get("constants", {}).items():
            a = arrays[spec["init"]["npz"]]
            if a.shape != tuple(spec["shape"]) or a.dtype != DType.of(spec["dtype"]).np:
                raise ArtifactError(f"artifact {where}: constant {spec['init']['npz']} in "
                                    f"{CONSTANTS_FILE} is {a.dtype}{list(a.shape)}, "
                                    f"{GRAPH_FILE} says {spec['dtype']}{spec['shape']}; "
                                    "re-export the artifact")
            consts[name] = a
            spec["init"] = {"fill": 0}    # shape and dtype only; the data comes next
        g = from_json(d)
    except ArtifactError:
        raise
    except (WorkbenchError, KeyError, TypeError, ValueError, OSError,
            zipfile.BadZipFile) as e:
        raise ArtifactError(f"artifact {where}: cannot rebuild the graph from {GRAPH_FILE} "
                            f"and {CONSTANTS_FILE} ({type(e).__name__}: {e}); re-export "
                            "the artifact") from None
    return replace(g, constants=consts)
