"""Attempts at gaming the checker, one per trick and lab, each graded through ``proflab check``.

Every attempt in ``tests/cheats`` starts from the lab's own reference fix
(or its original), so the trick is the only thing wrong with it; each must
fail, with a reason a learner understands. Beside them, legitimate
alternative fixes must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CHECK_NAMES, REPO, statuses, explain

CHEATS = Path(__file__).resolve().parent / "cheats"
ALL_LABS = ["1", "2", "3", "4"]


def cheat(kit, monkeypatch, lab: str, name: str) -> tuple[int, dict]:
    """A trick graded with the source audit off: these attempts reach into the kit (the audit refuses
    them at once, tests/test_trust.py), and here the checks behind the audit must catch them alone."""
    monkeypatch.setenv("PROFLAB_CHEAT_LAB", lab)
    monkeypatch.setenv("PROFLAB_AUDIT", "off")
    return kit.check_json(lab, "--file", str(CHEATS / name))


def failed_check(report: dict) -> dict:
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert len(failed) == 1, report
    return failed[0]


# How the checker catches a trick: the check that fails, and what its rationale says.
NO_WORK = ("evidence", "the profiled steps did not do the work")
SLOWER_WHEN_PROFILED = ("same_results", "as long as a timed one")
WORK_BESIDE = ("runs", "work went on beside the timed steps")
CLOCK = ("runs", "something changed the clock")


def caught(report: dict, *ways: tuple[str, str]) -> None:
    check = failed_check(report)
    assert any(check["name"] == name and words in check["rationale"] for name, words in ways), check


@pytest.mark.parametrize("lab", ALL_LABS)
@pytest.mark.parametrize("name", ["cached_at_import.py", "cached_in_warmup.py"])
def test_results_computed_before_the_step_fail(fresh_kit, monkeypatch, lab, name):
    code, report = cheat(fresh_kit, monkeypatch, lab, name)
    assert code == 1, explain(report)
    # Yielding from a cache costs nothing, so even the profiler's own cost per
    # step may make the profiled steps stand out; otherwise they show no work.
    caught(report, NO_WORK, SLOWER_WHEN_PROFILED)
    check = failed_check(report)
    assert "not at import time" in check["help"] or "same work in every step" in check["help"]


@pytest.mark.parametrize("lab", ALL_LABS)
def test_working_only_while_profiled_fails(fresh_kit, monkeypatch, lab):
    code, report = cheat(fresh_kit, monkeypatch, lab, "work_only_when_profiled.py")
    assert code == 1, explain(report)
    caught(report, SLOWER_WHEN_PROFILED)


@pytest.mark.parametrize("lab", ALL_LABS)
def test_a_thread_working_ahead_fails(fresh_kit, monkeypatch, lab):
    code, report = cheat(fresh_kit, monkeypatch, lab, "background_thread.py")
    assert code == 1, explain(report)
    # Caught while it works beside the timed steps; or, if it finished during
    # the warm-up, by profiled steps that do no work of their own.
    caught(report, WORK_BESIDE, NO_WORK, SLOWER_WHEN_PROFILED)


@pytest.mark.parametrize("lab", ALL_LABS)
def test_a_patched_clock_is_found_out(fresh_kit, monkeypatch, lab):
    code, report = cheat(fresh_kit, monkeypatch, lab, "patched_clock.py")
    assert code == 1, explain(report)
    caught(report, CLOCK)


@pytest.mark.parametrize("lab", ALL_LABS)
def test_skipped_steps_fail_on_results(fresh_kit, monkeypatch, lab):
    code, report = cheat(fresh_kit, monkeypatch, lab, "skipped_steps.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert check["rationale"].startswith("step 1:")


@pytest.mark.parametrize("lab", ["1", "2"])
def test_a_smaller_batch_fails_on_results(fresh_kit, monkeypatch, lab):
    code, report = cheat(fresh_kit, monkeypatch, lab, "smaller_batch.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert "has shape" in check["rationale"]


@pytest.mark.parametrize("lab, folder, loop, cut", [
    ("3", "03_fusion", "    for x, target in data.batches(cfg.device):\n",
     "        x, target = x[: len(x) // 2], target[: len(target) // 2]\n"),
    ("4", "04_syncs", "    for step, (x, y) in enumerate(data.batches(cfg.device)):\n",
     "        x, y = x[: len(x) // 2], y[: len(y) // 2]\n"),
])
def test_half_of_each_batch_fails_on_results(fresh_kit, lab, folder, loop, cut):
    """Labs 3 and 4 read fixed batches from their data: the trick is to slice them."""
    source = (REPO / "labs" / folder / "solution.py").read_text()
    assert loop in source
    attempt = fresh_kit.root / "half_batch.py"
    attempt.write_text(source.replace(loop, loop + cut))
    code, report = fresh_kit.check_json(lab, "--file", str(attempt))
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert check["rationale"].startswith("step 0:")


def test_another_seed_fails_on_results(fresh_kit, monkeypatch):
    """Lab 1 shuffles with cfg.seed; labs 2-4 read fixed batches that no seed chooses."""
    code, report = cheat(fresh_kit, monkeypatch, "1", "other_seed.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"


@pytest.mark.parametrize("folder", ["01_dataloader", "02_embeddings", "03_fusion", "04_syncs"])
def test_an_edited_original_cannot_be_graded_against(fresh_kit, folder):
    original = fresh_kit.root / "labs" / folder / "original.py"
    original.write_text(original.read_text() + "\n# made easier\n")
    code, report = fresh_kit.check_json(folder.split("_", 1)[1])
    assert code == 3
    assert report["verdict"] == "error" and "was edited" in report["error"]


def test_an_alternative_lab4_fix_with_bincount_passes_on_cpu(fresh_kit):
    """torch.bincount reads nothing into Python on the CPU (on CUDA it would, once per step)."""
    source = (REPO / "labs" / "04_syncs" / "solution.py").read_text()
    old = "confusion.index_add_(0, y * CLASSES + preds, torch.ones_like(y))"
    assert old in source
    attempt = fresh_kit.root / "bincount.py"
    attempt.write_text(source.replace(old, "confusion += torch.bincount(y * CLASSES + preds, minlength=CLASSES * CLASSES)"))
    code, report = fresh_kit.check_decided("4", "--file", str(attempt))
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")


def test_an_alternative_lab1_fix_with_four_workers_passes(fresh_kit):
    source = (REPO / "labs" / "01_dataloader" / "solution.py").read_text()
    assert "num_workers=8," in source
    attempt = fresh_kit.root / "four_workers.py"
    attempt.write_text(source.replace("num_workers=8,", "num_workers=4,"))
    code, report = fresh_kit.check_decided("1", "--file", str(attempt))
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
