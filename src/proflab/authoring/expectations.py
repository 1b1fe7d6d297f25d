"""What the tests expect of each learner file: the rows of ``tests/learner_files/README.md``, and of each
lab's own table beside it (``tests/learner_files/labN.md``, which ``proflab new-lab`` writes for a new lab,
so that adding a lab edits no shared file here).

Each row names a file ``labN_*.py``, what is wrong with it (or "not broken"), and the verdict expected:

    **passes** every check                   a sound fix: every check passes
    **Same results** fails: ...              that check fails, the first to fail (the chain stops there)
    **Faster** passes, fails or is ...       a verdict left open (a fix close to its threshold)

The tables are the one place this is written: the lab tests, ``proflab validate-lab`` and
``benchmarks/bench_alternatives.py`` (the sound fixes, side by side) all read it here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "tests" / "learner_files" / "README.md"

# How the README names a check (its title, in bold), and the check's own name in a report: every check's
# title, from the registry, and the shorter names the README also uses.
ALSO = {"Same results": "same_results"}


def titles() -> dict[str, str]:
    from ..grading.checks.registry import REGISTRY

    return {**{module.TITLE: module.NAME for module in REGISTRY.values()}, **ALSO}


PASSES = "passed"


@dataclass(frozen=True)
class Expected:
    """A learner file and its expected verdict: ``PASSES``, the name of the check that fails, or None (open)."""

    file: Path
    check: str | None
    said: str  # the README's own words


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def tables(readme: Path = README) -> list[Path]:
    """The README's table, then each lab's own (``labN.md`` beside it), in the labs' order."""
    own = sorted(readme.parent.glob("lab*.md"), key=lambda p: (len(p.stem), p.stem))
    return [readme, *[p for p in own if re.fullmatch(r"lab\d+", p.stem)]]


def read(readme: Path = README) -> list[Expected]:
    """Every row of every table, in their order."""
    found = []
    for table in tables(readme):
        found += _rows(table, readme.parent)
    return found


def _rows(table: Path, folder: Path) -> list[Expected]:
    found = []
    for row in table.read_text(encoding="utf-8").splitlines():
        cells = _cells(row)
        match = re.fullmatch(r"`(lab\d+_\w+\.py)`", cells[0]) if len(cells) >= 3 else None
        if not match:
            continue
        said = cells[2]
        title = re.match(r"\*\*(.+?)\*\* fails\b", said)
        check = PASSES if said.startswith("**passes**") else titles().get(title.group(1)) if title else None
        found.append(Expected(folder / match.group(1), check, said))
    return found


def of_lab(number: int, readme: Path = README) -> list[Expected]:
    """Lab ``number``'s rows."""
    return [e for e in read(readme) if re.match(rf"lab{number}_", e.file.name)]


def sound(number: int, readme: Path = README) -> list[Path]:
    """Lab ``number``'s sound fixes: the files expected to pass."""
    return [e.file for e in of_lab(number, readme) if e.check == PASSES]


def met(expected: Expected, report: dict) -> bool:
    """Whether a check's JSON report gives the verdict ``expected``."""
    if expected.check is None:
        return True
    if expected.check == PASSES:
        return report.get("verdict") == "passed"
    failed = [c["name"] for c in report.get("checks", []) if c.get("status") == "failed"]
    return report.get("verdict") == "failed" and failed[:1] == [expected.check]
