"""Runs forked from the server that imported torch once: each one still a fresh process for its lab file.

A probe file reports, from inside its run, what a fresh ``python -m
proflab.running.runner`` would have: a session and group of its own, the run's folder
and environment, nothing open but its streams and the mark pipe, and nothing
left behind by the run before it. Then the server is attacked from a run
(killed, stopped) and the check goes on with a new one; a server that cannot
start leaves runs to fresh processes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from proflab.grading import checks
from proflab.running import execute, forkserver, processes, sandbox
from proflab import labs

CALIBRATION = Path(__file__).resolve().parent / "calibration"

PROBE = '''
import json, os, sys
import torch

def pipeline(cfg):
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed since
            pass
    facts = {"pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0), "ppid": os.getppid(),
             "cwd": os.getcwd(), "argv0": sys.argv[0], "path0": sys.path[0], "file": __file__,
             "env": os.environ.get("PROBE_SET"), "mark": os.environ.get("PROFLAB_TEST_MARK"),
             "left": getattr(torch, "_probe_left", None), "fds": fds,
             "pidns": os.readlink("/proc/self/ns/pid"), "spec": sys.argv[1],
             "torch_preloaded": True}
    print("FACTS " + json.dumps(facts), flush=True)
    torch._probe_left = "by the run before"
    os.environ["PROBE_SET"] = "by the run before"
    ATTACK
    step = 0
    while True:
        yield {"step": torch.ones(4).sum() * step}
        step += 1
'''


@pytest.fixture
def lab(tmp_path) -> labs.Lab:
    folder = tmp_path / "labs" / "90_calibration"
    shutil.copytree(CALIBRATION, folder)
    return labs.load(folder)


def probe(lab: labs.Lab, attack: str = "pass", name: str = "probe.py") -> Path:
    path = lab.folder / name
    path.write_text(PROBE.replace("ATTACK", attack), encoding="utf-8")
    return path


def facts(outcome: execute.Outcome) -> dict:
    assert outcome.ok, (outcome.status, outcome.result, outcome.stderr[-2000:])
    line = next(line for line in outcome.stdout.splitlines() if line.startswith("FACTS "))
    return json.loads(line[len("FACTS "):])


def test_each_forked_run_is_a_fresh_process_for_its_file(lab, tmp_path):
    file, elsewhere = probe(lab), tmp_path / "elsewhere"
    elsewhere.mkdir()
    with forkserver.session():
        first = facts(execute.run(lab, file, "probe", workdir=elsewhere))
        second = facts(execute.run(lab, file, "probe", workdir=lab.folder))
    for seen in (first, second):
        assert seen["ppid"] != os.getpid()  # forked by the server, not started by the checker
        assert seen["sid"] == seen["pgid"] == seen["pid"]  # a session and process group of its own
        assert seen["file"] == str(file.resolve())
        assert Path(seen["argv0"]).name == "runner.py"
        assert seen["mark"] == os.environ["PROFLAB_TEST_MARK"]  # the checker's environment, as it is now
        # Its streams are the run's files, the marks its pipe: no end of the server's socket is open.
        assert not [link for link in seen["fds"].values() if link.startswith("socket:")], seen["fds"]
        assert seen["fds"]["3"].startswith("pipe:")
    assert (first["ppid"], first["pidns"]) == (second["ppid"], second["pidns"])  # one server for the session
    assert first["pid"] != second["pid"]
    assert (first["cwd"], first["path0"]) == (str(elsewhere), str(elsewhere))
    assert (second["cwd"], second["path0"]) == (str(lab.folder), str(lab.folder))
    # Nothing of the first run is left in the second: not a module's attribute, not the environment.
    assert first["left"] is None and second["left"] is None
    assert first["env"] is None and second["env"] is None


def test_outside_a_session_each_run_has_a_server_of_its_own(lab):
    file = probe(lab)
    one, two = (facts(execute.run(lab, file, "probe")) for _ in range(2))
    if sandbox.in_use():  # each server in a sandbox of its own (its folder, where each run's spec is; a PID
        # namespace's number may be handed out again once the first sandbox is gone)
        assert Path(one["spec"]).parent.parent != Path(two["spec"]).parent.parent
    else:
        assert one["ppid"] != two["ppid"] and os.getpid() not in (one["ppid"], two["ppid"])


def test_a_run_that_kills_its_server_only_costs_the_next_run_a_new_one(lab):
    # It goes on for a while after: it is then the checker's to wait for, and its run ends as its own.
    killer = probe(lab, "import signal, time; os.kill(os.getppid(), signal.SIGKILL); time.sleep(1.5)",
                   "killer.py")
    with forkserver.session():
        killed = execute.run(lab, killer, "killer")
        before = facts(execute.run(lab, probe(lab), "probe"))  # a new server: the first was killed
    if sandbox.in_use():  # the run reached its own sandbox's server: seen from outside, and failed for it
        assert killed.result["kind"] == "tampered" and "killed" in killed.result["message"], killed.result
    else:
        assert killed.ok  # its result is read from its file, as ever
    assert before["left"] is None


def test_a_run_that_stops_its_server_is_stopped_and_the_server_replaced(lab):
    stopper = probe(lab, "import signal; os.kill(os.getppid(), signal.SIGSTOP)", "stopper.py")
    with forkserver.session():
        stopped = execute.run(lab, stopper, "stopper", timeout_s=4)
        after = facts(execute.run(lab, probe(lab), "probe"))
    if sandbox.in_use():  # seen from outside: the run stopped its server, and failed for it
        assert stopped.result["kind"] == "tampered" and "stopped" in stopped.result["message"], stopped.result
    else:
        assert stopped.status == "timeout"  # its exit was never reported: it is not graded as a run that ended
    assert after["left"] is None
    # (the test's leak check then finds no process left: the stopped server was killed)


def test_where_no_server_starts_runs_are_fresh_processes(lab, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("no server here")

    monkeypatch.setattr(forkserver, "Server", refuse)
    with forkserver.session():
        seen = facts(execute.run(lab, probe(lab), "probe"))
    if sandbox.in_use():  # a fresh process in a sandbox of its own (the sandbox's session, its PID namespace)
        assert seen["pidns"] != os.readlink("/proc/self/ns/pid") and seen["ppid"] == 1
    else:
        assert seen["ppid"] == os.getpid()
        assert seen["sid"] == seen["pid"]


@pytest.fixture
def started(monkeypatch) -> list:
    """Every fork server started during the test, one entry each."""
    started, real = [], forkserver.Server

    class Counted(real):
        def __init__(self, *args, **kwargs):
            started.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(forkserver, "Server", Counted)
    return started


def test_a_check_imports_torch_once_for_all_its_runs(lab, monkeypatch, tmp_path, started):
    monkeypatch.setenv("PROFLAB_CAL_SPEEDUPS", "2")
    monkeypatch.setenv("PROFLAB_CAL_COUNTER", str(tmp_path / "runs-so-far"))
    monkeypatch.setenv("PROFLAB_SANDBOX_SHARED", str(tmp_path))  # the count crosses runs: a test instrument
    report = checks.check(lab, lab.folder / "scheduled.py", audited=False)
    assert report.verdict == "passed", report.as_dict()
    assert report.comparison["rounds"] >= 2
    assert len(started) == 2  # four runs and more, one server for each version (each in its own sandbox)


def test_the_server_imports_what_the_lab_files_import(lab):
    file = probe(lab)
    file.write_text("from torch.utils.data import DataLoader\nimport torchvision.models\n"
                    "from proflab.labkit.photos import PhotoDataset\n" + file.read_text())
    preload = execute.preload_for(lab.original, file)
    assert {"torch", "torch.utils.data", "torchvision.models", "proflab.labkit.photos"} <= set(preload)
    assert not [name for name in preload if name.split(".")[0] not in ("torch", "torchvision", "proflab")]


def test_a_grading_starts_two_servers_per_submission_and_no_more(lab, tmp_path, started):
    from proflab.grading import grade

    faster = (CALIBRATION / "original.py").read_text().replace("cfg.step_ms / 1000", "cfg.step_ms / 2000")
    for learner in ("alice", "bob"):
        (tmp_path / "class" / learner).mkdir(parents=True)
        (tmp_path / "class" / learner / "calibration.py").write_text(faster)
    result = grade.grade(grade.find(tmp_path / "class", lab, [lab]), rounds=2)
    assert [g.report.verdict for g in result.graded] == ["passed", "passed"], [g.report.as_dict() for g in result.graded]
    # A submission's runs never fork from a server another submission's runs could reach: its own, in a
    # sandbox of its own, closed when its check ends; the original's one server, in another, for the class.
    assert len(started) == 3


def test_runs_asked_for_in_two_threads_at_once_run_one_after_the_other(lab):
    import threading

    file, seen = probe(lab), {}

    def one(name):
        seen[name] = facts(execute.run(lab, file, name))

    with forkserver.session():
        threads = [threading.Thread(target=one, args=(name,)) for name in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = facts(execute.run(lab, file, "c"))
    # Neither took the other's processes for its own (nor killed the server): both ran, from one server.
    assert seen["a"]["ppid"] == seen["b"]["ppid"] == after["ppid"]


def test_a_server_whose_checker_is_killed_exits(lab):
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys, time\nfrom proflab import labs\nfrom proflab.running import execute, forkserver\n"
              "lab = labs.load(sys.argv[1])\nwith forkserver.session():\n"
              "    execute.warm(lab, ('torch',), 'probe', lab.original, lab.folder)\n    print('started', flush=True)\n    time.sleep(120)\n")
    checker = subprocess.Popen([sys.executable, "-c", script, str(lab.folder)], stdout=subprocess.PIPE, text=True)
    assert checker.stdout.readline().strip() == "started"

    def servers() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"proflab.running.serve" not in command or state in "ZX":
                continue
            try:
                mine = os.environ["PROFLAB_TEST_MARK"].encode() in Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:  # not running as root: a server's environment is not readable (not dumpable)
                mine = True
            if mine:
                found.append(int(entry))
        return found

    assert servers()  # importing torch, or ready
    checker.send_signal(signal.SIGKILL)
    checker.wait()
    deadline = time.monotonic() + 60
    while servers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert servers() == []  # its socket's other end closed: it exits, whatever it was doing


def test_a_sandboxed_server_stopped_as_it_starts_leaves_nothing_running(lab, tmp_path):
    # A check refused at once stops its servers while their sandboxes are still being made: bubblewrap's
    # first process can outlive the one that started it (it asks to die with its parent only once it runs),
    # and then goes on importing torch for seconds. Stopped at every moment of the start, nothing is left.
    import time

    engine = sandbox.engine()
    if not engine.ok:
        pytest.skip(f"no sandbox here: {engine.why}")
    roots = []
    for i in range(12):
        server = forkserver.Server(execute.run_env(lab), ("torch",), tmp_path, engine, (lab.folder,))
        roots.append(str(server.box.root).encode())
        time.sleep(0.002 * i)
        server.close()
    alive = [pid for pid, line in processes.command_lines().items() if any(root in line for root in roots)]
    assert alive == []
