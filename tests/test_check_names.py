"""Every check names itself: its name in reports, records, JUnit and Gradescope is its own, its points are mapped
apart, it declares what it waits on, and a skipped check says which failure it waited on.

Lab 5's last check is *leaner*, lab 0's *own_profile* and *overhead*, lab 7's four *gate_*: none is called
``faster`` or ``evidence`` for the slot it fills. A record written before checks had their own names (lab 5's
last called ``faster``) still merges, with the same points. The reports here are made by the chain's own rows
(``trial.rows``) and the kit's writers, from a lab 5 report as a check fills it in.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import kit_labs
from proflab import labs
from proflab.grading import grade
from proflab.grading.checks import registry
from proflab.grading.checks.checker import judge
from proflab.grading.engines import merge
from proflab.grading.trial import rows
from proflab.grading.verdicts import FAILED, PASSED, Report
from proflab.reporting import grade_formats


def lab5_report(last: str = PASSED) -> Report:
    lab = labs.resolve("5")
    checks = rows(registry.chain_of(lab).checks)
    report = Report(lab=lab.name, number=lab.number, title=lab.title, file="alice/5.py", label="alice",
                    device="cpu", verdict=last, checks=checks, threshold=lab.threshold("cpu"),
                    comparison={"speedup": 2.5})
    for c in checks[:-1]:
        c.passed("fine")
    (checks[-1].passed if last == PASSED else checks[-1].failed)("the peak", "at most 60%", "40%")
    return report


def graded(report: Report, learner: str = "alice") -> grade.Result:
    lab = labs.resolve(str(report.number))
    sub = grade.Submission(learner, lab, Path(f"/class/{learner}/{lab.number}.py"), f"{learner}/{lab.number}.py")
    return grade.Result(Path("/class"), [grade.Graded(sub, report, grade.score(report, lab.grading))], [],
                        [learner], "2026-12-08T00:00:00+00:00", 1.0)


def test_each_lab_chains_checks_that_name_themselves_and_wait_on_what_comes_first():
    seen = set()
    for lab in kit_labs():
        chain = registry.chain_of(lab)  # a chain that runs a check before what it waits on is refused here
        names = [m.NAME for m in chain.checks]
        assert len(set(names)) == len(names)
        assert [m.POINTS for m in chain.checks][:2] == ["runs", "same_results"]
        seen.update(names)
    for name, module in registry.REGISTRY.items():
        assert module.NAME == name, f"{module.__name__} is registered as {name} and calls itself {module.NAME}"
        assert module.POINTS in labs.Grading.CHECKS
    assert {"leaner", "overhead", "own_profile", "gate_cause"} <= seen
    with pytest.raises(ValueError, match="waits on"):
        registry.Chain(registry.Rounds, ("runs", "faster", "evidence"))


def test_lab5s_last_check_is_leaner_in_json_junit_and_gradescope():
    result = graded(lab5_report())
    record = json.loads(grade_formats.to_json(result))["submissions"][0]
    last = record["checks"][-1]
    assert (last["name"], last["title"], last["points"]) == ("leaner", "Leaner", "faster")
    assert last["score"] == labs.resolve("5").grading.faster and record["score"] == record["max_score"]

    suite = ET.fromstring(grade_formats.to_junit(result))
    cases = [c.get("name") for c in suite.iter("testcase")]
    assert cases[-1].endswith(": leaner") and not any(c.endswith(": faster") for c in cases), cases

    tests = json.loads(grade_formats.to_gradescope(result))["tests"]
    assert tests[-1]["tags"][1:] == ["leaner"] and tests[-1]["name"].endswith("Leaner")
    assert tests[-1]["score"] == tests[-1]["max_score"] == labs.resolve("5").grading.faster


def test_a_skipped_check_says_which_check_it_waits_on():
    lab = labs.resolve("5")
    chain = registry.chain_of(lab)

    class Trial:  # a trial whose first moment ends the chain at "same_results"
        report = Report(lab=lab.name, number=5, title=lab.title, file="f.py", label="yours",
                        checks=rows(chain.checks))

        def moments(self):
            yield "before any run"
            yield "the first round"

    def fails(trial, check):
        check.failed("the values differ")
        return FAILED
    same = registry.REGISTRY["same_results"]
    checks = [type("M", (), {"NAME": m.NAME, "WHEN": ("the first round",),
                             "decide": staticmethod(fails if m is same else lambda t, c: c.passed("ok"))})
              for m in chain.checks]
    trial = Trial()
    judge(trial, checks)
    skipped = [c for c in trial.report.checks if c.status == "skipped"]
    assert [c.name for c in skipped] == ["evidence", "leaner"]
    assert all(c.skipped_because() == "can't check until “Same work, same results” passes" for c in skipped)
    result = graded(trial.report)
    record = json.loads(grade_formats.to_json(result))["submissions"][0]
    assert record["checks"][-1]["waits_on"] == "Same work, same results"
    suite = ET.fromstring(grade_formats.to_junit(result))
    said = [s.get("message") for s in suite.iter("skipped")]
    assert said == ["not run: can't check until “Same work, same results” passes"] * 2


def test_a_record_written_before_checks_had_their_own_names_still_merges(tmp_path):
    # a lab 5 record as the kit wrote it before: its last check named by its slot, "faster", no "points"
    old = json.loads(grade_formats.to_json(graded(lab5_report(FAILED))))
    for c in old["submissions"][0]["checks"]:
        c.pop("points")
    old["submissions"][0]["checks"][-1]["name"] = "faster"
    (tmp_path / "old.json").write_text(json.dumps(old))
    # and the same grading's JUnit file, whose last test case was "lab 5 memory: faster"
    junit = grade_formats.to_junit(graded(lab5_report(FAILED))).replace(": leaner\"", ": faster\"")
    (tmp_path / "bob.xml").write_text(junit.replace('name="alice"', 'name="bob"'))
    merged = merge.merge([tmp_path / "old.json", tmp_path / "bob.xml"], kit_labs())
    assert [s.shown for s in merged.skipped] == []
    by = {g.submission.learner: g for g in merged.graded}
    assert set(by) == {"alice", "bob"}
    for g in by.values():
        worth = labs.resolve("5").grading
        assert g.max_score == worth.max_score  # every check's points, the last one's too
        assert g.score == worth.max_score - worth.faster  # the failed last check earns nothing
    assert by["bob"].report.checks[-1].name == "leaner"  # read as the check it is now
