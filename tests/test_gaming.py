"""Attempts at gaming the checker, one per trick and lab, each graded through ``proflab check``.

Every attempt in ``tests/cheats`` starts from the lab's own reference fix
(or its original), so the trick is the only thing wrong with it; each must
fail, with a reason a learner understands. Beside them, legitimate
alternative fixes must pass.

Each lab's attempts are checked in one batch (``conftest.Batch``: the
checker's own ``checks.check``, one fork server per lab, as ``proflab grade``
grades a class), and each test reads its attempt's report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CHECK_NAMES, REPO, Batch, kit_labs, pipeline_labs, sharing_data, statuses, explain

CHEATS = Path(__file__).resolve().parent / "cheats"
ALL_LABS = pipeline_labs()  # every lab the generic tricks apply to, found in labs/

# The tricks tried on every lab, and those tried on some.
TRICKS = ["cached_at_import.py", "cached_in_warmup.py", "work_only_when_profiled.py", "background_thread.py",
          "patched_clock.py", "skipped_steps.py"]
MORE_TRICKS = {"1": ["smaller_batch.py", "other_seed.py"], "2": ["smaller_batch.py"]}

# A lab's reference fix with one line changed: name -> (lab, lab folder, the line, what it becomes).
LOOP3 = "    for x, target in data.batches(cfg.device):\n"
LOOP4 = "    for step, (x, y) in enumerate(data.batches(cfg.device)):\n"
VARIANTS = {
    # Labs 3 and 4 read fixed batches from their data: the trick is to slice them.
    "half_batch_3": ("3", "03_fusion", LOOP3, LOOP3 + "        x, target = x[: len(x) // 2], target[: len(target) // 2]\n"),
    "half_batch_4": ("4", "04_syncs", LOOP4, LOOP4 + "        x, y = x[: len(x) // 2], y[: len(y) // 2]\n"),
    # torch.bincount reads the largest id to size its output: a read, once a step, which lab 4 does not count
    # on the CPU (one bincount a step is allowed there; on CUDA it waits for the device, and counts).
    "bincount": ("4", "04_syncs", "confusion.index_add_(0, y * CLASSES + preds, torch.ones_like(y))",
                 "confusion += torch.bincount(y * CLASSES + preds, minlength=CLASSES * CLASSES)"),
    "four_workers": ("1", "01_dataloader", "num_workers=8,", "num_workers=4,"),
}


@pytest.fixture(scope="module")
def batch(kit, tmp_path_factory) -> Batch:
    """Each lab's tricks, graded with the source audit off (PROFLAB_CHEAT_LAB names the lab they target):
    these attempts reach into the kit (the audit refuses them at once, tests/test_trust.py), and here the
    checks behind the audit must catch them alone. And the variants of the reference fixes, audited."""
    k = sharing_data(tmp_path_factory.mktemp("gaming-kit"), kit)
    groups = {lab: ({"PROFLAB_CHEAT_LAB": lab}, [(lab, CHEATS / name, False)
                                                 for name in TRICKS + MORE_TRICKS.get(lab, [])])
              for lab in ALL_LABS}
    variants = []
    for name, (lab, folder, old, new) in VARIANTS.items():
        source = (REPO / "labs" / folder / "solution.py").read_text()
        assert old in source, (name, old)
        (k.root / f"{name}.py").write_text(source.replace(old, new))
        variants.append((lab, k.root / f"{name}.py", True))
    groups["variants"] = ({}, variants)
    return Batch(k, groups)


def cheat(batch: Batch, lab: str, name: str) -> tuple[int, dict]:
    code, report = batch.report(lab, CHEATS / name)
    assert report["audited"] is False
    return code, report


def failed_check(report: dict) -> dict:
    failed = [c for c in report["checks"] if c["status"] == "failed"]
    assert len(failed) == 1, report
    return failed[0]


# How the checker catches a trick: the check that fails, and what its rationale says.
NO_WORK = ("evidence", "the profiled steps did not do the work")
SLOWER_WHEN_PROFILED = ("same_results", "inside operators as a whole timed step")
WORK_BESIDE = ("runs", "work went on beside the timed steps")
CLOCK = ("runs", "something changed the clock")
# Values computed before the step from a cfg of its own guessing: each round's inputs are the checker's, new
OTHER_INPUTS = ("same_results", "differs")
# Lab 3 hands out each step's batch only as the step begins (labkit.handout): a batch asked for ahead is refused
HANDED_OUT = ("runs", "only as that step begins")


def caught(report: dict, *ways: tuple[str, str]) -> None:
    check = failed_check(report)
    said = check["rationale"] + " " + str(check.get("actual") or "")  # what it found, and what it saw
    assert any(check["name"] == name and words in said for name, words in ways), check


@pytest.mark.parametrize("lab", ALL_LABS)
@pytest.mark.parametrize("name", ["cached_at_import.py", "cached_in_warmup.py"])
def test_results_computed_before_the_step_fail(batch, lab, name):
    code, report = cheat(batch, lab, name)
    assert code == 1, explain(report)
    # Yielding from a cache costs nothing, so even the profiler's own cost per
    # step may make the profiled steps stand out; otherwise they show no work.
    caught(report, OTHER_INPUTS, NO_WORK, SLOWER_WHEN_PROFILED, *([HANDED_OUT] if lab == "3" else []))
    check = failed_check(report)
    assert (check["name"] in ("same_results", "runs") or "not at import time" in check["help"]
            or "same work in every step" in check["help"]), check


@pytest.mark.parametrize("lab", ALL_LABS)
def test_working_only_while_profiled_fails(batch, lab):
    code, report = cheat(batch, lab, "work_only_when_profiled.py")
    assert code == 1, explain(report)
    caught(report, SLOWER_WHEN_PROFILED, *([HANDED_OUT] if lab == "3" else []))


@pytest.mark.parametrize("lab", ALL_LABS)
def test_a_thread_working_ahead_fails(batch, lab):
    code, report = cheat(batch, lab, "background_thread.py")
    assert code == 1, explain(report)
    # Caught while it works beside the timed steps; or, if it finished during
    # the warm-up, by profiled steps that do no work of their own; in lab 3, as it asks for a later batch.
    caught(report, WORK_BESIDE, NO_WORK, SLOWER_WHEN_PROFILED, *([HANDED_OUT] if lab == "3" else []))


@pytest.mark.parametrize("lab", ALL_LABS)
def test_a_patched_clock_is_found_out(batch, lab):
    code, report = cheat(batch, lab, "patched_clock.py")
    assert code == 1, explain(report)
    caught(report, CLOCK)


@pytest.mark.parametrize("lab", ALL_LABS)
def test_skipped_steps_fail_on_results(batch, lab):
    code, report = cheat(batch, lab, "skipped_steps.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert check["rationale"].startswith("step 1:")


@pytest.mark.parametrize("lab", ["1", "2"])
def test_a_smaller_batch_fails_on_results(batch, lab):
    code, report = cheat(batch, lab, "smaller_batch.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert "has shape" in check["rationale"]


@pytest.mark.parametrize("lab", ["3", "4"])
def test_half_of_each_batch_fails_on_results(batch, lab):
    code, report = batch.report("variants", batch.kit.root / f"half_batch_{lab}.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"
    assert check["rationale"].startswith("step 0:")


def test_another_seed_fails_on_results(batch):
    """Lab 1 shuffles with cfg.seed; labs 2-4 read fixed batches that no seed chooses."""
    code, report = cheat(batch, "1", "other_seed.py")
    assert code == 1, explain(report)
    check = failed_check(report)
    assert check["name"] == "same_results"


@pytest.mark.parametrize("folder", [lab.folder.name for lab in kit_labs() if str(lab.number) in ALL_LABS])
def test_an_edited_original_cannot_be_graded_against(fresh_kit, folder):
    original = fresh_kit.root / "labs" / folder / "original.py"
    original.write_text(original.read_text() + "\n# made easier\n")
    code, report = fresh_kit.check_json(folder.split("_", 1)[1])
    assert code == 3
    assert report["verdict"] == "error" and "was edited" in report["error"]


@pytest.mark.parametrize("name, lab", [("bincount", "4"), ("four_workers", "1")])
def test_alternative_fixes_pass(batch, name, lab):
    """Lab 4's confusion matrix counted with torch.bincount; lab 1's loader with four workers, not eight."""
    code, report = batch.decided("variants", lab, batch.kit.root / f"{name}.py")
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(CHECK_NAMES, "passed")
    if name == "bincount":  # the read is seen, and allowed: one a step
        assert report["evidence"]["learner"]["details"]["bincount()"] == 1.0, explain(report)
