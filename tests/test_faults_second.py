"""Faults and bad input, second round: the machine's failures are never the learner's, no valid file stops a
class, nothing of a check outlives its checker, no output overwrites the kit or the work, and no fault is
answered with a traceback.

Each test drives the real command (``python -m proflab``) on the calibration lab (tests/calibration: steps
that sleep 20 ms, checked in seconds), with real files, locks, signals and mounts; lab 2 where the lab's
data is what a fault touches.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Kit, sharing_data
from test_grade import make_kit, variant, write_folder
from test_faults_runs import alive_with, mounted_tmpfs, wait_for, wait_gone

FAST = variant(4.0)  # the calibration original, 4x faster: passes
LATIN1 = ("# -*- coding: latin-1 -*-\n# Réglé à la main : é, à, ç\n" + FAST).encode("latin-1")


def proflab(kit: Kit, *args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proflab", *args], cwd=kit.root, env=kit.env(env),
                          capture_output=True, text=True, timeout=300, **kwargs)


def start(kit: Kit, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "proflab", *args], cwd=kit.root, env=kit.env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def a_run_started(kit: Kit) -> bool:
    tmp = kit.root / ".proflab" / "tmp"
    return any(p.is_dir() for p in [*tmp.glob("run-*"), *tmp.glob("box-*/run-*")])


@pytest.fixture
def cal(tmp_path) -> Kit:
    return make_kit(tmp_path / "kit")


# --- 2. a file in Latin-1, with its coding line: valid Python, graded like any other -------------------

def test_a_latin1_file_with_a_coding_line_is_checked_and_graded(cal, tmp_path):
    mine = cal.root / "latin1.py"
    mine.write_bytes(LATIN1)
    checked = proflab(cal, "check", "90", "--file", str(mine), "--rounds", "2")
    assert checked.returncode in (0, 4), checked.stdout + checked.stderr  # graded: passed (or too noisy)
    assert "Traceback" not in checked.stderr and "UnicodeDecodeError" not in checked.stdout + checked.stderr
    folder = write_folder(cal.root / "class", {"bob/90.py": FAST})
    (folder / "ann").mkdir()
    (folder / "ann" / "90.py").write_bytes(LATIN1)
    record = tmp_path / "grades.json"
    graded = proflab(cal, "grade", str(folder), "--json-out", str(record), "--rounds", "2")
    assert graded.returncode == 0, graded.stderr
    verdicts = {s["learner"]: s["verdict"] for s in json.loads(record.read_text())["submissions"]}
    assert set(verdicts) == {"ann", "bob"} and "error" not in verdicts.values(), verdicts


# --- 4, 6. the journal: held by one grading at a time, and a broken one kept aside ----------------------

def test_a_second_grading_of_the_same_outputs_is_refused_while_the_first_holds_its_journal(cal, tmp_path):
    folder = write_folder(cal.root / "class", {"ann/90.py": FAST})
    out = tmp_path / "grades.json"
    lock = out.with_name(f".{out.name}.journal.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a grading that runs now holds it
        os.write(fd, b"4242")
        for extra in ([], ["--resume"], ["--restart"]):
            second = proflab(cal, "grade", str(folder), "--json-out", str(out), *extra)
            assert second.returncode == 2, second.stderr
            assert "another grading (process 4242)" in second.stderr, second.stderr
            assert "--resume continues" not in second.stderr and not out.exists()
    finally:
        os.close(fd)
    done = proflab(cal, "grade", str(folder), "--json-out", str(out), "--rounds", "2")
    assert done.returncode == 0, done.stderr
    assert out.is_file() and not lock.exists() and not out.with_name(f".{out.name}.journal").exists()


@pytest.mark.parametrize("first_line", ["[]", "null", "5", "not json at all"])
def test_a_broken_journal_is_moved_aside_with_a_message(cal, tmp_path, first_line):
    folder = write_folder(cal.root / "class", {"ann/90.py": FAST})
    out = tmp_path / "grades.json"
    journal = out.with_name(f".{out.name}.journal")
    journal.write_text(first_line + "\n")
    resumed = proflab(cal, "grade", str(folder), "--json-out", str(out), "--resume")
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr
    assert "is not a grading journal" in resumed.stderr and "nothing to resume" in resumed.stderr
    aside = list(tmp_path.glob(f".{out.name}.journal.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == first_line + "\n"
    if first_line == "[]":  # and without --resume, the grading goes on from an empty journal
        journal.write_text("[]\n")
        graded = proflab(cal, "grade", str(folder), "--json-out", str(out), "--rounds", "2")
        assert graded.returncode == 0 and "moved it to" in graded.stderr, graded.stderr
        assert len(list(tmp_path.glob(f".{out.name}.journal.corrupt-*"))) == 2


# --- 5. two Ctrl-C 0.3 s apart: the outputs are written all the same ----------------------------------

HANGS = '''
import time
import torch


def pipeline(cfg):
    step = 0
    while True:
        time.sleep(30)  # hangs in its first step
        yield {"step": torch.ones(4).sum() * step}
        step += 1
'''


def test_two_ctrl_c_during_a_grading_still_write_its_outputs(cal, tmp_path):
    folder = write_folder(cal.root / "class", {"ann/90.py": HANGS, "bob/90.py": FAST})
    junit, record = tmp_path / "grades.xml", tmp_path / "grades.json"
    proc = start(cal, "grade", str(folder), "--format", "junit", "--out", str(junit), "--json-out", str(record))
    try:
        wait_for(lambda: a_run_started(cal), 60, "the first run")
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    partial = json.loads(record.read_text())
    assert partial["partial"] is True and junit.is_file(), stderr


# --- 7. a lab's manifest broken when a grading runs: its journal is kept for --resume ---------------------

def test_a_broken_manifest_keeps_the_journal_and_resume_grades_only_that_labs_files(cal, tmp_path):
    second = cal.root / "labs" / "91_calibration2"
    shutil.copytree(cal.root / "labs" / "90_calibration", second)
    manifest = second / "lab.toml"
    good = manifest.read_text().replace("number = 90", "number = 91").replace('name = "calibration"',
                                                                             'name = "calibration2"')
    manifest.write_text("number = [broken\n")
    folder = write_folder(cal.root / "class", {"ann/90.py": FAST, "ann/91.py": FAST})
    record = tmp_path / "grades.json"
    journal = record.with_name(f".{record.name}.journal")
    first = proflab(cal, "grade", str(folder), "--json-out", str(record), "--rounds", "2")
    assert first.returncode == 3 and "Traceback" not in first.stderr, first.stderr
    assert journal.exists(), "the journal of a grading with files the kit could not grade was removed"
    manifest.write_text(good)
    resumed = proflab(cal, "grade", str(folder), "--json-out", str(record), "--rounds", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming: 1 of 2" in resumed.stderr, resumed.stderr
    verdicts = {s["lab"]: s["verdict"] for s in json.loads(record.read_text())["submissions"]}
    assert verdicts == {"calibration": "passed", "calibration2": "passed"}, verdicts
    assert not journal.exists()


# --- 8. outputs never land on the kit, a submission, or hide a verdict ----------------------------------

def test_grading_outputs_over_the_kit_or_a_submission_are_refused(cal, tmp_path):
    folder = write_folder(tmp_path / "class", {"ann/90.py": FAST})
    original = cal.root / "labs" / "90_calibration" / "original.py"
    before = original.read_bytes()
    for option, target in (("--out", original), ("--json-out", cal.root / "labs" / "90_calibration" / "new.json"),
                           ("--json-out", folder / "ann" / "90.py")):
        refused = proflab(cal, "grade", str(folder), option, str(target))
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2, said
        assert "write it somewhere else" in said or "inside the class folder" in said, said
    assert original.read_bytes() == before and (folder / "ann" / "90.py").read_text() == FAST
    assert not (cal.root / "labs" / "90_calibration" / "new.json").exists()


def test_a_gate_record_that_cannot_be_written_does_not_hide_the_verdict(cal, tmp_path):
    base, cand = tmp_path / "base.py", tmp_path / "cand.py"
    base.write_text(variant(1.0))
    cand.write_text(variant(1.0))
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    gated = proflab(cal, "gate", str(cand), "--baseline", str(base), "--lab", "90", "--rounds", "2",
                    "--max-rounds", "4", "--junit", str(blocked / "gate.xml"))
    assert gated.returncode == 3, gated.stdout + gated.stderr
    assert "Traceback" not in gated.stderr
    assert "the verdict above stands" in gated.stderr
    assert "REGRESSION ·" in gated.stdout or "TOO NOISY" in gated.stdout.upper(), gated.stdout


# --- 12. the gate's settings and its CI files -----------------------------------------------------------

def test_gate_settings_that_would_make_it_useless_are_refused(cal, tmp_path):
    base = tmp_path / "base.py"
    base.write_text(variant(1.0))
    never = proflab(cal, "gate", str(base), "--baseline", str(base), "--lab", "90", "--max-slowdown", "inf")
    said = " ".join(never.stderr.split())
    assert never.returncode == 2 and "max_slowdown must be a number above 1" in said and "found inf" in said, said
    (tmp_path / "traces").write_text("a file")
    lost = proflab(cal, "gate", str(base), "--baseline", str(base), "--lab", "90",
                   "--trace-dir", str(tmp_path / "traces"))
    assert lost.returncode == 2 and "is a file, not a folder" in lost.stderr, lost.stderr


def test_init_ci_says_where_it_writes_and_why_it_cannot(cal, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    env = {"PROFLAB_ROOT": str(cal.root), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    kit = ["--kit", "proflab @ git+https://example.org/proflab.git@v1.0"]
    done = subprocess.run([sys.executable, "-m", "proflab", "gate", "--init-ci", "github", *kit], cwd=project,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "not inside a git repository" in done.stderr
    assert "[tool.proflab.gate]" in done.stdout, done.stdout
    other = tmp_path / "other"
    (other / ".github").mkdir(parents=True)
    (other / ".github" / "workflows").write_text("a file where the folder goes")
    refused = subprocess.run([sys.executable, "-m", "proflab", "gate", "--init-ci", "github", *kit], cwd=other,
                             env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "Errno" not in said and ".github/workflows is a file" in said, said


# --- 9. a held progress lock: said, and given up on ------------------------------------------------------

def test_a_held_progress_lock_is_said_and_given_up_on(cal):
    lock = cal.root / ".proflab" / "progress.lock"
    lock.parent.mkdir(parents=True)
    (lock.parent / "progress.json").write_text(json.dumps({"labs": {}}))
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        listed = proflab(cal, "list", env={"PROFLAB_LOCK_WAIT_S": "3"})
        took = time.monotonic() - started
        assert listed.returncode == 0, listed.stderr
        assert "waiting for" in listed.stderr and "gave up waiting" in listed.stderr, listed.stderr
        assert took < 30
        (cal.root / "labs" / "90_calibration" / "exercise.py").write_text(FAST)  # the learner's fix
        checked = proflab(cal, "check", "90", "--rounds", "2", env={"PROFLAB_LOCK_WAIT_S": "3"})
        assert checked.returncode in (0, 4) and "Traceback" not in checked.stderr, checked.stderr
        said = " ".join(checked.stderr.split())
        assert "another proflab command has held" in said and "not recorded" in said, said
    finally:
        os.close(fd)


# --- 13. small ones: a closed pipe, a dead checker's scratch, a SIGKILL not blamed on memory -------------

def test_a_closed_pipe_is_not_a_verdict_and_a_dead_checkers_scratch_is_cleaned(cal):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = cal.root / ".proflab" / "tmp" / f"box-{dead.pid}-abcd1234"
    (stale / "run-x").mkdir(parents=True)
    (stale / "run-x" / "trace.json").write_text("{}")
    mine = cal.root / "fast.py"
    mine.write_text(FAST)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write to stdout fails
    try:
        proc = subprocess.run([sys.executable, "-m", "proflab", "check", "90", "--file", str(mine), "--rounds", "2"],
                              cwd=cal.root, env=cal.env(), stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    finally:
        os.close(write)
    assert proc.returncode in (0, 4), proc.stderr  # the check's own verdict, not 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert not stale.exists(), "a dead checker's scratch folder was left"


KILLED = '''
import os
import time
import torch


def pipeline(cfg):
    step = 0
    while True:
        time.sleep(cfg.step_ms / 1000)
        if step == 3:
            os.kill(os.getpid(), 9)  # SIGKILL, as a peer, or the file itself, would
        yield {"step": torch.ones(4).sum() * step}
        step += 1
'''


def test_a_run_killed_by_sigkill_is_not_said_to_have_run_out_of_memory(cal):
    mine = cal.root / "killed.py"
    mine.write_text(KILLED)
    code, report = cal.check_json("90", "--file", str(mine), "--rounds", "2")
    assert code == 1, report
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    assert "SIGKILL" in runs["rationale"], runs
    assert "out of memory?" not in runs["rationale"] and "killed nothing for want of memory" in runs["rationale"]


# --- 3. a checker killed with SIGKILL leaves nothing running ---------------------------------------------

@pytest.mark.parametrize("command", ["check", "grade", "gate", "check-unsandboxed"])
def test_nothing_of_a_check_outlives_a_checker_killed_with_sigkill(cal, tmp_path, command):
    mark = f"hangs-killed-{command}"
    source = HANGS.replace("hangs in its first step", mark)
    env = None
    if command == "check-unsandboxed":  # no sandbox engine here: the fork server must end the run itself
        command, env = "check", {"PROFLAB_BWRAP": str(tmp_path / "no-bwrap")}
    if command in ("check", "gate"):
        mine = cal.root / "hangs.py"
        mine.write_text(source)
        base = cal.root / "base.py"
        base.write_text(variant(1.0))
        args = (["check", "90", "--file", str(mine)] if command == "check" else
                ["gate", str(mine), "--baseline", str(base), "--lab", "90"])
    else:
        folder = write_folder(tmp_path / "class", {"ann/90.py": source})
        args = ["grade", str(folder), "--json-out", str(tmp_path / "g.json")]
    proc = start(cal, *args, env=env)
    try:
        wait_for(lambda: a_run_started(cal) and alive_with("proflab.running", cal.root), 60, "a run")
        time.sleep(2)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone("proflab.running", within_s=10, kit=cal.root) == [], "the checker's servers or runs outlived it"
    assert wait_gone(str(cal.root), within_s=5) == []


# --- 1. the machine's failures are not the learner's ------------------------------------------------------

def test_a_disk_filled_by_another_process_during_a_run_is_not_graded(cal, tmp_path):
    state = cal.root / ".proflab"
    with mounted_tmpfs(state, "300m"):
        slow = cal.root / "slow.py"
        slow.write_text(variant(0.1))  # 200 ms steps: the disk fills while it runs
        proc = start(cal, "check", "90", "--file", str(slow), "--rounds", "2")
        try:
            wait_for(lambda: a_run_started(cal), 60, "a run")
            filler = state / "filler"
            subprocess.run(["fallocate", "-l", str(os.statvfs(state).f_bavail * os.statvfs(state).f_frsize),
                            str(filler)], capture_output=True)
            if not filler.exists() or os.statvfs(state).f_bavail > 1000:
                with open(filler, "ab") as f:  # fallocate unsupported: fill by writing
                    try:
                        while True:
                            f.write(b"\0" * (1 << 20))
                    except OSError:
                        pass
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == 3, out + err
        assert "not by it" in out + err and "Traceback" not in err, out + err
        assert not (state / "progress.json").exists() or "calibration" not in (state / "progress.json").read_text()


def test_lab_data_rewritten_during_a_check_is_not_graded(kit, tmp_path):
    k = sharing_data(tmp_path / "kit", kit)
    victim = (k.root / "data" / "requests" / "requests.pt").resolve()
    saved = victim.read_bytes()
    proc = start(k, "check", "2", "--file", str(k.root / "labs" / "02_embeddings" / "solution.py"), "--json")
    try:
        wait_for(lambda: a_run_started(k), 120, "a run")
        victim.write_bytes(bytes(len(saved)))  # same size, other bytes: another process's doing
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
        victim.write_bytes(saved)
        assert k.run("data").returncode == 0
    report = json.loads(out)
    assert proc.returncode == 3 and report["verdict"] == "error", report
    assert "another process on this machine changed it" in report["error"], report["error"]
    assert "Traceback" not in err


# --- 12. a mark stamped late is not a changed clock ------------------------------------------------------

def test_a_mark_stamped_late_is_not_a_changed_clock_and_a_slowed_clock_still_is():
    from proflab.running.marks import _clock_slow

    steps = [0.01] * 10
    bounds = [0.0]
    for s in steps:
        bounds.append(bounds[-1] + s)
    late = bounds[:-1] + [bounds[-1] + 0.2]  # the window's last mark read 200 ms late (the checker was busy)
    assert not _clock_slow(steps, late)
    early_late = bounds[:4] + [b + 0.2 for b in bounds[4:]]  # one mark late: one step longer, the next shorter
    assert not _clock_slow(steps, early_late)
    assert _clock_slow([s / 3 for s in steps], bounds)  # every step a third as long inside: a slowed clock
    assert _clock_slow(None, bounds) and _clock_slow(["x"] * 10, bounds)  # nothing to tell by: the window decides


def test_a_full_runs_folder_costs_the_traces_not_the_verdict(cal):
    runs = cal.root / "runs"
    with mounted_tmpfs(runs, "200k"):
        (runs / "filler").write_bytes(b"\0" * 150_000)
        mine = cal.root / "fast.py"
        mine.write_text(FAST)
        checked = proflab(cal, "check", "90", "--file", str(mine), "--rounds", "2")
        said = " ".join((checked.stdout + checked.stderr).split())
        assert checked.returncode in (0, 4), said
        assert "Exception in thread" not in said and "Traceback" not in said, said
        assert "trace was not kept for TensorBoard" in said or "summaries were not written" in said, said
        cut_short = [p for p in runs.rglob("*") if p.is_file() and p.name not in ("filler", ".lock")
                     and p.stat().st_size == 0]  # (.lock: the runs folder's lock, empty by design)
        assert cut_short == [], cut_short
