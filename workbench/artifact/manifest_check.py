"""Validating a parsed manifest.json before anything reads it.

A manifest is untrusted input until its signature (if asked for) verifies, and its
contents reach file names, C symbols and kernel launches. :func:`read_manifest`
therefore checks every field's type and range before anything else reads it: names
that become paths or symbols are C identifiers of at most 128 characters, source paths
are exactly ``kernels/<name>.c`` / ``.cu``, launches are within CUDA's limits, file
sizes and nesting are bounded, and NaN, infinities and duplicate keys are refused. What
the manifest claims about the graph (tensor specs, buffers, the plan) is checked against
the rebuilt graph by :func:`.plan_check.check_plan`.

Example::

    >>> m = read_manifest(json.loads(text), "model.zip")     # doctest: +SKIP
    >>> m.kernels[0].launch                                   # doctest: +SKIP
    {'grid': 4096, 'block': 256, 'mapping': 'block', ...}
"""
from __future__ import annotations

import re
from dataclasses import MISSING, fields
from typing import Any

from ..errors import ArtifactError
from ..dtypes import DType
from ..shapes import MAX_RANK
from ..runtime.blas import SYMBOLS as BLAS_SYMBOLS
from ..codegen.kernel import Kernel
from ..codegen.kir import Buffer, Scratch
from ..fusion.mapping import Mapping as ThreadMapping
from .limits import (IDENTIFIER, MAX_BLOCK, MAX_GRID, MAX_IDENTIFIER, MAX_INT, MAX_ITEMS,
                     MAX_NUMEL, MAX_SHARED_BYTES, MAX_TEXT, file_limit)
from .manifest import (CONSTANTS_FILE, FORMAT, GRAPH_FILE, KERNEL_DIR, SOURCE_SUFFIX,
                       VERSION, FileEntry, GroupSpec, KernelSpec, LibrarySpec, Manifest,
                       TensorSpec, canonical_json, sha256)
from .messages import artifact_error, show

# artifact paths are generated (kernel names are sanitized identifiers); anything else
# in a manifest -- an absolute path, "..", a backslash -- is refused before it is read
_SAFE_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_path(rel: str, where: str) -> str:
    if not isinstance(rel, str) or not _SAFE_PATH.fullmatch(rel) or ".." in rel.split("/"):
        raise artifact_error(where, f"manifest.json names an unsafe file path {rel!r}; the "
                                    "artifact is corrupt or was not made by the workbench -- "
                                    "re-export it")
    return rel


def check_header(d: Any, where: str) -> str:
    """Format, version and digest of a parsed manifest.json; returns the digest."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise artifact_error(where, f"manifest.json is not a Fusion Workbench artifact "
                                    f"manifest (expected \"format\": \"{FORMAT}\"); load a "
                                    "directory or .zip written by session.export() or "
                                    "`workbench export`")
    version = d.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise artifact_error(where, f"manifest.json has an invalid format version "
                                    f"{show(version)}; re-export the artifact")
    if version > VERSION:
        raise artifact_error(where, f"made by a newer workbench (artifact format version "
                                    f"{version if version < 1 << 32 else 'huge'}, this "
                                    f"workbench reads up to {VERSION}); upgrade "
                                    "fusion-workbench to load it")
    body = {k: v for k, v in d.items() if k != "digest"}
    if d.get("digest") != sha256(canonical_json(body)):
        raise artifact_error(where, "manifest.json has changed since export (its digest does "
                                    "not match its contents); re-export the artifact")
    return d["digest"]


class _Checker:
    """Type and range checks of manifest fields; each failure is one ArtifactError."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, ctx: str, what: str, fix: str = "re-export the artifact") -> ArtifactError:
        return artifact_error(self.where,
                              f"manifest.json {ctx + ' ' if ctx else ''}{what}; {fix}")

    def obj(self, v: Any, ctx: str, required, optional=(), upgrade: bool = False) -> dict:
        if not isinstance(v, dict):
            raise self.fail(ctx, f"is {_kind(v)}, not an object")
        unknown = sorted(set(v) - set(required) - set(optional))
        if unknown:
            if upgrade:
                raise self.fail(ctx, f"has fields this workbench cannot read "
                                     f"({', '.join(show(u, 40) for u in unknown[:3])})",
                                "upgrade fusion-workbench or re-export the artifact")
            raise self.fail(ctx, f"has unknown fields "
                                 f"({', '.join(show(u, 40) for u in unknown[:3])})")
        missing = sorted(set(required) - set(v))
        if missing:
            raise self.fail(ctx, f"lacks the field {missing[0]!r}")
        return v

    def list(self, v: Any, ctx: str, limit: int = MAX_ITEMS) -> list:
        if not isinstance(v, list):
            raise self.fail(ctx, f"is {_kind(v)}, not a list")
        if len(v) > limit:
            raise self.fail(ctx, f"has {len(v)} entries (at most {limit})")
        return v

    def str(self, v: Any, ctx: str, limit: int = MAX_TEXT) -> str:
        if not isinstance(v, str):
            raise self.fail(ctx, f"is {_kind(v)}, not a string")
        if len(v) > limit:
            raise self.fail(ctx, f"is {len(v)} characters long (at most {limit})")
        return v

    def int(self, v: Any, ctx: str, lo: int = 0, hi: int = MAX_INT, what: str = "") -> int:
        if not isinstance(v, int) or isinstance(v, bool):
            raise self.fail(ctx, f"is {_kind(v)}, not an integer")
        if not lo <= v <= hi:
            shown = str(v) if abs(v) < 1 << 64 else ("a huge number" if v > 0 else
                                                     "a huge negative number")
            raise self.fail(ctx, f"is {shown}, outside {lo}..{hi}{what}")
        return v

    def bool(self, v: Any, ctx: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(ctx, f"is {_kind(v)}, not true or false")
        return v

    def ident(self, v: Any, ctx: str) -> str:
        if not isinstance(v, str) or len(v) > MAX_IDENTIFIER or not IDENTIFIER.fullmatch(v):
            raise self.fail(ctx, f"{show(v)} is not a C identifier ([A-Za-z_][A-Za-z0-9_]*, "
                                 f"at most {MAX_IDENTIFIER} characters)")
        return v

    def dtype(self, v: Any, ctx: str) -> str:
        if v not in _DTYPES:
            raise self.fail(ctx, f"{show(v)} is not a dtype ({', '.join(sorted(_DTYPES))})")
        return v

    def scalar(self, v: Any, ctx: str, like: Any) -> Any:
        """A field the workbench added later, checked by the type of its default."""
        if isinstance(like, bool):
            return self.bool(v, ctx)
        if isinstance(like, int):
            return self.int(v, ctx)
        if isinstance(like, float):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise self.fail(ctx, f"is {_kind(v)}, not a number")
            return v
        if isinstance(like, str):
            return self.str(v, ctx)
        if like is None and v is None:
            return v
        raise self.fail(ctx, "has a type this workbench cannot check",
                        "upgrade fusion-workbench or re-export the artifact")

    def tensor(self, t: Any, ctx: str) -> TensorSpec:
        self.obj(t, ctx, ("name", "shape", "dtype"))
        shape = self.list(t["shape"], f"{ctx}.shape", MAX_RANK)
        return TensorSpec(self.str(t["name"], f"{ctx}.name"),
                          tuple(self.int(x, f"{ctx}.shape[{i}]", 0, MAX_NUMEL)
                                for i, x in enumerate(shape)),
                          self.dtype(t["dtype"], f"{ctx}.dtype"))

    def buffer(self, p: Any, ctx: str) -> dict:
        self.obj(p, ctx, _BUFFER_REQUIRED, _BUFFER_OTHER, upgrade=True)
        self.ident(p["name"], f"{ctx}.name")
        self.str(p["value"], f"{ctx}.value")
        self.dtype(p["dtype"], f"{ctx}.dtype")
        self.int(p["numel"], f"{ctx}.numel", 0, MAX_NUMEL)
        self.bool(p["is_output"], f"{ctx}.is_output")
        for k, like in _BUFFER_OTHER.items():
            if k in p:
                self.scalar(p[k], f"{ctx}.{k}", like)
        return dict(p)

    def launch(self, v: Any, ctx: str) -> dict:
        self.obj(v, ctx, _LAUNCH_FIELDS, upgrade=True)
        self.int(v["grid"], f"{ctx}.grid", 1, MAX_GRID, " (a CUDA grid)")
        self.int(v["block"], f"{ctx}.block", 1, MAX_BLOCK, " (CUDA threads per block)")
        mapping = self.str(v["mapping"], f"{ctx}.mapping", MAX_IDENTIFIER)
        if mapping not in _MAPPINGS:
            raise self.fail(f"{ctx}.mapping", f"{show(mapping)} is not a thread mapping "
                                              f"({', '.join(sorted(_MAPPINGS - {''}))})",
                            "upgrade fusion-workbench or re-export the artifact")
        self.int(v["rows_per_block"], f"{ctx}.rows_per_block", 0, MAX_BLOCK)
        self.bool(v["cooperative"], f"{ctx}.cooperative")
        self.int(v["splits"], f"{ctx}.splits", 1, MAX_GRID)
        self.int(v["shared_bytes"], f"{ctx}.shared_bytes", 0, MAX_SHARED_BYTES,
                 " (CUDA shared memory per block)")
        return dict(v)

    def scratch(self, x: Any, ctx: str) -> dict:
        self.obj(x, ctx, _SCRATCH_REQUIRED, _SCRATCH_OTHER, upgrade=True)
        self.ident(x["name"], f"{ctx}.name")
        self.str(x["value"], f"{ctx}.value")
        self.dtype(x["dtype"], f"{ctx}.dtype")
        self.int(x["numel"], f"{ctx}.numel", 0, MAX_GRID)
        for k, like in _SCRATCH_OTHER.items():
            if k not in x:
                continue
            c = f"{ctx}.{k}"
            if k == "rows":
                self.int(x[k], c, 1, MAX_BLOCK)
            elif k == "space":
                if x[k] not in ("shared", "register", "hybrid"):
                    raise self.fail(c, f"{show(x[k])} is not shared, register or hybrid")
            elif k == "threads":
                self.int(x[k], c, 0, MAX_BLOCK)
            elif k == "slots":
                self.int(x[k], c, 0, MAX_GRID)
            elif k == "source":
                # where a register copy is read from: a buffer, or a thread's tile (a
                # GEMM kernel's product, in a float32 tile of the thread's own), itself
                # read from nowhere
                if isinstance(x[k], dict) and "is_output" not in x[k]:
                    self.scratch(x[k], c)
                    if x[k].get("source") is not None:
                        raise self.fail(f"{c}.source", "a tile is read from no other "
                                        "memory")
                elif x[k] is not None:
                    self.buffer(x[k], c)
            elif k == "home":
                # (a CPU row kept in an output's own row until its last pass): an output
                if x[k] is not None and not self.buffer(x[k], c)["is_output"]:
                    raise self.fail(c, "is not an output buffer (a row lives only in an "
                                       "output the kernel writes)")
            else:
                self.scalar(x[k], c, like)
        return dict(x)

    def kernel(self, k: Any, ctx: str) -> KernelSpec:
        self.obj(k, ctx, _KERNEL_FIELDS)
        name = self.ident(k["name"], f"{ctx}: kernel name")
        ctx = f"kernel {name}"
        params = tuple(self.buffer(p, f"{ctx} params[{i}]")
                       for i, p in enumerate(self.list(k["params"], f"{ctx} params")))
        fields_ = self.obj(k["fields"], f"{ctx} fields", (), _KERNEL_SCALARS, upgrade=True)
        for f, like in _KERNEL_SCALARS.items():
            if f in fields_:
                self.scalar(fields_[f], f"{ctx} fields.{f}", like)
        lib = k["library"]
        if lib is not None:
            self.obj(lib, f"{ctx} library", ("op", "attrs", "inputs", "outputs"))
            self.obj(lib["attrs"], f"{ctx} library.attrs", lib["attrs"] if
                     isinstance(lib["attrs"], dict) else ())
            lib = LibrarySpec(
                self.str(lib["op"], f"{ctx} library.op", MAX_IDENTIFIER), dict(lib["attrs"]),
                tuple(self.str(x, f"{ctx} library.inputs")
                      for x in self.list(lib["inputs"], f"{ctx} library.inputs")),
                tuple(self.str(x, f"{ctx} library.outputs")
                      for x in self.list(lib["outputs"], f"{ctx} library.outputs")))
        blas = fields_.get("blas", "")
        if blas and blas not in BLAS_SYMBOLS:
            raise self.fail(f"{ctx} fields.blas", f"is {show(blas)}, not one of "
                            f"{', '.join(sorted(BLAS_SYMBOLS))}")
        sources = self.obj(k["sources"], f"{ctx} sources", (), SOURCE_SUFFIX)
        # a kernel calling the host BLAS, or running on the host only, ships C only
        # (GEMM kernels run on the CPU)
        host = bool(blas) or fields_.get("host_only", False) is True
        want = {} if lib is not None else {t: f"{KERNEL_DIR}/{name}{suffix}"
                                           for t, suffix in SOURCE_SUFFIX.items()
                                           if not (host and t != "c")}
        for t in sorted(set(want) | set(sources)):
            if sources.get(t) != want.get(t):
                got = show(sources[t]) if t in sources else "missing"
                raise self.fail(f"{ctx} source {t!r}",
                                f"is {got}, not {want[t]!r}" if t in want else
                                "is listed, but a library call ships no source")
        scratch = tuple(self.scratch(x, f"{ctx} scratch[{i}]")
                        for i, x in enumerate(self.list(k["scratch"], f"{ctx} scratch")))
        # (a row's home is one of the kernel's parameters; that the parameter is an
        # output the graph's checks below hold it to)
        names = {p["name"] for p in params}
        for i, x in enumerate(scratch):
            home = x.get("home")
            if home is not None and home["name"] not in names:
                raise self.fail(f"{ctx} scratch[{i}].home", f"{show(home['name'])} is not "
                                "one of the kernel's parameters")
        return KernelSpec(
            name=name, group=self.str(k["group"], f"{ctx} group"),
            schedule=self.str(k["schedule"], f"{ctx} schedule"), params=params,
            launch=self.launch(k["launch"], f"{ctx} launch"), scratch=scratch,
            fields=dict(fields_),
            shared_bytes=self.int(k["shared_bytes"], f"{ctx} shared_bytes", 0,
                                  MAX_SHARED_BYTES, " (CUDA shared memory per block)"),
            library=lib, sources={t: check_path(p, self.where) for t, p in sources.items()})


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(v), "a value")


def _defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


_DTYPES = {d.value for d in DType}
_BUFFER_REQUIRED = ("name", "value", "dtype", "numel", "is_output")
_BUFFER_OTHER = {k: v for k, v in _defaults(Buffer).items() if k not in _BUFFER_REQUIRED}
_SCRATCH_REQUIRED = ("name", "value", "dtype", "numel")
_SCRATCH_OTHER = {k: v for k, v in _defaults(Scratch).items()
                  if k not in _SCRATCH_REQUIRED}
# kernel fields recorded on their own (export._STRUCTURED); the rest are scalar fields
_KERNEL_STRUCTURED = {"name", "group", "schedule", "params", "body", "launch", "library",
                      "scratch"}
_KERNEL_SCALARS = {k: v for k, v in _defaults(Kernel).items()
                   if k not in _KERNEL_STRUCTURED}
_KERNEL_FIELDS = tuple(f.name for f in fields(KernelSpec))
_LAUNCH_FIELDS = ("grid", "block", "mapping", "rows_per_block", "cooperative", "splits",
                  "shared_bytes")
_MAPPINGS = {"", "stitched"} | {m.value for m in ThreadMapping}
_MANIFEST_FIELDS = tuple(f.name for f in fields(Manifest)) + ("digest",)


def read_manifest(d: Any, where: str) -> Manifest:
    """Validate a parsed manifest.json: format, version, digest, then every field's type
    and range, kernel names and source paths, and the list of files.

    Raises :class:`ArtifactError` naming the artifact, the field and the fix."""
    check_header(d, where)
    c = _Checker(where)
    c.obj(d, "", _MANIFEST_FIELDS)
    files = {}
    for p, e in c.obj(d["files"], "files", d["files"] if isinstance(d["files"], dict)
                      else ()).items():
        check_path(p, where)
        c.obj(e, f"files[{p!r}]", ("sha256", "size"))
        if not isinstance(e["sha256"], str) or not _SHA256.fullmatch(e["sha256"]):
            raise c.fail(f"files[{p!r}].sha256", f"{show(e['sha256'])} is not a SHA-256 "
                                                 "(64 hex digits)")
        files[p] = FileEntry(e["sha256"], c.int(e["size"], f"files[{p!r}].size", 0,
                                                file_limit(p)))
    kernels = tuple(c.kernel(k, f"kernels[{i}]")
                    for i, k in enumerate(c.list(d["kernels"], "kernels")))
    names = set()
    for k in kernels:
        if k.name in names:
            raise c.fail(f"kernel name {k.name!r}", "appears twice")
        names.add(k.name)
    want = {GRAPH_FILE, CONSTANTS_FILE} | {p for k in kernels for p in k.sources.values()}
    if set(files) != want:
        odd = sorted(set(files) ^ want)[0]
        raise c.fail("files", f"{'lists' if odd in files else 'does not list'} {odd!r}, "
                              f"which is {'not ' if odd in files else ''}part of the artifact")
    groups = []
    for i, gr in enumerate(c.list(d["groups"], "groups")):
        ctx = f"groups[{i}]"
        c.obj(gr, ctx, ("id", "nodes", "schedule", "schemes"))
        schemes = c.obj(gr["schemes"], f"{ctx}.schemes", gr["schemes"]
                        if isinstance(gr["schemes"], dict) else ())
        groups.append(GroupSpec(
            c.str(gr["id"], f"{ctx}.id", MAX_IDENTIFIER),
            tuple(c.str(n, f"{ctx}.nodes") for n in c.list(gr["nodes"], f"{ctx}.nodes")),
            c.str(gr["schedule"], f"{ctx}.schedule"),
            {c.str(k, f"{ctx}.schemes"): c.str(v, f"{ctx}.schemes") for k, v in
             schemes.items()}))
    device = c.obj(d["device"], "device", d["device"] if isinstance(d["device"], dict) else ())
    for k, v in device.items():
        c.str(v, f"device.{k}")
    if d["measurement"] is not None:
        c.obj(d["measurement"], "measurement", d["measurement"]
              if isinstance(d["measurement"], dict) else ())
    return Manifest(
        format=d["format"], version=d["version"], created=c.str(d["created"], "created"),
        workbench_version=c.str(d["workbench_version"], "workbench_version"),
        graph_name=c.str(d["graph_name"], "graph_name"),
        graph_hash=c.str(d["graph_hash"], "graph_hash"), planner=c.str(d["planner"], "planner"),
        inputs=tuple(c.tensor(t, f"inputs[{i}]")
                     for i, t in enumerate(c.list(d["inputs"], "inputs"))),
        outputs=tuple(c.tensor(t, f"outputs[{i}]")
                      for i, t in enumerate(c.list(d["outputs"], "outputs"))),
        groups=tuple(groups), kernels=kernels, device=dict(device),
        measurement=d["measurement"], files=files)
