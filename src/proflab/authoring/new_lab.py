"""``proflab new-lab``: a new lab's skeleton, written into a checkout of the kit, that runs and passes as it is.

The skeleton is a working lab with a placeholder lesson (a model applied one row at a time, fixed by one
call on the whole batch), so that ``proflab validate-lab N`` passes before its author changes anything,
and every step from there can be validated again. It writes:

    labs/NN_name/lab.toml, original.py, exercise.py, solution.py   the lab, its original's hash filled in
    src/proflab/labkit/name.py       its data (built once, deterministically) and its model
    docs/labs/NN-name.md             its page, from the labs' template; its nav entry and index row
    tests/test_labN_check.py         its test: the reference passes, the exercise fails, learner files
    tests/learner_files/labN_*.py    a sound alternative fix
    tests/learner_files/labN.md      the lab's table of learner files and the verdict each expects

``--metric NAME`` writes an evidence metric's module, its unit test and its line in the registry.
Nothing existing is overwritten: a name already taken is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).resolve().parent / "templates"
NAME = re.compile(r"[a-z][a-z0-9_]{1,30}")


class AuthoringError(Exception):
    """What stops a skeleton from being written; one line, naming what to change."""


@dataclass
class Written:
    """What a command wrote (paths relative to the checkout), and what its author fills in next."""

    files: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)


def checkout(root: Path) -> Path:
    """``root`` if it is a checkout of the kit (where labs are authored), else an ``AuthoringError``."""
    needed = ["labs", "docs/labs", "mkdocs.yml", "docs/index.md", "src/proflab/labkit", "tests/learner_files"]
    missing = [n for n in needed if not (root / n).exists()]
    if missing:
        raise AuthoringError(f"{root} is not a checkout of the kit (no {', '.join(missing)}): new labs are "
                             "written in a clone of its repository, installed with pip install -e .")
    return root


def _fill(template: str, **values: object) -> str:
    return Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(
        {k: str(v) for k, v in values.items()})


def _write_new(root: Path, rel: str, text: str, written: Written) -> None:
    from .. import outputs

    outputs.new_file(root / rel, text, within=root)  # never over a file that exists, never through a link
    written.files.append(rel)


def _insert_after_last(text: str, pattern: str, line: str, where: str) -> str:
    """``text`` with ``line`` after the last line matching ``pattern``."""
    lines = text.splitlines(keepends=True)
    found = [i for i, existing in enumerate(lines) if re.match(pattern, existing)]
    if not found:
        raise AuthoringError(f"{where}: found no line like {pattern!r} to add '{line.strip()}' after; add it by hand")
    lines.insert(found[-1] + 1, line)
    return "".join(lines)


def new_lab(root: Path, name: str, title: str = "", number: int | None = None) -> Written:
    """Write lab ``name``'s skeleton into the checkout at ``root``."""
    from .. import labs

    checkout(root)
    if not NAME.fullmatch(name):
        raise AuthoringError(f"'{name}' is not a lab name: lower case letters, digits and _, starting with a "
                             "letter (it names the lab's folder, its runs and its labkit module)")
    if keyword.iskeyword(name):
        raise AuthoringError(f"'{name}' is a Python keyword: it names the lab's labkit module, and "
                             f"`from proflab.labkit import {name}` would not parse; choose another name")
    found, broken = labs.discover_all(root / "labs")
    taken = {lab.number: lab.folder.name for lab in found} | {b.number: b.folder.name for b in broken if b.number}
    if any(lab.name == name for lab in found) or any(b.folder.name.split("_", 1)[-1] == name for b in broken):
        raise AuthoringError(f"a lab named '{name}' exists already; choose another name")
    number = max(taken, default=-1) + 1 if number is None else number
    if number in taken:
        raise AuthoringError(f"lab number {number} is taken by labs/{taken[number]}; leave --number out for the next free one")
    folder, slug, module = f"{number:02d}_{name}", f"{number:02d}-{name}", name
    for rel in (f"labs/{folder}", f"src/proflab/labkit/{module}.py", f"docs/labs/{slug}.md",
                f"tests/test_lab{number}_check.py", f"tests/learner_files/lab{number}.md"):
        if (root / rel).exists():
            raise AuthoringError(f"{rel} exists already; remove it or choose another name")
    # a title the author gave is theirs; one made from the name is still to write
    todo = "" if title else "TODO "
    title = title or name.replace("_", " ")
    values = dict(number=number, name=name, title=title, todo=todo, todo_colon=todo and "TODO: ", folder=folder,
                  slug=slug, module=module,
                  data_seed=1_000_003 * (number + 1), weights_seed=2_000_029 * (number + 1))
    original = _fill("original.py.tmpl", **values)
    written = Written()
    _write_new(root, f"src/proflab/labkit/{module}.py", _fill("labkit.py.tmpl", **values), written)
    _write_new(root, f"labs/{folder}/original.py", original, written)
    _write_new(root, f"labs/{folder}/exercise.py", original, written)
    _write_new(root, f"labs/{folder}/solution.py", _fill("solution.py.tmpl", **values), written)
    _write_new(root, f"labs/{folder}/debrief.md", _fill("debrief.md.tmpl", **values), written)
    sha = hashlib.sha256(original.encode("utf-8")).hexdigest()
    _write_new(root, f"labs/{folder}/lab.toml", _fill("lab.toml.tmpl", original_sha256=sha, **values), written)
    _write_new(root, f"docs/labs/{slug}.md", _fill("page.md.tmpl", **values), written)
    _write_new(root, f"tests/test_lab{number}_check.py", _fill("test_lab.py.tmpl", **values), written)
    alternative = f"lab{number}_batched_halves.py"
    _write_new(root, f"tests/learner_files/{alternative}", _fill("alternative.py.tmpl", **values), written)
    _write_new(root, f"tests/learner_files/lab{number}.md", _fill("expectations.md.tmpl", alternative=alternative,
                                                                  **values), written)

    edits = {
        "mkdocs.yml": (r"\s+- \"\d+ · .*\": labs/\d\d-", f'      - "{number} · {todo}{title}": labs/{slug}.md\n'),
        "docs/index.md": (r"\| \d+ \| \[", f"| {number} | [{todo}{title}](labs/{slug}.md) | TODO: the symptom | "
                                           "TODO: what it teaches |\n"),
    }
    for rel, (pattern, line) in edits.items():
        path = root / rel
        path.write_text(_insert_after_last(path.read_text(encoding="utf-8"), pattern, line, rel), encoding="utf-8")
        written.edited.append(rel)

    written.next_steps = [
        f"proflab data, then proflab validate-lab {number} --quick: the skeleton passes as it is",
        f"write the lesson: src/proflab/labkit/{module}.py (data and model), labs/{folder}/original.py "
        f"(the bottleneck), solution.py (the fix); copy original.py to exercise.py",
        f"fill in every TODO of labs/{folder}/lab.toml; proflab validate-lab {number} prints a changed "
        "original's new original_sha256",
        METRIC_STEP,
        f"add sound alternatives and plausible mistakes as tests/learner_files/lab{number}_*.py, each with its "
        f"row in tests/learner_files/lab{number}.md (its expected verdict), and the lab's own attempts at gaming it in "
        f"tests/test_lab{number}_check.py",
        f"set the threshold from python benchmarks/bench_alternatives.py --labs {number}",
        f"write docs/labs/{slug}.md, then python docs/gen_figures.py --lab {number} for its figures",
        f"proflab validate-lab {number}: every check green",
    ]
    return written


METRIC_STEP = ("pick the evidence metric that counts the lesson however it is spelled "
               "(src/proflab/measuring/metrics/), or write one: proflab new-lab --metric NAME")


def next_steps(done: list[Written]) -> list[str]:
    """What to fill in next, in order: a metric written with the lab takes the place of choosing one."""
    lab = next((w for w in done if METRIC_STEP in w.next_steps), None)
    metric = next((w for w in done if w is not lab), None)
    if lab is None:
        return metric.next_steps if metric else []
    steps = list(lab.next_steps)
    if metric is not None:
        at = steps.index(METRIC_STEP)
        steps[at:at + 1] = metric.next_steps
    return steps


def new_metric(root: Path, metric: str, unit: str = "calls") -> Written:
    """Write evidence metric ``metric``'s module, its unit test, and its line in the registry."""
    checkout(root)
    if not NAME.fullmatch(metric):
        raise AuthoringError(f"'{metric}' is not a metric name: lower case letters, digits and _ (a lab's "
                             "[evidence] metric names it, and it names its module)")
    if keyword.iskeyword(metric):
        raise AuthoringError(f"'{metric}' is a Python keyword: it names the metric's module, which could not be "
                             "imported; choose another name")
    package = root / "src" / "proflab" / "measuring" / "metrics"
    registry = package / "__init__.py"
    if (package / f"{metric}.py").exists():
        raise AuthoringError(f"a metric named '{metric}' exists already (src/proflab/measuring/metrics/{metric}.py)")
    text = registry.read_text(encoding="utf-8")
    if "from . import (" not in text or "MODULES = (" not in text:
        raise AuthoringError("src/proflab/measuring/metrics/__init__.py has no `from . import (` and `MODULES = (` "
                             "to add the metric to; add it by hand")
    written = Written()
    _write_new(root, f"src/proflab/measuring/metrics/{metric}.py", _fill("metric.py.tmpl", metric=metric, unit=unit),
               written)
    _write_new(root, f"tests/metrics/test_{metric}.py", _fill("test_metric.py.tmpl", metric=metric, unit=unit), written)
    head, rest = text.split("from . import (", 1)
    imports, tail = rest.split(")", 1)
    names = sorted({n.strip() for n in imports.split(",") if n.strip()} | {metric})
    text = head + "from . import (\n" + "".join(f"    {n},\n" for n in names) + ")" + tail
    head, rest = text.split("MODULES = (", 1)
    listed, tail = rest.split(")", 1)
    text = head + "MODULES = (" + listed.rstrip() + f"\n    {metric},\n" + ")" + tail
    registry.write_text(text, encoding="utf-8")
    written.edited.append("src/proflab/measuring/metrics/__init__.py")
    written.next_steps = [
        f"write what it counts in src/proflab/measuring/metrics/{metric}.py (its docstring is its documentation "
        "row: the contract is in metrics/__init__.py)",
        f"make tests/metrics/test_{metric}.py's step do, a known number of times, what it counts; "
        f"python -m pytest tests/metrics/test_{metric}.py",
        f"name it in a lab's lab.toml: [evidence] metric = \"{metric}\", unit = \"{unit}\"",
    ]
    return written
