"""Where TensorBoard is served: a real server on the kit's runs folder.

It runs as a child process in its own process group, with its chatter sent to
``.proflab/tensorboard.log``. The kit waits until the server answers, prints
the URL, and on Ctrl-C stops the whole group, so nothing is left running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import paths, quiet


class ServerError(RuntimeError):
    pass


def url(host: str, port: int) -> str:
    shown = "localhost" if host in ("127.0.0.1", "localhost", "0.0.0.0", "::") else host
    return f"http://{shown}:{port}/"


def start(logdir: Path, host: str = "127.0.0.1", port: int = 6006, wait_s: float = 60.0) -> subprocess.Popen:
    """Start TensorBoard and return once it answers HTTP requests."""
    if not port_is_free(host, port):
        raise ServerError(f"port {port} on {host} is already in use (another TensorBoard?). "
                          f"Try --port {port + 1}.")
    logdir.mkdir(parents=True, exist_ok=True)
    log_path = paths.state_dir() / "tensorboard.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host,
           "--port", str(port), "--reload_interval", "5"]
    env = {**os.environ, **quiet.QUIET_ENV, "PYTHONWARNINGS": "ignore"}
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    log.close()
    probe = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', 'localhost') else host}:{port}/data/logdir"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"TensorBoard exited (code {proc.returncode}): {_reason(log_path)} "
                              f"(full log: {paths.display(log_path)})")
        try:
            with urllib.request.urlopen(probe, timeout=2) as response:
                if response.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    stop(proc)
    raise ServerError(f"TensorBoard did not answer on {probe} within {wait_s:g} s (log: {log_path})")


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TensorBoard's server does
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _reason(log_path: Path) -> str:
    """TensorBoard's own error line, without the tracebacks of its helper processes."""
    lines = quiet.clean(log_path.read_text(errors="replace")).splitlines()
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
    return errors[-1] if errors else "see its log"


def stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue
