"""The Classroom 50 autograder, run as Classroom 50's runner runs it (emulated here, as the Gradescope
container is in test_autograder_gradescope.py).

``proflab autograder classroom50`` writes the folder an instructor commits as ``CLASSROOM/autograders/SLUG/``
of the classroom's config repository. Classroom 50's runner (its ``runner.py``, in the learner's repository's
Actions) extracts that bundle, deletes any ``result.json`` and ``release-body.md`` already in the learner's
checkout, and runs ``python autograder.py`` there with the submission's identity in the environment; a
non-zero exit is an infrastructure error, and ``result.json`` must hold to ``classroom50/result/v1``
(``validate``, written from the contract as its documentation and runner give it). Here the kit the
autograder fetches is a git repository made from this checkout, and the autograder runs with a fresh
environment's Python (the kit's dependencies reached through a ``.pth``, not installed again).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, copy_of_checkout
from proflab.running import sandbox

LABS = REPO / "labs"
IDENTITY = {"CLASSROOM": "ml-perf", "ASSIGNMENT": "proflab", "USERNAME": "ada", "OWNER": "ada",
            "ASSIGNMENT_TYPE": "individual", "SUBMISSION_TAG": "submit/2026-12-07T10-00-00Z-abc1234",
            "COMMIT_URL": "https://github.com/ml-perf/ml-perf-proflab-ada/commit/abc1234",
            "RELEASE_URL": "https://github.com/ml-perf/ml-perf-proflab-ada/releases/tag/submit/2026-12-07T10-00-00Z-abc1234",
            "REVIEW_URL": "https://github.com/ml-perf/ml-perf-proflab-ada/compare"}
RUNTIME_KEYS = {"runs-on", "container", "python", "node", "java", "go", "rust", "apt"}


def validate(data: dict, classroom: str, assignment: str) -> None:
    """result.json as Classroom 50's runner validates it (classroom50/result/v1)."""
    assert data.get("schema") == "classroom50/result/v1"
    assert data.get("classroom") == classroom and data.get("assignment") == assignment
    assert isinstance(data.get("submission"), str) and data["submission"].startswith("submit/")
    for key in ("commit", "release", "review"):
        assert isinstance(data.get(key), str) and data[key], key
    for key in ("score", "max-score"):
        assert isinstance(data.get(key), int) and not isinstance(data[key], bool) and data[key] >= 0, key
    assert data["score"] <= data["max-score"]
    assert isinstance(data.get("tests"), list)
    for t in data["tests"]:
        assert isinstance(t.get("test-name"), str) and t["test-name"], t
        assert isinstance(t.get("passed"), bool), t
        for key in ("score", "max-score"):
            assert isinstance(t.get(key), int) and not isinstance(t[key], bool) and t[key] >= 0, t
        assert t["score"] <= t["max-score"], t


def proflab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proflab", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_autograder_folder_holds_to_classroom50s_layout(tmp_path):
    out = tmp_path / "ml-perf" / "autograders" / "proflab"
    done = proflab("autograder", "classroom50", "--labs", "4", "2", "--kit-url", "https://example.org/proflab.git",
                   "--kit-ref", "v1.0", "--out", str(out), cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "autograder.py", "runtime.json"]
    script = (out / "autograder.py").read_text()
    compile(script, "autograder.py", "exec")
    assert "'https://example.org/proflab.git'" in script and "'v1.0'" in script and "['2', '4']" in script
    runtime = json.loads((out / "runtime.json").read_text())
    assert set(runtime) <= RUNTIME_KEYS and re.fullmatch(r"[A-Za-z0-9._+-]{1,32}", runtime["python"])
    assert "bubblewrap" in runtime["apt"] and all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]{0,63}", n) for n in runtime["apt"])
    readme = (out / "README.md").read_text()
    assert "gh teacher assignment add" in readme and "--runtime runtime.json" in readme
    again = proflab("autograder", "classroom50", "--labs", "4", "--kit-url", "https://example.org/proflab.git",
                    "--kit-ref", "v1.0", "--out", str(out), cwd=REPO)
    assert again.returncode == 2 and "left as it is" in " ".join(again.stderr.split()), again.stderr  # never a script
    bad = proflab("autograder", "classroom50", "--labs", "4", "--kit-url", "-x", "--kit-ref", "v1.0",
                  "--out", str(tmp_path / "bad"), cwd=REPO)
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()


def _kit_repository(where: Path) -> tuple[Path, str]:
    """A git repository of this checkout's kit as it is now (tracked files and new ones git does not ignore)."""
    copy_of_checkout(where)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"], "HOME": str(where)}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "kit"]):
        subprocess.run(["git", *argv], cwd=where, check=True, capture_output=True, env=env)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, check=True, capture_output=True, text=True,
                         env=env).stdout.strip()
    return where, sha


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """Classroom 50's runner, emulated: the bundle written and extracted where the runner puts it, a fresh
    environment's Python, and a function that grades one learner's checkout as the runner does."""
    from test_installed import fresh_venv

    where = tmp_path_factory.mktemp("classroom50")
    kit, sha = _kit_repository(where / "kit-repo")
    bundle = where / "runner-temp" / "classroom50-runtime" / "proflab"
    done = proflab("autograder", "classroom50", "--labs", "4", "--kit-url", str(kit), "--kit-ref", sha,
                   "--out", str(bundle), cwd=REPO)
    assert done.returncode == 0, done.stderr
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROFLAB_ROOT", "VIRTUAL_ENV")}
    python = fresh_venv(where / "venv", plain) / "bin" / "python"
    runs: list[float] = []  # each submission's time, the kit's install included the first time

    def grade(workspace: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
        for stale in ("result.json", "release-body.md"):  # the runner removes what a submission brought
            (workspace / stale).unlink(missing_ok=True)
        env = {**plain, **IDENTITY, "RUNNER_TEMP": str(where / "runner-temp"), "CLASSROOM50_BUNDLE_DIR": str(bundle),
               "GITHUB_WORKSPACE": str(workspace)}
        started = time.monotonic()
        proc = subprocess.run([str(python), str(bundle / "autograder.py")], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=900)
        runs.append(time.monotonic() - started)
        print(f"submission {len(runs)}: autograder.py took {runs[-1]:.0f} s, exit {proc.returncode}")
        result = workspace / "result.json"
        return proc, (json.loads(result.read_text()) if result.is_file() else None)
    return grade


def learner(tmp_path: Path, exercise: bytes) -> Path:
    """A learner's checkout: a copy of the kit's labs with lab 4's exercise as given, and a package named like
    the kit's at its top, which must never be what grades it."""
    workspace = tmp_path / "ml-perf-proflab-ada"
    shutil.copytree(LABS, workspace / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    (workspace / "labs" / "04_syncs" / "exercise.py").write_bytes(exercise)
    (workspace / "proflab").mkdir()
    (workspace / "proflab" / "__init__.py").write_text("raise SystemExit('the learner’s own proflab was imported')\n")
    (workspace / "proflab" / "__main__.py").write_text("raise SystemExit('the learner’s own proflab was run')\n")
    return workspace


def _said(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.skipif(not sandbox.engine().ok, reason=f"no sandbox here: {sandbox.engine().why}")
def test_a_passing_submission_gets_every_point(runner, tmp_path):
    workspace = learner(tmp_path, (LABS / "04_syncs" / "solution.py").read_bytes())
    proc, result = runner(workspace)
    if result is not None and any("Faster" in t["test-name"] and not t["passed"] for t in result["tests"]):
        proc, result = runner(workspace)  # too noisy to call: the checker's own advice is to check again
    assert proc.returncode == 0 and result is not None, _said(proc)
    validate(result, IDENTITY["CLASSROOM"], IDENTITY["ASSIGNMENT"])
    assert result["score"] == result["max-score"] > 0 and all(t["passed"] for t in result["tests"]), result
    assert [t["test-name"].split(": ")[1] for t in result["tests"]] == \
        ["It runs", "Same work, same results", "The bottleneck is gone", "Faster"]
    body = (workspace / "release-body.md").read_text()
    assert "lab 4 syncs" in body and "passed" in body and "sandboxed" in body
    assert "learner’s own proflab" not in proc.stdout + proc.stderr


@pytest.mark.skipif(not sandbox.engine().ok, reason=f"no sandbox here: {sandbox.engine().why}")
def test_a_failing_submission_scores_what_it_earned_and_says_why(runner, tmp_path):
    exercise = (LABS / "04_syncs" / "exercise.py").read_bytes() + b"\n# looked at it, changed nothing that matters\n"
    workspace = learner(tmp_path, exercise)
    proc, result = runner(workspace)
    assert proc.returncode == 0 and result is not None, _said(proc)
    validate(result, IDENTITY["CLASSROOM"], IDENTITY["ASSIGNMENT"])
    failed = [t for t in result["tests"] if not t["passed"]]
    assert failed and failed[0]["test-name"].endswith("The bottleneck is gone"), result
    assert 0 < result["score"] < result["max-score"], result  # it runs and gives the same results: those points
