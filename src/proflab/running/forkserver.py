"""Where a run's process comes from: a server that imports torch once, and forks a fresh child per run.

Importing torch, torchvision and torch._dynamo takes 3 to 7 s on a 2-core
machine, and a check starts at least six runs. So the checker starts one
server per check (per ``session``): a process that imports them, and the
kit's runner, once, then waits. For every run it forks a child, which is
the run's process: a session and process group of its own, its own standard
streams (the run's output files), the run's working folder, environment and
``sys.argv``, and nothing open but the checker's mark pipe. The child runs
``proflab.running.runner`` exactly as ``python -m proflab.running.runner SPEC`` would, and
the server reports its exit status.

What keeps this as sound as a fresh process per run:

* nothing of one run survives into the next: each child is forked from the
  server as it was after its imports, and the server itself never runs a lab
  file, an operator, or a CUDA call (a server that finds the CUDA driver
  loaded after its imports is not used: runs then start as fresh processes);
* the server is not dumpable (``PR_SET_DUMPABLE`` 0), so a run cannot attach
  to it, or write its memory through ``/proc``, to slow down the runs forked
  after it; each child is made dumpable again, so the checker can read its
  memory figures;
* the child holds no end of the server's socket; a server that dies, or
  stops answering, is replaced, and its children were re-parented to the
  checker (a child subreaper), which stops them with the rest of the run;
* the server exits when the checker's end of its socket closes, however the
  checker ends (not by ``PR_SET_PDEATHSIG``: that fires when the *thread*
  that started the server ends), and kills the run it was waiting on first:
  it waits in ``poll`` on the run's pidfd and the socket together.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from . import cgroups

PR_SET_DUMPABLE = 4
MARK_FD = 3  # the mark pipe's number in a forked child
MESSAGE_MAX = 1 << 20
READY_TIMEOUT_S = 120.0  # importing torch on a very busy machine
ANSWER_TIMEOUT_S = 10.0  # a fork, once asked for
SILENT_CPU_S = 0.5  # a server that used less CPU than this while it never answered is not importing: it hangs

# What every server imports before it forks its first child: torch, and what the runner needs; a run
# asks for more (``execute.preload_for``: what the lab's files import). torch._inductor too: the
# profiler imports it when it starts (``hasattr(torch, "_inductor")`` in torch.profiler's
# prepare_trace, with torch._dynamo and sympy: 1.9 s here), and a check profiles both versions.
PRELOAD = ("torch", "torch.profiler", "torch._inductor", "proflab.running.runner", "proflab.atomic", "proflab.labs",
           "proflab.quiet")


class ServerError(RuntimeError):
    """The server could not be started, or stopped answering."""


class EngineFailed(ServerError):
    """The sandbox engine started, and never ran the server: a run started by it fares no better."""


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# ---------------------------------------------------------------- in the checker (the server's own process:
# ``serve``)


GONE = object()  # what ``Server._exit_status`` says of a child once its server is gone


class Child:
    """A run's process, forked by a server: what ``subprocess.Popen`` offers the checker (pid, poll, wait).

    Its exit status comes from the server; once the server is gone, the child
    has been re-parented to the checker (a child subreaper), which then waits
    for it itself.
    """

    def __init__(self, server: "Server", pid: int, ns_pid: int | None = None):
        # ``pid`` as this process sees it; ``ns_pid`` as the server does (they differ in a sandbox)
        self.server, self.pid, self.returncode = server, pid, None
        self.ns_pid = pid if ns_pid is None else ns_pid
        self.orphaned = False

    def _status(self, timeout: float) -> int | None:
        if not self.orphaned:
            status = self.server._exit_status(self.ns_pid, timeout)
            if status is not GONE:
                return status
            self.orphaned = True
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not this process's child: gone, or not re-parented yet
            from .processes import stat

            info = stat(self.pid)
            if info is not None and info[4] not in ("Z", "X"):
                time.sleep(min(timeout, 0.05))
                return None
            return -signal.SIGKILL  # its status went with the server
        if not done:
            time.sleep(min(timeout, 0.05))
            return None
        return os.waitstatus_to_exitcode(status)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._status(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("proflab.running.runner", timeout)
            self.returncode = self._status(0.5 if left is None else min(left, 0.5))
        return self.returncode

    def wait_or_forget(self, timeout: float = ANSWER_TIMEOUT_S) -> int:
        """``wait``, once the run is killed: a server that does not report the exit status by then (one
        the run stopped, say) is killed, and the run counts as killed."""
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.server.kill()  # the child, killed with its run, is re-parented here: reaped below
            self.orphaned = True
            try:
                return self.wait(2.0)
            except subprocess.TimeoutExpired:
                self.returncode = -signal.SIGKILL
                return self.returncode


class Server:
    """One fork server, started with ``env``, importing ``preload``; ``spawn`` forks a run from it.

    It starts importing at once; ``spawn`` waits until it is ready, so the
    imports overlap whatever the checker does before its first run.

    With ``engine`` (a working ``sandbox.Engine``), the server lives in a
    sandbox of its own (``sandbox.Box``, made in ``cwd``), and so does every
    run forked from it: ``box`` is the sandbox's folder, where each run's
    scratch folder goes.
    """

    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = (), cwd: Path | None = None,
                 engine=None, expose: tuple[Path, ...] = ()):
        from . import sandbox

        self.env, self.preload = env, tuple(preload)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        self.log = tempfile.TemporaryFile()
        self.box = sandbox.Box(Path(cwd or tempfile.gettempdir()), engine, keep=("home",),
                                expose=expose) if engine is not None else None
        # An empty folder to start in, and -P: no module is found in the folder the checker runs in.
        from .. import paths

        self.home = str(self.box.folder("home")) if self.box else tempfile.mkdtemp(prefix=paths.owned("forkserver-"),
                                                                                   dir=cwd)
        flags = ["-P"] if sys.version_info >= (3, 11) else []
        argv = [sys.executable, *flags, "-m", "proflab.running.serve", str(theirs.fileno()),
                json.dumps(list(PRELOAD) + [m for m in self.preload if m not in PRELOAD]),
                "sandboxed" if self.box else "plain"]
        if self.box is not None:
            argv = self.box.command(argv, cwd=Path(self.home))
        # The server, its sandbox and every run forked from it in a cgroup of their own: the runs' CPU is read
        # from the kernel's count for it, less the server's own (``run_cpu_s``)
        self.group = cgroups.make("server")
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log, env=env, cwd=self.home,
                start_new_session=True, pass_fds=(theirs.fileno(),),
                preexec_fn=cgroups.entering(self.group))
        except OSError:
            mine.close()
            self.log.close()
            self._remove_home()
            if self.group is not None:
                self.group.remove()
            raise
        finally:
            theirs.close()
        if self.group is not None and self.proc.pid not in self.group.pids():
            self.group.remove()
            self.group = None
        self.pid: int | None = None if self.box else self.proc.pid  # the server's own process, as seen here
        self.namespace: str | None = None  # its PID namespace (a sandbox's)
        self.init_pid: int | None = None  # the sandbox's first process (bubblewrap's, PID 1 inside)
        self._as_started: tuple | None = None  # how the server was scheduled once ready (``tampered``)
        self._init_as_started: tuple | None = None  # the sandbox's first process then: what it runs
        self.ready: bool | None = None  # None: still importing
        self.silent = False  # it never answered while alive (``wait_ready``): its engine hangs
        self.usable = True
        self.busy: int | None = None  # the child whose exit status is awaited
        self.taken = False  # by a run, from ``server_for`` until ``release``: one run at a time

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Whether the server has imported everything and may fork (it then has no CUDA driver loaded);
        waited for at most ``timeout_s`` (``silent`` then says it never answered)."""
        if self.ready is None:
            try:
                hello = self._receive(timeout_s)
                if hello is None and self.proc.poll() is None and self._working():
                    hello = self._receive(max(0.0, READY_TIMEOUT_S - timeout_s))  # importing, slowly: wait on
            except ServerError:  # its end of the socket closed: it is gone (maybe not yet reaped), not silent
                hello, gone = None, True
            else:
                gone = False
            # alive, never said a word, and used no CPU: its engine hangs (a slow import works)
            self.silent = hello is None and not gone and self.proc.poll() is None and not self._working()
            self.ready = bool(hello and hello.get("ready") and not hello.get("cuda_driver_loaded"))
            if self.ready and self.box is not None:
                self.ready = self._find_in_sandbox()
            if self.ready:
                self._as_started = _scheduling(self.pid)
                self._init_as_started = _identity(self.init_pid) if self.init_pid is not None else None
            if not self.ready:
                self.usable = False
        return self.ready and self.usable

    def _working(self) -> bool:
        """Whether the server's processes have used CPU (importing, say): True where that cannot be read."""
        used = self.group.usage_s() if self.group is not None else None
        return used is None or used >= SILENT_CPU_S

    def _find_in_sandbox(self) -> bool:
        """The server's PID as seen here, and its sandbox's: bubblewrap's process (``proc``) starts the
        sandbox's first process, which starts the server."""
        from . import sandbox

        for init in sandbox.children(self.proc.pid):
            for server in sandbox.children(init):
                self.init_pid, self.pid = init, server
                self.namespace = sandbox.namespace_of(server)
                return self.namespace is not None
        return False

    def tampered(self) -> str:
        """What a run did to this server, seen from outside ("" when nothing): a server stopped, killed,
        reniced, rescheduled or pinned elsewhere forks slower runs, so it is not used again."""
        if self.pid is None or self._as_started is None:
            return ""
        if self.proc.poll() is not None or not _alive(self.pid):
            return "the server its runs are forked from was killed"
        now = _scheduling(self.pid)
        if now is None:
            return "the server its runs are forked from was killed"
        if now[0] in ("T", "t"):
            return "the server its runs are forked from was stopped (SIGSTOP)"
        if now[1:] != self._as_started[1:]:
            return "the server its runs are forked from was reniced, rescheduled or moved to other cores"
        if self.init_pid is not None and self._init_as_started is not None:
            init = _identity(self.init_pid)
            if init is None or init[0] in ("T", "t") or init[1:] != self._init_as_started[1:]:
                return ("the sandbox's first process (bubblewrap's) was stopped, traced or made to run something "
                        "else")
        return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run_cpu_s(self) -> float | None:
        """CPU seconds the runs forked from this server have used so far, every process they ever started
        included, as the kernel counts them: the cgroup's usage less the server's own and that of bubblewrap's
        process outside the sandbox. None where there is no cgroup."""
        if self.group is None:
            return None
        usage = self.group.usage_s()
        if usage is None:
            return None
        # Only what no run can reach is left out: the server (not dumpable: no run may trace it) and
        # bubblewrap's process outside the sandbox (in no namespace a run sees). The sandbox's first process
        # is reachable by its runs (same user, dumpable): whatever it runs counts as theirs.
        return usage - cgroups.own_cpu_s((self.proc.pid, self.pid))

    def spawn(self, spec_path: Path, cwd: Path, env: dict[str, str], stdout: int, stderr: int,
              mark: int, ready_s: float = READY_TIMEOUT_S) -> Child:
        if not self.wait_ready(ready_s):
            if self.box is not None and self.silent:
                # the sandbox engine started and never ran the server: it would not run the run either
                self.kill()
                raise EngineFailed(f"the sandbox engine started no run server within {ready_s:.0f} s (it hangs "
                                   f"after its start-up probe); `proflab doctor` tells more")
            raise ServerError(f"the run server cannot fork runs: {self._log_tail() or 'no message'}")
        request = json.dumps({"spec": str(spec_path), "cwd": str(cwd), "env": env}).encode()
        if len(request) > MESSAGE_MAX:
            raise ServerError("the run's environment is too large to send")
        try:
            socket.send_fds(self.sock, [request], [stdout, stderr, mark])
        except OSError as e:
            self.usable = False
            raise ServerError(f"the run server is gone ({e.strerror or e})") from None
        answer = self._receive(ANSWER_TIMEOUT_S)
        if answer is None or not isinstance(answer.get("pid"), int):
            self.usable = False
            raise ServerError(f"the run server did not start the run: {self._log_tail() or 'no answer'}")
        self.busy = answer["pid"]
        if self.box is None:
            return Child(self, answer["pid"])
        from . import sandbox

        seen = sandbox.host_pid(self.pid, answer["pid"])
        if seen is None:  # gone already (it may have exited at once): its status still comes from the server
            seen = -1
        return Child(self, seen, answer["pid"])

    def _exit_status(self, pid: int, timeout: float):
        """The child's exit status once the server reports it (None before); ``GONE`` when the server is
        gone, or said something else (it is not asked again)."""
        if self.busy != pid:
            return GONE
        try:
            answer = self._receive(timeout, eof_ok=True)
        except ServerError:
            answer = {"gone": True}
        if answer is None:
            return None
        self.busy = None
        if "exit" in answer and isinstance(answer["exit"], int) and not isinstance(answer["exit"], bool):
            return answer["exit"]
        self.usable = False
        return GONE

    def _receive(self, timeout: float, eof_ok: bool = False) -> dict | None:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return None
        try:
            data = self.sock.recv(MESSAGE_MAX)
        except OSError:
            data = b""
        if not data:
            self.usable = False
            if eof_ok:
                return {"gone": True}
            raise ServerError(f"the run server stopped: {self._log_tail() or 'no message'}")
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        return answer if isinstance(answer, dict) else {"garbled": True}

    def _log_tail(self) -> str:
        try:
            self.log.seek(0)
            return self.log.read().decode("utf-8", "replace").strip()[-600:]
        except (OSError, ValueError):
            return ""

    def release(self) -> None:
        """The run that ``server_for`` gave this server to is over: another may have it."""
        with _lock:
            self.taken = False

    def kill(self) -> None:
        """Kill a server that stopped answering; it is not used again."""
        self.usable = False
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Stop the server (its children are the runs', stopped by the checker before this)."""
        self.usable = False
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                if self.ready is None:  # still importing: nothing to wait for
                    raise subprocess.TimeoutExpired("proflab.running.serve", 0)
                self.proc.wait(timeout=2)  # it exits when its socket closes
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        self._remove_home()
        if self.group is not None:
            self.group.remove()

    def _remove_home(self) -> None:
        if self.box is not None:
            from . import sandbox

            sandbox.reap()
            self.box.remove()
            return
        try:
            os.rmdir(self.home)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    from .processes import stat

    info = stat(pid)
    return info is not None and info[4] not in ("Z", "X")


def _identity(pid: int) -> tuple | None:
    """(state, the program, its command line) of a process, from /proc; None when it is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state, os.readlink(f"/proc/{pid}/exe"), Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return None


def _scheduling(pid: int | None) -> tuple | None:
    """(state, nice, policy, cores) of a process, from /proc; None when it is gone."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cores = tuple(sorted(os.sched_getaffinity(pid)))
    except (OSError, IndexError):
        return None
    return fields[0], fields[16], fields[38], cores


_lock = threading.Lock()
_sessions: list[dict[str, Server]] = []


def _key(env: dict[str, str], leave_out: tuple[str, ...], preload: tuple[str, ...], role: str) -> str:
    return json.dumps([sorted((k, v) for k, v in env.items() if k not in leave_out), sorted(preload), role])


@contextmanager
def session():
    """Every run started inside it (in this thread or another) is forked from a server kept for the
    session, one per environment and preload; the servers stop when it ends. Sessions nest: the
    outermost keeps them."""
    with _lock:
        outer = bool(_sessions)
        if not outer:
            _sessions.append({})
    try:
        yield
    finally:
        if not outer:
            with _lock:
                servers = _sessions.pop()
            for server in servers.values():
                server.close()


def server_for(env: dict[str, str], leave_out: tuple[str, ...] = (), preload: tuple[str, ...] = (),
               cwd: Path | None = None, role: str = "", engine=None,
               expose: tuple[Path, ...] = ()) -> tuple[Server | None, bool]:
    """A server for a run with ``env`` (the keys in ``leave_out`` may differ between runs) that imports
    ``preload``, and whether it is the session's (then ``release`` it after the run; False: one for this
    run only, to be closed after it); (None, False) when it cannot be started. A session's server serves
    one run at a time: a run in another thread meanwhile gets one of its own. Inside a session, a call
    before the first run starts the server's imports early. ``cwd``: where the server makes the empty
    folder it starts in (or its sandbox's folder).

    ``role``: whose runs it forks (a file's path): servers of two roles are never shared, so the runs
    of one file never fork from the server of another. ``engine``: the sandbox engine; the server,
    and every run it forks, then live in a sandbox of the server's own, which can read ``expose`` (the
    folders of the role's file and its runs' working folder) wherever they are."""
    key = _key(env, leave_out, preload, role)
    with _lock:
        servers = _sessions[-1] if _sessions else None
        server = servers.get(key) if servers is not None else None
        if server is not None and server.usable and server.alive():
            if not server.taken:
                server.taken = True
                return server, True
            servers = None  # a run in another thread has it: this one gets a server of its own
        elif server is not None:
            server.close()
            del servers[key]
    base = {k: v for k, v in env.items() if k not in leave_out}
    try:
        server = Server(base, preload, cwd, engine, expose)
    except (ServerError, OSError):
        return None, False
    with _lock:
        if servers is not None and _sessions and _sessions[-1] is servers and key not in servers:
            server.taken = True
            servers[key] = server
            return server, True
    return server, False


def settle(timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait until every server of the session has imported what it preloads (or failed to), at most
    ``timeout_s`` in all: the first timed run of one version then never shares the machine with the other's
    imports. A sandboxed server still silent then, having used no CPU, raises ``EngineFailed``: its engine hangs."""
    with _lock:
        servers = list(_sessions[-1].values()) if _sessions else []
    deadline = time.monotonic() + min(timeout_s, READY_TIMEOUT_S)
    for server in servers:
        if server.ready is None:
            server.wait_ready(max(0.0, deadline - time.monotonic()))
            if server.box is not None and server.silent:  # its engine hangs: so would every run's
                raise EngineFailed(f"the sandbox engine started no run server within {timeout_s:.0f} s (it hangs "
                                   "after its start-up probe); `proflab doctor` tells more")


def retire(role: str) -> None:
    """Close the session's servers of ``role`` (a file whose check has ended): a class of two hundred
    does not keep two hundred servers, nor their sandboxes."""
    with _lock:
        servers = _sessions[-1] if _sessions else {}
        gone = [key for key, server in servers.items() if json.loads(key)[2] == role and not server.taken]
        closing = [servers.pop(key) for key in gone]
    for server in closing:
        server.close()


def done_with(server: Server | None, shared: bool) -> None:
    """After the run ``server_for`` gave ``server`` to: a session's server is released, a one-off closed."""
    if server is None:
        return
    if shared:
        server.release()
    else:
        server.close()
