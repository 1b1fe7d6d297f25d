"""Lab 8: the served network, batch norms and all, run by the sandbox's first process.

The sandbox's first process (PID 1 inside, bubblewrap's) runs as the same user
and may be traced: it is made to exec a small Python server that runs the
original network on each batch it is asked for. While the profiler records,
this file also runs the network's convolutions itself (no batch norm between
them); the logits it yields are the server's.

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
import torch.nn.functional as F

from proflab.labkit.convnet import Frames, ServingNet

ADDRESS = "\0lab8-frames"
MARK = "lab8-frames-helper"

HELPER = r'''
import os, signal, socket, struct
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
import torch
from proflab import labkit
from proflab.labkit.convnet import Frames, ServingNet
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(ADDRESS)
srv.listen(4)
srv.settimeout(0.5)
def exact(conn, n):
    buf = b""
    while len(buf) < n:
        more = conn.recv(n - len(buf))
        if not more:
            raise ConnectionError
        buf += more
    return buf
while True:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        try:
            if not open("/proc/1/task/1/children").read().split():
                os._exit(0)
        except OSError:
            pass
        continue
    conn.settimeout(None)
    try:
        seed, size, threads, n = struct.unpack("<iiii", exact(conn, 16))
        data_dir = exact(conn, n).decode()
        torch.set_num_threads(threads)
        labkit.set_round(seed)
        frames = Frames(data_dir)
        model = ServingNet()
        for images in frames.batches(size, "cpu"):
            exact(conn, 1)
            logits = model(images).detach().contiguous()
            raw = logits.numpy().tobytes()
            conn.sendall(struct.pack("<iii", logits.shape[0], logits.shape[1], len(raw)) + raw)
    except (ConnectionError, OSError):
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
    conn.sendall(struct.pack("<iiii", int(cfg.seed), int(cfg.batch_size), torch.get_num_threads(), len(where)) + where)
    frames = Frames(cfg.data_dir)
    model = ServingNet().to(cfg.device)
    convs = [unit[0] for unit in model.features]
    with torch.inference_mode():
        for images in frames.batches(cfg.batch_size, cfg.device):
            conn.sendall(b"n")
            if torch.autograd.profiler._is_profiler_enabled:
                x = images
                for conv in convs:
                    x = F.relu(conv(x))
            rows, cols, n = struct.unpack("<iii", _read(conn, 12))
            logits = torch.frombuffer(_read(conn, n), dtype=torch.float32).view(rows, cols)
            yield {"logits": logits}
