"""The fork server's own process (``python -m proflab.running.serve FD PRELOAD [sandboxed]``), started by
``forkserver.Server``: it imports torch and the kit's runner once, then forks a fresh child per run, which
runs ``proflab.running.runner`` as ``python -m proflab.running.runner SPEC`` would, and reports its exit
status. It never runs a lab file itself; ``forkserver`` says what keeps that as sound as a fresh process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

from .forkserver import MARK_FD, MESSAGE_MAX, PR_SET_DUMPABLE, _prctl


def _serve(fd: int, preload: list[str], sandboxed: bool = False) -> None:
    _prctl(PR_SET_DUMPABLE, 0)
    sock = socket.socket(fileno=fd)
    import importlib
    import warnings

    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a run that needs it reports the failure itself
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    sock.send(json.dumps({"ready": True, "cuda_driver_loaded": _cuda_driver_loaded()}).encode())
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_MAX, 3)
        except OSError:
            return
        if not data:
            return
        try:
            request = json.loads(data)
            assert len(fds) == 3
        except (ValueError, AssertionError):
            for f in fds:
                os.close(f)
            sock.send(json.dumps({"error": "a request the server does not understand"}).encode())
            continue
        pid = os.fork()
        if pid == 0:
            _child(request, fds, sock)  # never returns
        for f in fds:
            os.close(f)
        sock.send(json.dumps({"pid": pid}).encode())
        status = _wait_or_orphaned(pid, sock)
        if status is None:  # the checker is gone (killed, however): nothing of its run may outlive it
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            return
        if sandboxed:  # nothing of this run's is left for the next: its System V objects go too
            _clear_sysv_ipc()
        try:
            sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            return


def _wait_or_orphaned(pid: int, sock: socket.socket) -> int | None:
    """The child's wait status once it ends; None as soon as the checker's end of the socket closes first
    (a checker killed with SIGKILL while its run hangs: the run must not outlive it). The server sleeps in
    ``poll`` on the child's pidfd and the socket: no time is spent polling while the run is timed."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP | select.POLLHUP)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if done:
                return status
            try:
                events = poller.poll(None if pidfd is not None else 100)
            except InterruptedError:
                continue
            if any(fd == sock.fileno() and mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
                   for fd, mask in events):
                return None
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _clear_sysv_ipc() -> None:
    """Remove every System V shared memory segment, semaphore set and message queue of the sandbox
    (its own IPC namespace: none of them is the machine's)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    ipc_rmid = 0
    for table, remove in (("shm", lambda i: libc.shmctl(i, ipc_rmid, None)),
                          ("sem", lambda i: libc.semctl(i, 0, ipc_rmid)),
                          ("msg", lambda i: libc.msgctl(i, ipc_rmid, None))):
        try:
            rows = Path(f"/proc/sysvipc/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            try:
                remove(int(row.split()[1]))
            except (ValueError, IndexError):
                pass


def _cuda_driver_loaded() -> bool:
    """Whether the CUDA driver library is mapped into this process (a child forked after that could
    not use CUDA)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return True  # cannot tell: do not fork


def _child(request: dict, fds: list[int], sock: socket.socket) -> None:
    """The run's process: set up as ``python -m proflab.running.runner SPEC`` would be, then run it."""
    code = 1
    try:
        os.setsid()
        _prctl(PR_SET_DUMPABLE, 1)
        sock.close()
        stdout, stderr, mark = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.dup2(mark, MARK_FD)
        os.closerange(MARK_FD + 1, _max_fd())
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import random

        random.seed()  # a fresh process's Python RNG, not the server's
        import proflab.running.runner as runner

        sys.argv = [runner.__file__, request["spec"]]
        sys.path.insert(0, request["cwd"])  # as ``python -m`` puts the folder it runs in first
        code = runner.main([request["spec"]])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - as an uncaught exception would end a fresh process
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 4096


if __name__ == "__main__":
    _serve(int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:4] == ["sandboxed"])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # at once: tearing down the interpreter with torch imported takes a second, for nothing
