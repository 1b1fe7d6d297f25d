"""Sound alternative fixes pass: what a real learner writes instead of the reference fix, each graded through
the real checker (``conftest.Batch``), audited. The attempts that must fail are in tests/test_trust.py; these
rest on a speed-up measured here, so they run with the modules measured alone (``MEASURED_MODULES``)."""

from __future__ import annotations

import pytest

from conftest import LEARNER_FILES, chain_names, Batch, explain, sharing_data, statuses
from proflab.grading.checks.faster import START_UP_SHARE_SHOWN
from test_trust import lab_of, refused

SOUND = ["lab1_workers2.py", "lab1_workers16.py", "lab1_threadpool.py", "lab1_cpu_count.py", "lab3_foreach.py",
         "lab2_functional_bag.py", "lab2_index_add.py", "lab2_sparse.py",
         "lab3_inplace_builtins.py", "lab3_sdpa_only.py", "lab4_four_items.py", "lab4_preallocated.py",
         "lab2_padded_gather.py", "lab2_padded_lists.py", "lab4_bincount.py", "lab8_optimize_for_inference.py",
         "lab0_export_chrome_trace.py"]
WHOLE_EPOCH = "lab1_workers32.py"


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """The sound fixes, and the loader that asks for the whole epoch, audited, in one batch."""
    return Batch(sharing_data(tmp_path_factory.mktemp("trust-sound-kit"), kit), {
        "sound": ({}, [(str(lab_of(n).number), LEARNER_FILES / n, True) for n in SOUND + [WHOLE_EPOCH]]),
    })


# --- sound fixes pass ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SOUND)
def test_a_sound_alternative_fix_passes(batch, name):
    assert not refused(LEARNER_FILES / name, lab_of(name))
    code, report = batch.decided("sound", str(lab_of(name).number), LEARNER_FILES / name)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(chain_names(lab_of(name)), "passed")
    if name == "lab1_workers2.py":  # two workers may still leave a fifth of the wait: the report says so then
        evidence = next(c for c in report["checks"] if c["name"] == "evidence")
        left = report["evidence"]["learner"]["value"] / report["evidence"]["original"]["value"]
        said = any(d.startswith("more to gain: time each step waits on the DataLoader is still")
                   for d in evidence["details"])
        assert said == (left > lab_of(name).evidence.more_to_gain_above), (left, explain(report))


def test_a_scripted_frozen_models_convolutions_are_its_work(batch):
    """Lab 8 with torch.jit.optimize_for_inference: its convolutions, prepacked for oneDNN, leave no
    operator in the trace; the activations they write count them, every one of the original's 17."""
    code, report = batch.decided("sound", "8", LEARNER_FILES / "lab8_optimize_for_inference.py")
    assert code == 0, explain(report)
    evidence = next(c for c in report["checks"] if c["name"] == "evidence")
    assert report["evidence"]["learner"]["value"] == 0.0, explain(report)
    assert evidence["status"] == "passed", explain(report)


def test_a_trace_written_under_a_name_of_its_own_is_read(batch):
    """Lab 0 with prof.export_chrome_trace(cfg.trace_dir / "trace.json") in on_trace_ready: the one trace in
    the folder, read whatever its name, and graded as any other."""
    code, report = batch.decided("sound", "0", LEARNER_FILES / "lab0_export_chrome_trace.py")
    assert code == 0, explain(report)
    assert report["evidence"]["metric"] == "own_profile" and report["evidence"]["steps"] == 3, explain(report)
    assert all(a["right"] for a in report["evidence"]["answers"].values()), explain(report)


def test_a_loader_that_asks_for_the_whole_epoch_at_once_is_told_its_start_up_counts(batch):
    """32 workers with prefetch_factor=2 ask for all 64 batches of the epoch before the first step ends.

    A sound loader for a long epoch, and its trace is clean; but on 2 cores the first batch arrives
    only after most of the epoch is decoded (measured: a first step of 1.9-3.2 s, against 0.69 s with
    the reference's 8 workers and 0.96 s left out for start-up), and the check takes 11 steps: its
    speed-up here lands near the 1.5x threshold (1.5-2.1x, often inconclusive). The report must say
    where the time went, whatever the verdict.
    """
    name = WHOLE_EPOCH
    assert not refused(LEARNER_FILES / name, lab_of(name))
    code, report = batch.report("sound", LEARNER_FILES / name)
    found = statuses(report)
    assert (found["runs"], found["same_results"], found["evidence"]) == ("passed",) * 3, explain(report)
    assert found["faster"] in ("passed", "inconclusive", "failed") and code in (0, 1, 4), explain(report)
    first = report["first_step"]
    assert first["learner_s"] > first["allowance_s"], explain(report)  # by construction: the epoch comes first
    faster = next(c for c in report["checks"] if c["name"] == "faster")
    line = next((d for d in faster["details"] if d.startswith("start-up: your first step took")), None)
    # The line is said exactly when the excess weighs (how much it weighs depends on the machine).
    workload = lab_of(name).workload
    counted = report["comparison"]["learner_s"] * max(workload.warmup_steps + workload.timed_steps - 1, 1)
    weighs = (first["learner_s"] - first["allowance_s"]) / counted >= START_UP_SHARE_SHOWN
    assert (line is not None) == weighs, explain(report)
    if line is not None:
        assert f"{first['learner_s']:.2f} s" in line and f"{first['allowance_s']:.2f} s" in line, line


def test_samples_loaded_by_threads_beside_the_steps_still_pass(batch):
    """Lab 1's thread-pool fix: its reads are in the trace, on the pool's threads, while the step trains
    (the loading attempts that must fail: tests/test_evidence_spellings.py)."""
    code, report = batch.decided("sound", "1", LEARNER_FILES / "lab1_threadpool.py")
    assert code == 0, explain(report)
    assert set(statuses(report).values()) == {"passed"}, explain(report)
    wait = report["evidence"]
    assert wait["metric"] == "dataloader_wait", explain(report)
    assert wait["learner"]["value"] < 0.2 * wait["original"]["value"], explain(report)
