"""Faults and bad input, third round (issue 46): what a class's files and an instructor's inputs hold.

Each test is named after the issue's case it covers. They run the real CLI on the calibration lab's kit
(``test_grade.make_kit``); where a file must be graded it is one that does not parse, so a check ends at
once: what is tested is which file is graded and what is said, not the measuring.

- 8: a submission that is a link is "a link, not graded", in ``proflab grade`` and in the autograder alike;
  what it points at is never read.
- 10: a submission holding a folder whose name is not UTF-8: results.json is still written.
- 11: two files for one lab (the exercise unchanged and a changed one): the changed one is graded, the other
  named, by the same rule in both engines.
- 12: ``grade --merge`` with malformed files among good ones reads the good ones and names the others;
  a FIFO is never opened for reading; a BOM is read.
- 13: a journal of random bytes, or with a report that is not an object: no traceback.
- 15: the grade record holds the fields the instructor guide promises.
- 17: ``autograder run`` of a missing submission folder is the autograder's failure; ``new-lab`` refuses a
  Python keyword; ``autograder classroom`` refuses values that would write their own lines into the workflow.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_autograder_run import autograde, valid
from test_grade import CALIBRATION, grade, make_kit, write_folder

BROKEN = "def pipeline(cfg:\n    yield {}\n"  # does not parse: its check ends at "It runs", at once
SECRET = "root:$6$SECRET-HASH-NEVER-SHOWN:19000:0:99999:7:::\n"


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    return make_kit(tmp_path_factory.mktemp("faults-third-kit"))


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("elsewhere") / "shadow"
    path.write_text(SECRET)
    return path


@pytest.fixture(scope="module")
def graded_class(kit, secret, tmp_path_factory):
    """One grading of a class: alice handed in the exercise unchanged as 90.py and her fix as calibration.py;
    eve's 90.py is a link to a file outside the class, and mallory's folder a link to another folder."""
    root = tmp_path_factory.mktemp("faults-third-class")
    folder = write_folder(root / "class", {"alice/90.py": (CALIBRATION / "exercise.py").read_text(encoding="utf-8"),
                                           "alice/calibration.py": BROKEN})
    (folder / "eve").mkdir()
    (folder / "eve" / "90.py").symlink_to(secret)
    (folder / "mallory").symlink_to(secret.parent, target_is_directory=True)
    record = root / "out" / "record.json"
    proc = grade(kit, str(folder), "--out", str(record))
    data = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    return proc, data


def _not_graded(data: dict) -> dict[str, str]:
    return {row["file"]: row["reason"] for row in data["not_graded"]}


# --- 8: links -------------------------------------------------------------------------------------------

def test_8_a_link_is_a_link_not_graded_in_grade_and_in_the_autograder(kit, secret, graded_class, tmp_path):
    proc, data = graded_class
    assert data is not None and "Traceback" not in proc.stderr, proc.stderr
    assert [s["file"] for s in data["submissions"] if s["learner"] in ("eve", "mallory")] == []
    skipped = _not_graded(data)
    assert "a link, not graded" in skipped["eve/90.py"] and "a link, not graded" in skipped["mallory/"]
    assert "SECRET-HASH" not in proc.stdout + proc.stderr + json.dumps(data)

    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "90.py").symlink_to(secret)
    proc, results = autograde(kit, submission, tmp_path / "results" / "results.json")
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    [lab] = [t for t in results["tests"] if "max_score" in t]
    assert lab["score"] == 0 and "90.py is a link, not graded" in lab["output"]  # the same words as grade's
    assert "SECRET-HASH" not in proc.stdout + proc.stderr + json.dumps(results)


# --- 10: names that are not UTF-8 -----------------------------------------------------------------------

def test_10_results_json_is_written_whatever_a_submissions_names_hold(kit, tmp_path):
    submission = tmp_path / "submission"
    copy = Path(os.fsdecode(bytes(submission) + b"/caf\xe9/labs/90_calibration"))
    copy.mkdir(parents=True)
    (copy / "exercise.py").write_text(BROKEN)
    out = tmp_path / "results" / "results.json"
    proc, results = autograde(kit, submission, out)
    assert proc.returncode == 0 and "UnicodeEncodeError" not in proc.stderr, proc.stderr
    assert results is not None
    valid(results)
    out.read_bytes().decode("utf-8")  # UTF-8 throughout
    [record] = results["extra_data"]["records"]
    assert record["file"] == "caf\ufffd/labs/90_calibration/exercise.py"
    assert record["report"]["verdict"] == "failed"


# --- 11: two files for one lab --------------------------------------------------------------------------

def test_11_two_files_for_one_lab_are_both_named_and_the_changed_one_is_graded(kit, graded_class, tmp_path):
    proc, data = graded_class
    [alice] = [s for s in data["submissions"] if s["learner"] == "alice"]
    assert alice["file"] == "alice/calibration.py" and alice["verdict"] == "failed"
    assert "exercise as handed out" in _not_graded(data)["alice/90.py"]
    assert "alice/calibration.py is graded" in _not_graded(data)["alice/90.py"]

    # the autograder: 90.py comes first by name, and is the exercise unchanged; calibration.py is the fix
    submission = write_folder(tmp_path / "submission", {"90.py": (CALIBRATION / "exercise.py").read_text(
        encoding="utf-8"), "calibration.py": BROKEN})
    proc, results = autograde(kit, submission, tmp_path / "results" / "results.json")
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    [record] = results["extra_data"]["records"]
    assert record["file"] == "calibration.py"
    assert "Not graded: 90.py: lab 90's exercise as handed out" in results["output"]
    assert "calibration.py is graded" in results["output"]


# --- 12: grade --merge with bad files among good ones ---------------------------------------------------

CHECKS = [("runs", "It runs"), ("same_results", "Same work and same results"),
          ("evidence", "The bottleneck is gone"), ("faster", "Faster")]


def record(learner: str, **changed) -> dict:
    """A proflab grade JSON record of one submission of lab 90 that passed, as the grader writes it."""
    submission = {"learner": learner, "lab": "calibration", "number": 90, "title": "Calibration",
                  "file": f"{learner}/90.py", "verdict": "passed", "threshold": 1.2, "device": "cpu",
                  "comparison": {"speedup": 4.0},
                  "checks": [{"name": n, "title": t, "description": t, "status": "passed"} for n, t in CHECKS]}
    submission.update(changed)
    return {"proflab": "0", "folder": "class", "submissions": [submission]}


def test_12_merge_reads_the_good_files_and_names_the_bad_ones(kit, tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(record("ada")))
    (folder / "bom.json").write_bytes(codecs.BOM_UTF8 + json.dumps(record("bea")).encode())
    bad = {
        "not_objects.json": json.dumps({"proflab": "0", "submissions": [1, "two", None]}),
        "extra_list.json": json.dumps({"tests": [], "output": "x", "extra_data": [{"records": []}]}),
        "records_empty.json": json.dumps({"tests": [], "output": "", "extra_data": {"records": []}}),
        "deep.json": "[" * 200_000 + "]" * 200_000,
        "checks_string.json": json.dumps(record("cid", checks="passed")),
        "speedup_text.json": json.dumps(record("dan", comparison={"speedup": "fast"})),
    }
    for name, text in bad.items():
        (folder / name).write_text(text)
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)

    proc = grade(kit, "--merge", str(folder), "--format", "json", timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    assert sorted(s["learner"] for s in data["submissions"]) == ["ada", "bea"]  # the BOM is read
    named = {Path(f.split(": ")[0]).name: reason for f, reason in _not_graded(data).items()}
    assert set(bad) | {"fifo.json"} <= set(named), named
    assert "FIFO" in named["fifo.json"]
    assert "nested too deep" in named["deep.json"]
    assert "checks" in named["checks_string.json"] and "record is an object" in named["not_objects.json"]
    assert "extra_data is a list" in named["extra_list.json"] and "output is empty" in named["records_empty.json"]

    # a FIFO given by name is not waited on either
    proc = grade(kit, "--merge", str(folder / "good.json"), str(fifo), "--format", "json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [s["learner"] for s in json.loads(proc.stdout)["submissions"]] == ["ada"]

    # nothing readable at all: the usage error, every file named
    proc = grade(kit, "--merge", str(folder / "extra_list.json"), str(folder / "records_empty.json"), timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "extra_list.json" in proc.stderr and "records_empty.json" in proc.stderr


# --- 13: a broken journal -------------------------------------------------------------------------------

def test_13_a_journal_of_random_bytes_or_with_a_report_not_an_object_is_no_traceback(kit, tmp_path):
    folder = write_folder(tmp_path / "class", {"alice/90.py": BROKEN})
    out = tmp_path / "out" / "record.json"
    journal = out.with_name(f".{out.name}.journal")
    journal.parent.mkdir()
    noise = bytes(range(256)) * 64 + b"\xff\xfe\n\x80\x81\n"

    journal.write_bytes(noise)
    proc = grade(kit, str(folder), "--out", str(out), "--resume")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a grading journal" in proc.stderr and "nothing to resume" in proc.stderr
    assert list(journal.parent.glob(f"{journal.name}.corrupt-*")), "the broken journal is moved aside"

    journal.write_bytes(noise)
    proc = grade(kit, str(folder), "--out", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "moved it to" in proc.stderr
    assert [s["verdict"] for s in json.loads(out.read_text())["submissions"]] == ["failed"]

    from proflab import __version__  # the header of this grading's journal, as the grader writes it

    toml = kit.root / "labs" / "90_calibration" / "lab.toml"
    header = {"journal": 1, "proflab": __version__, "folder": str(folder.resolve()), "lab": None,
              "device": "auto", "rounds": None, "timeout": None,
              "labs": {"90-calibration": hashlib.sha256(toml.read_bytes()).hexdigest()}}
    out.unlink()
    journal.write_text(json.dumps(header) + "\n" + json.dumps(
        {"file": "alice/90.py", "sha256": hashlib.sha256(BROKEN.encode()).hexdigest(), "report": "passed"}) + "\n")
    proc = grade(kit, str(folder), "--out", str(out), "--resume")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "could not be read" in proc.stderr
    assert [s["verdict"] for s in json.loads(out.read_text())["submissions"]] == ["failed"]  # graded again


# --- 15: the grade record -------------------------------------------------------------------------------

def test_15_the_grade_record_holds_the_fields_the_instructor_guide_promises(graded_class):
    proc, data = graded_class
    [alice] = [s for s in data["submissions"] if s["learner"] == "alice"]
    promised = {"sandboxed": bool, "sandbox": str, "audited": bool, "refused": list, "trace_sha256": dict}
    for name, kind in promised.items():
        assert name in alice and isinstance(alice[name], kind), (name, alice.get(name))
    assert alice["audited"] is True  # proflab grade always audits
    doctor = subprocess.run([sys.executable, "-m", "proflab", "doctor", "--json"], capture_output=True, text=True,
                            timeout=120)
    if doctor.returncode == 0 and doctor.stdout.strip().startswith("{"):
        assert alice["sandboxed"] == json.loads(doctor.stdout)["sandboxed"]
    assert (alice["sandbox"] != "") == alice["sandboxed"]


# --- 17: a missing submission, a keyword for a lab's name, values for the workflow ----------------------

def test_17_autograder_run_of_a_missing_submission_is_the_autograders_failure(kit, tmp_path):
    proc, results = autograde(kit, tmp_path / "no-such-folder", tmp_path / "results" / "results.json")
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    assert "could not grade this submission" in results["output"] and "no such folder" in results["output"]
    assert results["tests"] == [], "no lab is given 0 points for the autograder's setup"


def test_17_new_lab_refuses_a_python_keyword(tmp_path):
    import proflab

    kit = Path(proflab.__file__).resolve().parents[2]  # the checkout this proflab comes from
    root = tmp_path / "checkout"
    for folder in ("labs", "docs/labs", "src/proflab/labkit", "tests/learner_files"):
        (root / folder).mkdir(parents=True)
    for name in ("mkdocs.yml", "docs/index.md", "tests/learner_files/README.md"):  # where new-lab adds lines
        shutil.copy2(kit / name, root / name)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "proflab", "new-lab", "import"], cwd=root,
                          env={**os.environ, "PROFLAB_ROOT": str(root), "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "'import' is a Python keyword" in " ".join(proc.stderr.split())
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_17_classroom_values_cannot_break_or_inject_into_the_workflow(kit, tmp_path):
    def classroom(url: str, ref: str, out: Path):
        return kit.run("autograder", "classroom", "--labs", "90", "--kit-url", url, "--kit-ref", ref,
                       "--out", str(out), timeout=120)

    out = tmp_path / "wf" / "proflab.yml"
    for url, ref in (("https://example.org/kit.git\n  EVIL: injected", "v1"),
                     ("https://example.org/kit.git", "v1\nname: injected"),
                     ("https://example.org/${{ secrets.TOKEN }}.git", "v1"),
                     ("--upload-pack=touch /tmp/pwned", "v1")):
        proc = classroom(url, ref, out)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (url, ref, proc.stderr)
        assert not out.exists(), (url, ref)
    url = "https://example.org/kit.git#a: b # not a comment"
    proc = classroom(url, "v1.0", out)
    assert proc.returncode == 0, proc.stderr
    workflow = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert workflow["env"]["PROFLAB_KIT"] == url and workflow["env"]["PROFLAB_REF"] == "v1.0"
