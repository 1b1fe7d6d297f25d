"""Faults around a run and a grading: real processes, real signals, real files, a real full disk.

Each test here is one way a workshop day goes wrong: a learner's file that
starts processes in a session of their own, the terminal closing, a second
Ctrl-C, a grading stopped half-way, a full disk, two checks of one lab at
once, a file saved during its own check. Lab 2 is used throughout: its check
is the quickest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path

import pytest

from proflab.running import sandbox

from conftest import Kit, as_in_a_terminal, explain, statuses

LAB = "02_embeddings"
NO_AUDIT = {"PROFLAB_AUDIT": "off"}  # the files below start processes, which the source audit refuses


def lab_file(kit: Kit, name: str, tail: str, head: str = "") -> Path:
    """The lab's reference solution with ``head`` before it and ``tail`` after it, in the lab folder."""
    path = kit.root / "labs" / LAB / name
    path.write_text(head + (kit.root / "labs" / LAB / "solution.py").read_text() + "\n" + tail)
    return path


def start(kit: Kit, *args: str, extra_env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "proflab", *args], cwd=kit.root,
                            env={**kit.env(), **(extra_env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal)


def alive_with(word: str, kit: Path | None = None) -> list[str]:
    """Command lines of live processes that mention ``word``, whatever their session or group; with ``kit``,
    only those of that kit's runs (the suite runs other tests' checks beside this one): the process or one
    of its parents names the kit's folder, or carries it as ``PROFLAB_ROOT``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if word in command and state not in "ZX" and int(entry) != os.getpid() \
                and (kit is None or _of_kit(int(entry), kit)):
            found.append(f"{entry}: {command}")
    return found


def _of_kit(pid: int, kit: Path) -> bool:
    needle = f"PROFLAB_ROOT={kit}".encode()
    while pid > 1:
        try:
            if str(kit).encode() in Path(f"/proc/{pid}/cmdline").read_bytes() \
                    or needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return True
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def wait_gone(word: str, within_s: float = 10.0, kit: Path | None = None) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := alive_with(word, kit)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def wait_for(predicate, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def runner_started(kit: Kit) -> bool:
    tmp = kit.root / ".proflab" / "tmp"  # a run's folder: in its sandbox's box, or (unsandboxed) on its own
    return any(p.is_dir() for p in [*tmp.glob("run-*"), *tmp.glob("box-*/run-*")])


@contextmanager
def mounted_tmpfs(where: Path, size: str, read_only: bool = False):
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs (a real full disk, a real read-only folder)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


# --- 2. nothing a run starts outlives it ------------------------------------------------

ESCAPES = '''
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)  # MARK-popen"], start_new_session=True)
if os.fork() == 0:  # a double fork into a session of its own
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(900)  # MARK-setsid"])
    os._exit(0)
'''


@pytest.mark.parametrize("command", ["run", "check"])
def test_processes_a_lab_file_starts_in_a_new_session_do_not_outlive_its_run(fresh_kit, command):
    mark = f"escapes-{command}"
    path = lab_file(fresh_kit, f"{mark}.py", "", head=ESCAPES.replace("MARK", mark))
    args = [command, "2", "--file", str(path)] + (["--rounds", "1"] if command == "check" else [])
    proc = subprocess.run([sys.executable, "-m", "proflab", *args], cwd=fresh_kit.root,
                          env={**fresh_kit.env(), **NO_AUDIT}, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert wait_gone(mark, within_s=5) == [], "processes of the run outlived it"
    if command == "check":
        assert proc.returncode in (0, 1, 4), proc.stdout + proc.stderr  # graded (the verdict is not the point)


# --- 3. SIGHUP, and a second Ctrl-C during the kill sequence --------------------------------

HANGS = '''
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a program that shrugs off a polite stop
signal.signal(signal.SIGINT, signal.SIG_IGN)
def pipeline(cfg):
    while True:
        time.sleep(1)  # MARK
        yield {"scores": 0.0}
'''


@pytest.mark.parametrize("signals", [(signal.SIGHUP,), (signal.SIGINT, signal.SIGINT)], ids=["hangup", "two-ctrl-c"])
def test_closing_the_terminal_or_a_second_ctrl_c_leaves_nothing_running(fresh_kit, signals):
    mark = f"hangs-{signals[0].name.lower()}-{len(signals)}"
    path = fresh_kit.root / "labs" / LAB / f"{mark}.py"
    path.write_text(HANGS.replace("MARK", mark))
    proc = start(fresh_kit, "check", "2", "--file", str(path), extra_env=NO_AUDIT)
    try:
        wait_for(lambda: alive_with(mark) or alive_with("proflab.running.runner", fresh_kit.root), 60,
                 "the runner to start")
        time.sleep(3)  # it is importing the lab file, or sleeping in its first step
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        proc.wait(timeout=30)
        assert proc.returncode == 130, proc.stderr.read()
        assert wait_gone("proflab.running.runner", kit=fresh_kit.root) == [] and wait_gone(mark) == []
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# --- 1. an interrupted grading keeps its verdicts, and --resume finishes it ----------------------

def class_folder(kit: Kit, names: list[str]) -> Path:
    folder = kit.root / "class"
    for name in names:
        (folder / name).mkdir(parents=True)
        (folder / name / "2.py").write_text((kit.root / "labs" / LAB / "solution.py").read_text())
    return folder


def test_an_interrupted_grading_leaves_partial_outputs_and_resume_grades_each_submission_once(fresh_kit, tmp_path):
    folder = class_folder(fresh_kit, ["ann", "ben", "cat"])
    junit, record = tmp_path / "out" / "grades.xml", tmp_path / "out" / "grades.json"
    args = ["grade", str(folder), "--format", "junit", "--out", str(junit), "--json-out", str(record),
            "--rounds", "1"]
    journal = junit.with_name(f".{junit.name}.journal")
    proc = start(fresh_kit, *args)
    try:  # SIGTERM, as a CI job's timeout sends it, once the first verdict is in the journal
        wait_for(lambda: journal.exists() and len(journal.read_text().splitlines()) >= 2, 240, "a first verdict")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read()
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    partial = json.loads(record.read_text())
    done = [s["learner"] for s in partial["submissions"]]
    assert partial["partial"] is True and len(done) >= 1, partial["summary"]
    assert sorted(done + [s["learner"] for s in partial["not_yet_graded"]]) == ["ann", "ben", "cat"]
    suites = ET.parse(junit).getroot()
    assert "partial" in suites.get("name")
    assert [s for s in suites if s.get("name") == "not graded yet (interrupted)"]
    assert journal.exists()

    again = fresh_kit.run(*args)  # without --resume: refused, nothing lost
    assert again.returncode == 2 and "--resume" in again.stderr
    assert journal.exists()

    resumed = fresh_kit.run(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming: {len(done)} of 3" in resumed.stderr
    final = json.loads(record.read_text())
    assert final["partial"] is False and final["not_yet_graded"] == []
    assert sorted(s["learner"] for s in final["submissions"]) == ["ann", "ben", "cat"]
    before = {s["learner"]: s for s in partial["submissions"]}
    for sub in final["submissions"]:  # graded once: a resumed verdict is the journaled one, timings and all
        assert sub["verdict"] == "passed", sub
        if sub["learner"] in before:
            assert sub["timings"] == before[sub["learner"]]["timings"]
    assert final["summary"]["resumed"] == len(done)
    assert not journal.exists()  # a finished grading leaves no journal behind


def test_a_submission_the_kit_cannot_grade_is_listed_as_not_graded_with_no_score(fresh_kit, tmp_path):
    folder = class_folder(fresh_kit, ["ann"])
    original = fresh_kit.root / "labs" / LAB / "original.py"
    original.write_text(original.read_text() + "\n# edited\n")  # the kit's side is broken, not the learner's
    proc = fresh_kit.run("grade", str(folder), "--out", str(tmp_path / "g.json"))
    assert proc.returncode == 3, proc.stderr
    sub = json.loads((tmp_path / "g.json").read_text())["submissions"][0]
    assert sub["verdict"] == "error" and sub["score"] is None and "edited" in sub["error"]
    assert "not graded" in proc.stderr.lower()


# --- 6. the kit's own failures are never the learner's ------------------------------------------

def test_a_full_disk_is_the_kits_failure_and_leaves_progress_as_it_was(fresh_kit):
    state = fresh_kit.root / ".proflab"
    progress = {"labs": {"embeddings": {"status": "passed", "checks": 3}}}
    with mounted_tmpfs(state, "64k"):
        (state / "progress.json").write_text(json.dumps(progress))
        proc = fresh_kit.run("check", "2", "--file", str(fresh_kit.root / "labs" / LAB / "solution.py"), "--json")
        assert proc.returncode == 3, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["verdict"] == "error" and "full" in report["error"], report["error"]
        assert "sys.exit" not in proc.stdout and "crash" not in report["error"]
        assert json.loads((state / "progress.json").read_text()) == progress
        plain = fresh_kit.run("check", "2", "--file", str(fresh_kit.root / "labs" / LAB / "solution.py"))
        assert plain.returncode == 3 and "Traceback" not in plain.stdout + plain.stderr
        assert "not your fix" in plain.stdout


def test_two_checks_of_one_lab_at_once_keep_their_traces_apart(fresh_kit):
    solution = str(fresh_kit.root / "labs" / LAB / "solution.py")
    procs = [start(fresh_kit, "check", "2", "--file", solution, "--json", "--rounds", "1") for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for (stdout, stderr), p in zip(outputs, procs):
        report = json.loads(stdout)
        assert statuses(report)["evidence"] == "passed", explain(report)
        assert p.returncode in (0, 4), explain(report)  # passed, or too noisy to call beside the other
    traces = list((fresh_kit.root / "runs" / "02-embeddings" / "original").glob("*.pt.trace.json*"))
    assert len(traces) == 1  # the last one published; TensorBoard sees one trace per run


# --- 7. the file is graded as it was when the check started --------------------------------------

def test_saving_the_file_during_its_own_check_changes_nothing_graded(fresh_kit):
    path = lab_file(fresh_kit, "mine.py", "")
    proc = start(fresh_kit, "check", "2", "--file", str(path), "--json", "--rounds", "2")
    try:
        wait_for(lambda: runner_started(fresh_kit), 60, "the first run")
        path.write_text("def pipeline(cfg):\n    this is not Python\n")  # saved mid-check
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    report = json.loads(stdout)
    assert report["verdict"] == "passed" or proc.returncode == 4, explain(report)
    assert statuses(report)["runs"] == "passed" and report["file"] == str(path)
    assert "not Python" in path.read_text()  # the learner's file is theirs: never written back


# --- 5. memory as the machine pays for it, and a bound on what the checker reads ---------------------

def test_sixty_forked_children_are_not_counted_sixty_times(fresh_kit):
    forks = '''
import os, time
kids = []
for _ in range(60):  # each shares its parent's pages: torch and all
    pid = os.fork()
    if pid == 0:
        time.sleep(900)
        os._exit(0)
    kids.append(pid)
'''
    path = lab_file(fresh_kit, "forks60.py", "", head=forks)
    proc = fresh_kit.run("run", "2", "--file", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "memory" not in proc.stderr
    assert wait_gone("forks60", within_s=5) == []


def test_a_run_that_yields_too_much_is_stopped_before_the_checker_reads_it(fresh_kit):
    path = lab_file(fresh_kit, "yields_a_lot.py", "", head="")
    source = path.read_text().replace('yield {"scores": scores.cpu()}',
                                      'yield {"scores": scores.cpu(), "extra": torch.zeros(300_000)}')
    path.write_text(source)
    code, report = fresh_kit.check_json("2", "--file", str(path), "--rounds", "1")
    assert code == 1, explain(report)
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    assert runs["status"] == "failed" and "MB of values" in runs["rationale"], runs


# --- 12. options are checked before anything runs ------------------------------------------------

@pytest.mark.parametrize("args", [
    ["check", "2", "--timeout", "-1"], ["check", "2", "--timeout", "0"], ["check", "2", "--timeout", "nan"],
    ["check", "2", "--timeout", "inf"], ["run", "2", "--timeout", "0"], ["check", "2", "--rounds", "0"],
    ["check", "2", "--timeout", "soon"],
])
def test_bad_options_are_usage_errors(fresh_kit, args):
    proc = fresh_kit.run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and args[-1] in proc.stderr
    assert not (fresh_kit.root / ".proflab" / "progress.json").exists()  # nothing recorded


def test_grade_refuses_outputs_that_collide_or_land_in_the_class_folder(fresh_kit, tmp_path):
    folder = class_folder(fresh_kit, ["ann"])
    submission = folder / "ann" / "2.py"
    kept = submission.read_bytes()
    same = fresh_kit.run("grade", str(folder), "--out", str(tmp_path / "x.json"), "--json-out", str(tmp_path / "x.json"))
    assert same.returncode == 2 and "same file" in same.stderr
    inside = fresh_kit.run("grade", str(folder), "--json-out", str(submission))
    said = " ".join(inside.stderr.split())
    assert inside.returncode == 2 and ("inside the class folder" in said or "is a submission" in said), said
    assert submission.read_bytes() == kept


# --- 9. unwritable folders are the machine's, said plainly --------------------------------------

def test_a_read_only_state_folder_is_a_clear_kit_error(fresh_kit):
    with mounted_tmpfs(fresh_kit.root / ".proflab", "1m", read_only=True):
        for args in (["check", "2"], ["run", "2"]):
            proc = fresh_kit.run(*args)
            assert proc.returncode == 3, proc.stdout + proc.stderr
            text = proc.stdout + proc.stderr
            assert "Traceback" not in text and "Read-only file system" in text, text


def test_a_tree_that_keeps_forking_into_new_sessions_is_stopped_whole():
    """The kill sequence freezes the tree before it kills it, so forking faster than it is killed does not help."""
    from proflab.running import processes

    processes.become_subreaper()
    others = processes.children_of_mine()
    spawner = ("import os, time\n"
               "while True:\n"
               "    if os.fork() == 0:\n"
               "        os.setsid()\n"
               "        time.sleep(900)  # forks-forever\n"
               "        os._exit(0)\n"
               "    time.sleep(0.02)\n")
    proc = subprocess.Popen([sys.executable, "-c", spawner], start_new_session=True)
    tree = processes.Tree(proc.pid, others)
    try:
        wait_for(lambda: len(tree.scan()) > 20, 30, "the tree to grow")
        killed = tree.kill()
        proc.wait(timeout=10)
        assert len(killed) > 20
        assert wait_gone("forks-forever", within_s=5) == [] and tree.scan() == []
        assert all(processes.stat(pid) is None for pid in killed)  # killed and reaped: no zombies left
    finally:
        proc.kill()
        proc.wait()


def test_a_check_on_an_incomplete_copy_of_the_data_repairs_it_before_any_run(kit, tmp_path):
    import shutil

    from conftest import make_kit

    copy = make_kit(tmp_path)
    shutil.copytree(kit.root / "data", copy.root / "data")
    for path in (copy.root / "data" / "requests").iterdir():
        if path.name != "READY":
            path.unlink()  # a partial copy: the instructor's copy was cut short
    code, report = copy.check_json("2", "--file", str(copy.root / "labs" / LAB / "solution.py"), "--rounds", "1")
    assert report["verdict"] != "error" and statuses(report)["runs"] == "passed", explain(report)
    assert "FileNotFoundError" not in json.dumps(report)


# --- what the checker reads from the run is read as the learner's -------------------------------

def test_a_result_file_the_run_replaced_is_read_as_a_failed_run(tmp_path):
    from proflab.running import outcome

    good = {"status": "ok", "window_s": 0.1, "device": "cpu", "results": [], "steps_done": 1, "trace": None,
            "torch": "2", "threads": 1}
    cases = {
        "link": lambda p: p.symlink_to("/dev/zero"),
        "fifo": lambda p: os.mkfifo(p),
        "deep": lambda p: p.write_text("[" * 200_000),
        "huge": lambda p: p.write_bytes(b" " * (outcome.RESULT_MAX_BYTES + 1)),
        "not a dict": lambda p: p.write_text("[1, 2]"),
        "window as text": lambda p: p.write_text(json.dumps({**good, "window_s": "fast"})),
        "no results": lambda p: p.write_text(json.dumps({k: v for k, v in good.items() if k != "results"})),
        "message not text": lambda p: p.write_text(json.dumps({"status": "error", "message": [1]})),
    }
    for name, make in cases.items():
        path = tmp_path / f"{name}.json"
        make(path)
        result = outcome.read_result(path, 0)
        assert result["status"] == "error" and result["kind"] in ("crash", "too_much"), (name, result)
    (tmp_path / "good.json").write_text(json.dumps(good))
    assert outcome.read_result(tmp_path / "good.json", 0) == good


def test_a_trace_named_outside_the_runs_own_folder_is_never_read_or_moved(tmp_path):
    from proflab.running import outcome as results

    elsewhere = tmp_path / "class" / "alice.py"
    elsewhere.parent.mkdir()
    elsewhere.write_text("print('my submission')\n")
    import hashlib

    outcome = results.Outcome("learner", elsewhere, "ok", result={
        "trace": str(elsewhere), "trace_sha256": hashlib.sha256(elsewhere.read_bytes()).hexdigest()})
    (tmp_path / "traces").mkdir()
    results.take_trace(outcome, str(tmp_path / "traces"))
    assert outcome.status == "error" and outcome.result["kind"] == "trace"
    assert elsewhere.read_text() == "print('my submission')\n"


TAMPERS = {
    "original": '''
import glob
for copy in glob.glob("../../.proflab/tmp/check-*/original/original.py"):
    with open(copy, "a") as f:
        f.write("\\n# made slower\\n")
''',
    "data": '''
import glob, os
for path in glob.glob("../../data/requests/*.pt"):
    os.utime(path, (0, 0))  # a rewrite, as far as the checker can tell
''',
}


@pytest.mark.parametrize("what", sorted(TAMPERS))
def test_a_run_that_changes_what_the_original_runs_from_fails(fresh_kit, tmp_path, what):
    import shutil

    from conftest import make_kit

    kit = fresh_kit
    if what == "data":  # a copy of its own: this one is damaged
        kit = make_kit(tmp_path / "own")
        shutil.copytree(fresh_kit.root / "data", kit.root / "data")
    path = lab_file(kit, f"tampers_{what}.py", "", head=TAMPERS[what])
    proc = subprocess.run([sys.executable, "-m", "proflab", "check", "2", "--file", str(path), "--json",
                           "--rounds", "1"], cwd=kit.root, env={**kit.env(), **NO_AUDIT},
                          capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    if sandbox.engine().ok:  # in its sandbox the run reaches neither: the check's copy is hidden, data/ read-only
        if what == "data":
            assert proc.returncode == 1 and "importing the file raised an error" in runs["rationale"], runs
            assert "Read-only file system" in report["traceback"] + runs.get("actual", ""), explain(report)
            assert (kit.root / "data" / "requests" / "READY").exists()
            assert all(p.stat().st_mtime > 0 for p in (kit.root / "data" / "requests").glob("*.pt"))
        else:  # nothing there to change: the reference fix it runs passes, against the original as it was
            assert report["verdict"] in ("passed", "inconclusive"), explain(report)
        return
    assert proc.returncode == 1, explain(report)
    assert runs["status"] == "failed" and "changed during its run" in runs["rationale"], runs
    if what == "data":  # never trusted again as it is: the next check rebuilds it
        assert not (kit.root / "data" / "requests" / "READY").exists()


def test_a_run_that_fills_the_disk_fails_as_its_own_doing(fresh_kit):
    # A sandboxed run writes only in its own folder and /tmp, both in the kit's .proflab/ (here, 300 MB)
    where = "/tmp/filler.bin" if sandbox.engine().ok else "../../.proflab/filler.bin"
    fills = f'''
with open("{where}", "wb") as f:
    for _ in range(400):
        f.write(b"x" * (1 << 20))
'''
    with mounted_tmpfs(fresh_kit.root / ".proflab", "300m"):
        path = lab_file(fresh_kit, "fills.py", "", head=fills)
        proc = subprocess.run([sys.executable, "-m", "proflab", "check", "2", "--file", str(path), "--json",
                               "--rounds", "1"], cwd=fresh_kit.root, env={**fresh_kit.env(), **NO_AUDIT},
                              capture_output=True, text=True, timeout=300)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["verdict"] == "failed", explain(report)
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    assert "filled up during its run" in runs["rationale"] or "No space" in runs["rationale"], runs


def test_the_journal_keeps_the_fingerprint_of_what_was_graded_and_refuses_another_grading(tmp_path):
    from proflab.grading import checks, journal

    sub = tmp_path / "alice.py"
    sub.write_text("graded version\n")
    report = checks.Report(lab="embeddings", number=2, title="t", file=str(sub), label="grade-alice",
                           checks=[checks.Check(*c) for c in checks.CHECKS], verdict="passed")
    report.file_sha256 = journal.file_sha256(sub)
    header = {"folder": str(tmp_path), "lab": None, "labs": {"02-embeddings": "a" * 64}}
    book = journal.Journal.begin(tmp_path / ".j", header, resume=False, restart=False)
    sub.write_text("changed while it was graded\n")  # the file on disk is not what was graded
    book.add("alice.py", sub, report)
    with pytest.raises(journal.JournalError, match="another grading"):  # while its grading holds it
        journal.Journal.begin(tmp_path / ".j", header, resume=True, restart=False)
    book.close()
    again = journal.Journal.begin(tmp_path / ".j", header, resume=True, restart=False)
    assert again.done("alice.py", sub) is None  # graded again: the verdict was for other bytes
    sub.write_text("graded version\n")
    assert again.done("alice.py", sub).verdict == "passed"
    again.close()
    with pytest.raises(journal.JournalError, match="manifests have changed"):
        journal.Journal.begin(tmp_path / ".j", {**header, "labs": {"02-embeddings": "b" * 64}}, resume=True,
                              restart=False)
    # a lab with no verdict in the journal (its manifest broken then, fixed since) may have changed
    journal.Journal.begin(tmp_path / ".j", {**header, "labs": {**header["labs"], "03-fusion": "c" * 64}},
                          resume=True, restart=False).close()
    with pytest.raises(journal.JournalError, match="--resume continues it"):
        journal.Journal.begin(tmp_path / ".j", header, resume=False, restart=False)
