"""The graph of an artifact rebuilt from ``graph.json`` and ``constants.npz``, with no
pickle: every constant graph.json declares is read from its own ``.npy`` entry, whose
header (shape, dtype, size) is checked before its data is read."""
from __future__ import annotations

import io
import math
import zipfile
import zlib
from dataclasses import replace
from typing import Mapping

import numpy as np

from ..errors import ArtifactError
from ..dtypes import DType
from ..ir import Graph
from ..ir.serialize import from_json
from ..ops.bfloat16 import bits_as
from ..shapes import MAX_RANK
from .limits import MAX_IDENTIFIER
from .manifest import CONSTANTS_FILE, GRAPH_FILE
from .messages import one_line, show
from .strict_json import parse_json

MAX_NPY_HEADER = 10_000        # NumPy's own default limit


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
