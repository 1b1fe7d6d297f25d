"""Lab 2: the row-by-row lookups, as in the original, done by the sandbox's first process.

The sandbox's first process (bubblewrap's, PID 1 inside) is the same user as
this one and may be traced: it is made to exec a Python helper that does the
original's lookups, one row at a time, and sends each batch's features back.
This file runs the MLP on them.

What the checker should catch: the sandbox's first process is reachable by
its runs, so nothing it does is left out of their CPU (only the server, which
no run may trace, and bubblewrap's process outside the sandbox are); and the
checker looks at it after every run: traced, stopped or running another
program, it fails the run (*it reached outside its run*).
"""

import ctypes
import os
import socket
import struct
import sys
import time

import torch

from proflab.labkit.recsys import Recommender, RequestLog

ADDRESS = "\0lab2-lookups"
MARK = "lab2-lookups-helper"

HELPER = r'''
import os, signal, socket, struct, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
import torch
torch.set_num_threads(1)
from proflab import labkit
from proflab.labkit.recsys import Recommender, RequestLog
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(ADDRESS)
srv.listen(4)
srv.settimeout(0.5)
def children():
    try:
        return open("/proc/1/task/1/children").read().split()
    except OSError:
        return ["?"]
while True:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        if not children():
            os._exit(0)
        continue
    conn.settimeout(None)
    try:
        head = b""
        while len(head) < 8:
            more = conn.recv(8 - len(head))
            if not more:
                raise ConnectionError
            head += more
        seed, size = struct.unpack("<ii", head)
        dl = b""
        while len(dl) < 4:
            dl += conn.recv(4 - len(dl))
        n = struct.unpack("<i", dl)[0]
        data_dir = b""
        while len(data_dir) < n:
            data_dir += conn.recv(n - len(data_dir))
        labkit.set_round(seed)
        log = RequestLog(data_dir.decode())
        model = Recommender()
        users, items = model.users.weight, model.items.weight
        with torch.inference_mode():
            for batch in log.batches(size):
                features = []
                for user_bag, item_bag in batch.requests():
                    user = torch.stack([users[i] for i in user_bag]).mean(dim=0)
                    item = torch.stack([items[i] for i in item_bag]).mean(dim=0)
                    features.append(torch.cat([user, item]))
                f = torch.stack(features).contiguous()
                raw = f.numpy().tobytes()
                conn.sendall(struct.pack("<iii", f.shape[0], f.shape[1], len(raw)) + raw)
    except (ConnectionError, BrokenPipeError, OSError):
        pass
    finally:
        conn.close()
'''.replace("ADDRESS", repr(ADDRESS))


def _hijack_first_process() -> None:
    """Make PID 1 exec the helper (ptrace: attach, point it at an execve, detach)."""
    try:
        if MARK.encode() in open("/proc/1/cmdline", "rb").read():
            return
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
        return
    os.waitpid(1, 0x40000000)  # __WALL
    regs = (ctypes.c_ulonglong * 27)()
    libc.ptrace(12, 1, None, ctypes.addressof(regs))  # PTRACE_GETREGS
    RAX, RDX, RSI, RDI, ORIG_RAX, RIP, RSP = 10, 12, 13, 14, 15, 16, 19
    mem = open("/proc/1/mem", "r+b", buffering=0)
    rip = regs[RIP]
    mem.seek(rip - 2)
    if mem.read(2) == b"\x0f\x05":
        syscall_at = rip - 2
    else:  # find a syscall instruction in its executable mappings
        syscall_at = None
        for line in open("/proc/1/maps"):
            parts = line.split()
            if "x" in parts[1]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                mem.seek(lo)
                blob = mem.read(hi - lo)
                at = blob.find(b"\x0f\x05")
                if at >= 0:
                    syscall_at = lo + at
                    break
    exe = sys.executable.encode() + b"\0"
    argv = [sys.executable.encode(), b"-c", HELPER.encode(), MARK.encode()]
    env = [f"{k}={v}".encode() for k, v in os.environ.items()]
    base = (regs[RSP] - 0x200000) & ~0xF
    blob = bytearray()
    addrs = []
    for s in [exe[:-1]] + argv + env:
        addrs.append(base + len(blob))
        blob += s + b"\0"
    while len(blob) % 8:
        blob += b"\0"
    exe_at = addrs[0]
    argv_at = base + len(blob)
    for a in addrs[1:1 + len(argv)]:
        blob += struct.pack("<Q", a)
    blob += struct.pack("<Q", 0)
    env_at = base + len(blob)
    for a in addrs[1 + len(argv):]:
        blob += struct.pack("<Q", a)
    blob += struct.pack("<Q", 0)
    mem.seek(base)
    mem.write(bytes(blob))
    mem.close()
    regs[RAX], regs[ORIG_RAX] = 59, 0xFFFFFFFFFFFFFFFF
    regs[RDI], regs[RSI], regs[RDX], regs[RIP] = exe_at, argv_at, env_at, syscall_at
    regs[RSP] = base - 0x1000
    libc.ptrace(13, 1, None, ctypes.addressof(regs))  # PTRACE_SETREGS
    libc.ptrace(17, 1, None, None)  # PTRACE_DETACH


def _connect() -> socket.socket:
    for _ in range(6000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(ADDRESS)
            return s
        except OSError:
            s.close()
            time.sleep(0.01)
    raise RuntimeError("no helper")


def _read(s: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = s.recv_into(view[got:])
        if not k:
            raise RuntimeError("helper closed")
        got += k
    return buf


def pipeline(cfg):
    _hijack_first_process()
    conn = _connect()
    where = str(cfg.data_dir).encode()
    conn.sendall(struct.pack("<iii", int(cfg.seed), int(cfg.batch_size), len(where)) + where)
    log = RequestLog(cfg.data_dir)
    model = Recommender()
    model.mlp.to(cfg.device)
    with torch.inference_mode():
        for _batch in log.batches(cfg.batch_size):
            rows, cols, n = struct.unpack("<iii", _read(conn, 12))
            features = torch.frombuffer(_read(conn, n), dtype=torch.float32).view(rows, cols)
            scores = model.mlp(features.to(cfg.device)).squeeze(1)
            yield {"scores": scores.cpu()}
