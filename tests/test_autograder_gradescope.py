"""The Gradescope autograder, tested as Gradescope runs it (``tests/container.py``).

``proflab autograder gradescope --labs 2 4`` writes the bundle; in a
container-like root where no kit is installed, ``setup.sh`` builds the image
(torch, the kit, the data) as root, then ``run_autograder`` grades each
submission in a fresh container of it. Every results.json is validated
against Gradescope's documented fields (``tests/schemas``), for a passing
submission, a failing one with a lab missing, a broken one with an exercise
left as handed out, and a cheat. Building the image installs torch: about
two minutes here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from container import Image
from proflab.running import sandbox

REPO = Path(__file__).resolve().parents[1]
LABS = REPO / "labs"
CHEATS = Path(__file__).resolve().parent / "cheats"
SCHEMA = Path(__file__).resolve().parent / "schemas" / "gradescope-results.schema.json"
WHO = {"users": [{"email": "ada@example.edu", "name": "Ada", "id": 7}], "id": 1234}

pytestmark = pytest.mark.skipif(not sandbox.engine().ok or shutil.which("mount") is None,
                                reason=f"no sandbox here: {sandbox.engine().why}")


def valid(results: dict) -> None:
    import jsonschema

    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(results)


def lab_tests(results: dict, lab: int) -> list[dict]:
    return [t for t in results["tests"] if t.get("tags", [""])[0] == f"lab-{lab}"]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    where = tmp_path_factory.mktemp("gradescope")
    bundle = where / "autograder.zip"
    made = subprocess.run([sys.executable, "-m", "proflab", "autograder", "gradescope", "--labs", "4", "2",
                           "--out", str(bundle), "--torch-index", "pypi"], cwd=REPO, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    img = Image(where / "image")
    proc, seconds = img.build(bundle)
    print(f"setup.sh took {seconds:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield img, proc
    shutil.rmtree(where, ignore_errors=True)


def test_setup_installs_the_kit_from_the_bundle_and_says_whether_runs_are_sandboxed(image):
    img, proc = image
    venv = img.folder / "autograder" / "venv"
    assert (venv / "bin" / "proflab").is_file()
    assert (img.folder / "autograder" / "run_autograder").stat().st_mode & 0o111
    # the kit the image runs is the bundle's, not this checkout's
    found = list((venv / "lib").glob("python3*/site-packages/proflab/__init__.py"))
    assert found, "proflab is not installed in the image's venv"
    assert "The autograder is ready: labs 2 4" in proc.stdout
    assert "sandbox" in proc.stdout.lower()
    assert (img.folder / "autograder" / "source" / "proflab" / "data").is_dir()


def test_a_passing_submission_gets_every_point(image, tmp_path):
    img, _ = image
    files = {"4.py": (LABS / "04_syncs" / "solution.py").read_bytes(),
             "embeddings.py": (LABS / "02_embeddings" / "solution.py").read_bytes()}
    run = img.run(tmp_path / "c", files, WHO)
    print(f"a passing submission of labs 2 and 4 took {run.seconds:.0f} s")
    assert run.proc.returncode == 0 and run.results is not None, run.proc.stderr[-3000:]
    valid(run.results)
    graded = [t for t in run.results["tests"] if "max_score" in t]
    assert graded and all(t["status"] == "passed" and t["score"] == t["max_score"] for t in graded), run.results
    assert run.results["score"] == sum(t["max_score"] for t in graded) > 0
    assert run.results["extra_data"]["learner"] == "ada@example.edu"
    [hidden] = [t for t in run.results["tests"] if t["visibility"] == "hidden"]
    assert hidden["output"].startswith("Runs were sandboxed"), hidden
    assert {b["name"] for b in run.results["leaderboard"]} == {"Lab 2 speed-up (×)", "Lab 4 speed-up (×)"}


def test_a_failing_fix_and_a_missing_lab_each_say_why_with_no_points(image, tmp_path):
    img, _ = image
    still_slow = (LABS / "04_syncs" / "exercise.py").read_text() + "\n# I changed nothing that matters\n"
    run = img.run(tmp_path / "c", {"04_syncs.py": still_slow.encode()}, WHO)
    assert run.proc.returncode == 0 and run.results is not None, run.proc.stderr[-3000:]
    valid(run.results)
    lab4 = {t["name"].split(" · ")[1]: t for t in lab_tests(run.results, 4)}
    assert lab4["It runs"]["status"] == "passed"
    assert lab4["The bottleneck is gone"]["status"] == "failed" and lab4["The bottleneck is gone"]["score"] == 0
    assert "host round trips" in lab4["The bottleneck is gone"]["output"]
    [missing] = lab_tests(run.results, 2)
    assert missing["status"] == "failed" and missing["score"] == 0 and missing["max_score"] > 0
    assert "no file for lab 2" in missing["output"] and "embeddings.py" in missing["output"]
    assert run.results["score"] == sum(t.get("score", 0) for t in lab_tests(run.results, 4))


def test_a_file_that_does_not_parse_and_an_untouched_exercise_get_clear_results(image, tmp_path):
    img, _ = image
    files = {"4.py": b"def pipeline(cfg)\n    yield {}\n",
             "mycopy/labs/02_embeddings/exercise.py": (LABS / "02_embeddings" / "exercise.py").read_bytes()}
    run = img.run(tmp_path / "c", files, WHO)
    assert run.proc.returncode == 0 and run.results is not None, run.proc.stderr[-3000:]
    valid(run.results)
    runs = next(t for t in lab_tests(run.results, 4) if t["tags"][1] == "runs")
    assert runs["status"] == "failed" and "SyntaxError" in runs["output"] and "line 1" in runs["output"]
    [untouched] = lab_tests(run.results, 2)
    assert "exercise as handed out" in untouched["output"] and untouched["score"] == 0
    assert "mycopy/labs/02_embeddings/exercise.py" in untouched["output"]
    assert run.results["score"] == 0
    assert "Traceback (most recent call last)" not in run.results["output"]


def test_a_cheat_fails_and_the_results_are_the_autograders(image, tmp_path):
    img, _ = image
    run = img.run(tmp_path / "c", {"4.py": (CHEATS / "lab4_nan_by_nonzero.py").read_bytes()}, WHO)
    assert run.proc.returncode == 0 and run.results is not None, run.proc.stderr[-3000:]
    valid(run.results)
    lab4 = {t["tags"][1]: t for t in lab_tests(run.results, 4)}
    assert lab4["evidence"]["status"] == "failed" and lab4["faster"]["status"] == "failed"
    assert "aten::nonzero" in lab4["evidence"]["output"] or "round trips" in lab4["evidence"]["output"]
    assert run.results["score"] < sum(t["max_score"] for t in lab4.values())
