"""``proflab check 1`` end to end on this machine's CPU: real subprocesses, real timings.

Speed is not asserted against a fixed number of milliseconds: the checker
measures the original and the learner side by side, and these tests assert
only its verdicts and the internal consistency of what it reports.
"""

from __future__ import annotations

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, REPO, failing, statuses, explain
from proflab import labs


def test_reference_solution_passes(solution_check):
    code, report = solution_check
    assert code == 0, explain(report)
    assert report["verdict"] == "passed"
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    cmp = report["comparison"]
    assert cmp["speedup"] >= report["threshold"] == labs.resolve("1").threshold("cpu")
    assert cmp["rounds"] >= 2  # the lab's base rounds
    # every round was timed: one mean step time per run, per version
    assert len(report["timings"]["original"]) == len(report["timings"]["learner"]) == cmp["rounds"] >= 2
    ratios = [o / m for o, m in zip(report["timings"]["original"], report["timings"]["learner"])]
    assert cmp["ratio_low"] == pytest.approx(min(ratios))
    assert cmp["ratio_high"] == pytest.approx(max(ratios))
    assert "noise" in failing_or_faster(report)["actual"]


def failing_or_faster(report):
    return next(c for c in report["checks"] if c["name"] == "faster")


def test_reference_removes_most_of_the_dataloader_wait(solution_check):
    _, report = solution_check
    ev = report["evidence"]
    assert ev["metric"] == "dataloader_wait"
    # Every sample of a batch waits on storage in the main process: a floor no machine load lowers.
    lab = labs.resolve("1", labs.discover(REPO / "labs"))
    latency_ms = lab.storage.latency_ms
    assert ev["original"]["value"] >= 0.95 * lab.workload.batch_size * latency_ms
    assert ev["original"]["details"]["share"] > 2 * ev["learner"]["details"]["share"]
    assert ev["learner"]["value"] <= 0.5 * ev["original"]["value"]
    if ev["learner"]["value"] <= lab.evidence.more_to_gain_above * ev["original"]["value"]:
        evidence = next(c for c in report["checks"] if c["name"] == "evidence")
        assert not any("more to gain" in d for d in evidence["details"])


@pytest.mark.load_free
def test_untouched_exercise_fails_on_the_evidence(exercise_check):
    code, report = exercise_check
    assert code == 1
    assert report["verdict"] == "failed"
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert "DataLoader" in evidence["rationale"]
    assert "Profile › Overview" in evidence["help"] and "Trace timeline" in evidence["help"]
    assert report["comparison"] is None


@pytest.mark.load_free
def test_untouched_exercise_is_recorded_as_failing(exercise_kit, exercise_check):
    listing = exercise_kit.run("list")
    assert listing.returncode == 0
    assert "failing" in listing.stdout


def grade(kit, name: str, *extra: str) -> tuple[int, dict]:
    """Grade one file of tests/learner_files in a kit of its own (its runs never mix with others')."""
    return kit.check_decided("1", "--file", str(LEARNER_FILES / name), *extra)


@pytest.mark.load_free
def test_a_file_that_does_not_parse(fresh_kit):
    code, report = grade(fresh_kit, "lab1_syntax_error.py")
    assert code == 1
    runs = failing(report)
    assert runs["name"] == "runs"
    assert "does not parse" in runs["rationale"]
    assert "lab1_syntax_error.py, line" in runs["rationale"]
    assert "SyntaxError" in runs["actual"]
    # In the terminal, a file refused before it ran names no device it never ran on.
    shown = fresh_kit.run("check", "1", "--file", str(LEARNER_FILES / "lab1_syntax_error.py"))
    assert shown.returncode == 1 and "against the original" in shown.stdout and "on ?" not in shown.stdout


@pytest.mark.load_free
def test_a_file_that_raises_names_the_line(fresh_kit):
    code, report = grade(fresh_kit, "lab1_raises.py")
    assert code == 1
    runs = failing(report)
    assert runs["name"] == "runs"
    assert "lab1_raises.py, line 22" in runs["rationale"]
    assert "step 3" in runs["rationale"]
    assert "AttributeError" in runs["actual"] and "stepp" in runs["actual"]
    assert any("optimizer.stepp()" in line for line in runs["details"])
    assert "Traceback" in report["traceback"], "--verbose has the full traceback to show"


@pytest.mark.load_free
def test_a_file_without_pipeline(fresh_kit):
    code, report = grade(fresh_kit, "lab1_no_pipeline.py")
    assert code == 1
    runs = failing(report)
    assert runs["name"] == "runs"
    assert "defines no pipeline(cfg)" in runs["rationale"]


@pytest.mark.load_free
def test_a_file_that_hangs_is_stopped_at_the_time_limit(fresh_kit):
    # It hangs in its fourth step, whatever the machine: any limit stops it, and a short one costs the suite less.
    code, report = grade(fresh_kit, "lab1_hangs.py", "--timeout", "10")
    assert code == 1
    runs = failing(report)
    assert runs["name"] == "runs"
    assert "did not finish within the time limit (10 s)" in runs["rationale"]
    assert report["duration_s"] < 60


@pytest.mark.load_free
def test_a_file_that_crashes_the_interpreter(fresh_kit, monkeypatch):
    # It crashes through ctypes, which the source audit refuses (tests/test_audit.py): with the audit
    # off, the run itself shows how a crash is reported.
    monkeypatch.setenv("PROFLAB_AUDIT", "off")
    code, report = grade(fresh_kit, "lab1_crashes.py")
    assert code == 1
    runs = failing(report)
    assert runs["name"] == "runs"
    assert "killed by SIGSEGV" in runs["rationale"]


@pytest.mark.load_free
def test_skipping_batches_fails_on_results(fresh_kit):
    code, report = grade(fresh_kit, "lab1_skips_batches.py")
    assert code == 1
    same = failing(report)
    assert same["name"] == "same_results"
    assert same["rationale"].startswith("step 1: the labels of the batch ('labels') differ")
    assert "same samples in the same order" in same["help"]


@pytest.mark.load_free
def test_a_smaller_batch_fails_on_results(fresh_kit):
    code, report = grade(fresh_kit, "lab1_smaller_batch.py")
    assert code == 1
    same = failing(report)
    assert same["name"] == "same_results"
    assert "has shape (16,), the original's (32,)" in same["rationale"]


@pytest.mark.load_free
def test_the_human_report_is_short_and_has_no_traceback(fresh_kit):
    proc = fresh_kit.run("check", "1", "--file", str(LEARNER_FILES / "lab1_raises.py"))
    assert proc.returncode == 1
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text
    assert "lab1_raises.py, line 22" in text
    assert len(text.splitlines()) < 30
    verbose = fresh_kit.run("check", "1", "--file", str(LEARNER_FILES / "lab1_raises.py"), "--verbose")
    assert "Traceback" in verbose.stdout
