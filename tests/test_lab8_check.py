"""``proflab check 8`` end to end on this machine's CPU: real subprocesses, real timings.

As for the other labs, speed is never asserted against a fixed number of
milliseconds, only the checker's verdicts and what it reports. The batch-norm
counts are exact: the same code runs the same operators on any machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CHECK_NAMES, LEARNER_FILES, Batch, explain, failing, sharing_data, statuses
from proflab import labs

CHEATS = Path(__file__).resolve().parent / "cheats"

SOUND = ["lab8_fx_fuse.py", "lab8_fx_fuse_channels_last.py", "lab8_fuse_modules.py", "lab8_fuse_conv_bn_eval.py",
         "lab8_functional.py"]
PARTIAL = ["lab8_channels_last_only.py", "lab8_bias_after_conv.py"]
ATTEMPTS = ["lab8_identity.py", "lab8_wrong_eps.py", "lab8_manual_bn.py", "lab8_expanded_affine.py",
            "lab8_depthwise_bn.py", "lab8_cached_logits.py"]


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """Every file below, audited (they are plain lab files), checked in one batch (conftest.Batch)."""
    k = sharing_data(tmp_path_factory.mktemp("lab8-kit"), kit)
    return Batch(k, {"8": ({}, [("8", LEARNER_FILES / name, True) for name in SOUND + PARTIAL]
                           + [("8", CHEATS / name, True) for name in ATTEMPTS])})


def grade(batch: Batch, name: str) -> tuple[int, dict]:
    folder = LEARNER_FILES if (LEARNER_FILES / name).exists() else CHEATS
    return batch.decided("8", "8", folder / name)


def test_reference_solution_passes(reference_check):
    code, report = reference_check(8)
    assert code == 0, explain(report)
    assert report["verdict"] == "passed"
    assert report["device"] == "cpu"
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    cmp = report["comparison"]
    assert cmp["speedup"] >= report["threshold"] == labs.resolve("8").threshold("cpu")
    assert cmp["rounds"] >= 2  # the lab's base rounds


def test_reference_runs_no_batch_norm(reference_check):
    _, report = reference_check(8)
    ev = report["evidence"]
    assert ev["metric"] == "batchnorm_calls"
    assert ev["original"]["value"] == 17  # one per convolution: aten::batch_norm
    assert ev["original"]["details"]["aten::batch_norm"] == 17
    assert ev["learner"]["value"] == 0


@pytest.mark.load_free
def test_untouched_exercise_fails(fresh_kit):
    code, report = fresh_kit.check_json("serving")
    assert code == 1
    assert report["verdict"] == "failed"
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    evidence = failing(report)
    assert evidence["rationale"].startswith("batch-norm calls per batch is still 17")
    assert "aten::batch_norm" in evidence["help"]


@pytest.mark.parametrize("name", SOUND)
def test_sound_fixes_pass(batch, name):
    """Every way of folding the batch norms passes, with or without channels_last and inference_mode:
    torch.fx's fuse() alone (the slowest), fuse_modules, fuse_conv_bn_eval, a functional rewrite."""
    code, report = grade(batch, name)
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    assert report["evidence"]["learner"]["value"] == 0


def test_channels_last_alone_fails_on_the_evidence(batch):
    """Faster, but the batch norms still run: the evidence tells it from a fold."""
    code, report = grade(batch, "lab8_channels_last_only.py")
    assert code == 1
    assert statuses(report)["evidence"] == "failed"
    assert report["evidence"]["learner"]["value"] == 17


def test_a_shift_added_after_the_convolution_still_counts(batch):
    code, report = grade(batch, "lab8_bias_after_conv.py")
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    learner = report["evidence"]["learner"]
    assert learner["value"] == 17
    assert "aten::add applying a per-channel tensor" in learner["summary"]


@pytest.mark.parametrize("name", ["lab8_identity.py", "lab8_wrong_eps.py"])
def test_a_wrong_fold_fails_on_results(batch, name):
    code, report = grade(batch, name)
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    same = failing(report)
    assert same["rationale"].startswith("step 0:")
    assert "bn.eps" in same["help"]


@pytest.mark.parametrize("name, calls", [("lab8_manual_bn.py", 68), ("lab8_expanded_affine.py", 17),
                                         ("lab8_depthwise_bn.py", 17)])
def test_batch_norm_spelled_otherwise_still_counts(batch, name, calls):
    code, report = grade(batch, name)
    assert code == 1
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "failed",
                                "faster": "skipped"}
    assert report["evidence"]["learner"]["value"] == calls


def test_logits_cached_in_the_first_step_fail(batch):
    code, report = grade(batch, "lab8_cached_logits.py")
    assert code == 1
    evidence = failing(report)
    assert evidence["name"] == "evidence"
    assert "the profiled steps did not do the work" in evidence["rationale"]
