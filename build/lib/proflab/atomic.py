"""Atomic file writes: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_verified(path: str | os.PathLike, data: bytes, like: str | os.PathLike | None = None) -> None:
    """``data`` to ``path``, atomically and checked: a temp file in the same folder, fsynced, read back and
    compared byte for byte, then renamed into place (and the folder fsynced).

    On any failure (a full disk, a read-only folder) it raises OSError and leaves no file behind: ``path``
    is then either absent or as it was. ``like``: a file whose permissions and times the copy takes.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(f.fileno(), view):]
            os.fsync(f.fileno())
        with open(tmp, "rb") as f:
            written = f.read()
        if written != data:
            raise OSError(errno.EIO, f"the copy reads back different from what was written "
                                     f"({len(written)} of {len(data)} bytes)", tmp)
        if like is not None:
            try:
                shutil.copystat(like, tmp)
            except OSError:
                pass  # the bytes are what matter
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dirfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dirfd)
    except OSError:
        pass
    finally:
        os.close(dirfd)
