"""Lab 7, keep it fast: the learner's gate settings, run by the checker on lab 1's fix.

The reference settings pass all four checks; the untouched exercise (a 1.01x
limit, two rounds, no profile) is refused at the first check: no gate can
resolve 1% on this machine. A limit in range but too tight for the rounds
cannot pass the unchanged fix, and settings without a profile catch the fix
undone without naming the DataLoader. Settings out of range, that set what
is gated, or that are not a gate's table at all, fail the first check,
before anything runs.
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


def test_the_untouched_exercise_fails_its_first_check_on_a_limit_no_gate_can_resolve(lab7_kit):
    code, report = check(lab7_kit, Path())
    assert code == 1, explain(report)
    assert statuses(report) == {"runs": "failed", "same_results": "skipped", "evidence": "skipped",
                                "faster": "skipped"}
    first = report["checks"][0]
    assert "max_slowdown = 1.01, outside 1.05–2" in first["rationale"], first["rationale"]
    assert "run-to-run noise" in first["rationale"] and "proflab gate" in first["help"]


def _gate_said(verdict: str, slowdown: tuple[float, float, float], regression: str = "", because: str = "",
              traced: bool = True):
    """A gate's report as the checker gets it back (the numbers measured, the verdict decided)."""
    from proflab.grading import gate
    from proflab.grading.checks import Check

    done = gate.GateReport(candidate="c.py", baseline="b.py", verdict=verdict,
                           checks=[Check(*c) for c in gate.CHECKS], comparison={"rounds": 4},
                           slowdown=dict(zip(("median", "low", "high"), slowdown)),
                           because={"slower": because} if because else {},
                           traces={"baseline": "b", "candidate": "c"} if traced else {})
    done.check("no_regression").status = regression or {"passed": "passed", "failed": "failed"}.get(verdict,
                                                                                                  "inconclusive")
    return done


# Which gate verdicts pass which check: a noisy machine decides which one a run gets, so each is built here.
@pytest.mark.parametrize("verdict, slowdown, status, said", [
    ("passed", (0.98, 0.85, 1.12), "passed", "no regression on the unchanged fix: 0.98×"),
    ("failed", (1.40, 1.32, 1.50), "failed", "a false alarm: your gate calls the unchanged fix a regression"),
    ("inconclusive", (1.01, 0.93, 1.09), "failed", "could not call the unchanged fix: 1.01×"),
])
def test_only_no_regression_passes_the_unchanged_fix(verdict, slowdown, status, said):
    from proflab.grading import gate_lab
    from proflab.grading.checks import Check

    check = Check("same_results", "Passes the unchanged fix", "")
    gate_lab.judge_unchanged(_gate_said(verdict, slowdown), 1.05, check)
    assert check.status == status and said in check.rationale, check.rationale


@pytest.mark.parametrize("verdict, regression, status, said", [
    ("failed", "failed", "passed", "regression caught: the fix undone is 2.97×"),
    ("passed", "passed", "failed", "let the fix undone through: 2.97× the fix's step time (95% interval "
                                   "2.20–4.02×, 4 rounds), no regression against 2×"),
    ("inconclusive", "inconclusive", "failed", "too noisy to call against 2×"),
    ("failed", "skipped", "failed", "let the fix undone through"),  # a candidate that broke is no catch
])
def test_only_a_regression_verdict_catches_the_fix_undone(verdict, regression, status, said):
    from proflab.grading import gate_lab
    from proflab.grading.checks import Check

    check = Check("evidence", "Catches the regression", "")
    gate_lab.judge_regression(_gate_said(verdict, (2.97, 2.20, 4.02), regression), 2.0, check)
    assert check.status == status and said in check.rationale, check.rationale


def test_the_cause_must_be_named_by_the_change_that_grew_most():
    from proflab import labs
    from proflab.grading import gate_lab
    from proflab.grading.checks import Check

    g = labs.resolve("7").gating
    named = Check("faster", "Names the cause", "")
    gate_lab.judge_cause(_gate_said("failed", (3, 2, 4), because="`enumerate(DataLoader)#…__next__` went from "
                                                                  "2.8 ms to 331 ms per step"), g, named)
    assert named.status == "passed"
    other = Check("faster", "Names the cause", "")
    gate_lab.judge_cause(_gate_said("failed", (3, 2, 4), because="`aten::addmm` went from 1 ms to 2 ms"), g, other)
    assert other.status == "failed" and "without naming the DataLoader" in other.rationale
    blind = Check("faster", "Names the cause", "")
    gate_lab.judge_cause(_gate_said("failed", (3, 2, 4), traced=False), g, blind)
    assert blind.status == "failed" and "no trace was recorded" in blind.rationale


# A cheap gate that still tells the two apart on this machine: the fix undone is ~3x, its copy ~1x, and a 1.6x
# limit sits far from both, so two rounds of four steps call each (a close call still gets more).
CHEAP = """[tool.proflab.gate]
lab = "dataloader"
max_slowdown = 1.6
rounds = 2
max_rounds = 8
timed_steps = 4
"""


def test_a_gate_without_a_profile_cannot_name_the_cause(lab7_kit, tmp_path):
    code, report = check(lab7_kit, tmp_path, CHEAP + "profile_steps = 0\n")
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
    (GOOD.replace("max_slowdown = 1.3", "max_slowdown = 3.0"), "max_slowdown = 3, outside 1.05–2"),
    (GOOD.replace("rounds = 3\n", "rounds = 300\n", 1), "rounds = 300, outside 2–10"),
    (GOOD.replace("max_rounds = 10", "max_rounds = 2"), "max_rounds (2) is below rounds (3)"),
], ids=["what-is-gated", "typo", "other-lab", "not-toml", "no-table", "limit-below-1", "limit-too-lax",
        "rounds-too-many", "rounds-disagree"])
def test_settings_the_gate_cannot_use_fail_the_first_check_before_anything_runs(lab7_kit, tmp_path, text, said):
    code, report = check(lab7_kit, tmp_path, text)
    assert code == 1, explain(report)
    assert statuses(report)["runs"] == "failed" and statuses(report)["same_results"] == "skipped"
    first = report["checks"][0]
    assert said in first["rationale"], first["rationale"]
    assert "/learner/" not in first["rationale"]  # the learner's file is named, not the checker's copy of it
    assert report["evidence"] == {} and report["traces"] == {}  # no gate was run


def test_proflab_run_on_a_gate_lab_says_how_to_try_the_settings(lab7_kit):
    proc = lab7_kit.run("run", "7")
    assert proc.returncode == 2
    assert "holds a gate's settings, not a pipeline" in proc.stderr
    assert "proflab gate labs/01_dataloader/exercise.py --baseline labs/01_dataloader/original.py --config" \
        in proc.stderr
