"""Where TensorBoard is served: a real server on the kit's runs folder.

It runs as a child process in a session (and process group) of its own, with
its chatter sent to ``.proflab/tensorboard.log``. The kit waits until the
server answers, prints the URL, and on Ctrl-C, SIGTERM or a closed terminal
stops the whole group: TensorBoard starts helpers (its data server, the
PyTorch Profiler plugin's worker processes and their resource tracker) that
outlive it when only it is killed, so ``stop`` signals the group, then kills
whatever of it is left, wherever it moved (``processes.Tree``), and returns
only once ``/proc`` shows no process of it left.

Options the learner got wrong (a host that does not resolve or is not this
machine's, a port out of range or reserved, a log folder that is a file) raise
``BadOption``, a ``ServerError`` the command reports as a usage error.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from .. import paths, quiet
from ..running import processes

# How long each polite signal is given before the next, harder one: the server can shut down; helpers
# it left behind when it died have nothing to finish.
GRACE_S = ((signal.SIGINT, 3.0), (signal.SIGTERM, 2.0))
ORPHANS_GRACE_S = ((signal.SIGTERM, 1.0),)
KILL_S = 10.0  # SIGKILL is repeated this long at most (a process stuck in the kernel cannot be killed)


class ServerError(RuntimeError):
    """TensorBoard could not be started."""


class BadOption(ServerError):
    """The host, port or log folder asked for cannot be served: the learner's option is wrong."""


def url(host: str, port: int) -> str:
    shown = "localhost" if host in ("127.0.0.1", "localhost", "0.0.0.0", "::", "") else host
    return f"http://{_bracketed(shown)}:{port}/"


def log_path() -> Path:
    return paths.state_dir() / "tensorboard.log"


def port_number(text: str) -> int:
    """``--port``'s type: a TCP port, 1 to 65535 (argparse reports anything else as a usage error)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a whole number from 1 to 65535, not {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be from 1 to 65535, not {port}")
    return port


def start(logdir: Path, host: str = "127.0.0.1", port: int = 6006, wait_s: float = 60.0) -> subprocess.Popen:
    """Start TensorBoard and return once it answers HTTP requests.

    On any failure after the server process exists (it died, it did not answer
    in time, an interrupt) its whole group is stopped before the error is raised.
    """
    logdir = Path(logdir)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise BadOption(f"port must be from 1 to 65535, not {port}")
    if logdir.exists() and not logdir.is_dir():
        raise BadOption(f"--logdir {paths.display(logdir)} is a file, not a folder: name the folder to serve")
    if not port_is_free(host, port):
        raise ServerError(f"port {port} on {host} is already in use (another TensorBoard?). "
                          f"Try --port {_other_port(port)}.")
    try:
        logdir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise BadOption(f"--logdir {paths.display(logdir)}: a part of that path is a file, not a folder") from None
    except OSError as e:
        raise ServerError(f"cannot create {paths.display(logdir)}: {e.strerror or e}") from None
    log_file = log_path()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host,
           "--port", str(port), "--reload_interval", "5"]
    env = {**os.environ, **quiet.QUIET_ENV, "PYTHONWARNINGS": "ignore"}
    processes.become_subreaper()  # a helper TensorBoard orphans comes back here, to be stopped with it
    others = processes.children_of_mine()
    try:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        proc.proflab_tree = processes.Tree(proc.pid, others)
    except OSError as e:
        raise ServerError(f"cannot start TensorBoard: {e.strerror or e} ({e.filename or paths.display(log_file)})") \
            from None
    try:
        _wait_until_it_answers(proc, host, port, wait_s, log_file)
    except BaseException:
        while True:  # stopped even when a Ctrl-C arrives as this starts
            try:
                stop(proc)
                break
            except KeyboardInterrupt:
                continue
        raise
    return proc


def _wait_until_it_answers(proc: subprocess.Popen, host: str, port: int, wait_s: float, log_file: Path) -> None:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "localhost", "") else host
    probe = f"http://{_bracketed(probe_host)}:{port}/data/logdir"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through $http_proxy
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            reason = _reason(log_file)
            advice = f" Try --port {_other_port(port)}." if "already in use" in reason else ""
            raise ServerError(f"TensorBoard {how_it_ended(proc.returncode)} while starting"
                              f"{': ' + reason if reason else ''} (its log: {paths.display(log_file)}).{advice}")
        try:
            with opener.open(probe, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    raise ServerError(f"TensorBoard did not answer on {probe} within {wait_s:g} s "
                      f"(log: {paths.display(log_file)})")


def how_it_ended(returncode: int | None) -> str:
    """``exited with code 1``, ``was killed by SIGKILL``."""
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


def port_is_free(host: str, port: int) -> bool:
    """Whether TensorBoard could listen on ``host``:``port``; False only when the port is taken.

    The address is resolved as TensorBoard's server (werkzeug) resolves it. A
    host that does not resolve or is not this machine's, and a port this user
    may not open, raise ``BadOption``.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise BadOption(f"--host {host}: no such host ({e.strerror}); use 127.0.0.1 (this machine only) "
                        f"or 0.0.0.0 (every network interface)") from None
    except (UnicodeError, ValueError) as e:
        raise BadOption(f"--host {host!r} is not a host name: {e}") from None
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server does
        try:
            s.bind(infos[0][4])
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            if e.errno == errno.EADDRNOTAVAIL:
                raise BadOption(f"--host {host} is not an address of this machine; use 127.0.0.1 or 0.0.0.0") \
                    from None
            if e.errno == errno.EACCES:
                raise BadOption(f"this user may not listen on port {port} (ports below 1024 need root); "
                                f"use --port 6006") from None
            raise ServerError(f"cannot listen on {host} port {port}: {e.strerror or e}") from None
    return True


def _other_port(port: int) -> int:
    return port + 1 if port < 65535 else port - 1


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _reason(log_path: Path) -> str:
    """TensorBoard's own error line, without the tracebacks of its helper processes."""
    try:
        lines = quiet.clean(log_path.read_text(errors="replace")).splitlines()
    except OSError:
        return ""
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    return errors[-1] if errors else ""


# --- stopping ----------------------------------------------------------------

def stop(proc: subprocess.Popen) -> list[int]:
    """Stop TensorBoard and every process it started; return once none is left.

    SIGINT, then SIGTERM go to its process group, each with a grace period
    for TensorBoard to close cleanly; whatever is left then (in the group,
    its session, or any descendant, wherever it moved) is frozen and killed
    by ``processes.Tree``. SIGINT, SIGTERM and SIGHUP are held back meanwhile
    and delivered once it is done (a second Ctrl-C then raises
    KeyboardInterrupt here, with nothing left running). Returns the PIDs that
    could not be killed (a process stuck in the kernel), normally none.
    """
    tree = getattr(proc, "proflab_tree", None) or processes.Tree(proc.pid)
    with processes.shielded():
        _reap(proc)
        for sig, grace_s in GRACE_S if proc.returncode is None else ORPHANS_GRACE_S:
            if not tree.scan():
                break
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + grace_s
            while tree.scan() and time.monotonic() < deadline:
                _reap(proc)
                time.sleep(0.05)
        tree.kill(timeout_s=KILL_S)
        _reap(proc)
        return tree.scan()


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.poll()
    except OSError:
        pass
