"""Writing a plan as an artifact: a directory, or a ``.zip`` when the path says so.

Layout::

    manifest.json        format, version, graph hash, inputs/outputs, plan, kernels in
                         execution order, device, measurement, SHA-256 of every file
    graph.json           the graph (workbench.graph format); each constant's data is
                         {"npz": "c0"}: a key into constants.npz, never inline bytes
    constants.npz        the constants (np.savez; read back with allow_pickle=False)
    kernels/<name>.c     C + OpenMP source of each generated kernel (CPU)
    kernels/<name>.cu    CUDA C source of each generated kernel (GPU)
    signature.json       (when signed: ``sign_with``) a signature of the manifest's
                         digest, outside the digest by design (see :mod:`.sign`)

Every file is built in memory first, then written to a temporary sibling of the
target and renamed into place, so a failure leaves nothing half-written. An existing
non-empty target is refused unless ``force``, and ``force`` replaces only an existing
artifact: a directory holding a ``manifest.json`` of this format and nothing but its
files, or a zip holding one. Anything else -- a home directory, a document, a link --
is refused, naming the path.

Example::

    >>> export_plan(session.plan, "ln.zip", backend=session.backend)   # doctest: +SKIP
    PosixPath('ln.zip')
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import asdict, fields
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..codegen import RENDERERS, lower_plan, render_kernel
from ..codegen.kernel import Kernel
from ..errors import ArtifactError, shown
from ..fusion import Plan
from ..ir import Graph
from ..ir.serialize import to_json
from ..ops.bfloat16 import as_bits
from .limits import MAX_MANIFEST_BYTES
from .manifest import (CONSTANTS_FILE, FORMAT, GRAPH_FILE, KERNEL_DIR, MANIFEST,
                       SOURCE_SUFFIX, VERSION, FileEntry, GroupSpec, KernelSpec, LibrarySpec,
                       Manifest, TensorSpec, graph_hash, json_safe, sha256)
from .sign import SIGNATURE_FILE, signature_file, signing_key
from .verify import read_artifact
from ..version import __version__

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)   # fixed entry times: the archive's bytes follow its files


def constant_keys(g: Graph) -> dict[str, str]:
    """Constant value name -> its key in constants.npz (generated: model names may hold
    any text, and npz keys become file names inside the archive)."""
    return {name: f"c{i}" for i, name in enumerate(g.constants)}


def graph_files(g: Graph) -> dict[str, bytes]:
    """graph.json without constant payloads, and constants.npz."""
    keys = constant_keys(g)
    d = to_json(g)
    for name, spec in d["constants"].items():
        spec["init"] = {"npz": keys[name]}
    buf = io.BytesIO()
    # (bfloat16 as its bits: .npy has no bfloat16 and would write an opaque void type)
    np.savez(buf, **{keys[n]: as_bits(np.asarray(a)) for n, a in g.constants.items()})
    return {GRAPH_FILE: json.dumps(d, indent=1).encode(), CONSTANTS_FILE: buf.getvalue()}


# Kernel fields recorded on their own (or not at all: the body is the shipped source)
_STRUCTURED = {"name", "group", "schedule", "params", "body", "launch", "library", "scratch"}


def _kernel_spec(k: Kernel) -> tuple[KernelSpec, dict[str, bytes]]:
    files, sources = {}, {}
    if k.library is None:
        for target, suffix in SOURCE_SUFFIX.items():
            if not RENDERERS[target].supports(k):
                continue          # (a host-only kernel, the CPU's form: C only)
            rel = f"{KERNEL_DIR}/{k.name}{suffix}"
            files[rel] = render_kernel(k, target).encode()
            sources[target] = rel
    lib = None
    if k.library is not None:
        c = k.library
        lib = LibrarySpec(c.op, json_safe(dict(c.attrs)), tuple(b.value for b in c.inputs),
                          tuple(b.value for b in c.outputs))
    scalars = {f.name: getattr(k, f.name) for f in fields(k) if f.name not in _STRUCTURED}
    spec = KernelSpec(
        name=k.name, group=k.group, schedule=k.schedule,
        # dataclass by dataclass, whatever fields the schedules add
        params=tuple(json_safe(asdict(b)) for b in k.params),
        launch=json_safe(k.launch.to_json()),
        scratch=tuple(json_safe(asdict(x)) for x in k.scratch),
        fields=json_safe({n: v for n, v in scalars.items()
                          if isinstance(v, (bool, int, float, str))}),
        shared_bytes=k.shared_bytes, library=lib, sources=sources)
    return spec, files


def _measurement_record(m) -> dict:
    """Every field of a StepMeasurement; its per-kernel frame as a list of records."""
    d = {f.name: getattr(m, f.name) for f in fields(m) if f.name != "per_kernel"}
    return json_safe({**d, "per_kernel": m.per_kernel.to_dict("records")})


def build_files(plan: Plan, backend_name: str, device: str, measurement=None) -> dict[str, bytes]:
    """Every file of the artifact of ``plan``, by relative path (manifest.json last)."""
    g = plan.graph
    files = graph_files(g)
    kernels = []
    for k in lower_plan(plan):
        spec, src = _kernel_spec(k)
        kernels.append(spec)
        files.update(src)
    tensor = lambda n: TensorSpec(n, g.value(n).shape, g.value(n).dtype.value)
    manifest = Manifest(
        format=FORMAT, version=VERSION,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        workbench_version=__version__, graph_name=g.name, graph_hash=graph_hash(g),
        planner=plan.planner, inputs=tuple(map(tensor, g.inputs)),
        outputs=tuple(map(tensor, g.outputs)),
        groups=tuple(GroupSpec(gr.id, gr.nodes, gr.schedule.describe(),
                               {v: s.value for v, s in gr.schemes}) for gr in plan.groups),
        kernels=tuple(kernels), device={"backend": backend_name, "name": device},
        measurement=_measurement_record(measurement) if measurement is not None else None,
        files={p: FileEntry(sha256(b), len(b)) for p, b in sorted(files.items())})
    files[MANIFEST] = json.dumps(manifest.to_json(), indent=1, ensure_ascii=False).encode()
    return files


def _taken(target: Path) -> bool:
    if target.is_dir():
        return any(target.iterdir())
    return target.exists() or target.is_symlink()


def _manifest_format(data: bytes) -> bool:
    try:
        d = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return isinstance(d, dict) and d.get("format") == FORMAT


def _not_an_artifact(target: Path) -> str | None:
    """Why ``force`` may not replace what is at target (None: it is an artifact)."""
    if target.is_symlink():
        return "it is a symbolic link"
    if target.is_dir():
        m = target / MANIFEST
        if m.is_symlink() or not m.is_file():
            return f"it has no {MANIFEST}"
        if m.stat().st_size > MAX_MANIFEST_BYTES or not _manifest_format(m.read_bytes()):
            return f"its {MANIFEST} is not of format {FORMAT}"
        listed = json.loads(m.read_bytes()).get("files")
        allowed = {MANIFEST, SIGNATURE_FILE} | (set(listed) if isinstance(listed, dict)
                                               else set())
        for dirpath, dirnames, filenames in os.walk(target):
            for n in sorted(filenames) + sorted(d for d in dirnames
                                                if (Path(dirpath) / d).is_symlink()):
                rel = (Path(dirpath) / n).relative_to(target).as_posix()
                if rel not in allowed:
                    return f"holds {rel}, which is not part of the artifact"
        return None
    if target.is_file():
        try:
            with zipfile.ZipFile(target) as z:
                names = z.namelist()
                info = z.getinfo(MANIFEST) if MANIFEST in names else None
                if info is None:
                    return f"it is not a zip holding a {MANIFEST}"
                if info.file_size > MAX_MANIFEST_BYTES or not _manifest_format(
                        z.read(info)):
                    return f"its {MANIFEST} is not of format {FORMAT}"
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError,
                NotImplementedError):
            return "it is not a zip file"
        return None
    return "it is not a regular file or a directory"


def write_files(files: dict[str, bytes], path: str | Path, force: bool = False,
                check=None) -> Path:
    """Write the files as a directory, or a zip when path ends in .zip, atomically.

    ``force`` replaces an existing artifact (directory or zip) and nothing else.
    ``check(staged)`` (raising ArtifactError) runs on the complete staged copy before it
    takes the target's place: refused, nothing at the target changes."""
    target = Path(path)
    as_zip = target.suffix.lower() == ".zip"
    if _taken(target) and not force:
        what = "a non-empty directory" if target.is_dir() else "a file"
        raise ArtifactError(f"{target} already exists and is {what}; choose another path "
                            "or pass force=True (--force) to replace it")
    if _taken(target) and force:
        why = _not_an_artifact(target)
        if why is not None:
            reason = why if why.startswith("it ") else f"it {why}"
            raise ArtifactError(f"{target} is not a Fusion Workbench artifact ({reason}); "
                                "force=True (--force) replaces only an existing artifact -- "
                                "choose another path, or remove it yourself")
    parent = target.parent
    if not parent.is_dir():
        raise ArtifactError(f"cannot write {target}: the directory {parent} does not exist; "
                            "create it first")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    try:
        if as_zip:
            staged = tmp / "artifact.zip"
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
                for rel in sorted(files):
                    z.writestr(zipfile.ZipInfo(rel, _ZIP_TIME), files[rel],
                               zipfile.ZIP_DEFLATED)
        else:
            staged = tmp / "artifact"
            for rel, data in files.items():
                f = staged / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(data)
        if check is not None:
            check(staged)
        _replace(staged, target)
    except OSError as e:
        raise ArtifactError(f"cannot write {target}: {e.strerror or e}; check the path and "
                            "free space") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _replace(staged: Path, target: Path) -> None:
    """Move staged into target's place; an old target (force) goes only once the new
    one is complete."""
    if target.is_dir() and not target.is_symlink():
        if staged.is_dir() and not any(target.iterdir()):
            os.replace(staged, target)    # rename(2) replaces an empty directory
        else:
            os.rename(target, staged.parent / "old")   # removed with the temporary dir
            os.rename(staged, target)
    else:
        if staged.is_dir() and (target.exists() or target.is_symlink()):
            target.unlink()               # a file where the directory goes
        os.replace(staged, target)


def export_plan(plan: Plan, path: str | Path, backend=None, measurement=None,
                force: bool = False, sign_with=None) -> Path:
    """Write ``plan`` as an artifact at ``path`` (a ``.zip``, or a directory).

    ``backend`` is the backend the plan ran on (its name and device go in the manifest);
    ``measurement`` a :class:`~workbench.measure.StepMeasurement` of this plan, or None.
    ``sign_with``: a key that signs the artifact (``signature.json``): an
    :class:`~workbench.artifact.HmacKey`, an :class:`~workbench.artifact.Ed25519Key`
    private key, or a ``pathlib.Path`` to a key file. Returns the path written; raises
    :class:`ArtifactError` when the target is taken (unless ``force``, and then unless
    it is an artifact) or cannot be written -- or when the loader would refuse what was
    written (each artifact is read back by the loader's own checks before it takes its
    place: an export never writes what ``load_artifact`` refuses).
    """
    key = signing_key(sign_with) if sign_with is not None else None   # before any work
    name = backend.name if backend is not None else "none"
    device = backend.device_name() if backend is not None else "unknown"
    files = build_files(plan, name, device, measurement)
    if key is not None:
        files[SIGNATURE_FILE] = signature_file(json.loads(files[MANIFEST])["digest"], key)
    return write_files(files, path, force, check=lambda staged: _loads(staged, path))


def _loads(staged: Path, target) -> None:
    """The loader's checks (:func:`.verify.read_artifact`; nothing compiled) of a staged
    artifact, a refusal said as the export's (what the loader found, without the staged
    copy's name or its advice to re-export)."""
    try:
        read_artifact(staged)
    except ArtifactError as e:
        why = str(e).replace(f"artifact {staged}: ", "").replace(str(staged), str(target))
        why = why.removesuffix("; re-export the artifact")
        raise ArtifactError(f"cannot export {shown(target)}: load_artifact would refuse "
                            f"it ({shown(why)}); nothing was written") from None
