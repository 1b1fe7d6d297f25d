"""Where a lab file's runs are isolated: a bubblewrap sandbox per version and per check.

A learner's file is untrusted code, and Python has no boundary inside a
process. The boundary is the operating system's: every run of a file is
forked from a fork server that lives inside a sandbox made by bubblewrap
(``bwrap``, Debian's ``bubblewrap``, the engine under Flatpak), one sandbox per
file and per check. Inside it:

* the whole file system read-only: the kit, its virtual environment,
  ``labs/`` and ``data/``; the kit's state folder (``.proflab/``) and
  ``runs/`` hidden behind empty folders;
* writable only the sandbox's own folder (its *box*), bound at the same path
  as outside: each run's scratch folder (its spec, result and trace), and the
  box's ``tmp`` and ``shm``, seen as ``/tmp`` and ``/dev/shm``. The checker
  empties all of it after every run, once it has read what it needs;
* its own PID, IPC, network (loopback only), UTS and cgroup namespaces: a run
  sees no process outside its sandbox (the checker, the other version's
  server, other checks' runs), so it can signal none of them;
* its own user namespace, as ``nobody`` inside; when the kit runs as root,
  the sandbox is started as ``nobody`` outside too (``setpriv``), so what it
  writes is a nobody's files, and it holds no capability anywhere;
* ``--die-with-parent``: the sandbox ends with the checker, however it ends.

A run can still signal its own sandbox's server (same user, same PID
namespace): the checker looks at the server after every run and replaces a
server that a run stopped, killed, reniced or rescheduled, and fails that run.
It never reaches the server of the other version, whose runs are timed
against it.

Where the engine cannot run (not Linux, no ``bwrap``, user namespaces
disabled), runs are forked as before, unsandboxed: ``proflab check`` says so
once, ``proflab grade`` and ``proflab gate`` refuse without ``--unsandboxed``,
and every record says which it was.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from . import processes

NOBODY = 65534  # the user a sandbox runs as, inside (and outside, when the kit runs as root)
ENGINE_ENV = "PROFLAB_BWRAP"  # the engine's path (default: bwrap on PATH); a path that does not exist: none
# A folder every run may write, whichever sandbox it is in: only for the kit's own tests, whose calibration
# lab counts its runs there (a test instrument, like PROFLAB_AUDIT=off); the records then say so.
SHARED_ENV = "PROFLAB_SANDBOX_SHARED"


def shared() -> Path | None:
    given = os.environ.get(SHARED_ENV)
    return Path(given).resolve() if given and Path(given).is_dir() else None


PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Engine:
    """Whether runs are sandboxed on this machine, and if not, why not."""

    ok: bool
    why: str = ""  # when not ok: a sentence for the learner
    bwrap: str = ""
    version: str = ""
    as_root: bool = False  # started as root (nobody cannot read this Python), not as nobody

    def describe(self) -> str:
        if not self.ok:
            return f"unsandboxed: {self.why}"
        who = "nobody inside and outside" if os.geteuid() == 0 and not self.as_root else \
            ("nobody inside; root outside, with no capability (nobody cannot read this Python)"
             if self.as_root else "nobody inside; your own user outside")
        also = f"; every run may write {shared()} (the kit's tests: {SHARED_ENV})" if shared() else ""
        return f"sandboxed by bubblewrap {self.version} ({self.bwrap}): {who}{also}"

    def prefix(self) -> list[str]:
        """What starts the engine as ``nobody`` when this process is root; empty otherwise."""
        if os.geteuid() != 0 or self.as_root:
            return []
        setpriv = shutil.which("setpriv")
        return [setpriv, "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"] if setpriv else []

    def at_least(self, major: int, minor: int) -> bool:
        try:
            return tuple(int(p) for p in self.version.split(".")[:2]) >= (major, minor)
        except ValueError:
            return False

    @property
    def owner(self) -> int | None:
        """The user the box's folders must belong to (None: this process's own)."""
        return NOBODY if os.geteuid() == 0 and not self.as_root else None


@functools.lru_cache(maxsize=1)
def interpreter_folders() -> tuple[Path, ...]:
    """Where this Python and the kit's own code live: a sandboxed run needs them, even in a folder the
    sandbox hides (a checkout and its virtual environment under /tmp). Every folder of ``sys.path`` too: an
    environment whose packages come from another one's, through a ``.pth`` line (a kit installed from its
    wheel beside a class's shared environment), imports torch from there."""
    import proflab

    here = Path.cwd().resolve()
    imported = [Path(p) for p in sys.path if p and Path(p).is_absolute() and Path(p).is_dir()
                and Path(p).resolve() != here]
    return (Path(sys.prefix), Path(sys.executable).parent, Path(proflab.__file__).resolve().parents[1], *imported)


def engine() -> Engine:
    """The sandbox engine, tried once per process (and again only if what it depends on changes: the
    engine named, the user, the kit's folder, the temporary folder): a real sandbox that runs this Python
    and imports the kit. Every run asks for it; a probe each time cost a grading of six files 10 s of 38.

    As root, the sandbox is started as ``nobody``; where ``nobody`` cannot
    read this Python (an interpreter under ``/root``), it is started as root
    instead: still ``nobody`` inside, with no capability anywhere, its own
    namespaces, and every mount read-only but its box (``Engine.as_root``).
    """
    given = os.environ.get(ENGINE_ENV)
    return _probe(given, shutil.which("bwrap") if given is None else None, os.geteuid(), str(paths.root()),
                  tempfile.gettempdir())


@functools.lru_cache(maxsize=8)
def _probe(given: str | None, found_on_path: str | None, euid: int, root: str, tmp: str) -> Engine:
    """``engine()``, for what it depends on (its arguments: the probe reads them from the process as well)."""
    if not sys.platform.startswith("linux"):
        return Engine(False, f"the sandbox engine (bubblewrap) needs Linux; this is {sys.platform}")
    bwrap = given if given is not None else found_on_path
    if not bwrap or not os.access(bwrap, os.X_OK):
        return Engine(False, "bubblewrap is not installed (Debian, Ubuntu: `sudo apt-get install bubblewrap`; "
                             "Fedora: `sudo dnf install bubblewrap`)")
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True,
                                 timeout=PROBE_TIMEOUT_S).stdout.split()[-1:]
    except (OSError, subprocess.SubprocessError):
        version = []
    version_text = version[0] if version else "?"
    said = ""
    for as_root in ((False, True) if os.geteuid() == 0 else (False,)):
        found = Engine(True, bwrap=bwrap, version=version_text, as_root=as_root)
        if os.geteuid() == 0 and not as_root and not found.prefix():
            continue  # no setpriv: root it is
        box = None
        try:
            box = Box(Path(tempfile.gettempdir()), found, expose=(paths.root(), *interpreter_folders()))
            probe = subprocess.run(box.command([sys.executable, "-c", "import proflab.running.runner"],
                                               cwd=box.root),
                                   capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                   stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            said = str(e)
            continue
        finally:
            if box is not None:
                box.remove()
            reap()
        if probe.returncode == 0:
            return found
        said = (probe.stderr.strip().splitlines() or ["no message"])[-1][:300]
    if "namespace" in said or "Operation not permitted" in said or "uid map" in said:
        said += " (user namespaces are disabled on this machine: sysctl kernel.unprivileged_userns_clone=1, " \
                "or user.max_user_namespaces > 0)"
    return Engine(False, f"bubblewrap could not start a sandbox here: {said}", bwrap)


def _hidden() -> list[Path]:
    """Folders a run must not read, hidden behind empty ones: the kit's state (other runs' boxes, the
    check's workspace, progress) and the published traces."""
    return [paths.state_dir(), paths.runs_dir()]


def _device_nodes() -> list[str]:
    """The GPU's device files, for a sandbox's /dev (CUDA needs them)."""
    try:
        names = sorted(os.listdir("/dev"))
    except OSError:
        return []
    return [f"/dev/{n}" for n in names if n.startswith("nvidia")] + \
        [f"/dev/{n}" for n in ("dri",) if n in names]


def lend(folders: list[Path]) -> None:
    """Make ``folders`` readable by ``nobody``, for a sandbox that runs as nobody outside too (the kit run
    as root): everything in them readable, their folders enterable, and the way to them enterable where
    it is the kit's own (its state folder) or a temporary folder; a private temporary folder (0700, as
    ``mkdtemp`` makes them) would otherwise stop every run with "permission denied". Nothing else changes:
    a folder the kit does not own, or outside those two places, is left as it is."""
    state, tmp = paths.state_dir().resolve(), Path(tempfile.gettempdir()).resolve()
    me = os.geteuid()
    for folder in folders:
        for parent in Path(folder).parents:
            if _inside(parent, state) or (_inside(parent, tmp) and parent != tmp):
                _add_mode(parent, 0o001, me)
        for top, dirs, files in os.walk(folder):
            _add_mode(Path(top), 0o005, me)
            for name in files:
                _add_mode(Path(top) / name, 0o004, me)


def _add_mode(path: Path, bits: int, owner: int) -> None:
    try:
        st = path.lstat()
        if st.st_uid == owner and not path.is_symlink() and st.st_mode & bits != bits:
            os.chmod(path, (st.st_mode & 0o7777) | bits)
    except OSError:
        pass  # gone, or not ours: the run then says what it could not read


class Box:
    """One sandbox's folder, and the bubblewrap command line that starts a process in that sandbox.

    ``root`` is bound read-write at the same path inside; ``root/tmp`` and
    ``root/shm`` are the sandbox's ``/tmp`` and ``/dev/shm``. ``expose``: the
    folders its runs read that the sandbox would otherwise hide (under /tmp,
    or the kit's state folder: the file being run, its working folder, a kit
    in a temporary folder), bound read-only. ``wipe`` empties the box but the
    folders that stay (``keep``).
    """

    def __init__(self, parent: Path, engine_: Engine, keep: tuple[str, ...] = (), expose: tuple[Path, ...] = ()):
        self.engine = engine_
        self.root = Path(tempfile.mkdtemp(prefix=paths.owned("box-"), dir=parent)).resolve()
        self.keep = ("tmp", "shm", *keep)
        for name in self.keep:
            self.folder(name)
        self._own(self.root)
        hidden = [Path("/tmp"), *_hidden()]
        self.expose = sorted({Path(p).resolve() for p in expose
                              if any(_inside(Path(p), h) for h in hidden) and Path(p).is_dir()
                              and not _inside(Path(p), self.root)}, key=lambda p: len(p.parts))
        self.headers = compile_headers()  # torch.compile's precompiled header, lent read-only
        if engine_.owner is not None:  # nobody outside too: what it reads must be readable by nobody
            lend(self.expose)

    def _own(self, path: Path) -> None:
        """A folder the sandbox's user can write: its own when the sandbox runs as nobody."""
        if self.engine.owner is not None:
            os.chown(path, self.engine.owner, self.engine.owner)
        os.chmod(path, 0o755)

    def folder(self, name: str) -> Path:
        """A folder of the box (made if missing), writable inside the sandbox."""
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        self._own(path)
        return path

    def new_folder(self, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        self._own(path)
        return path

    def command(self, argv: list[str], cwd: Path) -> list[str]:
        bind = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for node in _device_nodes():
            bind += ["--dev-bind-try", node, node]
        # /tmp first: what the sandbox must read there (a kit in a temporary folder) is bound again,
        # read-only, inside the sandbox's own /tmp, its mount points made there (``wipe`` keeps them)
        bind += ["--bind", str(self.root / "tmp"), "/tmp", "--bind", str(self.root / "shm"), "/dev/shm"]
        for header in self.headers:
            bind += ["--ro-bind", str(header), f"{HEADERS_INSIDE}/{header.name}"]
        for path in self.expose:
            if not any(_inside(path, h) for h in _hidden()):
                bind += ["--ro-bind", str(path), str(path)]
        if shared() is not None:
            bind += ["--bind", str(shared()), str(shared())]
        for hidden in _hidden():  # then hidden, even where an exposed folder (the kit's) holds them
            if hidden.is_dir():
                bind += ["--tmpfs", str(hidden)]
        for path in self.expose:  # and what the sandbox reads in there (the check's copy of the file)
            if any(_inside(path, h) for h in _hidden()):
                bind += ["--ro-bind", str(path), str(path)]
        bind += ["--bind", str(self.root), str(self.root)]
        # The empty folders over what is hidden, and the sandbox's /dev, read-only: a run leaves nothing there
        # for the next run of the same sandbox (its own folder, /tmp and /dev/shm are emptied after each run)
        bind += ["--remount-ro", "/dev"]
        for hidden in _hidden():
            if hidden.is_dir():
                bind += ["--remount-ro", str(hidden)]
        # (no user namespace of its own inside: bubblewrap 0.8 and later)
        nested = ["--disable-userns"] if self.engine.at_least(0, 8) else []
        return [*self.engine.prefix(), self.engine.bwrap, *bind,
                "--unshare-all", "--unshare-user", *nested, "--cap-drop", "ALL",
                "--uid", str(NOBODY), "--gid", str(NOBODY),
                "--die-with-parent", "--new-session", "--chdir", str(cwd), "--", *argv]

    def wipe(self) -> None:
        """Empty the box: every run's folder, and everything in /tmp, /dev/shm and the server's home (the
        folders stay, and in /tmp the way to what is bound there)."""
        mounts = [_under("/tmp", p) for p in (*self.expose, self.root, *filter(None, [shared()]),
                                              *(Path(HEADERS_INSIDE) / h.name for h in self.headers))]
        for entry in list(self.root.iterdir()):
            if entry.name in self.keep and entry.is_dir() and not entry.is_symlink():
                _empty(entry, [m for m in mounts if m] if entry.name == "tmp" else None)
                continue
            _remove(entry)

    def remove(self) -> None:
        """Stop whatever still runs in the box, then remove its folder."""
        self.stop()
        _rmtree(self.root)

    def stop(self, wait_s: float = 5.0) -> None:
        """Kill the sandbox's first process (bubblewrap's, PID 1 of the box's PID namespace: every process
        of the box dies with it) where it outlived the process that started it. ``--die-with-parent``
        misses one case: bubblewrap's first process asks for it only once it runs, so a sandbox killed as
        it starts (a server stopped while importing, a check refused at once) goes on importing for as
        long as that takes. It is found by its command line, which binds this box's folder."""
        import signal
        import time

        bound = f"\0--bind\0{self.root}\0{self.root}\0".encode()
        deadline = time.monotonic() + wait_s
        while True:
            left = [pid for pid, line in processes.command_lines().items() if bound in line]
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            reap()
            if not left or time.monotonic() > deadline:
                return
            time.sleep(0.02)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _under(top: str, path: Path) -> tuple[str, ...]:
    """The parts of ``path`` below ``top`` (empty when it is not below it)."""
    try:
        return Path(path).relative_to(top).parts
    except ValueError:
        return ()


def _empty(folder: Path, keep: list[tuple[str, ...]] | None = None) -> None:
    """Remove everything in ``folder`` but the paths ``keep`` (the folders down to each mount point)."""
    keep = keep or []
    for entry in list(folder.iterdir()):
        below = [k[1:] for k in keep if k and k[0] == entry.name]
        if () in below:
            continue  # a mount point itself (a folder, or a file: unlinking it here would unmount it there)
        if below and entry.is_dir() and not entry.is_symlink():
            _empty(entry, below)  # a folder on the way to a mount point: emptied around it
            continue
        _remove(entry)


def _remove(entry: Path) -> None:
    try:
        if entry.is_dir() and not entry.is_symlink():
            _rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
    except OSError:
        pass


def _rmtree(folder: Path) -> None:
    """Remove ``folder`` whatever modes a run left in it: a folder it made unreadable or unwritable (``chmod
    000``) is given back its owner's rights on the way down. Root needs none of this; the kit run as an
    ordinary user, whose sandbox writes as that same user, does."""
    def writable(path: str) -> None:
        try:
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o700 != 0o700:
                os.chmod(path, stat.S_IMODE(st.st_mode) | 0o700)
        except OSError:
            pass

    writable(str(folder))
    for top, dirs, _files in os.walk(folder):
        for name in dirs:
            writable(os.path.join(top, name))
    shutil.rmtree(folder, ignore_errors=True)


def reap() -> None:
    """Collect the sandboxes' own processes that ended as this process's children: bubblewrap's first
    process outlives the one that started it, and is re-parented here (this process is a child
    subreaper, ``processes.become_subreaper``). Only zombies named bwrap: other children are waited for
    by whoever started them."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = text[text.find("(") + 1:text.rfind(")")], text.rsplit(")", 1)[1].split()
        if name == "bwrap" and rest[0] == "Z" and int(rest[1]) == me:
            try:
                os.waitpid(int(entry), os.WNOHANG)
            except ChildProcessError:
                pass


def namespace_of(pid: int) -> str | None:
    """The PID namespace a process is in (``pid:[inode]``), or None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def children(pid: int) -> list[int]:
    """The PIDs of a process's children, as this process sees them (from /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def host_pid(parent: int, ns_pid: int) -> int | None:
    """The PID, as this process sees it, of the child of ``parent`` whose PID is ``ns_pid`` in its sandbox."""
    return next((child for child in children(parent) if inner_pid(child) == ns_pid), None)


def inner_pid(pid: int) -> int | None:
    """The PID process ``pid`` has in its own (innermost) PID namespace: in its sandbox, or ``pid`` itself."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def members(namespace: str, leave_out: set[int]) -> list[int]:
    """Every live process in PID namespace ``namespace`` but ``leave_out`` (the sandbox's init, its server)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.isdigit() and int(entry) not in leave_out and namespace_of(int(entry)) == namespace:
            info = processes.stat(int(entry))
            if info is not None and info[4] not in ("Z", "X"):
                found.append(int(entry))
    return found


# What a sandboxed run's environment points at its own /tmp (the box's, emptied after every run).
RUN_ENV = {"HOME": "/tmp", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache", "MPLCONFIGDIR": "/tmp/.matplotlib",
           # torch.compile's caches too: a compiled fix compiles in every run, nothing kept from the one before
           "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor", "TRITON_CACHE_DIR": "/tmp/triton",
           # the user's name, as Inductor reads it (getpass): the sandbox's, whoever started the checker
           "LOGNAME": "nobody", "USER": "nobody"}

# Where Inductor looks for its precompiled header inside a sandbox ($TMPDIR/torchinductor_$LOGNAME): the one
# the kit built (compile_headers) is bound there, read-only, file by file; the folder stays the run's own.
HEADERS_INSIDE = "/tmp/torchinductor_nobody/precompiled_headers"


@functools.lru_cache(maxsize=1)
def headers_folder() -> Path:
    """Where the kit keeps torch.compile's precompiled header for this Python (``compile_headers``): in the
    virtual environment, which every sandbox reads (it runs this Python) and none can write; else in the
    kit's state folder. One sub-folder per interpreter and torch."""
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    key = hashlib.sha256(f"{sys.executable}\n{torch_version}".encode()).hexdigest()[:16]
    if sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK):
        return Path(sys.prefix) / "var" / "proflab" / "compile-headers" / key
    return paths.state_dir() / "compile-headers" / key


def compile_headers(folder: Path | None = None) -> list[Path]:
    """The precompiled header's files the kit has built (none yet: an empty list)."""
    folder = folder or headers_folder()
    try:
        return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".h", ".h.gch")))
    except OSError:
        return []


def in_use() -> Engine | None:
    """The engine every run is sandboxed by, or None where runs go unsandboxed (``engine().why`` says why)."""
    found = engine()
    return found if found.ok else None


class Tree(processes.Tree):
    """The processes of a run forked in a sandbox: every process of the sandbox but its first (bubblewrap's)
    and its server, wherever they moved (an orphan is re-parented inside the sandbox, not here)."""

    def __init__(self, root: int, namespace: str | None, leave_out: set[int | None]):
        super().__init__(root, set(), parent=None)
        self.namespace = namespace
        self.leave_out = {p for p in leave_out if p is not None}

    def scan(self) -> list[int]:
        found = members(self.namespace, self.leave_out) if self.namespace else []
        with self._lock:
            for pid in found:
                info = processes.stat(pid)
                if info is not None:
                    self.seen[pid] = info[3]
        return sorted(found, key=lambda pid: pid != self.root)
