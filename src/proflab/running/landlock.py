"""Each rank's files its own: Landlock, which a rank of a torchrun job confines itself with before the lab
file runs (``torchrun.confine_rank``).


The ranks of a job run in one sandbox, as one user: what one writes in /tmp, /dev/shm or the run's folder,
the other could read, and gradients averaged through such a file after every micro-batch are the
original's traffic, sent where no trace sees it. Before the lab file runs, each rank confines itself with
Landlock (Linux 5.13 and later, open to an unprivileged process): it keeps reading every read-only part of
the file system, and writes and reads only a folder of its own (``own_folder``), with its TMPDIR and HOME
there; the sandbox's writable folders (/tmp, /dev/shm, the run's) are closed to it but for what the runner
hands over (its result and its trace, moved out of its folder, never read back). Two ranks so confined are
two Landlock domains: neither can trace the other (``/proc/PID/mem``), and from ABI 6 neither can reach
the other's abstract Unix sockets or signal it. A Unix socket reached by its path, and the IPC objects of
the sandbox, are refused by a seccomp filter (``side_channels``). What stays shared is the network of the
sandbox, the collectives' (and their store's) own, whose every byte the kernel counts (``readings.network_bytes``).
"""

from __future__ import annotations

import os
from pathlib import Path

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_VERSION = 1  # landlock_create_ruleset's flag: ask for the ABI version
_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# Access rights by ABI version (include/uapi/linux/landlock.h).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_V1 = (1 << 13) - 1  # execute .. make_sym
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
# Writable mounts a rank keeps using as a process must: the kernel's views and its terminals.
_KEPT_WRITABLE = ("/proc", "/dev/pts")


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers (0: none: not Linux, too old, or switched off)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _mounts() -> dict[str, bool]:
    """Every mount point this process sees -> whether it is writable (the last mount on a path wins)."""
    found: dict[str, bool] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) > 5:
            point = fields[4].replace("\\040", " ")
            found[point] = "rw" in fields[5].split(",")
    return found


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def readable_roots(mounts: dict[str, bool]) -> tuple[list[str], list[str]]:
    """Where a confined rank may read: every part of the file system but the writable folders the ranks
    share (``closed``), as (folders, files) to grant; a read-only mount inside a shared folder (the kit in
    a temporary folder, bound read-only in the sandbox's /tmp) is read too, but for any writable folder
    inside it. Device nodes bound writable are granted apart (``device_files``)."""
    closed = sorted(p for p, rw in mounts.items()
                    if rw and os.path.isdir(p) and not any(_inside(p, k) for k in _KEPT_WRITABLE)
                    and not _is_device(p))
    folders: list[str] = []
    files: list[str] = []

    def walk(path: str, shut: list[str]) -> None:
        if any(_inside(path, c) for c in shut):
            return
        if not any(_inside(c, path) for c in shut):
            (folders if os.path.isdir(path) and not os.path.islink(path) else files).append(path)
            return
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            walk(os.path.join(path, name), shut)

    roots = ["/"] + sorted(p for p, rw in mounts.items()
                           if not rw and os.path.isdir(p) and any(_inside(p, c) and p != c for c in closed))
    for root in roots:
        walk(root, [c for c in closed if _inside(c, root) and c != root])
    return folders, files


def _is_device(path: str) -> bool:
    """A device node, or a folder of them (a GPU's /dev/nvidia-caps, /dev/dri), bound into /dev; not /dev/shm."""
    return path.startswith("/dev/") and not _inside(path, "/dev/shm")


def device_files(mounts: dict[str, bool]) -> list[str]:
    """The device nodes (and folders of them) bound writable (/dev/null, a GPU's): a rank keeps using them."""
    return sorted(p for p, rw in mounts.items() if rw and _is_device(p))


def confine(own: Path, handover: tuple[str, ...] = ()) -> int:
    """Confine this process (a rank, before the lab file runs) to its own folder ``own`` for everything it
    writes, and to the read-only rest of the file system for what it reads; into the folders ``handover``
    it may only move files of its own (its result, its trace), never read them. Returns the Landlock ABI
    used, or 0 where the kernel offers none (the process is then left as it was)."""
    import ctypes

    abi = landlock_abi()
    if abi < 1:
        return 0
    handled = _FS_V1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    scoped = (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    libc = ctypes.CDLL(None, use_errno=True)
    attr = RulesetAttr(handled, 0, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0

    def allow(path: str, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                access &= _FILE_RIGHTS
            rule = PathBeneath(access & handled, fd)
            libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), ctypes.byref(rule),
                         ctypes.c_uint32(0))
        finally:
            os.close(fd)

    try:
        mounts = _mounts()
        folders, files = readable_roots(mounts)
        for path in folders + files:
            allow(path, _READ)
        for path in device_files(mounts) + [p for p in _KEPT_WRITABLE if os.path.isdir(p)]:
            allow(path, _READ | _WRITE_FILE | _TRUNCATE | _IOCTL_DEV)
        allow(str(own), handled)
        # What the runner hands over: its result and its trace, moved (renamed) into the run's folders.
        for path in handover:
            allow(path, (1 << 8) | _REFER)  # make_reg, refer: a file moved in, never read back
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi
