"""``proflab check 9`` (capstone) end to end on this machine's CPU: three bottlenecks, each graded.

The reference passes, the untouched exercise fails naming all three, each fix of one bottleneck alone
fails naming the two left, the sound alternatives pass, and the lab's own attempts at gaming it fail.
Every learner file and attempt is checked in one batch (conftest.Batch: one process, torch imported
once), as ``proflab grade`` grades a class. Speed is never asserted against a number of milliseconds;
the host round trips are exact (the same code reads the same numbers on any machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, REPO, Batch, explain, failing, sharing_data, statuses

from proflab import labs

CHEATS = Path(__file__).resolve().parent / "cheats"
NUMBER = 9

WAIT, TRAFFIC, READS = ("time each step waits on the DataLoader", "elements read per step outside matrix products",
                        "host round trips per step")
SOUND = ["lab9_one_worker.py", "lab9_read_once.py"]
# Each fixes one bottleneck, and leaves the other two.
ONE_FIXED = {"lab9_only_loader.py": (TRAFFIC, READS), "lab9_only_gelu.py": (WAIT, READS),
             "lab9_only_metrics.py": (WAIT, TRAFFIC)}
ATTEMPTS = ["lab9_fewer_samples.py", "lab9_numpy_reads.py", "lab9_direct_read.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """Every file below, audited (they are plain lab files), checked in one batch."""
    k = sharing_data(tmp_path_factory.mktemp("lab9-kit"), kit)
    return Batch(k, {"9": ({}, [("9", LEARNER_FILES / name, True) for name in SOUND + list(ONE_FIXED)]
                           + [("9", CHEATS / name, True) for name in ATTEMPTS])})


def grade(batch: Batch, name: str) -> tuple[int, dict]:
    folder = LEARNER_FILES if (LEARNER_FILES / name).exists() else CHEATS
    return batch.decided("9", str(NUMBER), folder / name)


def test_the_reference_fix_passes_every_evidence(reference_check):
    code, report = reference_check(NUMBER)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    assert [e["label"] for e in report["evidences"]] == [WAIT, TRAFFIC, READS]
    assert all(e["met"] for e in report["evidences"])
    # Every photo of a batch waits on storage in the main process: a floor no machine load lowers.
    lab = labs.resolve(str(NUMBER), labs.discover(REPO / "labs"))
    assert report["evidences"][0]["original"]["value"] >= 0.95 * lab.workload.batch_size * lab.storage.latency_ms
    reads = report["evidences"][2]
    assert reads["original"]["value"] == 4 * lab.workload.batch_size and reads["learner"]["value"] == 0  # 4 a sample
    assert report["evidence"] == {k: v for k, v in report["evidences"][0].items() if k not in ("met", "expected")}
    assert all(label in failing_or_passing(report)["rationale"] for label in (WAIT, TRAFFIC, READS))


def failing_or_passing(report: dict) -> dict:
    return next(c for c in report["checks"] if c["name"] == "evidence")


@pytest.mark.load_free
def test_the_untouched_exercise_fails_naming_all_three(fresh_kit):
    code, report = fresh_kit.check_json(str(NUMBER))
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("3 of the 3 bottlenecks still left: "), explain(report)
    assert all(label in evidence["rationale"] for label in (WAIT, TRAFFIC, READS))
    assert not any(e["met"] for e in report["evidences"])


@pytest.mark.parametrize("name", SOUND)
def test_sound_fixes_pass(batch, name):
    code, report = grade(batch, name)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")


@pytest.mark.parametrize("name", sorted(ONE_FIXED))
def test_fixing_one_bottleneck_fails_naming_the_two_left(batch, name):
    """Fixing only the most visible bottleneck is not enough: the message names what is left, and what is gone."""
    code, report = grade(batch, name)
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    left = ONE_FIXED[name]
    gone = next(label for label in (WAIT, TRAFFIC, READS) if label not in left)
    still, done = evidence["rationale"].split(" (gone: ")
    assert still.startswith("2 of the 3 bottlenecks still left: "), explain(report)
    assert all(label in still for label in left) and gone not in still
    assert done.startswith(gone)
    assert sum(line.startswith("still left: ") for line in evidence["details"]) == 2
    assert [e["met"] for e in report["evidences"]] == [label == gone for label in (WAIT, TRAFFIC, READS)]


def test_metrics_on_fewer_samples_fail_on_results(batch):
    code, report = grade(batch, "lab9_fewer_samples.py")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    # whichever of the books kept over the samples seen differs first on the round's inputs is named
    assert any(f"('{key}')" in failing(report)["rationale"] for key in ("accuracy", "top3", "confidence")), \
        explain(report)


def test_reads_through_numpy_are_refused_before_anything_runs(batch):
    code, report = grade(batch, "lab9_numpy_reads.py")
    assert code == 1
    assert failing(report)["name"] == "runs"
    assert {r["rule"] for r in report["refused"]} == {"untraced_reads"}, report["refused"]
    assert any(".numpy()" in r["code"] for r in report["refused"])


def test_photos_read_around_the_storage_fail_on_results(batch):
    """Read from the data folder, the photos skip the storage's wait: the storage service's log shows it."""
    code, report = grade(batch, "lab9_direct_read.py")
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    assert "were read from the lab's storage" in failing(report)["rationale"], explain(report)
