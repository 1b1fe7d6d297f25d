"""A control before any blame: a learner's run that fails in a way the machine or the kit could cause (the
sandbox engine failing or hanging after its start-up probe, a signal, the lab's data unreadable) is not
failed until the original has run the same way. If the original fails too, the fault is the kit's or the
machine's: exit 3, and nothing is recorded against the learner (progress, grade).

Each test drives the real command on the calibration lab (tests/calibration: steps that sleep 20 ms), with
a real engine that passes its probe and then breaks (bubblewrap behind a wrapper, ``PROFLAB_BWRAP``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, Kit
from test_grade import make_kit, variant, write_folder

FAST = variant(4.0)
CRASHES = variant(4.0).replace("def pipeline(cfg):", "import os\n\n\ndef pipeline(cfg):\n    os.abort()\n", 1)

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def proflab(kit: Kit, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proflab", *args], cwd=kit.root, env=kit.env(env),
                          capture_output=True, text=True, timeout=timeout)


def broken_engine(folder: Path, after_probe: str) -> Path:
    """bubblewrap, behind a wrapper that lets the kit's start-up probe through and then ``after_probe``
    (a shell command) for every sandbox the kit starts."""
    wrapper = folder / "bwrap"
    wrapper.write_text("#!/bin/sh\n"
                       'case "$*" in *"import proflab.running.runner"*) exec ' + shutil.which("bwrap") + ' "$@";; esac\n'
                       + after_probe + "\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


@pytest.fixture
def cal(tmp_path) -> Kit:
    return make_kit(tmp_path / "kit")


def progress(kit: Kit) -> dict:
    path = kit.root / ".proflab" / "progress.json"
    return json.loads(path.read_text()) if path.exists() else {}


@needs_bwrap
def test_an_engine_that_fails_every_run_after_its_probe_is_the_kits_fault_not_the_learners(cal, tmp_path):
    mine = cal.root / "mine.py"
    mine.write_text(FAST)
    env = {"PROFLAB_BWRAP": str(broken_engine(tmp_path, "exit 1"))}
    done = proflab(cal, "check", "90", "--file", str(mine), "--json", env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "error", report
    assert "so did the original's, run the same way as a control" in report["error"], report["error"]
    assert "90" not in json.dumps(progress(cal).get("labs", progress(cal))), progress(cal)
    folder = write_folder(cal.root / "class", {"ann/90.py": FAST})
    record = tmp_path / "grades.json"
    graded = proflab(cal, "grade", str(folder), "--json-out", str(record), env=env)
    assert graded.returncode in (0, 3), graded.stderr
    verdicts = {s["learner"]: s["verdict"] for s in json.loads(record.read_text())["submissions"]}
    assert verdicts == {"ann": "error"}, verdicts  # not "failed": nothing counted against ann


def test_a_crash_of_the_learners_own_is_still_the_learners_and_says_the_control_ran(cal):
    mine = cal.root / "mine.py"
    mine.write_text(CRASHES)
    done = proflab(cal, "check", "90", "--file", str(mine), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    runs = next(c for c in report["checks"] if c["name"] == "runs")
    assert runs["status"] == "failed", report
    assert any("run the same way as a control, ran through" in line for line in runs["details"]), runs


@needs_bwrap
@pytest.mark.slow  # waits out the calibration lab's limit
def test_an_engine_that_hangs_after_its_probe_is_given_up_within_the_runs_limit(cal, tmp_path):
    """The run server is waited for no longer than the run itself may take (the calibration lab's limit),
    then the check ends as the kit's failure, exit 3, its turn at the machine given back."""
    mine = cal.root / "mine.py"
    mine.write_text(FAST)
    env = {"PROFLAB_BWRAP": str(broken_engine(tmp_path, "exec sleep 600"))}
    limit = 10  # the calibration lab's limit, made shorter: waited out once
    manifest = cal.root / "labs" / "90_calibration" / "lab.toml"
    text = manifest.read_text(encoding="utf-8")
    assert "timeout_s = 60" in text
    manifest.write_text(text.replace("timeout_s = 60", f"timeout_s = {limit}"), encoding="utf-8")
    done = proflab(cal, "check", "90", "--file", str(mine), "--json", env=env, timeout=limit * 2 + 60)
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert "started no run server within" in report["error"], report["error"]
    assert "90" not in json.dumps(progress(cal).get("labs", progress(cal))), progress(cal)


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, a file made unreadable is unreadable to the sandbox only")
def test_lab_data_the_runs_cannot_read_is_the_machines_fault(kit, tmp_path):
    """Lab 2's data, present and fingerprinted, but unreadable to the runs: the learner's run fails reading
    it, and so does the original's, run the same way: exit 3, the learner not blamed."""
    root = tmp_path / "kit"
    shutil.copytree(REPO / "labs", root / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(kit.root / "data" / "requests", root / "data" / "requests")  # lab 2's own, a copy
    requests = root / "data" / "requests" / "requests.pt"
    requests.chmod(0)
    done = proflab(Kit(root), "check", "2", "--file", str(REPO / "labs" / "02_embeddings" / "solution.py"), "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert "so did the original's, run the same way as a control" in report["error"], report["error"]
    assert "Permission denied" in report["error"], report["error"]


@pytest.mark.skipif(os.geteuid() != 0, reason="a small disk of its own needs mount (root)")
def test_a_journal_on_a_full_disk_never_takes_a_verdict_with_it(cal, tmp_path):
    """The grading's outputs, and its journal beside them, on a disk that fills up during the grading: the
    verdict is printed, the journal's failure names its file, and the journal never ends in half a line."""
    folder = write_folder(cal.root / "class", {"ann/90.py": FAST})
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                      capture_output=True, timeout=30).returncode != 0:
        pytest.skip("tmpfs cannot be mounted here")
    proc = subprocess.Popen([sys.executable, "-m", "proflab", "grade", str(folder), "--out", str(full / "class.json")],
                            cwd=cal.root, env=cal.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any("journal" in p.name and p.stat().st_size for p in full.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, "the grading never began its journal"
            time.sleep(0.01)
        try:  # the disk fills up while the submission is graded
            with open(full / "fill", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        stdout, stderr = proc.communicate(timeout=240)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        journals = [p for p in full.iterdir() if "journal" in p.name and not p.name.endswith(".lock")]
        lines = [journal.read_bytes() for journal in journals]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        subprocess.run(["umount", str(full)], timeout=30)
    said = " ".join(done.stderr.split())
    assert done.returncode == 3, done.stdout + done.stderr
    assert "ann" in said and ("passed" in said or "inconclusive" in said), said  # the verdict, printed
    assert "cannot write the journal" in said and "No space left on device" in said, said
    assert all(text.endswith(b"\n") for text in lines if text), lines  # whole lines only


@pytest.mark.skipif(os.geteuid() != 0, reason="a small disk of its own needs mount (root)")
def test_a_full_runs_folder_is_named_as_runs_not_as_the_checks_scratch(cal):
    """runs/ on a disk of its own that is full: the verdict stands, and the note names runs/, where the
    trace could not go, not the check's private copy it came from."""
    runs = cal.root / "runs"
    runs.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(runs)],
                      capture_output=True, timeout=30).returncode != 0:
        pytest.skip("tmpfs cannot be mounted here")
    try:
        mine = cal.root / "mine.py"
        mine.write_text(FAST)
        done = proflab(cal, "check", "90", "--file", str(mine), "--json")
    finally:
        subprocess.run(["umount", str(runs)], timeout=30)
    assert done.returncode in (0, 4), done.stdout + done.stderr
    notes = " ".join(json.loads(done.stdout)["notes"])
    assert "was not kept for TensorBoard (cannot write into runs/90-calibration" in notes, notes
    assert ".proflab" not in notes, notes


@needs_bwrap
def test_the_autograder_gives_no_points_either_way_when_the_control_fails_too(cal, tmp_path):
    submission = write_folder(tmp_path / "submission", {"90.py": FAST})
    results = tmp_path / "results" / "results.json"
    env = {"PROFLAB_BWRAP": str(broken_engine(tmp_path, "exit 1"))}
    done = proflab(cal, "autograder", "run", "--submission", str(submission), "--results", str(results), env=env)
    assert done.returncode == 0, done.stderr  # run_autograder's contract: results.json, whatever happens
    graded = json.loads(results.read_text())
    labs = [t for t in graded["tests"] if t.get("max_score")]
    assert labs and all(t.get("score") is None for t in labs), labs  # not graded: no zero counted
    assert all("so did the original's" in t["output"] for t in labs), labs
