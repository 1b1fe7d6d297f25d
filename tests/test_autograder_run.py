"""``proflab autograder run`` (what the bundle's run_autograder calls), run here on the calibration lab, and
a class of 200 of its results.json files merged back into one table (``proflab grade --merge``).

The container test (``test_autograder_gradescope.py``) runs it as Gradescope does; this one covers what it
does with a submission at the command's level, quickly: the learner from Gradescope's metadata, a lab with
no file, a kit that cannot grade (results.json still written, saying so), and what --merge makes of an
export's folders.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_grade import SCHEMAS, grade, make_kit, variant, write_folder

WHO = {"users": [{"email": "ada@example.edu", "name": "Ada"}]}


def autograde(kit, submission: Path, out: Path, metadata: dict | None = None, env: dict | None = None):
    meta = submission.parent / "submission_metadata.json"
    if metadata is not None:
        meta.write_text(json.dumps(metadata))
    proc = subprocess.run([sys.executable, "-m", "proflab", "autograder", "run", "--submission", str(submission),
                           "--results", str(out), "--metadata", str(meta)], cwd=kit.root,
                          env={**kit.env(), **(env or {})}, capture_output=True, text=True, timeout=300)
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


def valid(results: dict) -> None:
    import jsonschema

    schema = json.loads((SCHEMAS / "gradescope-results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(results)


@pytest.fixture(scope="module")
def passed(tmp_path_factory):
    kit = make_kit(tmp_path_factory.mktemp("autograder-kit"))
    submission = write_folder(kit.root / "ag" / "submission", {"90.py": variant(4.0)})
    proc, results = autograde(kit, submission, kit.root / "ag" / "results" / "results.json", WHO)
    return kit, proc, results


def test_a_submission_is_graded_into_results_json_with_its_learner(passed):
    _, proc, results = passed
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    assert results["score"] == 10 and results["extra_data"]["learner"] == "ada@example.edu"
    [record] = results["extra_data"]["records"]
    assert record["file"] == "90.py" and record["report"]["verdict"] == "passed"
    assert "step_times" not in record["report"]
    assert "lab 90: passed (90.py" in proc.stderr


def test_a_lab_with_no_file_and_a_kit_that_cannot_grade_still_write_results(passed, tmp_path):
    kit, _, _ = passed
    empty = write_folder(tmp_path / "submission", {"notes.txt": "hello"})
    proc, results = autograde(kit, empty, tmp_path / "results" / "results.json", WHO)
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    [test] = [t for t in results["tests"] if "max_score" in t]
    assert test["score"] == 0 and "no file for lab 90" in test["output"] and "90.py" in test["output"]
    nowhere = tmp_path / "no-kit"
    nowhere.mkdir()
    proc, results = autograde(kit, empty, tmp_path / "r2" / "results.json", WHO, env={"PROFLAB_ROOT": str(nowhere)})
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    assert results["score"] == 0 and "could not grade this submission" in results["output"]
    assert "not yours" in results["output"]


def test_a_class_of_200_results_merges_into_one_table(passed, tmp_path):
    kit, _, results = passed
    export = tmp_path / "export"
    for i in range(200):
        one = json.loads(json.dumps(results))
        one["extra_data"]["learner"] = f"learner{i:03d}@example.edu" if i % 10 else "learner"  # 20 unnamed
        folder = export / f"submission_{1000 + i}" / "results"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(one))
    # Gradescope's export names who submitted each folder
    (export / "submission_metadata.yml").write_text("".join(
        f"submission_{1000 + i}:\n  :submitters:\n  - :name: Learner {i}\n    :email: learner{i:03d}@example.edu\n"
        for i in range(0, 200, 10)))
    started = time.perf_counter()
    proc = grade(kit, "--merge", str(export), "--format", "json", "--out", str(tmp_path / "class.json"))
    took = time.perf_counter() - started
    print(f"200 results.json merged in {took:.1f} s")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "class.json").read_text())
    assert record["summary"]["submissions"] == 200 and record["summary"]["passed"] == 200
    assert {s["learner"] for s in record["submissions"]} == {f"learner{i:03d}@example.edu" for i in range(200)}
    assert all(s["score"] == 10 for s in record["submissions"])


def test_a_speedup_too_noisy_to_call_says_so_and_how_to_run_it_again(passed, tmp_path):
    kit, _, _ = passed
    scheduled = (Path(__file__).resolve().parent / "calibration" / "scheduled.py").read_text(encoding="utf-8")
    submission = write_folder(tmp_path / "submission", {"calibration.py": scheduled})
    proc, results = autograde(kit, submission, tmp_path / "results" / "results.json", WHO, env={
        "PROFLAB_CAL_SPEEDUPS": "1.45,1.0", "PROFLAB_CAL_COUNTER": str(tmp_path / "runs-counted"),
        "PROFLAB_SANDBOX_SHARED": str(tmp_path)})
    assert proc.returncode == 0 and results is not None, proc.stderr
    valid(results)
    faster = next(t for t in results["tests"] if t.get("tags", [None, None])[1:] == ["faster"])
    assert "Too noisy to call on this machine" in faster["output"] and faster["score"] == 2.5, faster
    assert "too noisy to call on this machine: re-run it" in results["output"]
