"""What the ranks of a job may share, enforced by the kernel: a rank's seccomp filter
(``running.side_channels``), and the bytes of the sandbox's own network, counted from outside
(``running.readings.network_bytes``) and counted as traffic (``grading.checks.job_network``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from proflab.grading.checks import job_network
from proflab.measuring.trace import Measure
from proflab.running import execute, readings, sandbox, side_channels

pytestmark = pytest.mark.quick

# Run in a fresh process: a filter, once installed, stays for the process's life.
PROBE = """
import ctypes, os, socket
from proflab.running import side_channels
print("installed", side_channels.install())
def tried(what, call):
    try:
        call()
        print(what, "allowed")
    except OSError as e:
        print(what, "refused", e.errno)
tried("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
tried("unix-dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
tried("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 2))  # NETLINK_USERSOCK
tried("netlink-route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())  # getifaddrs
tried("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM))
tried("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close())
tried("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
tried("socketpair", lambda: [s.close() for s in socket.socketpair()])
libc = ctypes.CDLL(None, use_errno=True)
for name, call in (("shmget", lambda: libc.shmget(0x1234, 4096, 0o1600)),
                   ("semget", lambda: libc.semget(0x1234, 1, 0o1600)),
                   ("msgget", lambda: libc.msgget(0x1234, 0o1600))):
    print(name, "refused" if call() < 0 and ctypes.get_errno() == 1 else "allowed")
r, w = os.pipe()
print("pipe allowed")
"""


def test_a_ranks_filter_refuses_sockets_but_the_networks_and_shared_ipc_objects_and_keeps_the_rest():
    if not side_channels.program():
        pytest.skip("the kit has no seccomp filter for this machine's architecture")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    said = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert int(said["installed"]) > 0, out.stdout + out.stderr
    assert said["unix"] == "refused 1" and said["unix-dgram"] == "refused 1", out.stdout
    assert said["netlink"] == "refused 1" and said["packet"] == "refused 1", out.stdout
    assert said["inet"] == said["inet6"] == said["socketpair"] == said["netlink-route"] == "allowed", out.stdout
    assert said["shmget"] == said["semget"] == said["msgget"] == "refused", out.stdout
    assert said["pipe"] == "allowed", out.stdout


def test_the_filter_refuses_another_architectures_calls_and_x32s():
    """Its first instructions: a call made under another architecture's numbers (a 32-bit int 0x80), or
    x86-64's x32 numbers (bit 30), would reach the same calls unfiltered."""
    prog = side_channels.program("x86_64")
    assert prog[1][3] == 0xC000003E and prog[2] == (0x06, 0, 0, side_channels._ERRNO)
    x32 = [ins for ins in prog if ins[0] == 0x35]
    assert x32 and x32[0][3] == 0x40000000
    assert side_channels.program("riscv64") == []
    assert side_channels.program("aarch64")[1][3] == 0xC00000B7


def test_the_bytes_a_sandboxed_process_sends_are_read_from_outside():
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("no bubblewrap here: a run shares the machine's network, and none of it is counted")
    # 2 MB sent over the sandbox's own loopback, then held there until read
    send = ("import socket, time\n"
            "s = socket.create_server(('127.0.0.1', 0)); c = socket.create_connection(s.getsockname())\n"
            "a, _ = s.accept(); c.sendall(b'x' * 2_000_000); got = 0\n"
            "while got < 2_000_000: got += len(a.recv(1 << 20))\n"
            "print('sent', flush=True); time.sleep(30)\n")
    proc = subprocess.Popen([bwrap, "--dev-bind", "/", "/", "--unshare-net", "--unshare-user", "--die-with-parent",
                             sys.executable, "-c", send], stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "sent":
            pytest.skip("bubblewrap cannot make a network of its own here")
        inside = proc.pid
        deadline = time.monotonic() + 5
        while readings._name(inside) == "bwrap" and time.monotonic() < deadline:  # bwrap, then the process
            children = sandbox.children(inside)
            inside = children[0] if children else inside
        sent = readings.network_bytes(inside)
    finally:
        proc.kill()
        proc.wait()
    assert sent is not None and 2_000_000 <= sent < 2_500_000  # the bytes and their TCP headers
    assert readings.network_bytes(__import__("os").getpid()) is None  # this process's network is the machine's


def _run(sent_per_step: float | None) -> execute.Outcome:
    run = execute.Outcome(version="v", file=None, status="ok")
    run.result = {} if sent_per_step is None else {job_network.KEY: sent_per_step}
    return run


def _traffic(mb: float) -> Measure:
    return Measure(value=mb, unit="MB", summary=f"{mb} MB per step", details={"steps": 4.0})


@pytest.mark.parametrize("trace_mb, network_mb, counted_mb", [
    (7.5, 15.1, 7.5),  # the reference fix: its network carries what its collectives explain
    (0.0, 120.5, 60.1),  # a socket of the ranks' own: every byte counted as traffic
    (0.0, 0.2, 0.0),  # the store's own messages (a barrier, a heartbeat): within the slack
    (30.0, 120.0, 59.9),  # half sent by collectives, as much again outside them
])
def test_what_the_collectives_do_not_explain_counts_as_traffic(trace_mb, network_mb, counted_mb):
    original, learner = _run(120.4e6), _run(network_mb * 1e6)
    got = job_network.counted("allreduce_traffic", original, learner, _traffic(60.06), _traffic(trace_mb))
    assert got.value == pytest.approx(counted_mb, abs=0.1)
    assert got.details["network_mb_per_step"] == pytest.approx(network_mb)
    assert ("went outside the collectives" in got.summary) == (counted_mb > trace_mb)


def test_a_network_not_counted_is_said_and_changes_nothing():
    got = job_network.counted("allreduce_traffic", _run(None), _run(None), _traffic(60.06), _traffic(0.0))
    assert got.value == 0.0 and got.details["network"] == "not counted"
    assert "was not counted" in got.summary
    other = job_network.counted("host_syncs", _run(1e6), _run(9e6), _traffic(1.0), _traffic(0.5))
    assert other.value == 0.5 and "network" not in other.details


def test_the_doctor_says_what_keeps_the_ranks_apart():
    import json

    from proflab.running import landlock

    said = subprocess.run([sys.executable, "-m", "proflab", "doctor", "--json"], capture_output=True, text=True,
                          timeout=120)
    ranks = json.loads(said.stdout)["ranks"]
    assert ("Landlock ABI" in ranks) == (landlock.landlock_abi() > 0), ranks
    assert ("refused (seccomp)" in ranks) == bool(side_channels.program()), ranks


def test_a_jobs_time_after_its_window_and_its_network_are_its_busiest_ranks():
    """Each rank's after-window time runs to the job's end; the job keeps the most any rank shows, as it
    keeps its slowest rank's timings, and the bytes its one network carried a step."""
    from proflab.running import torchrun

    ranks = [{"results": [], "span_s": 2.0, "after_s": 0.3, "trace_gap_s": 0.1, "net_bytes_per_step": 15e6},
             {"results": [], "span_s": 1.9, "after_s": 1.7, "trace_gap_s": 0.2, "net_bytes_per_step": 15.2e6}]
    merged = torchrun.merge(ranks)
    assert merged["span_s"] == 2.0  # the slowest rank's timings
    assert merged["after_s"] == 1.7 and merged["trace_gap_s"] == 0.2 and merged["net_bytes_per_step"] == 15.2e6
    assert "net_bytes_per_step" not in torchrun.merge([{"results": [], "span_s": 1.0}] * 2)
