"""Every run of a lab file in a sandbox of the operating system's: what a run cannot do, tried from inside one.

A probe file, run by the checker's own ``execute.run`` (a fork server
session, as in a check), tries from inside its run what an attempt at
gaming the checker would: write into the kit, its virtual environment and its
data; leave files in /tmp and /dev/shm for the next run; see and signal the
checker and the servers; forge compile marks on its pipe. Each test fails on
a kit that runs lab files unsandboxed, and is skipped (saying why) only where
the engine cannot run (`proflab doctor`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from proflab import labs
from proflab.grading import checks
from proflab.running import compile_headers, execute, forkserver, sandbox

CALIBRATION = Path(__file__).resolve().parent / "calibration"
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sandbox.engine().ok, reason=f"no sandbox here: {sandbox.engine().why}")

PROBE = '''
import json, os, signal, sys, time
import torch

CHECKER = int(os.environ.get("PROBE_CHECKER", "0"))


def attempt(what, action):
    try:
        action()
        return what + ": done"
    except Exception as e:  # noqa: BLE001
        return what + ": " + type(e).__name__


def write(path, text="x"):
    with open(path, "a") as f:
        f.write(text)


def pipeline(cfg):
    seen = {
        "tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm")),
        "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "uid": os.getuid(), "pidns": os.readlink("/proc/self/ns/pid"), "box": os.path.dirname(os.path.dirname(sys.argv[1])),
        "tries": [
            attempt("kit", lambda: write(os.environ["PROBE_KIT_FILE"], "\\n# changed by a run\\n")),
            attempt("venv", lambda: write(os.path.join(os.path.dirname(os.__file__), "site-packages", "evil.pth"),
                                          "import os\\n")),
            attempt("data", lambda: write(os.path.join(str(cfg.data_dir), "cache.bin"))),
            attempt("signal checker", lambda: os.kill(CHECKER, signal.SIGSTOP)),
            attempt("net", lambda: __import__("socket").create_connection(("1.1.1.1", 53), timeout=1)),
        ],
    }
    print("FACTS " + json.dumps(seen), flush=True)
    write("/tmp/left-by-a-run")
    write("/dev/shm/left-by-a-run")
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
    assert outcome.sandboxed
    line = next(line for line in outcome.stdout.splitlines() if line.startswith("FACTS "))
    return json.loads(line[len("FACTS "):])


@pytest.fixture
def kit_file(tmp_path, monkeypatch) -> Path:
    """A file of the kit's own a run tries to change (one in the installed package: its source)."""
    target = REPO / "src" / "proflab" / "reporting" / "report.py"
    monkeypatch.setenv("PROBE_KIT_FILE", str(target))
    monkeypatch.setenv("PROBE_CHECKER", str(os.getpid()))
    return target


def test_a_run_writes_nowhere_but_its_own_folders_and_leaves_nothing_for_the_next(lab, kit_file):
    before = kit_file.read_bytes()
    site = Path(os.__file__).parent / "site-packages" / "evil.pth"
    with forkserver.session():
        first = facts(execute.run(lab, probe(lab), "probe"))
        second = facts(execute.run(lab, probe(lab), "probe"))
    assert kit_file.read_bytes() == before and not site.exists()
    assert not list(lab.folder.glob("cache.bin")) and not (REPO / "data" / "cache.bin").exists()
    for seen in (first, second):
        tries = dict(t.split(": ", 1) for t in seen["tries"])
        # Read-only: the kit, the virtual environment (or the interpreter's), the data; no network.
        assert tries["kit"] in ("OSError", "PermissionError"), seen
        assert tries["venv"] in ("OSError", "PermissionError", "FileNotFoundError"), seen
        assert tries["data"] in ("OSError", "PermissionError", "FileNotFoundError"), seen
        assert tries["net"] in ("OSError",) or tries["net"].endswith("Error"), seen
        assert tries["net"] != "done"
        assert seen["uid"] == sandbox.NOBODY
    # What the first run left in /tmp and /dev/shm is gone before the second starts.
    assert "left-by-a-run" not in second["tmp"] and "left-by-a-run" not in second["shm"], second


def test_a_run_sees_and_signals_no_process_outside_its_sandbox(lab, kit_file):
    with forkserver.session():
        seen = facts(execute.run(lab, probe(lab), "probe"))
    tries = dict(t.split(": ", 1) for t in seen["tries"])
    assert tries["signal checker"] == "ProcessLookupError", seen  # the checker's PID names no process there
    # Its sandbox's first process, its server, itself: nothing else (the checker, the other version's
    # server, other checks' runs are not there to be seen).
    assert seen["pids"] == [1, 2, seen["pids"][-1]] and seen["pids"][-1] < 100, seen


@pytest.mark.parametrize("attack", [
    "os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)",
    "os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0))",
    "os.kill(os.getppid(), signal.SIGSTOP)",
])
def test_a_run_that_slows_its_server_fails_and_the_server_is_replaced(lab, kit_file, attack):
    """Its own server only: the other version's is in another sandbox. It fails, and is not forked from again."""
    with forkserver.session():
        other = facts(execute.run(lab, probe(lab, name="other.py"), "other"))
        attacked = execute.run(lab, probe(lab, attack, "attacker.py"), "attacker", timeout_s=15)
        after = facts(execute.run(lab, probe(lab, name="other.py"), "other"))
        again = facts(execute.run(lab, probe(lab, name="attacker2.py"), "attacker", role=str(lab.folder / "attacker.py")))
    assert attacked.result.get("kind") == "tampered", attacked.result
    assert "reached outside its run" in attacked.result["message"]
    assert other["pidns"] == after["pidns"]  # the other file's server: untouched, the same sandbox
    line = next(line for line in attacked.stdout.splitlines() if line.startswith("FACTS "))
    # A new server, in a new sandbox, for its next run (told by the sandbox's folder: a PID namespace's number
    # may be handed out again once the first sandbox is gone)
    assert json.loads(line[len("FACTS "):])["box"] not in (again["box"], other["box"])


FORGED = '''
    fd = 3  # the mark pipe of a run forked by the server (torch.compile is not called: the marks are forged)
    os.write(fd, b"C")
    WAIT
    os.write(fd, b"c")
'''


@pytest.mark.parametrize("wait", ["time.sleep(1.0)", "__import__('subprocess').run(['sleep', '1'])"])
def test_forged_compile_marks_leave_no_time_out_of_the_count(lab, kit_file, wait):
    """A run that waits (itself, or on a child) between compile marks was not compiling: nothing is left out."""
    file = probe(lab, FORGED.replace("WAIT", wait).strip().replace("\n    ", "\n    "), "forger.py")
    file.write_text(file.read_text().replace("    ATTACK", ""))
    with forkserver.session():
        outcome = execute.run(lab, file, "forger")
    assert outcome.ok, outcome.result
    r = outcome.result
    assert r["compile_marked_s"] >= 0.9, r  # the marks arrived, a second apart
    assert r["compile_s"] < 0.2, r  # and almost none of it is left out of the count


LENT = '''
    lent = pathlib.Path("HEADERS")  # torch.compile's precompiled header, where Inductor looks for it
    gch, h = next(lent.glob("*.h.gch")), next(lent.glob("*.h"))
    write("/tmp/other.h", "#error not the kit's")
    print("LENT " + json.dumps({"names": sorted(p.name for p in lent.iterdir()), "tries": [
        attempt("append", lambda: write(str(gch))), attempt("remove", lambda: gch.unlink()),
        attempt("replace", lambda: os.replace("/tmp/other.h", str(h))),
        attempt("chmod", lambda: os.chmod(str(h), 0o666)),
        attempt("add", lambda: write(str(lent / "extra.h")))]}), flush=True)
'''


def test_the_compile_header_lent_to_every_run_cannot_be_changed_by_one(lab, kit_file):
    """A file that compiles is lent the kit's precompiled header, read-only: a run cannot change, remove or
    replace it, for itself or the next run; what it adds beside it is its own, and gone after it."""
    attack = "import pathlib\n" + textwrap.dedent(LENT).replace("HEADERS", sandbox.HEADERS_INSIDE).strip()
    file = probe(lab, attack.replace("\n", "\n    "), "compiler.py")
    assert compile_headers.prepare()  # built once, by the kit's own code (what a run of the file does first)
    kept = sandbox.compile_headers()
    assert kept and all(h.is_relative_to(sandbox.headers_folder()) for h in kept)
    before = {h.name: (h.stat().st_size, h.stat().st_mtime_ns, h.stat().st_mode) for h in kept}
    with forkserver.session():
        first, second = (execute.run(lab, file, "compiler") for _ in range(2))
    seen = []
    for outcome in (first, second):
        facts(outcome)
        line = next(line for line in outcome.stdout.splitlines() if line.startswith("LENT "))
        seen.append(json.loads(line[len("LENT "):]))
    for lent in seen:
        tries = dict(t.split(": ", 1) for t in lent["tries"])
        assert all(tries[t] != "done" for t in ("append", "remove", "replace", "chmod")), lent
        assert tries["add"] == "done", lent  # the folder is the run's own
    assert seen[0]["names"] == sorted(before)  # the kit's files, and nothing else, when a run starts
    assert seen[1]["names"] == sorted(before), seen[1]  # still there, and nothing left by the run before
    assert {h.name: (h.stat().st_size, h.stat().st_mtime_ns, h.stat().st_mode) for h in kept} == before


def test_each_round_draws_fresh_inputs_and_the_original_follows_them():
    """Lab 4's original on two seeds yields two different runs; on the same seed, the same one."""
    lab = labs.resolve("4")
    steps = {"warmup_steps": 1, "timed_steps": 2, "profile_steps": 0}
    checks.prepare_data(lab)  # as a check does, outside the sandbox: a run cannot write the data
    with forkserver.session():
        a, b, a2 = (execute.run(lab, lab.original, "original", seed=s, steps=steps) for s in (11, 12, 11))
    for o in (a, b, a2):
        assert o.ok and o.sandboxed, o.result
    loss = [[step["loss"]["data"] for step in o.result["results"]] for o in (a, b, a2)]
    assert loss[0] == loss[2] and loss[0] != loss[1]


def test_without_the_engine_checks_say_so_and_grade_refuses(tmp_path):
    import subprocess

    env = {**os.environ, sandbox.ENGINE_ENV: str(tmp_path / "no-bwrap")}
    doctor = subprocess.run([sys.executable, "-m", "proflab.cli", "doctor", "--json"], env=env,
                            capture_output=True, text=True)
    assert doctor.returncode == 1 and json.loads(doctor.stdout)["sandboxed"] is False, doctor.stderr
    grade = subprocess.run([sys.executable, "-m", "proflab.cli", "grade", str(tmp_path)], env=env,
                           capture_output=True, text=True)
    assert grade.returncode == 2 and "--unsandboxed" in grade.stderr, grade.stderr


REPLAY = '''
import json, os
from pathlib import Path

import torch

ORIGINAL = Path(os.environ["PROBE_ORIGINAL"])
CACHE = Path(os.environ["PROFLAB_SANDBOX_SHARED"]) / "replayed.json"
namespace = {"__file__": str(ORIGINAL), "__name__": "original"}
exec(compile(ORIGINAL.read_text(), str(ORIGINAL), "exec"), namespace)


def pipeline(cfg):
    if CACHE.exists():  # a later run: the first run's values, with no work at all
        for step in json.loads(CACHE.read_text()):
            yield {k: torch.tensor(v) for k, v in step.items()}
        return
    kept = []
    try:
        for out in namespace["pipeline"](cfg):
            kept.append({k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in out.items()})
            yield out
    finally:  # after its last step (no read of a value inside one): kept for the later rounds
        CACHE.write_text(json.dumps([{k: (v.tolist() if isinstance(v, torch.Tensor) else v)
                                      for k, v in step.items()} for step in kept]))
'''


@pytest.mark.parametrize("lab_number", ["4", "3"])
def test_results_kept_from_an_earlier_round_are_worth_nothing(tmp_path, lab_number):
    """Even with a folder every run may write (the tests' own instrument), replaying the reference fix's
    values from the first run in later rounds fails: each round's inputs are new."""
    import subprocess

    lab = labs.resolve(lab_number)
    shared, file = tmp_path / "shared", tmp_path / f"lab{lab_number}_replay.py"
    shared.mkdir()
    file.write_text(REPLAY, encoding="utf-8")
    env = {**os.environ, "PROFLAB_SANDBOX_SHARED": str(shared), "PROBE_ORIGINAL": str(lab.solution),
           "PROFLAB_AUDIT": "off"}
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", lab_number, "--file", str(file), "--json"],
                          env=env, capture_output=True, text=True, timeout=900)
    report = json.loads(proc.stdout)
    assert (shared / "replayed.json").exists()  # the first run kept its values; later runs found them
    assert proc.returncode == 1, report
    same = next(c for c in report["checks"] if c["name"] == "same_results")
    assert same["status"] == "failed" and "differ" in same["rationale"] + same.get("actual", ""), same


# --- a sandbox that runs as nobody outside too (the kit run as root, its Python readable by all) ---------

def test_data_built_under_a_private_umask_is_readable_by_a_sandbox_of_nobody(tmp_path):
    """On a server where root's umask is 077, the data every run reads was built private (mkdtemp's 0700)
    and every sandboxed run of every lab failed with "permission denied": it is built readable by all."""
    from proflab import labkit

    def build(folder):
        (folder / "part").mkdir()
        (folder / "part" / "x.bin").write_bytes(b"123")

    old = os.umask(0o077)
    try:
        root = labkit.build_once(tmp_path / "data", "things", "1", build)
    finally:
        os.umask(old)
    assert (tmp_path / "data").stat().st_mode & 0o005 == 0o005
    for path in [root, root / "part"]:
        assert path.stat().st_mode & 0o777 == 0o755, path
    for path in [root / "part" / "x.bin", root / "READY"]:
        assert path.stat().st_mode & 0o777 == 0o644, path


def test_what_a_sandbox_of_nobody_reads_is_lent_to_it_and_nothing_else_changes(tmp_path, monkeypatch):
    """A check's workspace (a private temporary folder) and the way to it become readable by nobody;
    a folder outside the kit's state and the temporary folders is left as it is."""
    import tempfile

    state = tmp_path / "kit" / ".proflab"
    monkeypatch.setenv("PROFLAB_ROOT", str(tmp_path / "kit"))
    (state / "tmp").mkdir(parents=True)
    os.chmod(state, 0o700)
    workspace = Path(tempfile.mkdtemp(dir=state / "tmp"))
    (workspace / "yours.py").write_text("print('hi')\n")
    os.chmod(workspace / "yours.py", 0o600)
    elsewhere = Path(tempfile.mkdtemp(dir=tmp_path))
    before = elsewhere.stat().st_mode
    outside_tmp = Path(tempfile.gettempdir()).stat().st_mode
    sandbox.lend([workspace])
    assert state.stat().st_mode & 0o001 and (state / "tmp").stat().st_mode & 0o001
    assert workspace.stat().st_mode & 0o005 == 0o005
    assert (workspace / "yours.py").stat().st_mode & 0o004
    assert elsewhere.stat().st_mode == before and Path(tempfile.gettempdir()).stat().st_mode == outside_tmp


def test_the_checkers_own_helper_is_never_taken_for_a_process_of_the_run():
    """nvidia-smi, started by the checker while a run was timed to read its device memory, was taken for
    one of the run's processes: "work went on beside the timed steps" failed every check on CUDA."""
    import subprocess
    import threading
    import time

    from proflab.running import processes

    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"], start_new_session=True)
    try:
        tree = processes.Tree(run.pid, others_before=set())
        started = threading.Thread(target=processes.helper, args=(["sleep", "1"], 5))
        started.start()
        deadline = time.monotonic() + 0.8
        seen = set()
        while time.monotonic() < deadline:
            seen |= set(tree.scan())
        started.join()
        assert seen == {run.pid}, seen
        # and a child that is not the checker's helper is the run's (the exclusion is not blanket)
        other = subprocess.Popen(["sleep", "1"])
        try:
            assert other.pid in tree.scan()
        finally:
            other.wait()
    finally:
        run.kill()
        run.wait()


def test_a_fresh_sandboxed_run_is_its_own_main_process_not_work_beside_itself(lab, monkeypatch):
    """Where the fork server cannot be used (on CUDA, a torch that loads the driver on import), each run is
    a fresh process inside bubblewrap's: its steps' CPU was counted as another process's "work beside the
    timed steps", and every check on CUDA failed, the original's too."""
    monkeypatch.setattr(execute, "FORK", False)
    busy = lab.folder / "busy.py"
    busy.write_text(textwrap.dedent('''
        import time
        import torch

        def pipeline(cfg):
            step = 0
            while True:
                until = time.process_time() + 0.02
                while time.process_time() < until:  # every step's work is the run's own CPU
                    pass
                yield {"step": torch.ones(4).sum() * step}
                step += 1
    '''), encoding="utf-8")
    outcome = execute.run(lab, busy, "busy")
    assert outcome.ok, (outcome.status, outcome.result)
    assert outcome.sandboxed
