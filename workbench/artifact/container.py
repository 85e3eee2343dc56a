"""An artifact's container, a directory or a zip file, read so that nothing but a
regular file is ever opened: no symlink is followed (at any component of a path), no
FIFO or device is opened, entries and sizes are bounded, and a zip bomb is refused.
:func:`open_container` opens one; :func:`read_entry` reads a file of it, or refuses
with one :class:`ArtifactError`."""
from __future__ import annotations

import os
import stat
import zipfile
import zlib
from pathlib import Path

from ..errors import ArtifactError
from .messages import one_line, show

MAX_ENTRIES = 100_000          # files in an artifact directory or zip
MAX_DIR_DEPTH = 8
MAX_ZIP_RATIO = 1000           # uncompressed : compressed, for entries over 64 MiB
REGULAR_ONLY = "an artifact holds only regular files -- re-export it"


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


def open_container(path: Path, where: str):
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


def read_entry(src, rel: str, limit: int, where: str) -> bytes | None:
    try:
        data = src.read(rel, limit)
    except _NotRegular as e:
        raise ArtifactError(f"artifact {where}: {e.rel} is not a regular file ({e.kind}); "
                            + REGULAR_ONLY) from None
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
