"""Lab 7, keep it fast: the learner's gate settings, run by the checker on lab 1's fix.

The reference settings pass all four checks; the untouched exercise (a 1.01x
limit, two rounds, no profile) cannot pass the unchanged fix. A limit too lax
lets the fix undone through, and settings without a profile catch it without
naming the DataLoader. Settings that set what is gated, or are not a gate's
table at all, fail the first check, before anything runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Kit, explain, sharing_data, statuses

GOOD = """[tool.proflab.gate]
lab = "dataloader"
max_slowdown = 1.3
rounds = 3
max_rounds = 10
"""


def check(kit: Kit, tmp_path: Path, text: str | None = None, name: str = "mine.toml") -> tuple[int, dict]:
    if text is None:
        return kit.check_json("7")
    path = tmp_path / name
    path.write_text(text)
    return kit.check_json("7", "--file", str(path))


@pytest.fixture(scope="module")
def lab7_kit(kit, tmp_path_factory) -> Kit:
    return sharing_data(tmp_path_factory.mktemp("lab7"), kit)


def test_the_reference_settings_pass_every_check(lab7_kit):
    code, report = lab7_kit.check_json("7", "--file", str(lab7_kit.root / "labs" / "07_gate" / "solution.toml"))
    assert code == 0, explain(report)
    assert statuses(report) == dict.fromkeys(("runs", "same_results", "evidence", "faster"), "passed")
    unchanged, regression = report["evidence"]["unchanged"], report["evidence"]["regression"]
    assert unchanged["verdict"] == "passed" and unchanged["slowdown"]["high"] < 1.3
    assert regression["verdict"] == "failed" and regression["slowdown"]["low"] > 1.3
    assert "DataLoader" in regression["because"]["slower"]
    runs = lab7_kit.root / "runs" / "07-gate"
    for gate in ("unchanged", "regression"):  # both gates' traces, a baseline and a candidate each
        for which in ("baseline", "candidate"):
            assert list((runs / gate / which).glob("*.pt.trace.json")), f"no {gate}/{which} trace"


def test_the_untouched_exercise_fails_on_the_unchanged_fix(lab7_kit):
    code, report = check(lab7_kit, Path())
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "failed", "evidence": "skipped",
                                "faster": "skipped"}
    same = next(c for c in report["checks"] if c["name"] == "same_results")
    assert "1.01×" in same["rationale"] and ("too noisy" in same["rationale"] or "false alarm" in same["rationale"])


def test_a_limit_too_lax_lets_the_fix_undone_through(lab7_kit, tmp_path):
    code, report = check(lab7_kit, tmp_path, GOOD.replace("1.3", "10.0"))
    assert code == 1, explain(report)
    assert statuses(report)["same_results"] == "passed"
    assert statuses(report)["evidence"] == "failed"
    caught = next(c for c in report["checks"] if c["name"] == "evidence")
    assert "let the fix undone through" in caught["rationale"] and "10×" in caught["rationale"]


def test_a_gate_without_a_profile_cannot_name_the_cause(lab7_kit, tmp_path):
    code, report = check(lab7_kit, tmp_path, GOOD + "profile_steps = 0\ntimed_steps = 6\n")
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "passed", "same_results": "passed", "evidence": "passed",
                                "faster": "failed"}
    cause = next(c for c in report["checks"] if c["name"] == "faster")
    assert "without naming the DataLoader" in cause["rationale"] and "no trace" in cause["rationale"]
    assert "profile_steps" in cause["help"]


@pytest.mark.parametrize("text, said", [
    (GOOD + "batch_size = 8\n", "sets batch_size: those change what is gated"),
    (GOOD + "timed_step = 8\n", "'timed_step' is not a gate setting; did you mean 'timed_steps'?"),
    (GOOD.replace('"dataloader"', '"embeddings"'), "gates lab embeddings; this lab gates lab dataloader"),
    ("[tool.proflab.gate\nlab = 1\n", "is not valid TOML"),
    ("[tool.other]\nx = 1\n", "has no [tool.proflab.gate] table"),
    (GOOD.replace("max_slowdown = 1.3", "max_slowdown = 0.9"), "max_slowdown must be a number above 1"),
], ids=["what-is-gated", "typo", "other-lab", "not-toml", "no-table", "limit-below-1"])
def test_settings_the_gate_cannot_use_fail_the_first_check_before_anything_runs(lab7_kit, tmp_path, text, said):
    code, report = check(lab7_kit, tmp_path, text)
    assert code == 1, explain(report)
    assert statuses(report)["runs"] == "failed" and statuses(report)["same_results"] == "skipped"
    first = report["checks"][0]
    assert said in first["rationale"], first["rationale"]
    assert str(tmp_path) not in first["rationale"] or "mine.toml" in first["rationale"]
    assert report["evidence"] == {} and report["traces"] == {}  # no gate was run


def test_proflab_run_on_a_gate_lab_says_how_to_try_the_settings(lab7_kit):
    proc = lab7_kit.run("run", "7")
    assert proc.returncode == 2
    assert "holds a gate's settings, not a pipeline" in proc.stderr
    assert "proflab gate labs/01_dataloader/exercise.py --baseline labs/01_dataloader/original.py --config" \
        in proc.stderr
