"""Slow storage served from the checker's own process.

Lab 1's and lab 9's photos live on "network storage": every read waits a
fixed latency before a byte arrives. That wait must not be something a lab
file can switch off, so it lives here, in a :class:`StorageService` that the kit starts in
its own process and whose address it hands to every run in the environment
variable ``PROFLAB_STORAGE``. The service applies the latency on its side,
and logs each read it serves (:attr:`StorageService.reads`), stamped with the
kit's ``time.perf_counter()``: the kit knows how many samples really came
from storage, and when.

The protocol, over a Unix stream socket at :attr:`StorageService.address`:

* A connection carries any number of requests, one after another.
* A request is one line, ``name\\n``, in UTF-8: a file's path relative to the
  served folder (at most :data:`MAX_NAME_BYTES` bytes).
* A reply is a header of 9 bytes, ``struct`` format ``!BQ`` (a status byte,
  then an unsigned 8-byte big-endian length), followed by that many bytes:

  ======================  ===============================================
  status                  payload
  ======================  ===============================================
  :data:`OK` (0)          the file's bytes
  :data:`NOT_FOUND` (1)   a UTF-8 message: no such file under the folder
  :data:`REFUSED` (2)     a UTF-8 message: an absolute name, a ``..``, or
                          a name that resolves outside the folder
  :data:`BAD_REQUEST` (3) a UTF-8 message: the line was not a name, or the
                          file could not be read; after a name too long the
                          server closes the connection
  ======================  ===============================================

Only a request for a file that exists under the folder waits the latency;
refusals are answered at once and are not logged. A read is logged before
the last byte of its reply is sent: once a client has a file, its read is in
the log. Requests on different connections are served by different threads,
so their waits overlap, as on real storage. The client side is
:mod:`proflab.labkit.storage_client`.
"""

from __future__ import annotations

import os
import shutil
import socket
import socketserver
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ENV_VAR = "PROFLAB_STORAGE"
# The ranges a lab's trace shows around its sample loading (``labkit.storage_client.read`` and the photo data
# sets' ``__getitem__``), on whichever thread loads: the DataLoader's wait metric counts them where they hold
# up the steps (``measuring.metrics.dataloader_wait``).
READ_RANGE = "storage read"
LOAD_RANGE = "load sample"
LOADING_RANGES = (LOAD_RANGE, READ_RANGE)
HEADER = struct.Struct("!BQ")
OK, NOT_FOUND, REFUSED, BAD_REQUEST = 0, 1, 2, 3
MAX_NAME_BYTES = 1024


@dataclass(frozen=True)
class Read:
    """One read the service served."""

    name: str  # the file asked for, relative to the root
    started: float  # time.perf_counter() of the serving process when the request arrived
    finished: float  # ... when the bytes were sent (all but the last, a few microseconds before it)
    nbytes: int


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        conn: socket.socket = self.request
        service = self.server.service
        if not service._track(conn):
            return
        try:
            with conn.makefile("rb") as lines:
                while True:
                    line = lines.readline(MAX_NAME_BYTES + 1)
                    if not line.endswith(b"\n"):
                        if len(line) > MAX_NAME_BYTES:
                            _reply(conn, BAD_REQUEST, f"a name is at most {MAX_NAME_BYTES} bytes".encode())
                        return  # end of stream, or a request cut short: the client has gone
                    started = time.perf_counter()
                    try:
                        service._serve(conn, line[:-1], started)
                    except _Refused as refused:
                        _reply(conn, refused.status, str(refused).encode())
        except OSError:
            pass  # the client went away mid-request, or the service is closing
        finally:
            service._untrack(conn)


def _reply(conn: socket.socket, status: int, payload: bytes) -> None:
    conn.sendall(HEADER.pack(status, len(payload)) + payload)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # every DataLoader worker of a run may connect at once
    block_on_close = False  # StorageService.close() ends and joins the handlers itself
    service: StorageService

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class StorageService:
    """Files of one folder served over a Unix socket, each read delayed by ``latency_ms``."""

    def __init__(self, root: str | os.PathLike, latency_ms: float):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"storage root {self.root} is not a folder")
        if latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {latency_ms}")
        self.latency_ms = float(latency_ms)
        self._lock = threading.Lock()
        self._reads: list[Read] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._conns: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._dir: str | None = None
        self._address: str | None = None
        self._closed = False

    # -- life cycle --------------------------------------------------------

    @property
    def address(self) -> str:
        """The socket's path, for ``PROFLAB_STORAGE``; set by :meth:`start`."""
        if self._address is None:
            raise RuntimeError("the storage service has not been started")
        return self._address

    def start(self, folder: str | os.PathLike | None = None, seen_as: str | None = None) -> StorageService:
        """Bind the socket (in a new folder inside ``folder``, default /tmp) and serve in a background
        thread; returns ``self``. A sandboxed run reaches it in its own /tmp: ``folder`` is that /tmp as
        seen from here, ``seen_as`` as the run sees it ("/tmp"), and ``address`` the run's path."""
        with self._lock:
            if self._closed:
                raise RuntimeError("a closed storage service cannot be started again")
            if self._server is not None:
                return self
            self._dir = tempfile.mkdtemp(prefix="proflab-", dir=str(folder) if folder is not None else "/tmp")
            address = os.path.join(self._dir, "storage.sock")
            held = None
            try:
                if len(address.encode()) > 100:  # a Unix socket's path holds 108 bytes: bind through the folder
                    held = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY)
                    server = _Server(f"/proc/self/fd/{held}/storage.sock", _Handler)
                else:
                    server = _Server(address, _Handler)
                if folder is not None:  # the sandbox's user may be another: it must reach the socket
                    os.chmod(self._dir, 0o755)
                    os.chmod(address, 0o777)
            except BaseException:
                shutil.rmtree(self._dir, ignore_errors=True)
                raise
            finally:
                if held is not None:
                    os.close(held)
            server.service = self
            shown = os.path.join(seen_as, os.path.basename(self._dir), "storage.sock") if seen_as else address
            self._server, self._address = server, shown
            self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="proflab-storage", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, close every connection and remove the socket; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            server, thread = self._server, self._thread
            conns = list(self._conns)
        if server is not None:
            server.shutdown()
            server.server_close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            handlers = list(self._handlers)
        for handler in handlers:
            handler.join(timeout=max(1.0, 2 * self.latency_ms / 1000))
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> StorageService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what the kit reads --------------------------------------------------

    @property
    def reads(self) -> list[Read]:
        """Every read served so far, in the order they finished (a copy)."""
        with self._lock:
            return list(self._reads)

    def reads_between(self, start: float, end: float) -> bool:
        """Whether a read was being served at any time between ``start`` and ``end`` (perf_counter)."""
        with self._lock:
            return any(r.started < end and r.finished > start for r in self._reads)

    @property
    def max_in_flight(self) -> int:
        """The largest number of reads served at the same time."""
        with self._lock:
            return self._max_in_flight

    # -- serving ---------------------------------------------------------------

    def _track(self, conn: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._conns.add(conn)
            self._handlers.add(threading.current_thread())
            return True

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)
            self._handlers.discard(threading.current_thread())

    def _resolve(self, raw: bytes) -> tuple[str, Path]:
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Refused(BAD_REQUEST, "a name must be UTF-8") from None
        if not name or "\x00" in name:
            raise _Refused(BAD_REQUEST, f"not a file name: {name!r}")
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts:
            raise _Refused(REFUSED, f"{name!r}: names are relative to the storage folder, without '..'")
        path = (self.root / pure).resolve()
        if not path.is_relative_to(self.root):
            raise _Refused(REFUSED, f"{name!r} resolves outside the storage folder")
        if not path.is_file():
            raise _Refused(NOT_FOUND, f"{name!r}: no such file in storage")
        return name, path

    def _serve(self, conn: socket.socket, raw: bytes, started: float) -> None:
        name, path = self._resolve(raw)
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
        try:
            time.sleep(self.latency_ms / 1000.0)  # the storage's answer time
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                raise _Refused(NOT_FOUND, f"{name!r}: no such file in storage") from None
            except OSError as e:
                raise _Refused(BAD_REQUEST, f"{name!r}: cannot be read: {e.strerror or e}") from None
            # The read is logged before its last byte goes out, so a client
            # that has the whole file always finds its read in the log.
            message = HEADER.pack(OK, len(data)) + data
            conn.sendall(message[:-1])
            read = Read(name, started, time.perf_counter(), len(data))
            with self._lock:
                self._reads.append(read)
            try:
                conn.sendall(message[-1:])
            except OSError:
                with self._lock:
                    self._reads.remove(read)  # never delivered
                raise
        finally:
            with self._lock:
                self._in_flight -= 1
