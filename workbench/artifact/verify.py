"""Reading an artifact and proving it intact before anything is compiled.

Order of checks: the path is a directory or a regular zip file; it has a
``manifest.json`` (a regular file of bounded size) of this format and a version this
workbench reads; the manifest's digest matches; its signature verifies when one is
asked for (``trusted_keys``, ``require_signature``; :mod:`.sign`); every field of the
manifest has its type and range (:func:`.manifest.read_manifest`); every entry of the
artifact is a regular file (no symlink, FIFO or device is ever opened); every listed
file is there with its size and SHA-256 and no file is there that the manifest does
not list; the graph rebuilt from ``graph.json`` + ``constants.npz`` (read without
pickle, each ``.npy`` header checked before its data) has the recorded graph hash;
and what the manifest says about the graph -- inputs and outputs, the plan's groups,
each kernel's buffers and workspace, the order kernels run in -- matches the graph
(:func:`check_plan`). The first failure raises one :class:`ArtifactError` (one line)
naming the file and the fix.

Example::

    >>> art = read_artifact("ln.zip")              # doctest: +SKIP
    >>> art.manifest.kernels[0].name, art.graph.name   # doctest: +SKIP
    ('k0_reduce_mean_sub_mul_etc', 'layernorm')
"""
from __future__ import annotations

import io
import math
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

import numpy as np

from ..codegen.microkernel import packed_numel
from ..errors import ArtifactError
from ..dtypes import DType
from ..ir import Graph
from ..ir.graph import freeze_attr
from ..ir.serialize import from_json
from ..ops.bfloat16 import bits_as
from .manifest import (CONSTANTS_FILE, GRAPH_FILE, MANIFEST, MAX_IDENTIFIER,
                       MAX_MANIFEST_BYTES, MAX_RANK, MAX_VALUE_BYTES, Manifest, check_header,
                       file_limit, graph_hash, one_line, parse_json, read_manifest, sha256,
                       show)
from .sign import MAX_SIGNATURE_BYTES, SIGNATURE_FILE, verify_signature
from ..ops import get_op

MAX_ENTRIES = 100_000          # files in an artifact directory or zip
MAX_DIR_DEPTH = 8
MAX_NPY_HEADER = 10_000        # NumPy's own default limit
MAX_ZIP_RATIO = 1000           # uncompressed : compressed, for entries over 64 MiB
_REGULAR_ONLY = "an artifact holds only regular files -- re-export it"


@dataclass(frozen=True)
class Artifact:
    """A verified artifact: its manifest, the rebuilt graph and every file's bytes."""
    where: str
    manifest: Manifest
    graph: Graph
    files: Mapping[str, bytes]
    signed_by: str | None = None       # the trusted key id that verified its signature


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return what
    return "not a regular file"


class _TooLarge(Exception):
    pass


class _NotRegular(Exception):
    def __init__(self, rel: str, kind: str):
        self.rel, self.kind = rel, kind


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit + 1
    while left > 0:
        b = os.read(fd, min(left, 1 << 24))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


_DIR_FD = os.open in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class _Dir:
    """An artifact directory. Every file is opened without following a symlink (at any
    component of its path) and only once it is known to be a regular file, so a FIFO
    or a device listed in a manifest is never opened and a link never leads outside."""

    def __init__(self, root: Path):
        self.root = root

    def scan(self) -> dict[str, tuple[int, str | None]]:
        """Every entry below the root but directories: relative path -> (size, None),
        or (0, what it is) for anything that is not a regular file."""
        out: dict[str, tuple[int, str | None]] = {}
        stack = [(self.root, "", 0)]
        while stack:
            d, prefix, depth = stack.pop()
            with os.scandir(d) as it:
                for e in it:
                    rel = prefix + e.name
                    st = e.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode) and not e.is_symlink():
                        if depth + 1 > MAX_DIR_DEPTH:
                            out[rel] = (0, "nested too deeply")
                        else:
                            stack.append((Path(e.path), rel + "/", depth + 1))
                    elif stat.S_ISREG(st.st_mode):
                        out[rel] = (st.st_size, None)
                    else:
                        out[rel] = (0, _kind(st.st_mode))
                    if len(out) > MAX_ENTRIES:
                        raise ArtifactError(f"artifact {self.root}: holds more than "
                                            f"{MAX_ENTRIES} files; it is not an artifact")
        return out

    def read(self, rel: str, limit: int) -> bytes | None:
        """The bytes of a regular file (None if it is absent); _NotRegular for anything
        else; at most limit + 1 bytes are read."""
        parts = rel.split("/")
        if not _DIR_FD:      # (no openat here: check each component, then open)
            p = self.root
            for i, part in enumerate(parts):
                p = p / part
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    return None
                last = i == len(parts) - 1
                if (not last and not stat.S_ISDIR(st.st_mode)) or \
                        (last and not stat.S_ISREG(st.st_mode)):
                    raise _NotRegular("/".join(parts[:i + 1]), _kind(st.st_mode))
            with open(p, "rb") as f:
                return f.read(limit + 1)
        fd = os.open(self.root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            for i, part in enumerate(parts):
                sub = "/".join(parts[:i + 1])
                try:
                    st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return None
                last = i == len(parts) - 1
                if not last:
                    if not stat.S_ISDIR(st.st_mode):
                        raise _NotRegular(sub, _kind(st.st_mode))
                    nfd = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC,
                                  dir_fd=fd)
                    os.close(fd)
                    fd = nfd
                    continue
                if not stat.S_ISREG(st.st_mode):
                    raise _NotRegular(sub, _kind(st.st_mode))
                ffd = os.open(part, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=fd)
                try:
                    fst = os.fstat(ffd)       # (swapped since the stat? still not read)
                    if not stat.S_ISREG(fst.st_mode):
                        raise _NotRegular(sub, _kind(fst.st_mode))
                    return _read_fd(ffd, limit)
                finally:
                    os.close(ffd)
        finally:
            os.close(fd)
        return None

    def close(self) -> None:
        pass


class _Zip:
    def __init__(self, f, where: str):
        self.f, self.where = f, where
        self.z = zipfile.ZipFile(f)
        infos = self.z.infolist()
        if len(infos) > MAX_ENTRIES:
            raise ArtifactError(f"artifact {where}: the zip holds {len(infos)} entries; it is "
                                "not an artifact")
        self.info: dict[str, zipfile.ZipInfo] = {}
        for i in infos:
            if i.filename in self.info:
                raise ArtifactError(f"artifact {where}: the zip holds {show(i.filename)} "
                                    "twice (which one is meant?); re-export the artifact")
            self.info[i.filename] = i

    def scan(self) -> dict[str, tuple[int, str | None]]:
        out = {}
        for name, i in self.info.items():
            if i.is_dir():
                continue
            fmt = stat.S_IFMT(i.external_attr >> 16)
            out[name] = (i.file_size, None if fmt in (0, stat.S_IFREG) else _kind(fmt))
        return out

    def read(self, rel: str, limit: int) -> bytes | None:
        i = self.info.get(rel)
        if i is None:
            return None
        if i.is_dir():
            raise _NotRegular(rel, "a directory")
        fmt = stat.S_IFMT(i.external_attr >> 16)
        if fmt not in (0, stat.S_IFREG):
            raise _NotRegular(rel, _kind(fmt))
        if i.file_size > limit:
            raise _TooLarge()
        if i.file_size > 64 << 20 and i.file_size > MAX_ZIP_RATIO * max(1, i.compress_size):
            raise ArtifactError(f"artifact {self.where}: {rel} is compressed more than "
                                f"{MAX_ZIP_RATIO}:1 in the zip (a zip bomb?); re-export the "
                                "artifact")
        try:
            with self.z.open(i) as f:
                return f.read(limit + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError,
                RuntimeError, ValueError) as e:
            raise ArtifactError(f"artifact {self.where}: cannot read {rel} from the zip "
                                f"({one_line(str(e), 120) or type(e).__name__}); re-export "
                                "the artifact") from None

    def close(self) -> None:
        self.z.close()
        self.f.close()


def _open(path: Path, where: str):
    try:
        st = os.stat(path)          # the path the caller gave may be a link
    except FileNotFoundError:
        raise ArtifactError(f"no artifact at {where}: the path does not exist; give the "
                            "directory or .zip written by session.export()") from None
    except OSError as e:
        raise ArtifactError(f"artifact {where}: cannot read it ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        return _Dir(path)
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactError(f"{where} is not a regular file or a directory "
                            f"({_kind(st.st_mode)}); give the directory or .zip written by "
                            "session.export()")
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    f = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ArtifactError(f"{where} is not a regular file or a directory; give the "
                                "directory or .zip written by session.export()")
        if not zipfile.is_zipfile(f):
            raise ArtifactError(f"{where} is not an artifact: neither a directory nor a .zip "
                                "file; give the directory or .zip written by "
                                "session.export()")
        f.seek(0)
        return _Zip(f, where)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        f.close()
        raise ArtifactError(f"artifact {where}: unreadable zip ({one_line(str(e), 120)}); "
                            "re-export it") from None
    except BaseException:
        f.close()
        raise


def _read(src, rel: str, limit: int, where: str) -> bytes | None:
    try:
        data = src.read(rel, limit)
    except _NotRegular as e:
        raise ArtifactError(f"artifact {where}: {e.rel} is not a regular file ({e.kind}); "
                            + _REGULAR_ONLY) from None
    except OSError as e:
        raise ArtifactError(f"artifact {where}: cannot read {rel} "
                            f"({e.strerror or type(e).__name__}); re-export the artifact"
                            ) from None
    except _TooLarge:
        data = None
        too_large = True
    else:
        too_large = data is not None and len(data) > limit
    if too_large:
        raise ArtifactError(f"artifact {where}: {rel} is larger than {limit} bytes; it is "
                            "not a file this workbench writes -- re-export the artifact")
    return data


def read_artifact(path: str | Path, trusted_keys: tuple = (),
                  require_signature: bool = False) -> Artifact:
    """Open, verify and read an artifact; raises ArtifactError at the first problem.

    ``trusted_keys`` (key objects, :func:`.sign.trusted`): a signed artifact's signature
    must verify with one of them; ``require_signature``: an unsigned one is refused."""
    path = Path(path)
    where = str(path)
    src = _open(path, where)
    signed_by = None
    try:
        text = _read(src, MANIFEST, MAX_MANIFEST_BYTES, where)
        if text is None:           # before listing: a foreign tree may be huge
            raise ArtifactError(f"{where} is not a Fusion Workbench artifact: it has no "
                                f"{MANIFEST}; give the directory or .zip written by "
                                "session.export() or `workbench export`")
        raw = parse_json(text, MANIFEST, where)
        digest = check_header(raw, where)
        if trusted_keys or require_signature:      # before anything else is read
            sig = _read(src, SIGNATURE_FILE, MAX_SIGNATURE_BYTES, where)
            signed_by = verify_signature(sig, digest, tuple(trusted_keys), where,
                                         require_signature)
        m = read_manifest(raw, where)
        present = src.scan()
        odd = sorted(rel for rel, (_, kind) in present.items() if kind)
        if odd:
            raise ArtifactError(f"artifact {where}: {odd[0]} is not a regular file "
                                f"({present[odd[0]][1]}); " + _REGULAR_ONLY)
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
            data = _read(src, rel, min(entry.size, file_limit(rel)), where)
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


# -- the graph -----------------------------------------------------------------------------
def read_npz(data: bytes, expected: Mapping[str, tuple[tuple[int, ...], np.dtype]],
             where: str) -> dict[str, np.ndarray]:
    """The arrays of constants.npz, exactly the ``expected`` keys with their shapes and
    dtypes: entries stored (as ``np.savez`` writes them), each ``.npy`` header read and
    checked -- size included -- before its data, no pickle, no object arrays."""
    def bad(what: str) -> ArtifactError:
        return ArtifactError(f"artifact {where}: {CONSTANTS_FILE} {what}; re-export the "
                             "artifact")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise bad(f"is not a readable .npz ({one_line(str(e), 120)})") from None
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise bad("holds an entry twice")
    want = {f"{k}.npy": k for k in expected}
    if set(names) != set(want):
        odd = sorted(set(names) ^ set(want))[0]
        raise bad(f"{'holds' if odd in names else 'lacks'} {show(odd)}, which "
                  f"{GRAPH_FILE} {'does not use' if odd in names else 'needs'}")
    out = {}
    for i in infos:
        key = want[i.filename]
        shape, dtype = expected[key]
        if i.compress_type != zipfile.ZIP_STORED or i.file_size != i.compress_size:
            raise bad(f"entry {i.filename} is compressed (np.savez stores its arrays)")
        try:
            with z.open(i) as f:
                head = f.read(10)
                if len(head) < 10 or head[:6] != b"\x93NUMPY" or head[6] not in (1, 2):
                    raise bad(f"entry {i.filename} is not a .npy array (version 1 or 2)")
                if head[6] == 1:
                    start, hlen = head, int.from_bytes(head[8:10], "little")
                else:
                    start = head + f.read(2)
                    hlen = int.from_bytes(start[8:12], "little")
                if hlen > MAX_NPY_HEADER:
                    raise bad(f"entry {i.filename} has a .npy header of {hlen} bytes (at most "
                              f"{MAX_NPY_HEADER})")
                header = start + f.read(hlen)
                reader = (np.lib.format.read_array_header_1_0 if head[6] == 1
                          else np.lib.format.read_array_header_2_0)
                hdr = io.BytesIO(header)
                np.lib.format.read_magic(hdr)
                got_shape, fortran, got_dtype = reader(hdr, max_header_size=MAX_NPY_HEADER)
                if got_dtype.hasobject or got_dtype != dtype or tuple(got_shape) != shape:
                    raise bad(f"entry {i.filename} is {show(str(got_dtype), 40)}"
                              f"{list(got_shape)[:MAX_RANK]}, {GRAPH_FILE} says "
                              f"{dtype}{list(shape)}")
                nbytes = math.prod(shape) * dtype.itemsize
                if i.file_size - len(header) != nbytes:
                    raise bad(f"entry {i.filename} holds {i.file_size - len(header)} bytes of "
                              f"data, its header says {nbytes}")
                buf = bytearray(nbytes)
                if f.readinto(buf) != nbytes:
                    raise bad(f"entry {i.filename} is truncated")
        except ArtifactError:
            raise
        except (ValueError, SyntaxError, TypeError, OSError, EOFError, zlib.error,
                zipfile.BadZipFile) as e:
            raise bad(f"entry {i.filename} is unreadable ({one_line(str(e), 120)})") from None
        out[key] = np.frombuffer(buf, dtype).reshape(shape, order="F" if fortran else "C")
    return out


def _constant_specs(d, where: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """npz key -> (shape, dtype) of every constant graph.json declares."""
    consts = d.get("constants", {}) if isinstance(d, dict) else None
    if not isinstance(consts, dict):
        raise ArtifactError(f"artifact {where}: {GRAPH_FILE} has no constants object; "
                            "re-export the artifact")
    out = {}
    for name, spec in consts.items():
        ok = (isinstance(spec, dict) and isinstance(spec.get("init"), dict)
              and set(spec["init"]) == {"npz"} and isinstance(spec["init"]["npz"], str)
              and 0 < len(spec["init"]["npz"]) <= MAX_IDENTIFIER
              and isinstance(spec.get("shape"), list) and len(spec["shape"]) <= MAX_RANK
              and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 62
                      for x in spec["shape"])
              and spec.get("dtype") in {t.value for t in DType})
        if not ok or spec["init"]["npz"] in out:
            raise ArtifactError(f"artifact {where}: constant {show(name, 60)} in {GRAPH_FILE} "
                                "is malformed (each constant names its own npz key, a shape "
                                "and a dtype); re-export the artifact")
        dt = DType(spec["dtype"])      # (bfloat16 is stored as its bits)
        out[spec["init"]["npz"]] = (tuple(spec["shape"]),
                                    np.dtype(np.uint16) if dt is DType.bfloat16 else dt.np)
    return out


def rebuild_graph(files: Mapping[str, bytes], where: str) -> Graph:
    """The graph from graph.json, its constants from constants.npz (no pickle)."""
    d = parse_json(files[GRAPH_FILE], GRAPH_FILE, where)
    specs = _constant_specs(d, where)
    arrays = read_npz(files[CONSTANTS_FILE], specs, where)
    consts = {}
    for name, spec in d["constants"].items():
        consts[name] = bits_as(arrays[spec["init"]["npz"]], DType(spec["dtype"]))
        spec["init"] = {"fill": 0}    # shape and dtype only; the data comes next
    try:
        g = from_json(d)
    except Exception as e:   # noqa: BLE001 -- graph.json is untrusted input to the IR
        raise ArtifactError(f"artifact {where}: cannot rebuild the graph from {GRAPH_FILE} "
                            f"and {CONSTANTS_FILE} ({type(e).__name__}: "
                            f"{one_line(str(e), 200)}); re-export the artifact") from None
    return replace(g, constants=consts)


# -- what the manifest says about the graph ------------------------------------------------
def check_plan(m: Manifest, g: Graph, where: str) -> None:
    """The manifest's claims checked against the rebuilt graph: inputs and outputs (name,
    shape, dtype); every value's size; groups that partition the graph's nodes, one
    kernel per group in the same order; each buffer's value, size and dtype, workspace
    within limits; library calls that are their node's op; and an order in which every
    kernel reads only what is there, writes only what its group computes, and the
    outputs get computed. So no kernel is handed a buffer of another size than its
    source was generated for, and no value is missing at call time."""
    def fail(what: str) -> ArtifactError:
        return ArtifactError(f"artifact {where}: {what}; re-export the artifact")

    def spec(t) -> str:
        return f"{t.dtype}{list(t.shape)}"

    for kind, specs, names in (("input", m.inputs, g.inputs), ("output", m.outputs, g.outputs)):
        if [t.name for t in specs] != list(names):
            raise fail(f"the {kind}s in manifest.json "
                       f"({show(', '.join(t.name for t in specs))}) do not match the graph's "
                       f"({show(', '.join(names))})")
        for t in specs:
            v = g.value(t.name)
            if t.shape != tuple(v.shape) or t.dtype != v.dtype.value:
                raise fail(f"{kind} {show(t.name)} is {spec(t)} in manifest.json, "
                           f"{v.dtype.value}{list(v.shape)} in the graph")
    values = {v.name: v for v in g.values}
    for v in g.values:
        if math.prod(v.shape) * v.dtype.itemsize > MAX_VALUE_BYTES:
            raise fail(f"graph value {show(v.name)} is larger than {MAX_VALUE_BYTES} bytes")
    largest = max([math.prod(v.shape) for v in g.values] + [1])

    # the plan: groups partition the nodes; one kernel per group, in order
    nodes = {n.id: n for n in g.nodes}
    owner: dict[str, str] = {}
    seen: set[str] = set()
    for gr in m.groups:
        if gr.id in seen:
            raise fail(f"group {show(gr.id)} appears twice in the plan")
        seen.add(gr.id)
        for n in gr.nodes:
            if n not in nodes:
                raise fail(f"group {show(gr.id)} names node {show(n)}, which the graph does "
                           "not have")
            if n in owner:
                raise fail(f"node {show(n)} is in groups {show(owner[n])} and {show(gr.id)}")
            owner[n] = gr.id
    if len(owner) != len(nodes):
        left = next(n for n in nodes if n not in owner)
        raise fail(f"the plan does not compute node {show(left)} (no group holds it)")
    if len(m.kernels) != len(m.groups):
        raise fail(f"manifest.json lists {len(m.kernels)} kernels for {len(m.groups)} plan "
                   "groups (one kernel runs each group)")
    for i, (k, gr) in enumerate(zip(m.kernels, m.groups)):
        if k.group != gr.id:
            raise fail(f"kernel {k.name} runs group {show(k.group)}, but the plan's group "
                       f"{i} is {show(gr.id)} (kernels run in the plan's order)")

    # buffers, and the order values become available in
    ready = set(g.inputs) | set(g.constants)          # compiled kernels
    ready_ref = set(ready)                            # the reference backend: node by node
    for k, gr in zip(m.kernels, m.groups):
        computes = {o for n in gr.nodes for o in nodes[n].outputs}
        for n in gr.nodes:
            missing = [x for x in nodes[n].inputs if x not in ready_ref]
            if missing:
                raise fail(f"group {show(gr.id)} runs node {n} before {show(missing[0])} is "
                           "computed")
            ready_ref.update(nodes[n].outputs)
        names, writes = set(), []
        for p in k.params:
            if p["name"] in names:
                raise fail(f"kernel {k.name} has two parameters named {p['name']}")
            names.add(p["name"])
            dt = DType(p["dtype"])
            if p.get("workspace", False):
                v = values.get(p["value"])
                if v is not None:    # a graph value passed between stitched phases
                    if p["numel"] != math.prod(v.shape) or dt is not v.dtype.compute:
                        raise fail(f"kernel {k.name} workspace {p['name']} "
                                   f"({dt.value}[{p['numel']}]) does not match the graph "
                                   f"value {show(p['value'])} it holds "
                                   f"({v.dtype.compute.value}[{math.prod(v.shape)}])")
                # a packed constant pads each row of B to whole panels (n = 1: PANEL x)
                most = (packed_numel(largest, 1) if p.get("persistent", False)
                        or p.get("packed", False) else largest)
                if not 1 <= p["numel"] <= most or p["numel"] * dt.itemsize > MAX_VALUE_BYTES:
                    raise fail(f"kernel {k.name} workspace {p['name']} has {p['numel']} "
                               f"elements (at most {most}, "
                               + ("the largest value of the graph packed into panels)"
                                  if most > largest else "the largest value of the graph)"))
                continue
            v = values.get(p["value"])
            if v is None or math.prod(v.shape) != p["numel"] or v.dtype is not dt:
                raise fail(f"kernel {k.name} parameter {p['name']} "
                           f"({dt.value}[{p['numel']}], value {show(p['value'], 40)}) does not "
                           "match the graph's value")
            if p["is_output"]:
                writes.append(p["value"])
            elif p["value"] not in ready:
                raise fail(f"kernel {k.name} reads {show(p['value'])} before any kernel "
                           "writes it")
        for w in writes:
            if w not in computes:
                raise fail(f"kernel {k.name} writes {show(w)}, which its group "
                           f"{show(gr.id)} does not compute")
            if w in ready:
                raise fail(f"kernel {k.name} writes {show(w)}, which is already there (an "
                           "input, a constant, or an earlier kernel's output)")
        ready.update(writes)
        if k.library is not None:
            _check_library(k, gr, nodes, fail)
    for o in g.outputs:
        if o not in ready or o not in ready_ref:
            raise fail(f"the plan does not compute the output {show(o)}")


def _check_library(k, gr, nodes, fail) -> None:
    """A library call is exactly its group's single node: op, attributes, arguments."""
    if len(gr.nodes) != 1:
        raise fail(f"kernel {k.name} is a library call for a group of {len(gr.nodes)} nodes")
    n = nodes[gr.nodes[0]]
    c = k.library
    try:
        attrs = {a: freeze_attr(v) for a, v in c.attrs.items()}
        same = attrs == dict(n.attrs)
    except Exception:  # noqa: BLE001 -- any value a JSON object can hold
        same = False
    if c.op != n.op or not same or c.inputs != n.inputs or c.outputs != n.outputs:
        raise fail(f"kernel {k.name} calls {show(c.op, 40)}, which is not its node {n.id} "
                   f"({n.op} with its attributes and arguments)")
    if getattr(get_op(n.op), "library", None) is None:
        raise fail(f"kernel {k.name} calls {n.op}, which has no library implementation")
    params = {p["value"] for p in k.params}
    if not set(c.inputs) | set(c.outputs) <= params:
        raise fail(f"kernel {k.name} library call names values that are not its parameters")
