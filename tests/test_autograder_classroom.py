"""The GitHub Classroom workflow, parsed and run step by step in a clean clone, as a runner would.

The instructor's kit is a git repository made from this checkout's files; the
assignment's template is a clone of it; a learner's repository is a clone of
that, with their lab 4. ``proflab autograder classroom`` writes the workflow
there. Each step then runs as GitHub's runner runs it: ``run`` steps under
``bash -eo pipefail`` with the workflow's environment (its ``${{ }}``
expressions filled in as GitHub would), ``if: always()`` steps after a failed
one; ``actions/checkout`` is a clone of the learner's repository at the
step's ``path``, ``actions/setup-python`` a virtual environment on PATH (that
sees this machine's torch, as the runner's cache would give it), and
``actions/upload-artifact`` a check that the paths it keeps exist. A passing
repository's job is green; a failing one's is red at its last step only, with
its results in the summary and the files kept.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from conftest import copy_of_checkout

from proflab.running import sandbox

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = Path(__file__).resolve().parent / "schemas"
LEARNER = "ada-lovelace"

pytestmark = pytest.mark.skipif(not sandbox.engine().ok, reason=f"no sandbox here: {sandbox.engine().why}")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def kit_repo(tmp_path_factory) -> tuple[Path, str]:
    """The instructor's kit: this checkout's files (tracked, and new ones git does not ignore), committed."""
    where = tmp_path_factory.mktemp("kit-origin")
    git("init", "-q", "-b", "main", str(where), cwd=where)
    copy_of_checkout(where)
    git("add", "-A", cwd=where)
    git("commit", "-q", "-m", "the kit", cwd=where)
    return where, git("rev-parse", "HEAD", cwd=where)


@pytest.fixture(scope="module")
def python_on_path(tmp_path_factory) -> Path:
    """actions/setup-python: a Python of its own, on PATH, whose packages include this machine's torch."""
    where = tmp_path_factory.mktemp("setup-python")
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    purelib = subprocess.run([str(where / "venv" / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # every folder of packages this Python sees (its own, and any a .pth of it adds): torch among them
    seen = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    Path(purelib, "runner-cache.pth").write_text("\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"], *seen]))
                                                 + "\n")
    return where / "venv" / "bin"


def learner_repo(where: Path, kit: Path, ref: str, lab4: str | None, tamper: bool = False) -> Path:
    """The assignment's template cloned for a learner, with their lab 4 (None: the exercise as handed out)."""
    repo = where / "learner"
    git("clone", "-q", str(kit), str(repo), cwd=where)
    if lab4 is not None:
        (repo / "labs" / "04_syncs" / "exercise.py").write_text(lab4)
    if tamper:  # the learner's own copy of the kit, changed to pass everything: not what grades
        (repo / "src" / "proflab" / "grading" / "verdicts.py").write_text("raise SystemExit('tampered')\n")
    made = subprocess.run([sys.executable, "-m", "proflab", "autograder", "classroom", "--labs", "4",
                           "--kit-url", str(kit), "--kit-ref", ref], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, "PROFLAB_ROOT": str(kit)})
    assert made.returncode == 0, made.stderr
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "my lab 4", cwd=repo)
    return repo


def expand(text: str, context: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        key = m.group(1).strip()
        assert key in context, f"the workflow uses ${{{{ {key} }}}}, which the test does not know"
        return context[key]
    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def run_job(repo: Path, workspace: Path, bin_dir: Path) -> tuple[dict, list[tuple[str, int, str]]]:
    """Every step of the workflow's one job, as the runner runs it: (name, exit status, output) each."""
    workflow = yaml.safe_load((repo / ".github" / "workflows" / "proflab.yml").read_text())
    context = {"github.workspace": str(workspace), "github.actor": LEARNER}
    env = {k: expand(str(v), context) for k, v in workflow["env"].items()}
    summary = workspace / "step-summary.md"
    env.update(GITHUB_STEP_SUMMARY=str(summary), GITHUB_WORKSPACE=str(workspace), HOME=os.environ.get("HOME", "/root"),
               PATH=f"{bin_dir}:{os.environ['PATH']}", LANG="C.UTF-8")
    [(_, job)] = workflow["jobs"].items()
    done, failed = [], False
    for step in job["steps"]:
        name = step.get("name") or step.get("uses")
        if failed and step.get("if") != "always()":
            done.append((name, None, "skipped"))
            continue
        uses = step.get("uses", "")
        if uses.startswith("actions/checkout@"):
            git("clone", "-q", str(repo), str(workspace / step["with"]["path"]), cwd=workspace)
            code, out = 0, ""
        elif uses.startswith("actions/setup-python@"):
            code, out = 0, ""
        elif uses.startswith("actions/upload-artifact@"):
            kept = [p for p in step["with"]["path"].split() if p]
            code, out = 0, " ".join(p for p in kept if (workspace / p).exists())
        else:
            assert not uses, f"a step the test cannot run: {uses}"
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                   expand(step["run"], context)], cwd=workspace, env=env,
                                  capture_output=True, text=True, timeout=900)
            code, out = proc.returncode, proc.stdout + proc.stderr
        done.append((name, code, out))
        failed = failed or code != 0
    return workflow, done


def test_the_workflow_parses_and_pins_the_kit(kit_repo, tmp_path):
    kit, ref = kit_repo
    repo = learner_repo(tmp_path, kit, ref, None)
    workflow = yaml.safe_load((repo / ".github" / "workflows" / "proflab.yml").read_text())
    assert workflow["env"]["PROFLAB_REF"] == ref and workflow["env"]["PROFLAB_KIT"] == str(kit)
    assert set(workflow[True]) == {"push", "workflow_dispatch"}  # YAML 1.1 reads "on" as true, as PyYAML does
    steps = workflow["jobs"]["check"]["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps if "uses" in s] == [
        "actions/checkout", "actions/setup-python", "actions/upload-artifact"]
    assert steps[-1]["name"] == "Every lab passed" and "--require-pass" in steps[-1]["run"]


def test_a_passing_repository_is_green_with_its_results_in_the_summary(kit_repo, python_on_path, tmp_path):
    kit, ref = kit_repo
    repo = learner_repo(tmp_path, kit, ref, (REPO / "labs" / "04_syncs" / "solution.py").read_text())
    workspace = tmp_path / "work"
    workspace.mkdir()
    _, steps = run_job(repo, workspace, python_on_path)
    assert all(code == 0 for _, code, _ in steps), "\n".join(f"{n}: {c}\n{o[-2000:]}" for n, c, o in steps)
    summary = (workspace / "step-summary.md").read_text()
    assert f"| {LEARNER} | ✅ passed" in summary, summary
    junit = workspace / "proflab.xml"
    import xmlschema

    xmlschema.XMLSchema(SCHEMAS / "junit-10.xsd").validate(str(junit))
    kept = dict((n, o) for n, _, o in steps)["Keep the JUnit file and the record"]
    assert kept.split() == ["proflab.xml", "proflab.json"]


def test_a_failing_repository_is_red_at_the_last_step_and_its_own_kit_copy_does_not_grade(
        kit_repo, python_on_path, tmp_path):
    kit, ref = kit_repo
    repo = learner_repo(tmp_path, kit, ref, None, tamper=True)
    workspace = tmp_path / "work"
    workspace.mkdir()
    _, steps = run_job(repo, workspace, python_on_path)
    codes = {n: c for n, c, _ in steps}
    assert codes["Check labs 4"] == 0 and codes["Results as the job's summary"] == 0, steps
    assert codes["Every lab passed"] == 1, steps
    summary = (workspace / "step-summary.md").read_text()
    assert f"| {LEARNER} | ❌ failed (evidence)" in summary, summary
    assert "host round trips" in summary
