"""Reading files from the kit's storage service (:mod:`proflab.running.storage`).

The kit serves lab data from its own process and puts the service's address
in the environment variable ``PROFLAB_STORAGE`` for every run. :func:`read`
asks it for one file and returns the bytes.

Each thread of each process keeps a connection of its own: a DataLoader
worker forked from a process that already read from storage opens a fresh
one rather than talking over its parent's socket, and a connection that
broke is opened again. Nothing here is stored on a data set object, so data
sets that use it stay picklable.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from ..running.storage import BAD_REQUEST, ENV_VAR, HEADER, NOT_FOUND, OK, READ_RANGE, REFUSED

TIMEOUT_S = 60.0  # a reply slower than this means the service is stuck

_local = threading.local()


def address() -> str | None:
    """The storage service's address, or None outside the kit."""
    return os.environ.get(ENV_VAR) or None


def read(name: str, address: str | None = None) -> bytes:
    """The bytes of ``name``, a path relative to the served folder.

    Raises FileNotFoundError for a file storage does not have, PermissionError
    for a name outside its folder, ConnectionError when no service answers.
    The read shows in a profile as a ``storage read`` range, on the thread
    that waited for it.
    """
    with _shown(READ_RANGE):
        return _read(name, address)


def _shown(label: str):
    """A ``record_function`` range where torch is loaded (every lab file's process), else nothing."""
    import contextlib
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return contextlib.nullcontext()
    return torch.autograd.profiler.record_function(label)


def _read(name: str, address: str | None) -> bytes:
    where = address or os.environ.get(ENV_VAR)
    if not where:
        raise ConnectionError(f"no storage service: {ENV_VAR} is not set")
    if "\n" in name:
        raise ValueError(f"a storage name cannot hold a newline: {name!r}")
    request = name.encode("utf-8") + b"\n"
    for attempt in range(2):
        conn = _connection(where)
        try:
            status, payload = conn.exchange(request)
            break
        except (ConnectionError, EOFError) as e:
            _drop()
            if attempt:
                raise ConnectionError(f"storage service at {where} closed the connection: {e}") from None
        except OSError:
            _drop()
            raise
    if status == OK:
        return payload
    message = payload.decode("utf-8", "replace")
    if status == NOT_FOUND:
        raise FileNotFoundError(f"storage: {message}")
    if status == REFUSED:
        raise PermissionError(f"storage refused the read: {message}")
    raise OSError(f"storage could not serve {name!r}: {message}" if status == BAD_REQUEST
                  else f"storage answered {name!r} with unknown status {status}")


def read_or_wait(name: str, folder: Path, latency_ms: float) -> bytes:
    """A lab data set's read: from the kit's storage service where one runs (every run the kit starts),
    else, outside the kit, after the same wait, from ``folder``: the same wait, the same bytes."""
    if address():
        return read(name)
    with _shown(READ_RANGE):
        time.sleep(latency_ms / 1000.0)
        return (folder / name).read_bytes()


def close() -> None:
    """Close this thread's connection, if it has one."""
    _drop()


class _Connection:
    """One process's connection to the service, closed when its thread's data goes."""

    def __init__(self, where: str):
        self.address, self.pid = where, os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(where)  # blocking: waits its turn when many connect at once
            self.sock.settimeout(TIMEOUT_S)
        except OSError as e:
            self.sock.close()
            raise ConnectionError(f"no storage service answers at {where} ({ENV_VAR}): "
                                  f"{e.strerror or e}") from None

    def exchange(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        status, length = HEADER.unpack(self._recv_exactly(HEADER.size))
        return status, self._recv_exactly(length)

    def _recv_exactly(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise EOFError(f"connection closed after {got} of {n} bytes")
            got += k
        return bytes(buf)

    def close(self) -> None:
        # In a forked child this closes the child's copy of the socket only:
        # the parent's connection stays open.
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()

    __del__ = close


def _connection(where: str) -> _Connection:
    conn = getattr(_local, "conn", None)
    if conn is not None and conn.pid == os.getpid() and conn.address == where:
        return conn
    _drop()  # another process's (inherited through fork), or another address's
    _local.conn = _Connection(where)
    return _local.conn


def _drop() -> None:
    conn = getattr(_local, "conn", None)
    _local.conn = None
    if conn is not None:
        conn.close()
