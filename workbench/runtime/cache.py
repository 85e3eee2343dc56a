"""The kernel cache: where built binaries live, and the proof of what each one holds.

Built kernel libraries (``cpu/``, ``cuda-emu/``) and cubins (``cuda/``) are cached in
``$WORKBENCH_CACHE`` (default ``~/.cache/fusion-workbench``), named by the SHA-256 of
what built them (source, flags, compiler). A name proves nothing about a file's
contents: anyone who can write into the directory -- a teammate sharing the cache, a
process of another user where the directory is world-writable -- could put a library
there under the name of a kernel the workbench is about to build, and loading it would
run that code (a C constructor runs at ``dlopen``).

So every binary is *sealed* when this user builds it: ``NAME.seal`` beside it holds an
HMAC-SHA256, under a secret of this user's (``~/.config/fusion-workbench/cache.key``,
mode 0600, made on first use), of the file's name and the SHA-256 of its bytes. A
cached binary is reused only when its seal verifies; one that does not (planted,
changed, truncated, built by another user) is built again and replaces it. Loading
verifies the very bytes it maps (the file is opened once, hashed, and mapped through
``/proc/self/fd``), so a file swapped after the check is not what is loaded.

A cache directory any user may write to is refused with the reason; temporary build
directories a killed process left behind are removed once they are an hour old.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import stat
import threading
import time
from pathlib import Path

from ..errors import WorkbenchError

SEAL_SUFFIX = ".seal"
# a temporary build directory older than this is a killed compile's
STALE_SECONDS = 3600
_KEY_BYTES = 32
_key_lock = threading.Lock()
_cleaned: set[Path] = set()


class CacheEntryChanged(WorkbenchError):
    """A cached binary whose seal does not verify when it is loaded."""


def cache_root() -> Path:
    return Path(os.environ.get("WORKBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "fusion-workbench"))


def cache_subdir(name: str) -> Path:
    """The cache directory ``name`` (``cpu``, ``cuda``, ``cuda-emu``, ``devices``,
    ``tuning``), made private where it is made, refused where every user may write to
    it, cleared of killed builds' leftovers."""
    p = cache_root() / name
    try:
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = p.stat()
    except OSError as e:
        raise WorkbenchError(f"cannot use the kernel cache {p} ({e.strerror or e}); set "
                             "WORKBENCH_CACHE to a directory of your own") from None
    if st.st_mode & stat.S_IWOTH:
        raise WorkbenchError(
            f"the kernel cache {p} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}): "
            "anyone on this machine could put a library there that the workbench would "
            f"load; make it private (chmod o-w {p}) or set WORKBENCH_CACHE to a directory "
            "of your own")
    if p not in _cleaned:
        _cleaned.add(p)
        _remove_stale_builds(p)
    return p


# the directories of built libraries, which are sealed and loaded through their seals
SEALED_DIRS = ("cpu", "cuda", "cuda-emu")


def is_cached(path: Path) -> bool:
    """Whether ``path`` is a binary of the kernel cache (so sealed)."""
    try:
        parent = Path(path).resolve().parent
        return any(parent == (cache_root() / d).resolve() for d in SEALED_DIRS)
    except OSError:
        return False


def _remove_stale_builds(p: Path) -> None:
    """Temporary build directories (``tmp*``) older than STALE_SECONDS: a process killed
    mid-compile leaves its own behind; a live compile's is minutes old at most."""
    now = time.time()
    try:
        entries = list(os.scandir(p))
    except OSError:
        return
    for e in entries:
        try:
            if e.name.startswith("tmp") and e.is_dir(follow_symlinks=False) and \
                    now - e.stat(follow_symlinks=False).st_mtime > STALE_SECONDS:
                shutil.rmtree(e.path, ignore_errors=True)
        except OSError:
            pass


def _key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "fusion-workbench" / "cache.key"


_key: bytes | None = None


def seal_key() -> bytes:
    """This user's secret that seals cache entries (made on first use, mode 0600; one
    another user could read or write is refused)."""
    global _key
    with _key_lock:
        if _key is not None:
            return _key
        path = _key_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(_KEY_BYTES))
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                key = f.read(_KEY_BYTES + 1)
        except OSError as e:
            raise WorkbenchError(f"cannot read or make the kernel cache's key {path} "
                                 f"({e.strerror or e}); set XDG_CONFIG_HOME to a "
                                 "directory of your own") from None
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) != _KEY_BYTES:
            raise WorkbenchError(f"the kernel cache's key {path} is not this user's private "
                                 f"{_KEY_BYTES}-byte file (owner {st.st_uid}, mode "
                                 f"{stat.S_IMODE(st.st_mode):o}); remove it and a new one "
                                 "is made")
        _key = key
        return key


def _mac(name: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    return hmac.new(seal_key(), f"{name}\0{digest}".encode(), hashlib.sha256).hexdigest()


def _seal_path(path: Path) -> Path:
    return path.with_name(path.name + SEAL_SUFFIX)


def seal(path: Path, data: bytes) -> None:
    """Write ``path``'s seal for ``data`` (the bytes about to be installed there)."""
    tmp = _seal_path(path).with_name(f".{path.name}.{secrets.token_hex(6)}{SEAL_SUFFIX}")
    tmp.write_text(_mac(path.name, data))
    os.replace(tmp, _seal_path(path))


def sealed(path: Path, data: bytes) -> bool:
    """Whether ``data`` (read from ``path``) is what this user sealed there."""
    try:
        mac = _seal_path(path).read_text()[:64]
    except (OSError, UnicodeDecodeError):
        return False
    return hmac.compare_digest(mac, _mac(path.name, data))


def read_sealed(path: Path) -> bytes | None:
    """The bytes of a cached binary whose seal verifies, or None (missing, unsealed,
    changed: build it again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read()
    return data if sealed(path, data) else None


def install(path: Path, built: Path) -> None:
    """Move the binary just built at ``built`` (in a temporary directory beside
    ``path``) into place, sealed; concurrent builders of the same kernel race
    harmlessly (each installs a sealed file; a reader finding a seal and a file of two
    builders' builds them again)."""
    seal(path, built.read_bytes())
    os.replace(built, path)


def open_sealed(path: Path) -> int:
    """A file descriptor of ``path`` whose bytes were just checked against its seal (to
    map exactly those bytes: ``/proc/self/fd/N``); CacheEntryChanged where they do
    not verify."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        if not sealed(path, b"".join(chunks)):
            raise CacheEntryChanged(
                f"the cached library {path} is not the one this user built there (its "
                "seal does not verify): something else writes into the kernel cache; it "
                "is built again, or set WORKBENCH_CACHE to a directory of your own")
        os.lseek(fd, 0, os.SEEK_SET)
        return fd
    except BaseException:
        os.close(fd)
        raise
