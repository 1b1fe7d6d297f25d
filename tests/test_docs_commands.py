"""The commands the docs tell you to type are commands the kit accepts, and the command reference is current.

Every shell code block (```bash, ```console, ```shell, ```sh) of ``docs/**/*.md``
and ``README.md`` is read, indented blocks inside tabs and admonitions
included. Each ``proflab ...`` invocation in it (``proflab``,
``.venv/bin/proflab`` or ``python -m proflab``, also after ``&&`` or ``|``,
and in a trailing ``# the same as: proflab ...`` comment) is checked against
the real parser, ``proflab.cli.build_parser()``: the command exists, every
option exists for that command and gets a valid value, the number of
arguments is right, the lab resolves to one of the kit's labs, and a
``--file`` or a lab file's path exists in the checkout.

The cheap commands are also run for real, as ``python -m proflab`` in a
scratch copy of the kit (``PROFLAB_ROOT`` set to a temporary folder, so
``hint`` advancing the progress and ``reset`` restoring an exercise touch
nothing in the checkout): ``list``, ``hint``, ``reset``, ``--help`` and
``--version``. The others take seconds to minutes (``run``, ``data``),
minutes (``check``, ``quickstart``), or serve until Ctrl-C (``tensorboard``):
they are validated against the parser only.

The scripts that shell blocks run with ``python`` or ``bash`` must exist.

``docs/reference.md`` must be exactly what ``docs/gen_cli_reference.py``
renders from the parser, and, checked independently of that script, name
every command and every option of the parser and no option the parser lacks.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import make_kit, spare_number

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from proflab import cli, labs  # noqa: E402

DOCS = sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]
SHELL_LANGUAGES = {"bash", "console", "shell", "sh"}
RUN_FOR_REAL = {"list", "hint", "reset"}
OPERATORS = {"&&", "||", "|", ";", "&"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@dataclass(frozen=True)
class Invocation:
    where: str  # docs/setup.md:42
    argv: tuple[str, ...]  # what follows "proflab"
    line: str

    def __str__(self) -> str:
        return f"{self.where}: proflab {shlex.join(self.argv)}"


def shell_blocks(path: Path) -> list[tuple[int, str, list[str]]]:
    """``(line number of the first line, language, lines)`` of each shell code block, dedented."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        language = (m.group("info").split() or [""])[0].lower()
        body, j = [], i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if close and close.group("fence").startswith(fence[0]) and len(close.group("fence")) >= len(fence) \
                    and not close.group("info").strip() and len(close.group("indent")) <= len(indent):
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if language in SHELL_LANGUAGES:
            blocks.append((i + 2, language, body))
        i = j + 1
    return blocks


def command_lines(language: str, first: int, body: list[str]) -> list[tuple[int, str]]:
    """The lines a reader types: ``$ `` lines of a console block, every line of the others."""
    out, pending, start = [], "", first
    for n, raw in enumerate(body, start=first):
        if language == "console":
            if not raw.startswith("$ ") and not pending:
                continue
            raw = raw[2:] if raw.startswith("$ ") and not pending else raw
        if not pending:
            start = n
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line:
            out.append((start, line))
    return out


def _tokens(line: str, comments: bool) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#" if comments else ""
    return list(lexer)


def invocations_in(line: str) -> tuple[list[tuple[str, ...]], list[list[str]]]:
    """The proflab invocations of one command line, and the other commands (as token lists)."""
    code = _tokens(line, comments=True)
    everything = _tokens(line, comments=False)
    comment = everything[len(code):] if everything[:len(code)] == code else []
    segments, current = [], []
    for token in code:
        if token in OPERATORS:
            segments.append(current)
            current = []
        else:
            current.append(token)
    segments.append(current)
    found, others = [], []
    for seg in segments:
        if not seg:
            continue
        if Path(seg[0]).name == "proflab":
            found.append(tuple(seg[1:]))
        elif Path(seg[0]).name.startswith("python") and seg[1:3] == ["-m", "proflab"]:
            found.append(tuple(seg[3:]))
        else:
            others.append(seg)
    # "# the same as: proflab run 1"
    if "proflab" in comment:
        found.append(tuple(comment[comment.index("proflab") + 1:]))
    return found, others


def collect() -> tuple[list[Invocation], list[tuple[str, list[str]]]]:
    found, others = [], []
    for path in DOCS:
        rel = path.relative_to(REPO).as_posix()
        for first, language, body in shell_blocks(path):
            for n, line in command_lines(language, first, body):
                mine, theirs = invocations_in(line)
                found += [Invocation(f"{rel}:{n}", argv, line) for argv in mine]
                others += [(f"{rel}:{n}", seg) for seg in theirs]
    return found, others


INVOCATIONS, OTHER_COMMANDS = collect()


def parse(argv: tuple[str, ...]) -> tuple[argparse.Namespace | None, int | None, str]:
    """``(namespace, None, "")``, or ``(None, exit code, what argparse printed)`` when it exits."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            return cli.build_parser().parse_args(list(argv)), None, ""
        except SystemExit as e:
            return None, e.code if isinstance(e.code, int) else 1, out.getvalue() + err.getvalue()


def is_help(argv: tuple[str, ...]) -> bool:
    return any(a in ("-h", "--help") for a in argv) or argv == ("--version",)


def test_the_docs_show_proflab_commands():
    """The extraction works: the pages show the main commands in shell blocks."""
    commands = {inv.argv[0] for inv in INVOCATIONS if inv.argv}
    assert len(INVOCATIONS) >= 15, [str(i) for i in INVOCATIONS]
    assert {"list", "run", "check", "hint", "tensorboard", "quickstart"} <= commands, commands
    pages = {inv.where.split(":")[0] for inv in INVOCATIONS}
    assert {"docs/setup.md", "docs/labs/01-dataloader.md", "docs/reading-a-profile.md"} <= pages, pages


def problem(argv: tuple[str, ...]) -> str | None:
    """What is wrong with ``proflab ARGV``, judged by the parser and the checkout; None if nothing."""
    ns, code, printed = parse(argv)
    if code is not None:
        return None if code == 0 and is_help(argv) else f"the parser refuses it (exit {code}):\n{printed}"
    if not getattr(ns, "func", None):
        return "it names no command"
    lab = getattr(ns, "lab", None)
    if lab is not None:
        if lab.endswith(".py") or "/" in lab:
            if not (REPO / lab).is_file():
                return f"{lab} does not exist"
            if labs.find_by_file(REPO / lab) is None:
                return f"{lab} is not inside a lab folder"
        else:
            try:
                labs.resolve(lab)
            except labs.LabNotFound as e:
                return str(e)
    file = getattr(ns, "file", None)
    if file is not None and not (REPO / file).is_file():
        return f"--file {file} does not exist"
    return None


@pytest.mark.parametrize("inv", INVOCATIONS, ids=str)
def test_command_is_accepted_by_the_parser(inv, monkeypatch):
    monkeypatch.setenv("PROFLAB_ROOT", str(REPO))
    wrong = problem(inv.argv)
    assert wrong is None, f"{inv}: {wrong}"


def test_the_checks_catch_wrong_commands(tmp_path, monkeypatch):
    """The extraction reads tabs and console prompts, and the checks refuse what the kit would refuse."""
    monkeypatch.setenv("PROFLAB_ROOT", str(REPO))
    page = tmp_path / "page.md"
    page.write_text("""\
=== "CPU"

    ```bash
    proflab run 1 --nope
    ```

```console
$ proflab chek 1
output, not a command: proflab list
$ .venv/bin/python -m proflab run \\
    SPARE
```

```text
proflab run 1 --nope-but-not-a-shell-block
```

```bash
cd x && proflab hint   # the same as: proflab check 1 --file labs/01_dataloader/missing.py
```
""".replace("SPARE", str(spare_number())), encoding="utf-8")  # a lab number no lab of the kit has
    found = []
    for first, language, body in shell_blocks(page):
        for _, line in command_lines(language, first, body):
            found += invocations_in(line)[0]
    assert found == [("run", "1", "--nope"), ("chek", "1"), ("run", str(spare_number())), ("hint",),
                     ("check", "1", "--file", "labs/01_dataloader/missing.py")]
    for argv in found:
        assert problem(argv), f"proflab {shlex.join(argv)} passed the checks"
    for argv in [("run", "1", "--profile-memory"), ("check", "dataloader", "--device", "cpu"), ("--help",),
                 ("run", "labs/01_dataloader/exercise.py"), ("check", "1", "--file", "labs/01_dataloader/solution.py")]:
        assert problem(argv) is None, f"proflab {shlex.join(argv)}: {problem(argv)}"


def test_scripts_the_shell_blocks_run_exist():
    """``python X.py`` and ``bash X.sh`` in a shell block name a file of the checkout."""
    checked = 0
    for where, seg in OTHER_COMMANDS:
        program = Path(seg[0]).name
        if program.startswith("python") or program == "bash":
            script = next((a for a in seg[1:] if not a.startswith("-")), None)
            if "-m" in seg or "-c" in seg or script is None:
                continue
            assert (REPO / script).is_file(), f"{where}: {shlex.join(seg)}: {script} does not exist"
            checked += 1
    assert checked >= 3


def _cheap() -> list[tuple[str, ...]]:
    """Distinct commands to run for real: the docs' cheap ones, and the help of every command."""
    argvs = {inv.argv for inv in INVOCATIONS
             if is_help(inv.argv) or (inv.argv and inv.argv[0] in RUN_FOR_REAL)}
    argvs.add(("--help",))
    return sorted(argvs)


@pytest.fixture(scope="module")
def scratch_kit(tmp_path_factory):
    return make_kit(tmp_path_factory.mktemp("docs-kit"))


@pytest.mark.parametrize("argv", _cheap(), ids=shlex.join)
def test_cheap_command_runs(argv, scratch_kit, monkeypatch):
    edited = None
    if argv[0] == "reset":  # give it something to restore
        monkeypatch.setenv("PROFLAB_ROOT", str(scratch_kit.root))
        edited = labs.resolve(argv[1])
        edited.exercise.write_text(edited.original.read_text(encoding="utf-8") + "\n# my edit\n", encoding="utf-8")
    env = {**os.environ, "PROFLAB_ROOT": str(scratch_kit.root), "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "proflab", *argv], cwd=scratch_kit.root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"proflab {shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    if is_help(argv):
        expected = "proflab " if argv == ("--version",) else "usage: proflab"
    else:
        expected = {"list": "The starved DataLoader", "hint": "Hint ", "reset": "Restored"}[argv[0]]
    assert expected in proc.stdout, f"proflab {shlex.join(argv)} printed:\n{proc.stdout}"
    if edited:
        assert edited.exercise.read_bytes() == edited.original.read_bytes()


# --- the command reference ------------------------------------------------------

def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", REPO / "docs" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_page_is_generated_from_the_parser():
    page = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert page == _generator().render(), "docs/reference.md is out of date: run python docs/gen_cli_reference.py"


def test_reference_names_every_command_and_option_and_nothing_else():
    """Independent of the generator: the page and the parser list the same commands and options."""
    page = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = {"-h", "--help"} | {s for a in parser._actions for s in a.option_strings}
    for name, sp in sub.choices.items():
        section = page.split(f"\n## proflab {name}\n", 1)
        assert len(section) == 2, f"no section for proflab {name}"
        section = section[1].split("\n## ", 1)[0]
        nested = next((a for a in sp._actions if isinstance(a, argparse._SubParsersAction)), None)
        if nested is not None:  # a command of commands (proflab autograder): each has a ### section of its own
            for inner, isp in nested.choices.items():
                part = section.split(f"\n### proflab {name} {inner}\n", 1)
                assert len(part) == 2, f"no section for proflab {name} {inner}"
                part = part[1].split("\n### ", 1)[0]
                for action in isp._actions:
                    known |= set(action.option_strings)
                    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                        continue
                    for flag in action.option_strings:
                        assert f"`{flag}" in part, f"proflab {name} {inner}: {flag} is not on the page"
            continue
        for action in sp._actions:
            known |= set(action.option_strings)
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if action.option_strings:
                for flag in action.option_strings:
                    assert f"`{flag}" in section, f"proflab {name}: {flag} is not on the page"
            else:
                assert f"`{(action.metavar or action.dest).upper()}`" in section, \
                    f"proflab {name}: argument {action.dest} is not on the page"
    named = set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", page))
    named = {n for n in named if n.startswith("--") or len(n) == 2}
    assert named <= known, f"the page names options the parser lacks: {sorted(named - known)}"
