"""The ranks of a job share no channel but the network its collectives use.

Landlock (``landlock.confine``) keeps each rank's files its own; what it
does not mediate is reached by name without a file's access rights: a
Unix socket bound in a rank's folder (``connect`` to its path), and the
System V and POSIX message queues, semaphores and shared memory of the
sandbox's IPC namespace, which both ranks share (``shmget`` of a key they
agree on). Gradients averaged through any of them are the original's
traffic, sent where neither the trace nor the kernel's count of the
network sees it.

So before the lab file runs, each rank installs a seccomp filter (open to
an unprivileged process once ``no_new_privs`` is set, as Landlock sets it)
that refuses, with EPERM:

* ``socket()`` of any family but the network's (``AF_INET``, ``AF_INET6``)
  and netlink to the kernel's routing tables (``NETLINK_ROUTE``, where the
  collectives' library looks up the interfaces; a process without
  ``CAP_NET_ADMIN`` may send there only to the kernel): a Unix socket to
  listen on or to connect with, a netlink socket of another protocol
  (``NETLINK_USERSOCK`` carries messages between processes, open to any
  user), a packet, VSOCK or TIPC socket. ``socketpair``, which connects a process with
  itself, stays open: a DataLoader's workers use it;
* ``shmget``, ``semget``, ``msgget`` and ``mq_open``: opening or making a
  System V segment, semaphore set or queue, or a POSIX queue, by key or by
  name;
* ``io_uring_setup``: a ring's operations (a socket among them) are made
  without the system calls this filter sees.

Every other way between the ranks goes over the sandbox's network (TCP or
UDP on its loopback, the collectives' store included), whose bytes the
checker reads from the kernel (``readings.network_bytes``) and counts beside
the collectives' (``grading.checks.job_network``).

The filter is a classic BPF program, written here for the two architectures
the kit runs on (x86-64, aarch64); elsewhere no filter is installed and
``install`` says so (0). On x86-64 the x32 system calls (numbers with bit
30 set) and any other architecture's (a 32-bit ``int 0x80``) are refused
too: they would reach the same calls under other numbers.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR, _ARCH, _ARG0 = 0, 4, 16  # args[0]'s low 32 bits (little-endian)
_AF_INET, _AF_INET6, _AF_NETLINK = 2, 10, 16  # the socket families a rank may open
_ARG2 = 32  # args[2]'s low 32 bits: socket()'s protocol
_NETLINK_ROUTE = 0  # the kernel's routing tables: a user process may send there, never to another process
_X32_BIT = 0x40000000
# (AUDIT_ARCH_*, the numbers of the system calls the filter reads)
_ARCHES = {
    "x86_64": (0xC000003E, {"socket": 41, "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240,
                            "io_uring_setup": 425}),
    "aarch64": (0xC00000B7, {"socket": 198, "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180,
                             "io_uring_setup": 425}),
}
REFUSED = ("shmget", "semget", "msgget", "mq_open", "io_uring_setup")

# BPF opcodes (linux/filter.h, linux/seccomp.h)
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K = 0x15, 0x35
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000 | errno.EPERM
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


def program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jt, jf, k) for ``machine`` (this one's by default); [] where the
    kit has none for it."""
    machine = machine or platform.machine()
    arch, numbers = _ARCHES.get(machine, (None, None))
    if arch is None:
        return []
    prog: list[tuple[int, int, int, int]] = []
    deny: list[int] = []  # the indices of jumps to the refusal, patched once its place is known

    def jump_to_deny(code: int, k: int) -> None:
        deny.append(len(prog))
        prog.append((code, 0, 0, k))  # jt patched below; jf 0: go on

    prog.append((_LD_W_ABS, 0, 0, _ARCH))
    prog.append((_JEQ_K, 1, 0, arch))  # another architecture's calls: refused
    prog.append((_RET_K, 0, 0, _ERRNO))
    prog.append((_LD_W_ABS, 0, 0, _NR))
    if machine == "x86_64":
        jump_to_deny(_JGE_K, _X32_BIT)
    for name in REFUSED:
        jump_to_deny(_JEQ_K, numbers[name])
    prog.append((_JEQ_K, 1, 0, numbers["socket"]))
    prog.append((_RET_K, 0, 0, _ALLOW))
    # socket(): the network's own families, and netlink to the kernel's routing tables (where the collectives
    # look up the machine's interfaces, getifaddrs); any other family or netlink protocol is refused, right
    # after these eight instructions
    prog.append((_LD_W_ABS, 0, 0, _ARG0))
    prog.append((_JEQ_K, 2, 0, _AF_INET))  # -> allow
    prog.append((_JEQ_K, 1, 0, _AF_INET6))  # -> allow
    prog.append((_JEQ_K, 1, 4, _AF_NETLINK))  # -> its protocol; else -> refused
    prog.append((_RET_K, 0, 0, _ALLOW))
    prog.append((_LD_W_ABS, 0, 0, _ARG2))
    prog.append((_JEQ_K, 0, 1, _NETLINK_ROUTE))  # -> allow; else -> refused
    prog.append((_RET_K, 0, 0, _ALLOW))
    refusal = len(prog)  # where every refusal above jumps
    prog.append((_RET_K, 0, 0, _ERRNO))
    for at in deny:
        code, _, jf, k = prog[at]
        prog[at] = (code, refusal - at - 1, jf, k)
    return prog


def install() -> int:
    """Install the filter in this process (a rank, before the lab file runs): the number of instructions
    installed, 0 where it could not be (no filter for this machine, no seccomp in this kernel)."""
    import ctypes

    prog = program()
    if not prog:
        return 0
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in prog)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return 0
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return 0
    return len(prog)


def describe() -> str:
    """What keeps a torchrun job's ranks apart on this machine, in a line (``proflab doctor``)."""
    from . import landlock

    abi = landlock.landlock_abi()
    files = f"each rank's files its own (Landlock ABI {abi})" if abi else \
        "the ranks' files NOT kept apart (this kernel offers no Landlock: Linux 5.13 or later)"
    ipc = ("Unix sockets and shared IPC objects refused (seccomp)" if program() else
           f"Unix sockets and shared IPC objects NOT refused (no filter for {platform.machine()})")
    return f"{files}; {ipc}; the network's bytes counted where the run has a sandbox"
