"""``proflab grade``: a class folder graded through the real CLI, on the calibration lab.

The calibration lab (tests/calibration) sleeps 20 ms a step, so the learners'
files here are variants with a fixed, known speed-up: 4x faster, 4x slower,
or the scheduled version whose runs alternate 1.45x and 1.0x (inconclusive).
The class's copy of the lab measures at most 4 rounds (``max_rounds = 4``),
and the class is graded with ``--rounds 2``: 4x either way is called after 2
rounds on a quiet machine, after an extra round or two on a busy one (with 2
rounds the interval's t-factor is 12.7: the two rounds must agree within
about 14%), and the alternating schedule stays inconclusive at the round limit.

The class is graded once (module fixture) with ``--format junit --out`` and
``--json-out``; the tests read that one run. The lab's ``[grading]`` table
gives runs 1, same_results 4, evidence 0, faster 5 points, and half the
faster points to an inconclusive speed-up.
"""

from __future__ import annotations

import hashlib
import json
import re
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import Kit

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE / "calibration"
SCHEMAS = HERE / "schemas"
if str(HERE.parent / "src") not in sys.path:
    sys.path.insert(0, str(HERE.parent / "src"))

from proflab import labs  # noqa: E402

SLEEP = "time.sleep(cfg.step_ms / 1000)"


def variant(speedup: float) -> str:
    """The calibration original, made ``speedup`` times faster (below 1: slower)."""
    text = (CALIBRATION / "original.py").read_text(encoding="utf-8")
    assert SLEEP in text
    return text.replace(SLEEP, f"time.sleep(cfg.step_ms / 1000 / {speedup})")


WRONG_RESULT = (CALIBRATION / "original.py").read_text(encoding="utf-8").replace("* step}", "* (step + 1)}")

# Prints escape codes and a NUL (XML cannot carry them), tries to scribble next to itself and
# over itself, then raises at step 2: graded from a copy, in a sandbox, the class folder never sees it.
SCRIBBLER = '''\
from pathlib import Path

import torch


def pipeline(cfg):
    print("colour \\x1b[31mred\\x1b[0m and a NUL \\x00 here", flush=True)
    for path, text in ((Path("scribble.txt"), "written in the current folder"),
                       (Path(__file__).with_name("notes.txt"), "written next to the file"),
                       (Path(__file__), "# overwritten by itself")):
        try:
            path.write_text(text)
        except OSError:  # read-only, in its sandbox
            pass
    for step in range(2):
        yield {"step": torch.ones(4).sum() * step}
    raise ValueError("gave up at step 2")
'''

CLASS = {
    "alice/90.py": variant(4.0),  # passes
    "alice/notes.py": "x = 1\n",  # names no lab
    "bob/calibration.py": variant(0.25),  # 4x slower: fails "faster"
    "carol/90_calibration.py": "def pipeline(cfg:\n    yield {}\n",  # does not parse
    "dave__90.py": WRONG_RESULT,  # the flat layout; fails "same results"
    "erin/90-calibration.py": (CALIBRATION / "scheduled.py").read_text(encoding="utf-8"),  # inconclusive
    "frank/exercise.py": variant(4.0),  # exercise.py names a lab only with --lab
    "gina__calibration.py": SCRIBBLER,  # raises at step 2
    "README.md": "# the class of 2026\n",  # not a Python file
}


def grade(kit: Kit, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proflab", "grade", *args], cwd=kit.root,
                          env={**kit.env(), **(env or {})}, capture_output=True, text=True, timeout=timeout)


def make_kit(root: Path, max_rounds: int = 4) -> Kit:
    lab = root / "labs" / "90_calibration"
    shutil.copytree(CALIBRATION, lab, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = lab / "lab.toml"
    text = manifest.read_text(encoding="utf-8")
    assert "max_rounds = 6" in text
    manifest.write_text(text.replace("max_rounds = 6", f"max_rounds = {max_rounds}"), encoding="utf-8")
    return Kit(root)


def write_folder(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and the hash of its bytes."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Graded:
    kit: Kit
    folder: Path
    proc: subprocess.CompletedProcess
    record: dict
    junit: Path
    before: dict[str, str]
    after: dict[str, str]

    def submission(self, learner: str) -> dict:
        return next(s for s in self.record["submissions"] if s["learner"] == learner)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Graded:
    kit = make_kit(tmp_path_factory.mktemp("grade-kit"))
    folder = write_folder(kit.root / "class", CLASS)
    before = snapshot(folder)
    proc = grade(kit, "class", "--rounds", "2", "--format", "junit", "--out", "out/report.xml",
                 "--json-out", "out/grades.json",
                 env={"PROFLAB_CAL_SPEEDUPS": "1.45,1.0", "PROFLAB_CAL_COUNTER": str(kit.root / "erin-runs"),
                      "PROFLAB_SANDBOX_SHARED": str(kit.root)})
    assert (kit.root / "out" / "grades.json").is_file(), proc.stdout + proc.stderr
    record = json.loads((kit.root / "out" / "grades.json").read_text(encoding="utf-8"))
    return Graded(kit, folder, proc, record, kit.root / "out" / "report.xml", before, snapshot(folder))


# --- the class -------------------------------------------------------------------

def test_grading_ran_and_exits_0_whatever_the_verdicts(graded):
    assert graded.proc.returncode == 0, graded.proc.stdout + graded.proc.stderr
    assert "Traceback" not in graded.proc.stdout + graded.proc.stderr


def test_each_learner_gets_a_verdict_and_the_points_of_the_labs_grading_table(graded):
    got = {s["learner"]: (s["verdict"], s["exit_code"], s["score"], s["max_score"])
           for s in graded.record["submissions"]}
    assert got == {
        "alice": ("passed", 0, 10, 10),  # full marks at or above the threshold
        "bob": ("failed", 1, 5, 10),  # below it: the correctness points alone (runs 1 + same results 4)
        "carol": ("failed", 1, 0, 10),  # does not parse
        "dave": ("failed", 1, 1, 10),  # runs, but not the same results
        "erin": ("inconclusive", 4, 7.5, 10),  # half the faster points: too noisy to call
        "gina": ("failed", 1, 0, 10),  # raises at step 2
    }
    assert graded.submission("alice")["speedup"] == pytest.approx(4.0, rel=0.15)
    assert graded.submission("bob")["speedup"] == pytest.approx(0.25, rel=0.15)
    files = {s["learner"]: s["file"] for s in graded.record["submissions"]}
    assert files["dave"] == "dave__90.py" and files["erin"] == "erin/90-calibration.py"
    assert graded.record["summary"] == {"learners": 7, "submissions": 6, "passed": 1, "failed": 4,
                                        "inconclusive": 1, "not_graded": 0, "files_not_graded": 3,
                                        "not_yet_graded": 0, "resumed": 0}


def test_the_json_record_has_check50_like_checks_and_the_raw_timings(graded):
    for sub in graded.record["submissions"]:
        assert [c["name"] for c in sub["checks"]] == ["runs", "same_results", "evidence", "faster"]
        for c in sub["checks"]:
            assert {"name", "passed", "rationale", "help", "expected", "actual", "score", "max_score"} <= set(c)
            assert c["passed"] in (True, False, None)
            assert c["passed"] is (None if c["status"] in ("skipped", "inconclusive") else c["status"] == "passed")
    checks = {s["learner"]: {c["name"]: c for c in s["checks"]} for s in graded.record["submissions"]}
    assert [c["passed"] for c in checks["carol"].values()] == [False, None, None, None]
    assert "does not parse" in checks["carol"]["runs"]["rationale"]
    assert checks["carol"]["runs"]["help"]
    assert checks["dave"]["same_results"]["passed"] is False and "differs" in checks["dave"]["same_results"]["rationale"]
    assert checks["bob"]["faster"]["expected"] == "at least 1.2× on cpu"
    assert "0.2" in checks["bob"]["faster"]["actual"]
    assert checks["erin"]["faster"]["status"] == "inconclusive" and checks["erin"]["faster"]["score"] == 2.5
    assert graded.submission("erin")["stopped"] == "round limit"
    assert graded.submission("alice")["stopped"] == "decided"
    assert "gave up at step 2" in checks["gina"]["runs"]["actual"]
    alice = graded.submission("alice")
    rounds = alice["comparison"]["rounds"]
    assert 2 <= rounds <= 4 and len(alice["timings"]["original"]) == len(alice["timings"]["learner"]) == rounds
    assert len(alice["step_times"]["learner"]) == rounds * 5  # 5 timed steps a round
    assert alice["comparison"]["speedup"] == alice["speedup"]


def test_files_that_name_no_lab_are_listed_not_graded(graded):
    reasons = {s["file"]: s["reason"] for s in graded.record["not_graded"]}
    assert set(reasons) == {"README.md", "alice/notes.py", "frank/exercise.py"}
    assert "not a Python file" in reasons["README.md"]
    assert "'notes' names no lab" in reasons["alice/notes.py"] and "90.py" in reasons["alice/notes.py"]
    assert "--lab" in reasons["frank/exercise.py"]
    assert "Not graded:" in graded.proc.stderr and "alice/notes.py" in graded.proc.stderr


def test_the_summary_table_shows_learner_by_lab_with_verdict_and_speedup(graded):
    err = graded.proc.stderr
    assert "learner" in err and "lab 90 calibration" in err
    rows = {line.split()[0]: line for line in err.splitlines() if line.split()[:1] and
            line.split()[0] in ("alice", "bob", "carol", "dave", "erin", "frank", "gina")}
    assert "passed" in rows["alice"] and "10/10" in rows["alice"] and "×" in rows["alice"]
    assert "failed (faster)" in rows["bob"] and "5/10" in rows["bob"]
    assert "failed (runs)" in rows["carol"]
    assert "failed (same_results)" in rows["dave"]
    assert "inconclusive" in rows["erin"] and "7.5/10" in rows["erin"]
    assert "6 submissions from 7 learners" in err and "1 inconclusive" in err
    assert "6/6" in err  # a line per submission as it is graded


def test_out_writes_the_file_and_nothing_goes_to_stdout(graded):
    assert graded.junit.is_file()
    assert graded.proc.stdout == ""
    assert not list(graded.junit.parent.glob(".report.xml.*")), "the temporary file of the atomic write was left"


def test_submissions_are_left_untouched(graded):
    assert graded.after == graded.before  # same files, same bytes: nothing written, nothing added
    # gina's program did write, next to its copy, and over it: none of it reached the class folder.
    assert "gina__calibration.py" in graded.before


def test_each_learner_has_a_trace_of_their_own(graded):
    runs = graded.kit.root / "runs" / "90-calibration"
    for learner in ("alice", "bob", "erin"):
        assert list((runs / f"grade-{learner}").glob("*.pt.trace.json*")), learner
    assert (runs / "original").is_dir()


def test_junit_validates_against_the_junit_xsd(graded):
    import xmlschema  # the test extra

    xmlschema.XMLSchema(str(SCHEMAS / "junit-10.xsd")).validate(str(graded.junit))


def test_junit_has_a_suite_per_learner_and_a_case_per_check(graded):
    root = ET.parse(graded.junit).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"alice", "bob", "carol", "dave", "erin", "gina", "files not graded"}

    def outcome(learner: str, check: str) -> str:
        case = next(c for c in suites[learner].findall("testcase") if c.get("name").endswith(f": {check}"))
        kids = [k.tag for k in case]
        return kids[0] if kids else "passed"

    assert [outcome("alice", c) for c in ("runs", "same_results", "evidence", "faster")] == ["passed"] * 4
    assert outcome("bob", "faster") == "failure"
    assert [outcome("carol", c) for c in ("runs", "same_results", "evidence", "faster")] == \
        ["failure", "skipped", "skipped", "skipped"]
    assert outcome("erin", "faster") == "error"  # inconclusive: no verdict on this machine, not a failure
    erin = next(c for c in suites["erin"].findall("testcase") if c.get("name").endswith(": faster")).find("error")
    assert erin.get("type") == "inconclusive" and "too noisy" in erin.get("message")
    assert suites["carol"].get("tests") == "4" and suites["carol"].get("skipped") == "3"
    assert suites["erin"].get("errors") == "1" and suites["bob"].get("failures") == "1"
    props = {p.get("name"): p.get("value") for p in suites["alice"].iter("property")}
    assert props["90-calibration.score"] == "10/10" and props["90-calibration.verdict"] == "passed"
    assert root.get("failures") == "4" and root.get("errors") == "1"
    # gina's output reached the report, less what XML cannot carry
    gina = next(c for c in suites["gina"].findall("testcase") if c.get("name").endswith(": runs")).find("failure")
    assert "red" in gina.text and "gave up at step 2" in gina.text
    assert "\x1b" not in graded.junit.read_text(encoding="utf-8")


# --- Gradescope: one learner ----------------------------------------------------------

@pytest.fixture(scope="module")
def gradescope(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    kit = make_kit(tmp_path_factory.mktemp("gradescope-kit"))
    write_folder(kit.root / "submission", {"90.py": variant(4.0)})  # like /autograder/submission
    proc = grade(kit, "submission", "--format", "gradescope", "--rounds", "2")
    assert proc.stdout.strip(), proc.stderr
    return proc, json.loads(proc.stdout)


def test_gradescope_results_validate_against_the_spec(gradescope):
    import jsonschema  # the test extra

    proc, results = gradescope
    assert proc.returncode == 0, proc.stderr
    schema = json.loads((SCHEMAS / "gradescope-results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(results)


def test_gradescope_results_carry_the_points_and_a_speedup_leaderboard(gradescope):
    _, results = gradescope
    assert results["score"] == 10
    assert [(t["name"], t["score"], t["max_score"], t["status"]) for t in results["tests"]] == [
        ("Lab 90 · It runs", 1, 1, "passed"),
        ("Lab 90 · Same work, same results", 4, 4, "passed"),
        ("Lab 90 · The bottleneck is gone", 0, 0, "passed"),
        ("Lab 90 · Faster", 5, 5, "passed"),
    ]
    assert "faster than the original" in results["tests"][3]["output"]
    [board] = results["leaderboard"]
    assert board["name"] == "Lab 90 speed-up (×)" and board["order"] == "desc"
    # the speed-up the check measured (steps of 20 ms against 5 ms: near 4× on a quiet machine, less on a busy
    # one, where the runs' own work weighs more beside the sleeps), as its Faster line says it
    said = re.search(r"([\d.]+)× faster than the original", results["tests"][3]["output"])
    assert said and board["value"] == pytest.approx(float(said.group(1)), abs=0.01), (board, said)
    assert 1.5 < board["value"] < 5.0, board
    assert results["execution_time"] >= 1 and "passed" in results["output"]


def test_gradescope_refuses_a_folder_of_several_learners(tmp_path):
    kit = make_kit(tmp_path)
    write_folder(kit.root / "class", {"alice/90.py": "x = (\n", "bob/90.py": "x = (\n"})
    proc = grade(kit, "class", "--format", "gradescope")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "one learner" in proc.stderr and "alice, bob" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- the cheap cases: nothing is timed ---------------------------------------------------

def test_usage_errors_are_short_and_exit_2(tmp_path):
    kit = make_kit(tmp_path)
    (kit.root / "empty").mkdir()
    (kit.root / "one.py").write_text("x = 1\n")
    (kit.root / "class" / "alice").mkdir(parents=True)
    (kit.root / "class" / "alice" / "90.py").write_text("x = (\n")
    for args, said in ((["missing"], "missing: no such folder"),
                       (["empty"], "empty holds no submissions"),
                       (["one.py"], "is a file, not a folder"),
                       (["class", "--lab", "7"], "no lab called '7'"),
                       (["class", "--out", "empty"], "empty is a folder"),
                       (["class", "--json-out", "one.py/grades.json"], "one.py is a file, not a folder")):
        proc = grade(kit, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert said in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 3, proc.stderr


def test_nothing_to_grade_still_lists_the_files_and_exits_2(tmp_path):
    kit = make_kit(tmp_path)
    folder = write_folder(kit.root / "class", {"alice/hello.py": "x = 1\n", "notes.txt": "hi\n"})
    with open(os.path.join(os.fsencode(folder), b"caf\xe9.py"), "w") as f:  # a name that is not UTF-8
        f.write("x = 1\n")
    proc = grade(kit, "class")  # the default format: JSON on stdout
    assert proc.returncode == 2, proc.stderr
    record = json.loads(proc.stdout)
    assert record["submissions"] == []
    reasons = {s["file"]: s["reason"] for s in record["not_graded"]}
    assert set(reasons) == {"alice/hello.py", "notes.txt", "caf\ufffd.py"}
    assert "not valid UTF-8" in reasons["caf\ufffd.py"]
    assert "nothing to grade in class" in proc.stderr and "alice/hello.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gradescope_takes_one_learner_whatever_else_the_folder_holds(tmp_path):
    kit = make_kit(tmp_path)
    write_folder(kit.root / "submission", {"90.py": "def pipeline(cfg:\n", "extra/readme.txt": "hi\n"})
    proc = grade(kit, "submission", "--format", "gradescope")
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    import jsonschema  # the test extra

    jsonschema.Draft202012Validator(json.loads((SCHEMAS / "gradescope-results.schema.json").read_text())).validate(results)
    assert results["score"] == 0 and [t["status"] for t in results["tests"]] == ["failed"] * 4
    assert "does not parse" in results["tests"][0]["output"] and "Not run" in results["tests"][1]["output"]
    assert "Not graded: extra/readme.txt" in results["output"]
    assert results["leaderboard"] == [{"name": "Lab 90 speed-up (×)", "value": 0.0, "order": "desc"}]


def test_with_a_lab_given_exercise_py_is_that_labs(tmp_path):
    kit = make_kit(tmp_path)
    write_folder(kit.root / "class", {"zoe/exercise.py": "def pipeline(cfg:\n", "zoe/lab2.py": "x = 1\n"})
    proc = grade(kit, "class", "--lab", "calibration")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    [sub] = record["submissions"]
    assert (sub["learner"], sub["number"], sub["file"], sub["verdict"]) == ("zoe", 90, "zoe/exercise.py", "failed")
    assert "exercise.py" in record["not_graded"][0]["reason"]


def test_a_broken_grading_table_cannot_grade_and_exits_3(tmp_path):
    kit = make_kit(tmp_path)
    manifest = kit.root / "labs" / "90_calibration" / "lab.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("faster = 5", "faster = -5"), encoding="utf-8")
    write_folder(kit.root / "class", {"alice/90.py": "x = (\n"})
    proc = grade(kit, "class")
    assert proc.returncode == 3, proc.stderr
    assert "cannot grade: a lab manifest is broken" in proc.stderr and "[grading] faster" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_the_grading_table_defaults_and_checks(tmp_path):
    lab = tmp_path / "90_calibration"
    shutil.copytree(CALIBRATION, lab, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = lab / "lab.toml"
    text = manifest.read_text(encoding="utf-8")
    assert labs.load(lab).grading == labs.Grading(runs=1, same_results=4, evidence=0, faster=5, inconclusive=0.5)

    manifest.write_text(text.split("[grading]")[0], encoding="utf-8")  # no [grading] table: the defaults
    default = labs.load(lab).grading
    assert (default.runs, default.same_results, default.evidence, default.faster) == (1, 3, 3, 3)
    assert default.max_score == 10 and default.inconclusive == 0

    for table, said in (("speed = 2", "unknown key(s) speed"), ("runs = 'one'", "runs must be a number"),
                        ("inconclusive = 2", "from 0 to 1"),
                        ("runs = 0\nsame_results = 0\nevidence = 0\nfaster = 0", "gives no points")):
        manifest.write_text(text.split("[grading]")[0] + "[grading]\n" + table + "\n", encoding="utf-8")
        with pytest.raises(labs.ManifestError, match=r"\[grading\]"):
            labs.load(lab)
        with pytest.raises(labs.ManifestError) as e:
            labs.load(lab)
        assert said in str(e.value)


# --- --merge: what other engines graded, back into one class table -----------------------------------

def merged(kit: Kit, *inputs: str, fmt: str = "json", extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict | str]:
    out = kit.root / "out" / f"merged.{ 'json' if fmt == 'json' else 'md'}"
    proc = grade(kit, "--merge", *inputs, "--format", fmt, "--out", str(out), *extra)
    assert out.is_file(), proc.stdout + proc.stderr
    text = out.read_text(encoding="utf-8")
    return proc, (json.loads(text) if fmt == "json" else text)


def verdicts_of(record: dict) -> dict[str, tuple]:
    return {s["learner"]: (s["verdict"], s["score"], s["max_score"]) for s in record["submissions"]}


def test_merging_the_json_record_or_the_junit_gives_back_the_class_table(graded):
    want = verdicts_of(graded.record)
    proc, from_json = merged(graded.kit, "out/grades.json")
    assert proc.returncode == 0, proc.stderr
    assert verdicts_of(from_json) == want
    proc, from_junit = merged(graded.kit, "out/report.xml")
    assert proc.returncode == 0, proc.stderr
    assert verdicts_of(from_junit) == want
    alice = next(s for s in from_junit["submissions"] if s["learner"] == "alice")
    assert alice["speedup"] == pytest.approx(graded.submission("alice")["speedup"], rel=1e-3)
    # the class table on the terminal, as grade prints it
    assert "alice" in proc.stderr and "6 submissions from 6 learners" in proc.stderr


def test_a_learner_merged_twice_keeps_the_newest_file_and_lists_the_other(graded):
    older = graded.kit.root / "out" / "older.json"
    shutil.copy(graded.kit.root / "out" / "grades.json", older)
    os.utime(older, (1_000_000_000, 1_000_000_000))
    proc, record = merged(graded.kit, "out/grades.json", str(older))
    assert proc.returncode == 0, proc.stderr
    assert len(record["submissions"]) == 6
    superseded = [n for n in record["not_graded"] if "newer" in n["reason"]]
    assert len(superseded) == 6 and all("older.json" in n["file"] for n in superseded), record["not_graded"]


def test_the_markdown_summary_and_require_pass(graded):
    proc, text = merged(graded.kit, "out/grades.json", fmt="markdown", extra=("--require-pass",))
    assert proc.returncode == 1 and "Not every submission passed" in proc.stderr
    assert "| alice | ✅ passed" in text and "### bob · lab 90" in text
    assert "❔ too noisy to call: re-run" in text  # erin's
    only_alice = graded.kit.root / "out" / "alice.json"
    record = dict(graded.record, submissions=[graded.submission("alice")])
    only_alice.write_text(json.dumps(record), encoding="utf-8")
    proc, _ = merged(graded.kit, str(only_alice), fmt="markdown", extra=("--require-pass",))
    assert proc.returncode == 0, proc.stderr


def test_merge_says_what_it_cannot_read_and_refuses_nothing_to_merge(graded, tmp_path):
    (tmp_path / "notes.json").write_text("{\"hello\": 1}")
    (tmp_path / "broken.xml").write_text("<testsuites><testsuite")
    proc = grade(graded.kit, "--merge", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "broken.xml" in proc.stderr and "not XML" in proc.stderr
    proc = grade(graded.kit, "--merge", str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr
    proc = grade(graded.kit, "class", "--merge", "out/grades.json")
    assert proc.returncode == 2 and "not both" in proc.stderr
