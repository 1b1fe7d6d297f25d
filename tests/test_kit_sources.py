"""Every job or bundle the kit writes installs the kit from a source that is the instructor's or team's own:
never a bare name, which pip would take from the public index, where anyone may register it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from proflab.grading import gate_ci

REPO = Path(__file__).resolve().parents[1]


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.fixture
def clone(tmp_path) -> Path:
    """A kit's clone of one commit, with no origin yet."""
    where = tmp_path / "kit"
    (where / "src" / "proflab").mkdir(parents=True)
    (where / "src" / "proflab" / "__init__.py").write_text("")
    git(where, "init", "-q", "-b", "main")
    (where / "README.md").write_text("kit\n")
    git(where, "add", ".")
    git(where, "commit", "-qm", "one")
    return where


@pytest.mark.parametrize("bare", ["proflab", "proflab==1.0", "proflab[extra] >= 1, < 2", " proflab~=0.3 "])
def test_a_bare_name_is_refused(bare, clone):
    with pytest.raises(gate_ci.KitSourceError, match="bare package name"):
        gate_ci.kit_requirement(bare, clone)


@pytest.mark.parametrize("source", ["proflab @ git+https://example.org/proflab.git@v1.0",
                                    "git+ssh://git@example.org/proflab.git@3f2a1c0",
                                    "./vendor/proflab-0.4-py3-none-any.whl",
                                    "https://example.org/dist/proflab-0.4-py3-none-any.whl"])
def test_a_source_of_ones_own_is_taken_as_it_is(source, clone):
    assert gate_ci.kit_requirement(source, clone) == (source, [])


def test_a_git_source_without_a_tag_or_commit_is_taken_and_said_to_be_unpinned(clone):
    kit, notes = gate_ci.kit_requirement("proflab @ git+https://example.org/proflab.git", clone)
    assert kit == "proflab @ git+https://example.org/proflab.git"
    assert notes and "names no tag or commit" in notes[0]


def test_by_default_the_kits_own_origin_is_pinned_at_its_commit_without_the_clones_token(clone):
    git(clone, "remote", "add", "origin", "https://ci-bot:s3cret@example.org/team/proflab.git")
    commit = git(clone, "rev-parse", "HEAD")
    kit, notes = gate_ci.kit_requirement(None, clone)
    assert kit == f"proflab @ git+https://example.org/team/proflab.git@{commit}" and notes == []
    assert "s3cret" not in kit
    (clone / "README.md").write_text("changed\n")
    assert "changes not in commit" in gate_ci.kit_requirement(None, clone)[1][0]


def test_an_scp_like_origin_becomes_an_ssh_url(clone):
    git(clone, "remote", "add", "origin", "git@example.org:team/proflab.git")
    kit, _ = gate_ci.kit_requirement(None, clone)
    assert kit.startswith("proflab @ git+ssh://git@example.org/team/proflab.git@")


def test_without_an_origin_ci_can_reach_nothing_is_guessed(clone, tmp_path):
    with pytest.raises(gate_ci.KitSourceError, match="no origin"):
        gate_ci.kit_requirement(None, clone)
    git(clone, "remote", "add", "origin", str(tmp_path))
    with pytest.raises(gate_ci.KitSourceError, match="a path on this machine"):
        gate_ci.kit_requirement(None, clone)
    with pytest.raises(gate_ci.KitSourceError, match="not a git clone"):
        gate_ci.kit_requirement(None, tmp_path, {})


def test_an_installed_kit_is_pinned_to_where_pip_installed_it_from(tmp_path, clone):
    """Installed from a git URL or a wheel's (pip's direct_url.json): that source again, at its commit; never
    the repository around the installed folder (a virtual environment inside a project's clone)."""
    project = tmp_path / "project"
    (project / "venv" / "lib").mkdir(parents=True)
    git(project, "init", "-q", "-b", "main")
    git(project, "remote", "add", "origin", "https://example.org/team/model.git")
    (project / "train.py").write_text("")
    git(project, "add", ".")
    git(project, "commit", "-qm", "one")
    inside = project / "venv" / "lib"
    commit = "0123456789abcdef0123456789abcdef01234567"
    vcs = {"url": "https://tok@example.org/team/proflab.git", "vcs_info": {"vcs": "git", "commit_id": commit}}
    assert gate_ci.kit_requirement(None, inside, vcs) == \
        (f"proflab @ git+https://example.org/team/proflab.git@{commit}", [])
    wheel = {"url": "https://example.org/dist/proflab-0.1-py3-none-any.whl", "archive_info": {}}
    assert gate_ci.kit_requirement(None, inside, wheel)[0] == f"proflab @ {wheel['url']}"
    for local in ({"url": f"file://{clone}", "vcs_info": {"vcs": "git", "commit_id": commit}},
                  {"url": f"file://{clone}", "dir_info": {"editable": True}}):
        with pytest.raises(gate_ci.KitSourceError, match="a path on this machine"):
            gate_ci.kit_requirement(None, inside, local)
    with pytest.raises(gate_ci.KitSourceError, match="recorded no source"):
        gate_ci.kit_requirement(None, inside, {})


def test_init_ci_with_a_bare_name_writes_nothing_and_exits_2(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    done = subprocess.run([sys.executable, "-m", "proflab", "gate", "--init-ci", "github", "--kit", "proflab"],
                          cwd=project, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "bare package name" in said and "--kit" in said and "Traceback" not in said, said
    assert not (project / ".github").exists()


def _pip_installs(text: str) -> list[list[str]]:
    """The arguments of every ``pip install`` in a job's or script's text."""
    found = []
    for line in text.splitlines():
        m = re.search(r"\bpip(?:\(\))?\s+install\s+(.*)$", line)
        if m and not line.lstrip().startswith(("#", "pip()")):
            found.append([w for w in shlex.split(m.group(1)) if not w.startswith("-")])
    return found


def kit_installs(text: str) -> list[str]:
    """What each ``pip install`` that is not torch's, pip's own or the project's requirements installs."""
    others = {"pip", "torch", "torchvision", "requirements.txt", ".", "$torch_args"}
    return [w for words in _pip_installs(text) for w in words if w not in others]


def test_no_generated_job_or_bundle_installs_the_kit_by_a_bare_name(tmp_path):
    from proflab import labs
    from proflab.grading.engines import classroom

    kit = "proflab @ git+https://example.org/proflab.git@v1.0"
    texts = {"gate, github": gate_ci.github(gate_ci.install_lines(tmp_path, kit)),
             "gate, gitlab": gate_ci.gitlab(gate_ci.install_lines(tmp_path, kit)),
             "classroom": classroom.workflow(labs.discover(REPO / "labs")[:2], "https://example.org/proflab.git",
                                             "v1.0"),
             "gradescope setup.sh": (REPO / "src/proflab/grading/engines/templates/setup.sh").read_text()}
    for name, text in texts.items():
        installed = kit_installs(text)
        assert installed, f"{name}: no install of the kit found"
        for requirement in installed:
            assert not gate_ci.BARE.match(requirement), f"{name} installs {requirement!r}, a bare name"
