"""The kit installed like any tool: a wheel built by the standard front end (``python -m build``), or a
pinned git requirement (``proflab @ git+URL@COMMIT``), installed into a fresh virtual environment outside
the checkout, and used from a project of one's own: ``proflab
profile`` on a script, ``proflab gate`` of two revisions of a small project, and the kit's TensorBoard tabs
registered by the wheel itself.

The fresh environment takes the kit's dependencies (torch, TensorBoard, ...) from the test's own environment
through a ``.pth`` line, not from the index: installing torch again takes minutes and gigabytes, and is not
what is tested. The kit itself comes from the wheel alone (``--no-deps``), and every command runs with the
fresh environment's own ``proflab``, from folders that are not the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, copy_of_checkout, explain
from test_gate import PIPELINE, SETTINGS, git

SCRIPTS = Path(__file__).resolve().parent / "own_scripts"


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def fresh_venv(venv: Path, env: dict[str, str]) -> Path:
    """A new virtual environment with no kit in it, which finds the test environment's packages (torch,
    TensorBoard...) through a ``.pth`` line, after its own."""
    made = run([sys.executable, "-m", "venv", str(venv)], venv.parent, env)
    assert made.returncode == 0, made.stderr
    site = Path(run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    venv.parent, env).stdout.strip())
    (site / "_proflab_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the fresh environment's ``proflab``, an environment for running it): the wheel built from the
    checkout and installed there."""
    where = tmp_path_factory.mktemp("installed")
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROFLAB_ROOT", "VIRTUAL_ENV")}
    # from a copy: setuptools writes build/ and an egg-info beside the sources, which are the checkout's
    source = copy_of_checkout(where / "source")
    built = run([sys.executable, "-m", "build", "--wheel", "--outdir", str(where / "dist"), str(source)], source, plain)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = sorted((where / "dist").glob("proflab-*.whl"))
    assert len(wheels) == 1, wheels
    venv = fresh_venv(where / "venv", plain)
    done = run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                str(wheels[0])], where, plain)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin" / "proflab", {**plain, "COLUMNS": "200", "PATH": f"{venv / 'bin'}:{plain['PATH']}"}


def test_the_wheel_holds_the_kit_and_registers_its_tensorboard_tabs(installed, tmp_path):
    proflab, env = installed
    python = proflab.parent / "python"
    where = run([str(python), "-c", """
import importlib.metadata as md, json, proflab
eps = {ep.name: ep.load().__module__ for ep in md.entry_points(group="tensorboard_plugins")
       if ep.name.startswith("proflab")}
mods = {name: __import__(mod, fromlist=["x"]).__file__ for name, mod in eps.items()}
print(json.dumps({"kit": proflab.__file__, "tabs": mods, "version": md.version("proflab")}))
"""], tmp_path, env)
    assert where.returncode == 0, where.stderr
    found = json.loads(where.stdout)
    venv = str(proflab.parent.parent)
    assert found["kit"].startswith(venv) and str(REPO) not in found["kit"], found
    assert set(found["tabs"]) == {"proflab_timeline", "proflab_profile"}, found
    assert all(path.startswith(venv) for path in found["tabs"].values()), found
    static = Path(found["kit"]).parent / "viewing"
    assert any((static / "timeline_static").iterdir()) and any((static / "dashboard_static").iterdir())


@pytest.fixture(scope="module")
def from_git(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The kit installed by a pinned git requirement, ``proflab @ git+URL@COMMIT``, as a team's CI job does:
    here the checkout's own repository, at its last commit."""
    where = tmp_path_factory.mktemp("from-git")
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PROFLAB_ROOT", "VIRTUAL_ENV")}
    commit = run(["git", "rev-parse", "HEAD"], REPO, plain).stdout.strip()
    venv = fresh_venv(where / "venv", plain)
    done = run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--quiet",
                f"proflab @ git+file://localhost{REPO}@{commit}"], where, plain)  # a host: older pip wants one
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return venv / "bin" / "proflab", {**plain, "COLUMNS": "200", "PATH": f"{venv / 'bin'}:{plain['PATH']}"}


def test_a_pinned_git_requirement_installs_the_kit_and_a_ci_job_pins_it_again(from_git, tmp_path):
    """From the git install: the kit's own package and tabs, ``proflab profile`` on a script, and
    ``gate --init-ci``, which pins the job to the source pip recorded, refused here only because a
    ``file://`` URL is a path of this machine that CI cannot reach (exit 2, saying what to pass)."""
    proflab, env = from_git
    python = proflab.parent / "python"
    found = run([str(python), "-c", "import importlib.metadata as md, json, proflab; print(json.dumps("
                 "[proflab.__file__, sorted(ep.name for ep in md.entry_points(group='tensorboard_plugins') "
                 "if ep.name.startswith('proflab')), json.loads(md.distribution('proflab').read_text('direct_url.json'))]))"],
                tmp_path, env)
    assert found.returncode == 0, found.stderr
    kit, tabs, direct = json.loads(found.stdout)
    assert kit.startswith(str(proflab.parent.parent)) and tabs == ["proflab_profile", "proflab_timeline"], found.stdout
    assert direct["vcs_info"]["commit_id"] == run(["git", "rev-parse", "HEAD"], REPO, env).stdout.strip(), direct
    report = tmp_path / "profile.json"
    done = run([str(proflab), "profile", "--json", str(report), str(SCRIPTS / "classify.py"), "--decode-in-loop"],
               tmp_path, env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # what it found is the wheel's test's to check (the same code): here, that it profiled from this install
    rank = json.loads(report.read_text())["ranks"][0]
    assert Path(rank["trace"]).is_file() and rank["trace"].startswith(str(tmp_path)), rank
    project = tmp_path / "project"
    project.mkdir()
    (project / "pipeline.py").write_text(PIPELINE.format(step_ms=20))
    git(project, "init", "-q", "-b", "main")
    refused = run([str(proflab), "gate", "--init-ci", "github"], project, env)
    assert refused.returncode == 2 and "a path on this machine" in refused.stderr, refused.stdout + refused.stderr
    assert not (project / ".github").exists()
    pinned = "proflab @ git+https://example.org/team/proflab.git@v1.0"
    made = run([str(proflab), "gate", "--init-ci", "github", "--kit", pinned], project, env)
    assert made.returncode == 0, made.stdout + made.stderr
    (job,) = (project / ".github" / "workflows").glob("*.yml")
    assert f'pip install "{pinned}"' in job.read_text()


def test_profile_runs_a_script_of_ones_own_from_the_installed_kit(installed, tmp_path):
    proflab, env = installed
    report = tmp_path / "profile.json"
    done = run([str(proflab), "profile", "--json", str(report), str(SCRIPTS / "classify.py"), "--decode-in-loop"],
               tmp_path, env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(report.read_text())
    assert [f["key"] for f in found["ranks"][0]["findings"]][:1] == ["loader"], done.stdout[-3000:]
    assert Path(found["ranks"][0]["trace"]).is_file() and (tmp_path / "runs" / "classify").is_dir()


def test_gate_measures_two_revisions_of_a_project_with_the_installed_kit(installed, tmp_path):
    proflab, env = installed
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(SETTINGS)
    (project / "pipeline.py").write_text(PIPELINE.format(step_ms=20))
    git(project, "init", "-q", "-b", "main")
    git(project, "add", ".")
    git(project, "commit", "-qm", "fast")
    (project / "pipeline.py").write_text(PIPELINE.format(step_ms=60))
    git(project, "commit", "-qam", "slow")
    done = run([str(proflab), "gate", "--against", "HEAD~1", "--json", "--unsandboxed"], project, env)
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["verdict"] == "failed", explain(report)  # 3x slower: a regression
