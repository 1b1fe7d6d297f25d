"""``proflab new-lab`` and ``proflab validate-lab``, for real, in a scratch checkout of the kit.

The skeleton new-lab writes is a working lab: validate-lab --quick grades its reference (it passes) and its
untouched exercise (it fails on its evidence) with the real checker, in the real sandbox. A metric's
skeleton registers itself and its own unit test passes. What is refused is refused before anything is
written, with a line that says what to change.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, holding_every_slot, kit_labs, waiting_in

PARTS = ["labs", "docs", "mkdocs.yml", "src", "tests/learner_files", "tests/cheats", "tests/metrics",
         "tests/conftest.py"]


def checkout(tmp_path: Path) -> Path:
    """The parts of the kit a lab author edits, copied; its own ``src`` imported first, so that a labkit
    module new-lab writes there is the one the lab imports."""
    root = tmp_path / "kit"
    for part in PARTS:
        source, target = REPO / part, root / part
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "site"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (root / "data").mkdir()
    root.chmod(0o755)  # the sandbox runs as nobody when the tests run as root
    return root


def proflab(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PROFLAB_ROOT": str(root), "PYTHONPATH": str(root / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "proflab", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def new_lab(tmp_path_factory) -> tuple[Path, int, subprocess.CompletedProcess]:
    root = checkout(tmp_path_factory.mktemp("authoring"))
    number = max(lab.number for lab in kit_labs()) + 1
    return root, number, proflab(root, "new-lab", "demo", "--title", "A demo lab")


def test_new_lab_writes_a_skeleton_and_says_what_next(new_lab):
    root, number, proc = new_lab
    assert proc.returncode == 0, proc.stderr
    folder = root / "labs" / f"{number:02d}_demo"
    for rel in ("lab.toml", "original.py", "exercise.py", "solution.py"):
        assert (folder / rel).is_file(), rel
    assert (folder / "exercise.py").read_bytes() == (folder / "original.py").read_bytes()
    for rel in ("src/proflab/labkit/demo.py", f"docs/labs/{number:02d}-demo.md", f"tests/test_lab{number}_check.py",
                f"tests/learner_files/lab{number}_batched_halves.py"):
        assert (root / rel).is_file(), rel
    assert f"labs/{number:02d}-demo.md" in (root / "mkdocs.yml").read_text()
    assert f"labs/{number:02d}-demo.md" in (root / "docs" / "index.md").read_text()
    # the lab's learner files have a table of their own: adding a lab edits no shared test file
    assert f"`lab{number}_batched_halves.py`" in (root / "tests" / "learner_files" / f"lab{number}.md").read_text()
    assert (root / "tests" / "learner_files" / "README.md").read_bytes() == \
        (REPO / "tests" / "learner_files" / "README.md").read_bytes()
    edited = sorted(line.split()[-1] for line in proc.stdout.splitlines() if "added to" in line)
    assert edited == ["docs/index.md", "mkdocs.yml"], proc.stdout  # the registries the guide names
    said = one_line(proc.stdout)
    assert f"proflab validate-lab {number} --quick" in said and "Next" in said
    compile((root / f"tests/test_lab{number}_check.py").read_text(), "test", "exec")


def test_the_skeleton_passes_validate_lab_quick(new_lab):
    root, number, _ = new_lab
    proc = proflab(root, "validate-lab", str(number), "--quick")
    said = one_line(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in ("✓ manifest", "✓ original", "✓ data", "✓ reference 1 of 1 passed", "✓ exercise 1 of 1 failed, on evidence",
                 "✓ tests"):
        assert line in said, said
    assert "Traceback" not in proc.stdout + proc.stderr


def test_an_edited_original_is_named_with_the_hash_to_set(new_lab, tmp_path):
    root, number, _ = new_lab
    original = root / "labs" / f"{number:02d}_demo" / "original.py"
    before = original.read_text()
    try:
        original.write_text(before + "\n# slower still\n")
        proc = proflab(root, "validate-lab", str(number), "--quick")
    finally:
        original.write_text(before)
    said = one_line(proc.stdout)
    assert proc.returncode == 1, said
    assert "✗ original original.py is not the file lab.toml names" in said
    assert "set original_sha256 = " in said and "reference not run: fix the checks above first" in said


def test_an_error_in_a_run_is_shown_with_its_text_and_line(new_lab):
    """A reference that raises: validate-lab names the exception's text and the line that raised it, not only
    "your pipeline raised an error"."""
    root, number, _ = new_lab
    solution = root / "labs" / f"{number:02d}_demo" / "solution.py"
    before = solution.read_text()
    lines = before.splitlines()
    at = next(i for i, line in enumerate(lines) if "yield" in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    try:
        solution.write_text("\n".join([*lines[:at], f'{indent}raise ValueError("no batch to fold")', *lines[at:]])
                            + "\n")
        proc = proflab(root, "validate-lab", str(number), "--quick")
    finally:
        solution.write_text(before)
    said = one_line(proc.stdout)
    assert proc.returncode == 1, said
    assert "✗ reference" in said and "ValueError: no batch to fold" in said, said
    assert f"line {at + 1}" in said and 'raise ValueError("no batch to fold")' in said, said


def test_what_validate_runs_is_said_and_its_wait_for_the_machine_shown_apart(new_lab, tmp_path, monkeypatch):
    """Before it grades, validate-lab says what it will run and why; a turn at the machine held by another
    check (here a process that holds every slot of a slot folder of the test's own until the reference's
    check has waited 4 s in the queue) is shown as waiting, apart from the lab's own time."""
    import time

    root, number, _ = new_lab
    monkeypatch.setenv("PROFLAB_SLOTS", str(tmp_path / "slots"))
    monkeypatch.setenv("PROFLAB_SLOT_CORES", str(len(os.sched_getaffinity(0))))  # one slot, on any machine
    env = {**os.environ, "PROFLAB_ROOT": str(root), "PYTHONPATH": str(root / "src"), "COLUMNS": "200"}
    holder = holding_every_slot(env)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "proflab", "validate-lab", str(number), "--quick"], cwd=root,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        waiting_in(tmp_path / "slots")
        time.sleep(4)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    out, err = proc.communicate(timeout=600)
    said = one_line(out)
    assert proc.returncode == 0, said + err
    assert "It grades, with the checker, as a learner's check is graded" in said
    assert "the reference fix, 1×: it must pass every time" in said, said
    waits = [int(w) for w in re.findall(r"(\d+) s of it waiting for other checks", said)]
    assert waits and waits[0] >= 3, said  # the reference waited its turn
    # a wait is told once: never more than the time it is part of (a check's turn and its rounds' inside it)
    for spent, waited in re.findall(r"\((\d+) s, (\d+) s of it waiting for other checks\)", said):
        assert int(waited) <= int(spent), said
    assert re.search(r"s in all; \d+ s of it waiting for other checks on this machine", said), said


@pytest.mark.parametrize("args, said", [
    (["new-lab", "Demo!"], "'Demo!' is not a lab name"),
    (["new-lab", "dataloader"], "a lab named 'dataloader' exists already"),
    (["new-lab", "other", "--number", "1"], "lab number 1 is taken by labs/01_dataloader"),
    (["new-lab"], "name the lab"),
    (["new-lab", "--metric", "host_syncs"], "a metric named 'host_syncs' exists already"),
])
def test_what_new_lab_refuses_it_refuses_before_writing(tmp_path, args, said):
    root = checkout(tmp_path)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    proc = proflab(root, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in one_line(proc.stderr) and "Traceback" not in proc.stderr
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_outside_a_checkout_new_lab_says_where_it_works(tmp_path):
    (tmp_path / "labs").mkdir()
    proc = proflab(tmp_path, "new-lab", "demo")
    assert proc.returncode == 2
    assert "is not a checkout of the kit" in one_line(proc.stderr)


def test_a_new_metric_registers_itself_and_its_test_passes(tmp_path):
    root = checkout(tmp_path)
    proc = proflab(root, "new-lab", "--metric", "demo_calls", "--unit", "calls")
    assert proc.returncode == 0, proc.stderr
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    listed = subprocess.run([sys.executable, "-c", "from proflab.measuring.metrics import METRICS; "
                             "print(sorted(METRICS))"], env=env, capture_output=True, text=True, cwd=root)
    assert "'demo_calls'" in listed.stdout, listed.stderr
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "tests/metrics/test_demo_calls.py", "tests/metrics/test_registry.py"],
                            env=env, capture_output=True, text=True, cwd=root, timeout=300)
    assert tested.returncode == 0, tested.stdout[-3000:]


def test_validate_says_what_the_skeleton_leaves_to_write(new_lab):
    """The full validation's last check: every TODO the skeleton wrote, in the lab's files, its page and its
    lines of the nav and the index, is named until it is written."""
    root, number, _ = new_lab
    code = ("import sys; from pathlib import Path; from proflab import labs; from proflab.authoring import validate;"
            f"lab = next(l for l in labs.discover(Path('labs')) if l.number == {number});"
            "r = validate.check_finished(Path('.'), lab); print(r.ok, r.measured)")
    env = {**os.environ, "PROFLAB_ROOT": str(root), "PYTHONPATH": str(root / "src")}
    said = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True).stdout
    assert said.startswith("False TODO left in"), said
    for place in (f"labs/{number:02d}_demo/lab.toml", f"docs/labs/{number:02d}-demo.md", "src/proflab/labkit/demo.py",
                  "docs/index.md (the lab's line)"):
        assert place in said, (place, said)
    # the title given to new-lab is the author's own: its nav line has nothing left to write
    assert "mkdocs.yml" not in said, said
    assert f'"{number} · A demo lab": labs/{number:02d}-demo.md' in (root / "mkdocs.yml").read_text()
    assert 'title = "A demo lab"' in (root / "labs" / f"{number:02d}_demo" / "lab.toml").read_text()


def test_a_metric_written_with_the_lab_comes_before_validating_it(tmp_path):
    root = checkout(tmp_path)
    proc = proflab(root, "new-lab", "demo", "--metric", "demo_calls")
    assert proc.returncode == 0, proc.stderr
    steps = [line.strip() for line in proc.stdout.split("Next", 1)[1].splitlines() if line.strip()]
    text = " ".join(steps)
    assert "or write one: proflab new-lab --metric NAME" not in text
    assert text.index("src/proflab/measuring/metrics/demo_calls.py") < text.index("every check green")


def test_a_value_the_original_never_yields_is_the_labs_mistake_not_a_pass(new_lab):
    """A [results.KEY] whose key the original does not yield would compare nothing, and every version
    would match it: the checker refuses to grade against it (exit 3), naming the table and what is yielded."""
    root, number, _ = new_lab
    manifest = root / "labs" / f"{number:02d}_demo" / "lab.toml"
    before = manifest.read_text()
    try:
        manifest.write_text(before.replace("[results.out]", "[results.scores]"))
        proc = proflab(root, "check", str(number), "--file", f"labs/{number:02d}_demo/solution.py", "--json")
    finally:
        manifest.write_text(before)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr
    said = one_line(proc.stdout)
    assert "compares [results.scores], but its original yields no 'scores' (it yields 'out')" in said, said


def test_each_labs_own_table_is_read_beside_the_readme(tmp_path):
    from proflab.authoring import expectations

    head = "| file | what is wrong | expected verdict |\n|---|---|---|\n"
    (tmp_path / "README.md").write_text(head + "| `lab1_a.py` | x | **passes** every check |\n")
    (tmp_path / "lab12.md").write_text(head + "| `lab12_b.py` | y | **Same results** fails: z |\n")
    (tmp_path / "lab2.md").write_text(head + "| `lab2_c.py` | w | **Faster** passes or fails |\n")
    (tmp_path / "notes.md").write_text(head + "| `lab3_d.py` | not a lab's table | **passes** every check |\n")
    rows = expectations.read(tmp_path / "README.md")
    assert [(r.file.name, r.check) for r in rows] == [("lab1_a.py", "passed"), ("lab2_c.py", None),
                                                      ("lab12_b.py", "same_results")]
    assert [r.file.name for r in expectations.of_lab(12, tmp_path / "README.md")] == ["lab12_b.py"]
