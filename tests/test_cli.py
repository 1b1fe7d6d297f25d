"""The learner's commands, through the real CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import as_in_a_terminal
from proflab import quiet


def test_list_shows_every_lab_with_a_status(fresh_kit):
    proc = fresh_kit.run("list")
    assert proc.returncode == 0
    assert "dataloader" in proc.stdout and "The starved DataLoader" in proc.stdout
    assert "not started" in proc.stdout


def test_hints_come_one_at_a_time_and_are_remembered(fresh_kit):
    first = fresh_kit.run("hint", "1")
    second = fresh_kit.run("hint", "dataloader")
    assert "Hint 1/3" in first.stdout and "Hint 2/3" in second.stdout
    assert "num_workers" not in first.stdout, "the first hint does not give the answer away"
    progress = json.loads((fresh_kit.root / ".proflab" / "progress.json").read_text())
    assert progress["labs"]["dataloader"]["hints_shown"] == 2
    assert "Hint 3/3" in fresh_kit.run("hint", "1", "--all").stdout


def test_the_last_hint_says_it_is_the_last(fresh_kit):
    for _ in range(2):
        fresh_kit.run("hint", "1")
    last = fresh_kit.run("hint", "1")
    assert "Hint 3/3 (the last)" in last.stdout and "That was the last hint" in last.stdout
    assert "(the last)" not in fresh_kit.run("hint", "2").stdout


def test_a_misspelt_lab_gets_a_did_you_mean(fresh_kit):
    proc = fresh_kit.run("hint", "dataloder")
    assert proc.returncode == 2 and "Did you mean 'dataloader'?" in proc.stderr
    assert "Did you mean" not in fresh_kit.run("hint", "warp-drive").stderr


def test_list_suggests_the_next_unfinished_lab(fresh_kit):
    assert "Start with: proflab run 0" in fresh_kit.run("list").stdout
    progress = fresh_kit.root / ".proflab" / "progress.json"
    progress.parent.mkdir(exist_ok=True)
    progress.write_text(json.dumps({"labs": {"profiler": {"status": "passed"}, "dataloader": {"status": "passed"}}}))
    listed = fresh_kit.run("list").stdout
    assert "Next: proflab run 2" in listed and "Start with" not in listed
    assert "`proflab reset` does not change it" in listed


def test_a_deleted_exercise_points_at_reset(fresh_kit):
    (fresh_kit.lab1 / "exercise.py").unlink()
    for command in ("run", "check"):
        proc = fresh_kit.run(command, "1")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "exercise.py is missing" in proc.stderr and "proflab reset 1" in proc.stderr
        assert "Traceback" not in proc.stdout + proc.stderr and "frozen" not in proc.stdout + proc.stderr


def test_reset_keeps_a_backup_and_restores_the_exercise(fresh_kit):
    exercise = fresh_kit.lab1 / "exercise.py"
    mine = exercise.read_text().replace("num_workers=0", "num_workers=3")
    exercise.write_text(mine)
    proc = fresh_kit.run("reset", "1")
    assert proc.returncode == 0
    assert exercise.read_bytes() == (fresh_kit.lab1 / "original.py").read_bytes()
    backups = list((fresh_kit.root / ".proflab" / "backups" / "01-dataloader").glob("exercise-*.py"))
    assert len(backups) == 1 and backups[0].read_text() == mine
    assert backups[0].name in proc.stdout
    again = fresh_kit.run("reset", "1")
    assert "already untouched" in again.stdout


def test_an_edited_original_is_noticed(fresh_kit):
    original = fresh_kit.lab1 / "original.py"
    original.write_text(original.read_text().replace("num_workers=0", "num_workers=1"))
    proc = fresh_kit.run("check", "1")
    assert proc.returncode == 3
    assert "original.py was edited" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_usage_errors_exit_with_2(fresh_kit):
    unknown = fresh_kit.run("check", "warp-drive")
    assert unknown.returncode == 2
    assert "no lab called 'warp-drive'" in unknown.stderr and "1 (dataloader)" in unknown.stderr
    missing = fresh_kit.run("check", "1", "--file", "nowhere.py")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    assert fresh_kit.run("check").returncode == 2
    assert fresh_kit.run("run", "1", "--device", "tpu").returncode == 2


def test_run_profiles_the_exercise_and_prints_the_table(fresh_kit):
    proc = fresh_kit.run("run", "1")
    assert proc.returncode == 0, proc.stderr
    assert 'sort_by="self_cpu_time_total"' in proc.stdout
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter" in proc.stdout
    assert "train_step" in proc.stdout, "the lab's record_function label is a row of its own"
    traces = list((fresh_kit.root / "runs" / "01-dataloader" / "yours").glob("yours.*.pt.trace.json"))
    assert len(traces) == 1
    assert "proflab tensorboard" in proc.stdout
    for noise in ("gpuGetDeviceCount", "USDT:", "STAGE:", "Warning", "Traceback"):
        assert noise not in proc.stdout + proc.stderr


def test_the_lab_file_runs_directly_with_python(fresh_kit):
    proc = subprocess.run([sys.executable, "solution.py"], cwd=fresh_kit.lab1, env=fresh_kit.env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    traces = list((fresh_kit.root / "runs" / "01-dataloader" / "reference").glob("*.pt.trace.json"))
    assert traces, proc.stdout
    # its DataLoader's workers are in the trace (the printed table lists the costliest rows only: with the
    # workers ahead, the wait for a batch may be too small to be one of them)
    names = {e.get("name", "") for e in json.loads(traces[0].read_text())["traceEvents"]}
    assert any("_MultiProcessingDataLoaderIter" in n for n in names), sorted(names)[:40]


def test_heavy_profiler_options_are_opt_in(fresh_kit):
    proc = fresh_kit.run("run", "1", "--version", "solution", "--record-shapes", "--with-stack")
    assert proc.returncode == 0, proc.stderr
    trace = next((fresh_kit.root / "runs" / "01-dataloader" / "reference").glob("*.pt.trace.json"))
    events = json.loads(trace.read_text())["traceEvents"]
    assert any("Input Dims" in e.get("args", {}) for e in events)
    assert any(e.get("cat") == "python_function" for e in events)


def test_kineto_noise_is_recognised_and_real_errors_are_not():
    assert quiet.is_noise("ERROR:2026-11-30 00:47:54 1917:1917 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35")
    assert quiet.is_noise("USDT:2026-11-30 00:47:54 1917:1917 SyncActivityProfilerHandler.cpp:39] profiler_start")
    assert not quiet.is_noise("RuntimeError: CUDA out of memory")
    assert not quiet.is_noise("ERROR: my own message")


def _runner_processes(root) -> list[str]:
    """Command lines of every live process the kit started for runs under ``root``: the runs (a fresh
    ``proflab.running.runner``, or a child of the fork server, whose command line it keeps) and the server."""
    found, needle = [], f"PROFLAB_ROOT={root}".encode()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if not ("proflab.running.runner" in cmdline or "proflab.running.serve" in cmdline):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                continue
            if str(root) in cmdline or needle in (proc / "environ").read_bytes().split(b"\0"):
                found.append(cmdline)
        except OSError:
            continue
    return found


def _a_run_started(root) -> bool:
    tmp = root / ".proflab" / "tmp"  # a run's folder: in its sandbox's box, or (unsandboxed) on its own
    return any(p.is_dir() for p in [*tmp.glob("run-*"), *tmp.glob("box-*/run-*")])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_stopping_a_check_stops_everything_it_started(fresh_kit, sig):
    proc = subprocess.Popen([sys.executable, "-m", "proflab", "check", "1"], cwd=fresh_kit.root,
                            preexec_fn=as_in_a_terminal,
                            env=fresh_kit.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (_a_run_started(fresh_kit.root) and _runner_processes(fresh_kit.root)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _runner_processes(fresh_kit.root), "the check never started a run"
    time.sleep(3)  # mid-run: torch imported, DataLoader loading
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Interrupted" in err and "Traceback" not in err
    time.sleep(0.5)
    assert _runner_processes(fresh_kit.root) == []
    assert not (fresh_kit.root / ".proflab" / "progress.json").exists(), "no verdict is recorded for a stopped check"
    assert list((fresh_kit.root / ".proflab" / "tmp").iterdir()) == []


def test_quickstart_prepares_data_grades_the_reference_and_says_where_to_look(fresh_kit):
    proc = fresh_kit.run("quickstart")
    # the reference's verdict, as a busy machine gives it (it passes, measured alone: test_lab1_check.py)
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr
    out = proc.stdout
    assert "lab 1 (dataloader): data ready in" in out and "photos" in out
    assert ("PASSED · lab 1 (dataloader)" in out) == (proc.returncode == 0), out
    assert "INCONCLUSIVE" in out or proc.returncode == 0, out
    assert "checking the lab's reference fix, labs/01_dataloader/solution.py against the original on cpu" in out
    assert "Your turn:" in out and "proflab check 1" in out
    assert "Traces: runs/01-dataloader/" in out and "proflab tensorboard" in out
    assert list((fresh_kit.root / "runs" / "01-dataloader" / "reference").glob("*.pt.trace.json"))
    assert not (fresh_kit.root / ".proflab" / "progress.json").exists() or \
        "dataloader" not in json.loads((fresh_kit.root / ".proflab" / "progress.json").read_text())["labs"], \
        "grading the reference is not the learner's progress"


def test_run_shows_the_spread_of_its_steps_and_how_it_compares_with_the_originals_last_run(fresh_kit):
    """`proflab run` gives the step time with its spread, the CPU time read from outside, and, after a
    run of the original, whether the difference is beyond the noise of the two runs."""
    first = fresh_kit.run("run", "2", "--version", "solution")
    assert first.returncode == 0, first.stderr
    assert "half of the steps within" in first.stdout and "CPU time of the run's processes" in first.stdout
    assert "To compare: proflab run embeddings --version original" in first.stdout
    original = fresh_kit.run("run", "2", "--version", "original")
    assert original.returncode == 0, original.stderr
    assert "Against the original" not in original.stdout
    again = fresh_kit.run("run", "2", "--version", "solution")
    assert again.returncode == 0, again.stderr
    said = next(line for line in again.stdout.splitlines() if line.startswith("Against the original's last run"))
    assert "the original's speed" in said and "beyond the noise of two runs" in said, again.stdout
    assert said.count("median") == 2 and said.count("half within") == 2, said  # each run's spread


def test_run_calls_a_difference_within_what_two_runs_can_differ_noise(fresh_kit, monkeypatch):
    """Two runs made at different times differ with the machine's load: a fix whose run came out slower
    than the original's last run (lab 6's correct fix printed 166.9 -> 213.4 ms) is within the noise, not a
    regression, unless the gap is beyond what two runs can differ. The steps of a real run of lab 3's fix,
    compared with an original's run planted 1.18x and 3.3x faster than them."""
    from proflab import labs, progress
    from proflab.commands import common, running

    first = fresh_kit.run("run", "3", "--version", "solution")
    assert first.returncode == 0, first.stderr
    monkeypatch.setenv("PROFLAB_ROOT", str(fresh_kit.root))
    mine = progress.load()["step_times"]["03-fusion/reference"]
    lab = labs.resolve("3")
    for factor, within in ((0.85, True), (0.3, False)):
        progress.remember_steps("03-fusion", "original", {**mine, "step_times": [
            t * factor for t in mine["step_times"]]})
        with common.out.capture() as captured:
            running._against_original(lab, "reference", {"step_times": mine["step_times"], "device": "cpu"}, None)
        said = next(line for line in captured.get().splitlines() if line.startswith("Against the original's last"))
        assert "slower than the original" in said, said
        if within:
            assert "within the noise: two runs made at different times differ by up to" in said, said
        else:
            assert "beyond the noise of two runs" in said, said
