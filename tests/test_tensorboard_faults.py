"""``proflab tensorboard`` when things go wrong: a real server, real signals, and nothing left running.

Each test starts ``python -m proflab tensorboard`` in a session of its own
(so everything it starts can be found), on a kit of its own with no runs. The
PyTorch Profiler plugin still starts helpers in TensorBoard's process group
(a spawned worker and multiprocessing's resource tracker) that outlive the
server when only it is killed: "nothing left" is checked by process group and
session read from ``/proc/PID/stat``, and by the kit root in each process's
environment (``PROFLAB_ROOT``), which catches any descendant wherever it went.

How TensorBoard is made to die during start-up, for real:

* killed (SIGKILL) once its helpers exist and before it answers HTTP; the
  helpers survive it unless the kit stops the group;
* its port is taken after the kit's free-port probe: TensorBoard is frozen
  (SIGSTOP) as soon as it appears, the test listens on its port, and thawed;
  TensorBoard then fails with its own "could not bind" error.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import as_in_a_terminal, make_kit

TB_LOG = ".proflab/tensorboard.log"


# --- /proc ------------------------------------------------------------------

def stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent, process group, session) from /proc/PID/stat; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def alive() -> dict[int, tuple[str, int, int, int]]:
    """Every process alive now (zombies are dead: left out)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = stat(int(entry))
            if info and info[0] not in ("Z", "X"):
                found[int(entry)] = info
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def in_group_or_session(leader: int) -> list[int]:
    return [pid for pid, info in alive().items() if leader in (info[2], info[3])]


def of_kit(root: Path) -> list[int]:
    """Processes whose environment names this kit's root: whatever proflab started, wherever it went."""
    marker = f"PROFLAB_ROOT={root}".encode()
    found = []
    for pid in alive():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in env:
            found.append(pid)
    return found


def describe(pids) -> str:
    return "; ".join(f"{pid} {stat(pid)} {cmdline(pid)[:120]}" for pid in pids) or "none"


def wait_for(condition, timeout: float, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


# --- the command ---------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.1:{port}/data/logdir", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


class Served:
    """``proflab tensorboard`` running in a session of its own, with its output read as it comes."""

    def __init__(self, kit, *args: str):
        self.kit = kit
        self.proc = subprocess.Popen([sys.executable, "-m", "proflab", "tensorboard", *args], cwd=kit.root,
                                     env={**kit.env(), "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=as_in_a_terminal)
        self.pid = self.proc.pid
        self.server: int | None = None  # TensorBoard's own process, once seen
        self._out = b""
        self.out = ""
        self.err = ""

    def find_server(self) -> int | None:
        if self.server is None:
            for pid, info in alive().items():
                if info[1] == self.pid and "tensorboard.main" in cmdline(pid):
                    self.server = pid
        return self.server

    def lines(self, n: int, timeout: float = 90) -> list[str]:
        """The first ``n`` lines of stdout (the banner, printed once the server answers)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while self._out.count(b"\n") < n and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._out += chunk
        got = self._out.decode(errors="replace").splitlines()
        assert len(got) >= n, f"proflab printed {got!r}; exit {self.proc.poll()}; stderr: {self.read_err()}"
        return got[:n]

    def up(self) -> list[str]:
        """Wait until it serves: the banner printed, the server found, answering HTTP."""
        banner = self.lines(3)
        assert "TensorBoard is serving" in banner[0], banner
        assert self.find_server(), "no TensorBoard process under proflab"
        return banner

    def read_err(self) -> str:
        if self.proc.poll() is not None and self.proc.stderr and not self.proc.stderr.closed:
            self.err += self.proc.stderr.read().decode(errors="replace")
            self.proc.stderr.close()
        return self.err

    def finish(self, timeout: float = 30) -> int:
        """Its exit code (it must exit within ``timeout``); stdout and stderr are read to the end."""
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            rest, err = self.proc.communicate(timeout=timeout)
            self._out += rest or b""
            self.err += (err or b"").decode(errors="replace")
        else:
            self.proc.wait(timeout=timeout)
            self.read_err()
        self.out = self._out.decode(errors="replace")
        return self.proc.returncode

    def nothing_left(self, timeout: float = 5) -> None:
        """No process of proflab's session, of TensorBoard's group or session, or of this kit is alive."""
        def left():
            pids = set(in_group_or_session(self.pid)) | set(of_kit(self.kit.root))
            if self.server:
                pids |= set(in_group_or_session(self.server))
            return sorted(pids)
        wait_for(lambda: not left(), timeout)
        assert not left(), f"still running: {describe(left())}"

    def kill_everything(self) -> None:
        """Cleanup however the test went: every process this test's proflab started is killed."""
        for _ in range(3):
            leaders = [self.pid] + ([self.server] if self.server else [])
            for leader in leaders:
                try:
                    os.killpg(leader, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            for pid in of_kit(self.kit.root):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if not of_kit(self.kit.root):
                break
            time.sleep(0.2)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture
def served(tmp_path):
    """Start ``proflab tensorboard ARGS`` on a kit of its own; everything it started is killed afterwards."""
    started: list[Served] = []
    kit = make_kit(tmp_path / "kit")

    def start(*args: str) -> Served:
        s = Served(kit, *args)
        started.append(s)
        return s

    start.kit = kit
    try:
        yield start
    finally:
        for s in started:
            s.kill_everything()


def helpers_of(server: int) -> list[int]:
    return [pid for pid in in_group_or_session(server) if pid != server]


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "Exception ignored" not in text, text


# --- the server dies ---------------------------------------------------------

def test_a_server_killed_from_outside_is_reported_and_its_helpers_stopped(served):
    port = free_port()
    s = served("--port", str(port))
    s.up()
    assert wait_for(lambda: any("multiprocessing" in cmdline(p) for p in helpers_of(s.server)), 30), \
        f"TensorBoard started no helpers to leave behind: {describe(in_group_or_session(s.server))}"
    os.kill(s.server, signal.SIGKILL)
    code = s.finish(timeout=30)
    s.nothing_left()
    no_traceback(s.err)
    assert code == 3, (s.out, s.err)
    stopped = [line for line in s.err.splitlines() if "TensorBoard stopped unexpectedly" in line]
    assert len(stopped) == 1, s.err
    assert "SIGKILL" in stopped[0] and TB_LOG in stopped[0], stopped
    assert "TensorBoard stopped." not in s.out


def test_a_server_killed_while_starting_is_stopped_with_its_helpers(served):
    """TensorBoard killed after its helpers started, before it answered: start() stops the whole group.

    Its resource tracker is frozen first, as a helper stuck and unable to exit by itself would be (left
    alone, it exits once the server is gone).
    """
    for attempt in range(3):
        s = served("--port", str(free_port()))
        assert wait_for(s.find_server, 60), f"no TensorBoard started; stderr: {s.read_err()}"
        tracker = wait_for(lambda: [p for p in helpers_of(s.server) if "resource_tracker" in cmdline(p)], 60,
                           every=0.01)
        assert tracker, f"no helpers: {describe(in_group_or_session(s.server))}"
        os.kill(tracker[0], signal.SIGSTOP)
        os.kill(s.server, signal.SIGKILL)
        code = s.finish(timeout=30)
        if "TensorBoard is serving" not in s.out:
            break
        s.nothing_left()  # it answered before the kill: that is the other test's case; try again
    else:
        pytest.skip("TensorBoard answered before its helpers could be seen, three times")
    s.nothing_left()
    no_traceback(s.err)
    assert code == 1, (s.out, s.err)
    assert "TensorBoard was killed by SIGKILL while starting" in s.err, s.err


def test_a_port_taken_after_the_probe_fails_start_up_with_tensorboards_reason(served):
    port = free_port()
    s = served("--port", str(port))
    assert wait_for(s.find_server, 60, every=0.005), f"no TensorBoard started; stderr: {s.read_err()}"
    os.kill(s.server, signal.SIGSTOP)  # frozen before it could bind: the kit's probe is behind it
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        os.kill(s.server, signal.SIGCONT)
        code = s.finish(timeout=60)
    s.nothing_left()
    no_traceback(s.err)
    assert code == 1, (s.out, s.err)
    assert "while starting" in s.err and f"could not bind to port {port}" in s.err, s.err
    assert f"--port {port + 1}" in s.err, s.err


# --- signals -----------------------------------------------------------------

def test_a_closed_terminal_stops_the_server_and_frees_its_port(served):
    """SIGHUP, with stdout already gone (printing fails): stopped as by Ctrl-C; the port can be served again."""
    port = free_port()
    s = served("--port", str(port))
    s.up()
    s.proc.stdout.close()  # the terminal is gone: "TensorBoard stopped." has nowhere to go
    s.proc.send_signal(signal.SIGHUP)
    code = s.finish(timeout=30)
    s.nothing_left()
    assert not answers(port)
    no_traceback(s.err)
    assert code == 0, s.err

    again = served("--port", str(port))
    again.up()
    assert answers(port)
    again.proc.send_signal(signal.SIGTERM)
    assert again.finish(timeout=30) == 0, again.err
    assert "TensorBoard stopped." in again.out
    again.nothing_left()


def test_two_quick_ctrl_c_leave_nothing_running(served):
    """The second Ctrl-C arrives while the kit stops the group; a helper that ignores SIGINT and SIGTERM
    (multiprocessing's resource tracker does; here it is also frozen, as if stuck) must still be killed."""
    s = served("--port", str(free_port()))
    s.up()
    tracker = wait_for(lambda: [p for p in helpers_of(s.server) if "resource_tracker" in cmdline(p)], 30)
    assert tracker, f"no resource tracker: {describe(in_group_or_session(s.server))}"
    os.kill(tracker[0], signal.SIGSTOP)
    s.proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # the second while the first is stopping the server (it waits for the frozen helper)
    s.proc.send_signal(signal.SIGINT)
    code = s.finish(timeout=60)
    s.nothing_left()
    no_traceback(s.err)
    assert code == 0, (code, s.err)
    assert "TensorBoard stopped." in s.out


# --- odd state ---------------------------------------------------------------

def test_odd_progress_and_runs_do_not_stop_the_server(served):
    """A last run without its lab, and a trace that is a broken link: a generic line, the server serves."""
    kit = served.kit
    (kit.root / ".proflab").mkdir()
    (kit.root / ".proflab" / "progress.json").write_text(json.dumps({"labs": {}, "last_run": {"run": "original"}}))
    broken = kit.root / "runs" / "01-dataloader" / "original"
    broken.mkdir(parents=True)
    (broken / "gone.pt.trace.json").symlink_to(kit.root / "no-such-trace")
    port = free_port()
    s = served("--port", str(port))
    banner = s.up()
    assert answers(port)
    s.proc.send_signal(signal.SIGTERM)
    code = s.finish(timeout=30)
    no_traceback(s.err)
    assert code == 0, s.err
    assert "No runs yet" in s.out, banner
    s.nothing_left()


@pytest.mark.parametrize("progress_file", [
    {"labs": {}, "last_run": {"run": "original"}},  # no lab
    {"labs": {}, "last_run": "01-dataloader/original"},  # not a mapping
    {"labs": {}, "last_run": {"lab": None, "run": 3}},
    ["not", "a", "mapping"],
], ids=["no-lab", "a-string", "not-strings", "a-list"])
def test_what_to_open_degrades_on_odd_progress(tmp_path, monkeypatch, progress_file):
    from proflab.commands import learning as cli

    monkeypatch.setenv("PROFLAB_ROOT", str(tmp_path))
    (tmp_path / ".proflab").mkdir()
    (tmp_path / ".proflab" / "progress.json").write_text(json.dumps(progress_file))
    run = tmp_path / "runs" / "02-embeddings" / "original"
    run.mkdir(parents=True)
    (run / "x.pt.trace.json").write_text("{}")
    lines = cli._what_to_open(tmp_path / "runs")
    assert lines and "Profile" in lines[0] and "02-embeddings/original" in lines[0], lines


def test_what_to_open_on_a_folder_it_cannot_read(tmp_path, monkeypatch):
    from proflab.commands import learning as cli

    monkeypatch.setenv("PROFLAB_ROOT", str(tmp_path))
    runs = tmp_path / "runs"
    (runs / "01-dataloader" / "original").mkdir(parents=True)
    runs.chmod(0)
    try:
        if os.access(runs, os.R_OK):
            pytest.skip("running as root: permissions do not stop reading")
        lines = cli._what_to_open(runs)
    finally:
        runs.chmod(0o755)
    assert "Profile" in lines[0] and "newest run" in lines[0], lines


# --- bad options ---------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (["--logdir", "labs/01_dataloader/lab.toml"], "is a file, not a folder"),
    (["--logdir", "labs/01_dataloader/lab.toml/runs"], "is a file, not a folder"),
    (["--logdir", "no/such/folder"], "no such folder"),
    (["--port", "99999"], "port must be from 1 to 65535"),
    (["--port", "0"], "port must be from 1 to 65535"),
    (["--port", "-1"], "port must be from 1 to 65535"),
    (["--port", "http"], "port must be a whole number from 1 to 65535"),
    (["--host", "no-such-host.invalid"], "no such host"),
    (["--host", "192.0.2.1"], "is not an address of this machine"),
], ids=["logdir-file", "logdir-under-a-file", "logdir-missing", "port-99999", "port-0", "port-minus-1", "port-text", "unknown-host",
        "not-this-machine"])
def test_bad_options_are_usage_errors_and_start_nothing(served, args, says):
    s = served(*args)
    code = s.finish(timeout=60)
    no_traceback(s.err)
    assert code == 2, (s.out, s.err)
    assert says in " ".join(s.err.split()), s.err
    assert "already in use" not in s.err
    assert not (served.kit.root / TB_LOG).exists(), "a server was started"
    s.nothing_left(timeout=1)


def test_a_port_really_in_use_still_says_so(served):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = served("--port", str(port))
        code = s.finish(timeout=60)
    no_traceback(s.err)
    assert code == 1, s.err
    assert "already in use" in s.err and f"--port {port + 1}" in s.err, s.err
    assert not (served.kit.root / TB_LOG).exists()


# --- bad traces: every view answers with a message, and one bad file hides nothing -------------------------

PROFILE = '''
import sys
import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
             on_trace_ready=tensorboard_trace_handler(sys.argv[1]), profile_memory=True) as prof:
    for _ in range(3):
        x = torch.randn(256, 256)
        (x @ x).relu().sum()
        prof.step()
'''


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.1:{port}{path}", timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_bad_traces_get_a_message_from_every_view_and_hide_no_other_run(served):
    runs = served.kit.root / "runs" / "90-bad"
    good = runs / "good"
    made = subprocess.run([sys.executable, "-c", PROFILE, str(good)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    trace = next(good.glob("*.pt.trace.json"))
    text = trace.read_text()
    bad = {"truncated": text[: len(text) // 2], "empty": "", "notjson": "profiler output\n",
           "nosteps": json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 2}]}),
           "list": json.dumps([{"ph": "X", "name": "ProfilerStep#1", "ts": 1, "dur": 2}])}
    for name, body in bad.items():
        (runs / name).mkdir()
        (runs / name / f"host.{name}.pt.trace.json").write_text(body)
    (runs / "gz").mkdir()
    (runs / "gz" / "host.gz.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00not gzip at all")
    (runs / "folder" / "host.folder.pt.trace.json").mkdir(parents=True)
    (runs / "dangling").mkdir()
    (runs / "dangling" / "host.gone.pt.trace.json").symlink_to(runs / "no-such-trace")
    port = free_port()
    s = served("--port", str(port))
    s.up()
    try:
        listing = json.loads(get(port, "/data/plugins_listing")[1])
        assert listing["proflab_profile"]["enabled"] and listing["proflab_timeline"]["enabled"], listing
        status, body = get(port, "/data/plugin/proflab_profile/runs")
        assert status == 200, body
        listed = json.loads(body)
        assert "90-bad/good" in listed and "90-bad/folder" not in listed and "90-bad/dangling" not in listed
        assert get(port, "/data/plugin/proflab_profile/overview?run=90-bad/good")[0] == 200
        assert get(port, "/data/plugin/proflab_profile/memory.svg?run=90-bad/good")[0] == 200
        for name in [*bad, "gz"]:
            run = f"90-bad/{name}"
            for path in (f"/data/plugin/proflab_profile/overview?run={run}",
                         f"/data/plugin/proflab_profile/operators?run={run}",
                         f"/data/plugin/proflab_profile/memory?run={run}",
                         f"/data/plugin/proflab_profile/memory.svg?run={run}",
                         f"/data/plugin/proflab_timeline/trace?run={run}"):
                status, body = get(port, path)
                assert status != 500 and b"Traceback" not in body, (path, status, body[:300])
                if status != 200:
                    assert len(body) > 10, (path, body)  # a message, not an empty answer
        status, body = get(port, "/data/plugin/proflab_timeline/trace?run=90-bad/gz")
        assert status == 422 and b"cannot be read" in body, body
    finally:
        s.proc.send_signal(signal.SIGTERM)
        s.finish(timeout=30)
    no_traceback(s.err)
    s.nothing_left()


# --- a large trace: read once, a window of its steps, every view within its budget ------------------------

FIRST_VIEW_BUDGET_S = 60  # reading and cutting a 200 MB trace once: 9.7 s for 254 MB on the 2-core machine
LATER_VIEW_BUDGET_S = 10


def write_large_trace(path: Path, steps: int, ops_per_step: int) -> int:
    """A trace shaped as torch.profiler writes it (a ProfilerStep# per step, operators inside it, each with
    its args), written line by line: its size in bytes."""
    with open(path, "w") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [\n')
        f.write('{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}')
        ts = 1_000_000.0
        for step in range(steps):
            f.write(f',\n{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 1, '
                    f'"tid": 1, "ts": {ts:.3f}, "dur": {ops_per_step * 10.0:.3f}, "args": {{"External id": {step}}}}}')
            for op in range(ops_per_step):
                name = ("aten::mm", "aten::add", "aten::relu", "aten::empty")[op % 4]
                f.write(f',\n{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, '
                        f'"ts": {ts + op * 10 + 1:.3f}, "dur": 8.000, "args": {{"External id": {step * 1000 + op}, '
                        f'"Record function id": 0, "Input Dims": [[256, 256], [256, 256]], '
                        f'"Input type": ["float", "float"], "Ev Idx": {op}}}}}')
            ts += ops_per_step * 10.0 + 50
        f.write("\n]}\n")
    return path.stat().st_size


def test_a_200_mb_trace_answers_every_view_within_its_budget(served):
    run = served.kit.root / "runs" / "99-large" / "mine"
    run.mkdir(parents=True)
    size = write_large_trace(run / "host.large.pt.trace.json", steps=4_800, ops_per_step=220)
    assert size > 200 * 2**20, size
    port = free_port()
    s = served("--port", str(port))
    s.up()
    try:
        status, body = get(port, "/data/plugin/proflab_profile/about?run=99-large/mine")
        about = json.loads(body)
        assert status == 200 and about["large"] and about["seconds"] >= 1, about
        timings = {}
        for name, path in (("overview", "/data/plugin/proflab_profile/overview?run=99-large/mine"),
                           ("operators", "/data/plugin/proflab_profile/operators?run=99-large/mine"),
                           ("memory", "/data/plugin/proflab_profile/memory?run=99-large/mine"),
                           ("timeline", "/data/plugin/proflab_timeline/trace?run=99-large/mine")):
            started = time.monotonic()
            status, body = get(port, path)
            timings[name] = time.monotonic() - started
            assert status in (200, 422), (name, status, body[:300])  # memory: 422, recorded without profile_memory
            if name == "overview":
                o = json.loads(body)
                assert o["window"] == {"shown": 10, "of": 4800} and o["steps"] == 10, o["window"]
            if name == "timeline":
                shown = json.loads(body)
                assert sum(1 for e in shown["traceEvents"] if e["name"].startswith("ProfilerStep#")) == 10
        print(f"a {size / 2**20:.0f} MB trace: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
        assert timings["overview"] < FIRST_VIEW_BUDGET_S, timings
        assert all(t < LATER_VIEW_BUDGET_S for k, t in timings.items() if k != "overview"), timings
        status, body = get(port, "/data/plugin/proflab_profile/about?run=99-large/mine")
        assert json.loads(body)["seconds"] == 0  # read already: no wait to announce
    finally:
        s.proc.send_signal(signal.SIGTERM)
        s.finish(timeout=60)
    no_traceback(s.err)
    s.nothing_left()
