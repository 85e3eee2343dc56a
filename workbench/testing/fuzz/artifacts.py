"""The ``artifacts`` attacks: a signed artifact changed the ways an attacker or an
accident changes one, each loaded by a loader that trusts the signer.

From a seed, each case copies the artifact (a directory) and applies one change: a
byte flipped, a file truncated, junk appended, a file added, a file removed, a kernel
source given a C constructor (the manifest made consistent again, as anyone can), the
signature taken from another artifact or made with a key the loader does not trust, a
signature of another algorithm. Loading it with the signer's key in ``trusted_keys``
must raise :class:`ArtifactError` (one line) -- every change here is one -- before
anything is compiled: the constructor never runs, nothing new lands in the kernel
cache. :func:`attack_failures` returns the changes that got through.
"""
from __future__ import annotations

import json
import os
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...artifact.manifest import canonical_json, sha256
from ...errors import ArtifactError

CHANGES = ("flip", "truncate", "append", "add_file", "remove_file", "constructor",
           "foreign_signature", "untrusted_signature", "other_algorithm")


@dataclass(frozen=True)
class AttackFailure:
    seed: int
    change: str
    error: str


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def resign(root: Path, edit=None) -> None:
    """What anyone can do to an artifact directory: recompute every file's entry and
    the digest of its manifest (after ``edit(manifest_dict)``, where given)."""
    m = json.loads((root / "manifest.json").read_text())
    if edit:
        edit(m)
    for rel in m["files"]:
        data = (root / rel).read_bytes()
        m["files"][rel] = {"sha256": sha256(data), "size": len(data)}
    m.pop("digest", None)
    m["digest"] = sha256(canonical_json(m))
    (root / "manifest.json").write_text(json.dumps(m, indent=1))


def _change(rng, root: Path, change: str, marker: Path, other: Path, untrusted) -> None:
    from ...artifact import sign
    files = _files(root)
    victim = files[int(rng.integers(len(files)))]
    if change == "flip":
        data = bytearray(victim.read_bytes())
        if not data:
            data = bytearray(b"\0")
        i = int(rng.integers(len(data)))
        data[i] ^= 1 << int(rng.integers(8))
        victim.write_bytes(bytes(data))
    elif change == "truncate":
        data = victim.read_bytes()
        victim.write_bytes(data[:int(rng.integers(max(1, len(data))))])
    elif change == "append":
        with open(victim, "ab") as f:
            f.write(bytes(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8)))
    elif change == "add_file":
        (root / "kernels" / "extra.c").write_text("int wb_extra;\n")
    elif change == "remove_file":
        victim.unlink()
    elif change == "constructor":
        (src,) = list((root / "kernels").glob("*.c"))[:1] or [None]
        if src is None:
            raise RuntimeError("the artifact has no C source to attack")
        src.write_text(src.read_text() + "\n#include <stdio.h>\n"
                       "__attribute__((constructor)) static void wb_evil(void) {\n"
                       f"  FILE* f = fopen(\"{marker}\", \"w\"); if (f) fclose(f);\n}}\n")
        resign(root)
    elif change == "foreign_signature":
        resign(root)
        shutil.copy(other / sign.SIGNATURE_FILE, root / sign.SIGNATURE_FILE)
    elif change == "untrusted_signature":
        (root / "kernels" / "extra.c").write_text("int wb_extra;\n")
        m = json.loads((root / "manifest.json").read_text())
        m["files"]["kernels/extra.c"] = {"sha256": "", "size": 0}
        (root / "manifest.json").write_text(json.dumps(m))
        resign(root)
        digest = json.loads((root / "manifest.json").read_text())["digest"]
        (root / sign.SIGNATURE_FILE).write_bytes(sign.signature_file(digest, untrusted))
    elif change == "other_algorithm":
        sig = json.loads((root / sign.SIGNATURE_FILE).read_text())
        sig["algorithm"] = sign.ED25519 if sig["algorithm"] == sign.HMAC else sign.HMAC
        (root / sign.SIGNATURE_FILE).write_text(json.dumps(sig))


def attack_failures(artifact: Path, other: Path, key, seeds, work: Path,
                    cache: Path) -> list[AttackFailure]:
    """Each seed's change to a copy of ``artifact`` (signed with ``key``; ``other`` is
    another artifact signed with it), loaded with ``trusted_keys=[key]``: the changes
    that loaded, raised anything but an ArtifactError, ran the constructor or compiled
    something (``cache``: the kernel cache directory, empty before)."""
    from ...artifact import HmacKey, load_artifact
    untrusted = HmacKey.generate()
    fails = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        change = CHANGES[int(rng.integers(len(CHANGES)))]
        root, marker = work / f"case{seed}", work / f"ran{seed}"
        shutil.copytree(artifact, root)
        try:
            _change(rng, root, change, marker, other, untrusted)
            load_artifact(root, backend="cpu", trusted_keys=[key])
            fails.append(AttackFailure(seed, change, "it loaded"))
        except ArtifactError as e:
            if "\n" in str(e):
                fails.append(AttackFailure(seed, change, f"a message of many lines: {e}"))
        except Exception as e:     # noqa: BLE001 -- a stray exception is the finding
            tb = traceback.extract_tb(e.__traceback__)[-1]
            fails.append(AttackFailure(seed, change, f"{type(e).__name__}: {e} "
                                       f"({tb.filename}:{tb.lineno})"))
        if marker.exists():
            fails.append(AttackFailure(seed, change, "its constructor ran"))
        built = [p for p in cache.rglob("*.so")] if cache.exists() else []
        if built:
            fails.append(AttackFailure(seed, change, f"{len(built)} libraries compiled"))
            for p in built:
                os.unlink(p)
        shutil.rmtree(root, ignore_errors=True)
    return fails
