"""One door for every file a command writes (``proflab.outputs``).

Every output option of every command is walked with the files an output must never replace: a lab's
``original.py``, a git repository's ``.git/config``, the Python environment's own ``bin/proflab``, one of the
command's inputs, and a symbolic link. Each is refused (exit 2) and every file is byte for byte as it was.

The environment is a throwaway one (a venv made for the test, running this checkout's proflab), and the
git repository is the test's own: a kit that wrote there would spoil nothing but the test.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO, make_kit

RECORD = ('{"proflab": "0", "submissions": [{"learner": "ann", "lab": "dataloader", "number": 1, '
          '"title": "DataLoader", "file": "ann/1.py", "verdict": "failed", "checks": []}]}\n')


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtual environment of the test's own whose Python runs this checkout's proflab: ``sys.prefix`` is
    it, and its ``bin/proflab`` is a copy of the real command."""
    where = tmp_path_factory.mktemp("env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    shutil.copyfile(Path(sys.prefix) / "bin" / "proflab", where / "bin" / "proflab")
    return where


def _env(root: Path) -> dict[str, str]:
    path = [p for p in (os.environ.get("PYTHONPATH"), str(REPO / "src"), sysconfig.get_paths()["purelib"],
                        sysconfig.get_paths()["platlib"]) if p]
    return {**os.environ, "PROFLAB_ROOT": str(root), "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(path)}


def _run(venv: Path, root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "proflab", *args], cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=timeout)


def _sha(path: Path) -> str:
    """A file's hash; a folder's: the names and hashes of all it holds."""
    if path.is_dir():
        return hashlib.sha256(repr(sorted((str(p.relative_to(path)), _sha(p)) for p in path.rglob("*")
                                          if not p.is_dir())).encode()).hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


@pytest.fixture
def ground(tmp_path, venv):
    """A kit, a git repository, the inputs of each command, a link, and the hashes of all of them."""
    kit = make_kit(tmp_path / "kit")
    root = kit.root
    lab = sorted((root / "labs").glob("*/original.py"))[0]
    repo = tmp_path / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    (root / "record.json").write_text(RECORD, encoding="utf-8")
    (root / "class").mkdir()
    (root / "class" / "readme.txt").write_text("the class's own notes\n", encoding="utf-8")
    (root / "submission").mkdir()
    (root / "train.py").write_text("print('trained')\n", encoding="utf-8")
    (root / "broken.py").write_text("x = (\n", encoding="utf-8")
    (root / "base.py").write_text("x = (\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere.json"  # names proflab: were the link followed, it would pass as the kit's
    elsewhere.write_text('{"proflab": "0"}\n', encoding="utf-8")
    (root / "link.json").symlink_to(elsewhere)
    (tmp_path / "elsewhere").mkdir()
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    (root / "link.zip").symlink_to(tmp_path / "elsewhere.zip")
    targets = {
        "file": {"a lab's original.py": lab, "a repository's .git/config": repo / ".git" / "config",
                 "the environment's bin/proflab": venv / "bin" / "proflab", "a link": root / "link.json"},
        "folder": {"a lab's folder": lab.parent, "a repository's .git": repo / ".git",
                   "the environment's bin": venv / "bin", "a link to a folder": root / "linked"},
        "zip": {"a lab's folder": lab.parent / "autograder.zip", "a repository's .git": repo / ".git" / "a.zip",
                "the environment's bin": venv / "bin" / "autograder.zip", "a link": root / "link.zip"},
    }
    watched = [lab.parent, repo / ".git", venv / "bin", elsewhere, tmp_path / "elsewhere",
               tmp_path / "elsewhere.zip", root / "record.json", root / "train.py", root / "broken.py",
               root / "base.py", root / "class"]
    return root, targets, watched


# command line (with {} for the output) and an input of the command that an output must not replace (None:
# it reads no file of the user's)
COMMANDS = [
    (["grade", "--merge", "record.json", "--out", "{}"], "record.json"),
    (["grade", "--merge", "record.json", "--json-out", "{}"], "record.json"),
    (["profile", "--json", "{}", "train.py"], "train.py"),
    (["profile", "--out", "{folder}", "train.py"], "train.py"),
    (["autograder", "classroom", "--labs", "1", "--kit-url", "https://example.org/kit.git", "--kit-ref", "v1",
      "--out", "{}", "--force"], None),
    (["autograder", "gradescope", "--labs", "1", "--out", "{zip}"], None),
    (["grade", "class", "--unsandboxed", "--out", "{}"], "class/readme.txt"),
    (["grade", "class", "--unsandboxed", "--json-out", "{}"], "class/readme.txt"),
    (["autograder", "run", "--submission", "submission", "--metadata", "record.json", "--results", "{}"],
     "record.json"),
    (["gate", "broken.py", "--baseline", "base.py", "--unsandboxed", "--rounds", "2", "--junit", "{}"], "base.py"),
    (["gate", "broken.py", "--baseline", "base.py", "--unsandboxed", "--rounds", "2", "--json-out", "{}"],
     "broken.py"),
]


def _slot(command: list[str]) -> int:
    return next(i for i, a in enumerate(command) if a in ("{}", "{folder}", "{zip}"))


@pytest.mark.parametrize("command,given", COMMANDS, ids=[" ".join(c[:2]) + " " + c[_slot(c) - 1] + " " + c[_slot(c)]
                                                          for c, _ in COMMANDS])
def test_every_output_option_refuses_the_kits_files_its_inputs_and_links(ground, venv, command, given):
    root, targets, watched = ground
    slot = _slot(command)
    kind = command[slot].strip("{}") or "file"
    for what, target in {**targets[kind], **({"one of its inputs": root / given} if given else {})}.items():
        before = {p: _sha(p) for p in watched}
        argv = [str(target) if i == slot else a for i, a in enumerate(command)]
        proc = _run(venv, root, *argv)
        said = f"{what}: {' '.join(argv)}\nexit {proc.returncode}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
        assert {p: _sha(p) for p in watched} == before, "written over " + said
        assert proc.returncode == 2, said
        assert str(target) in proc.stderr.replace("\n", "") or target.name in proc.stderr, said
        assert "Traceback" not in proc.stderr, said
    assert (root / "link.json").is_symlink()


def test_force_replaces_a_workflow_the_kit_wrote_and_nothing_else(tmp_path, venv):
    root = make_kit(tmp_path / "kit").root
    args = ["autograder", "classroom", "--labs", "1", "--kit-url", "https://example.org/kit.git", "--kit-ref", "v1"]
    mine = root / "notes.yml"
    mine.write_text("my own notes, not a workflow\n", encoding="utf-8")
    proc = _run(venv, root, *args, "--out", str(mine), "--force")
    assert proc.returncode == 2 and "was not written by the kit" in proc.stderr, proc.stderr
    assert mine.read_text(encoding="utf-8") == "my own notes, not a workflow\n"

    ours = root / "workflow.yml"
    assert _run(venv, root, *args, "--out", str(ours)).returncode == 0
    again = _run(venv, root, *args, "--out", str(ours))
    assert again.returncode == 2 and "--force" in again.stderr  # without --force, left as it is
    replaced = _run(venv, root, *args[:-1], "v2", "--out", str(ours), "--force")
    assert replaced.returncode == 0, replaced.stderr
    assert "v2" in ours.read_text(encoding="utf-8")


def test_an_output_over_a_file_the_kit_did_not_write_is_refused_and_its_own_is_replaced(tmp_path, venv):
    root = make_kit(tmp_path / "kit").root
    (root / "record.json").write_text(RECORD, encoding="utf-8")
    own = root / "grades.csv"
    own.write_text("name,grade\nann,A\n", encoding="utf-8")
    proc = _run(venv, root, "grade", "--merge", "record.json", "--out", str(own))
    assert proc.returncode == 2 and "was not written by the kit" in proc.stderr, proc.stderr
    assert own.read_text(encoding="utf-8") == "name,grade\nann,A\n"
    fifo = root / "pipe.json"
    os.mkfifo(fifo)
    proc = _run(venv, root, "grade", "--merge", "record.json", "--out", str(fifo), timeout=60)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
    for _ in range(2):  # its own output, written again
        proc = _run(venv, root, "grade", "--merge", "record.json", "--out", "class.json")
        assert proc.returncode == 0, proc.stderr


def test_a_full_disk_keeps_the_verdict_names_the_file_and_exits_3(tmp_path, venv):
    """Item 9: the output's disk is full. The class table is said before any file is written; the file that
    could not be written is named, its text follows on stdout; exit 3 (the machine's failure, not a usage
    error)."""
    root = make_kit(tmp_path / "kit").root
    (root / "record.json").write_text(RECORD, encoding="utf-8")
    full = root / "full"
    full.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(full)],
                                           capture_output=True, timeout=30).returncode != 0:
        pytest.skip("a small disk of its own needs mount (root)")
    try:
        with open(full / "fill", "wb") as f:
            try:
                f.write(b"\0" * 65536)
            except OSError:
                pass
        proc = _run(venv, root, "grade", "--merge", "record.json", "--out", str(full / "class.json"))
    finally:
        subprocess.run(["umount", str(full)], timeout=30)
    assert proc.returncode == 3, proc.stderr
    table = proc.stderr.index("1 submission from 1 learner")
    assert table < proc.stderr.index("could not write"), proc.stderr  # the verdict first
    assert f"could not write {full / 'class.json'}" in proc.stderr.replace("\n", ""), proc.stderr
    assert "No space left on device" in " ".join(proc.stderr.split())
    assert '"submissions"' in proc.stdout  # what could not be written, not lost


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_check_file_names_a_fifo_or_a_folder_for_what_it_is(tmp_path, venv, kind):
    root = make_kit(tmp_path / "kit").root
    given = root / "mine.py"
    os.mkfifo(given) if kind == "fifo" else given.mkdir()
    proc = _run(venv, root, "check", "1", "--file", str(given), timeout=60)
    assert proc.returncode == 2, proc.stderr
    said = proc.stderr.replace("\n", "")
    assert "no such file" not in said
    assert ("is a folder" if kind == "folder" else "not a regular file") in said, said
