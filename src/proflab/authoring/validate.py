"""``proflab validate-lab N``: is a lab ready for a class? Named checks, each saying what to change.

Run in a checkout of the kit, with no test runner: each step below is one named check, in order, and a
check that cannot run because an earlier one failed says so. The checker's own ``checks.check`` grades
every file, as ``proflab check`` does (sandboxed, against the original, on this machine):

    manifest      lab.toml loads: every table and key as the kit reads them
    original      original.py is the one lab.toml's original_sha256 names; exercise.py is a copy of it
    data          the lab's data preparer builds its data (labkit)
    reference     solution.py passes, every time of --times; its speed-up's spread against the threshold
                  and the checker's resolution on this machine
    exercise      the untouched exercise fails, every time
    alternatives  each learner file of the lab gets the verdict its README row expects
    cheats        the generic attempts at gaming the checker fail (a lab graded by the plain checks)
    page          its page is in the site's nav and index, the site builds (mkdocs --strict), and the page
                  quotes the lab's figures from docs/gen_figures.py
    tests         tests/test_labN_check.py exists
    finished      no TODO left in the lab's files, its labkit module, its page, its nav and index lines
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import expectations, page_rules

# The smallest speed-up over a threshold the checker called "passed" in every check on the 2-core machine
# (benchmarks/results/2026-11-30-cpu-2core-resolution.md; python benchmarks/bench_noise.py --resolution).
RESOLUTION = 1.30
# The generic attempts at gaming the checker (tests/cheats/), each starting from the lab's own reference fix.
TRICKS = ("cached_at_import.py", "cached_in_warmup.py", "work_only_when_profiled.py", "background_thread.py",
          "patched_clock.py", "skipped_steps.py")


@dataclass
class Result:
    """One named check of a lab: whether it held, what it measured, and what to change when it did not."""

    name: str
    ok: bool | None  # None: not run (an earlier check failed, or --quick)
    measured: str
    change: str = ""
    seconds: float = 0.0  # how long it took, waiting for the machine included
    waited_s: float = 0.0  # of which, waiting for other checks on this machine to end (slots' queue)


# Each report's wait for the machine (its ``waited_s``), as the checks of this process make them.
_waited: list[float] = []


class _Ahead:
    """The files a full run checks, in order, each set up while the one before it is (``staging.ahead``, as
    ``proflab grade`` sets up a class): the next file's server imports torch beside the current one's, never
    beside a timed step (``forkserver.settle``)."""

    def __init__(self, lab, files: list[Path]):
        self.lab, self.files, self.staged = lab, list(files), {}

    def take(self, file: Path):
        """The set-up of ``file``, if it was set up ahead (else None: its check sets itself up); the next
        file's begins now."""
        from ..grading import staging

        mine = self.staged.pop(file, None)
        if file in self.files:
            at = self.files.index(file)
            self.files = self.files[at + 1:]
            if mine is None and self.files:  # two by two: this one's and the next one's servers import together
                mine = staging.ahead(self.lab, file)
                nxt = self.files[0]
                if nxt not in self.staged:
                    self.staged[nxt] = staging.ahead(self.lab, nxt)
        return mine

    def close(self) -> None:
        for stage in self.staged.values():
            if stage is not None:
                stage.close()
        self.staged = {}


_ahead: _Ahead | None = None


def _report(lab, file: Path, label: str, audited: bool = True) -> dict:
    from ..grading import checks
    from ..reporting import report

    staged = _ahead.take(file) if _ahead is not None else None
    made = json.loads(report.to_json(checks.check(lab, file, label=label, audited=audited, staged=staged)))
    _waited.append(float(made.get("waited_s") or 0.0))
    return made


def _timed(make) -> Result:
    """``make()``'s result, with how long it took and how much of that was spent waiting for the machine."""
    start, before = time.perf_counter(), len(_waited)
    result = make()
    result.seconds, result.waited_s = time.perf_counter() - start, sum(_waited[before:])
    return result


def plan(root: Path, lab, times: int, quick: bool) -> list[str]:
    """What the full (or quick) run grades, and why: the checks it makes, in the order it makes them."""
    if lab.kind == "gate":
        return ["a gate lab: its settings are graded by the gate, as tests/test_lab7_check.py does"]
    n = 1 if quick else times
    lines = [f"the reference fix, {n}×: it must pass every time, by more than the checker's resolution",
             f"the untouched exercise, {n}×: it must fail every time, on its evidence (the bottleneck in its trace)"]
    if quick:
        return lines + ["(--quick: no learner files, no tricks, no site build)"]
    rows = expectations.of_lab(lab.number)
    lines.append(f"{len(rows)} learner file(s) of tests/learner_files/lab{lab.number}.md: each must get its "
                 "expected verdict (a sound fix passes, a mistake fails where the table says)")
    if plain(lab):
        lines.append(f"{len(TRICKS)} generic tricks, the source audit off: each must fail on what the checker "
                     "measures")
    lines.append("the page: the page rules, then the whole site built with mkdocs --strict")
    return lines


def _speedups(reports: list[dict]) -> list[float]:
    return [r["comparison"]["speedup"] for r in reports if (r.get("comparison") or {}).get("speedup")]


def _verdicts(reports: list[dict]) -> str:
    verdicts = [r.get("verdict", "no report") for r in reports]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts)))


def _first_failed_pays(report: dict) -> str:
    """The [grading] key of the first failed check (its own name in a record without one): ``evidence`` for the
    check that reads the bottleneck from the trace, whatever the lab calls it."""
    failed = [c for c in report.get("checks", []) if c.get("status") == "failed"]
    return str(failed[0].get("points") or failed[0].get("name")) if failed else ""


def _first_failed(report: dict) -> str:
    """The first failed check's name and why, with what it measured (a run's error text) and its first detail
    (the line that raised): what an author needs to fix it without running the check again."""
    failed = [c for c in report.get("checks", []) if c.get("status") == "failed"]
    if not failed:
        return report.get("error", "")
    check = failed[0]
    said = f"{check['name']}: {check.get('rationale', '')}"
    actual = str(check.get("actual") or "")
    if actual and actual not in said:
        said += f": {actual}"
    details = [str(d).strip() for d in check.get("details") or [] if str(d).strip()]
    return said + (f" ({details[0]})" if details else "")


def check_manifest(root: Path, number: int) -> tuple[Result, object | None]:
    from .. import labs

    found, broken = labs.discover_all(root / "labs")
    lab = next((lab for lab in found if lab.number == number), None)
    if lab is not None:
        return Result("manifest", True, f"{lab.folder.name}/lab.toml loads: lab {number} · {lab.name}"), lab
    bad = next((b for b in broken if b.number == number), None)
    if bad is not None:
        return Result("manifest", False, "lab.toml does not load", bad.message), None
    return Result("manifest", False, f"no lab {number} under labs/",
                  f"write one with proflab new-lab NAME (numbers found: {', '.join(str(lab.number) for lab in found)})"), None


def check_original(lab) -> Result:
    from .. import labs

    sha = labs.sha256(lab.original)
    if sha != lab.original_sha256:
        return Result("original", False, f"{lab.original.name} is not the file lab.toml names",
                      f"if the change is meant, set original_sha256 = \"{sha}\" in lab.toml, and copy "
                      f"{lab.original.name} to {lab.exercise.name}")
    if lab.exercise.read_bytes() != lab.original.read_bytes():
        return Result("original", False, f"{lab.exercise.name} differs from {lab.original.name}",
                      f"the exercise is handed out as a copy of the original: copy {lab.original.name} to it")
    return Result("original", True, f"{lab.original.name} matches its sha256; {lab.exercise.name} is a copy of it")


def check_data(lab) -> Result:
    from .. import labkit, paths

    if not lab.data:
        return Result("data", True, "the lab names no data preparer (it needs none)")
    try:
        folder = labkit.prepare(lab.data, paths.data_dir())
    except Exception as e:  # noqa: BLE001 - a lab author's code: any failure is reported, never raised
        return Result("data", False, f"{lab.data} failed: {e}",
                      "fix the preparer lab.toml's data names, then proflab data")
    return Result("data", True, f"{lab.data} made {paths.display(folder)} ready")


# An inconclusive verdict is the checker's "not enough evidence: run it again", on a busy machine most often;
# validate-lab does what the checker tells a learner, at most this many times more for one run.
AGAIN = 2


def _decided(lab, file: Path, name: str) -> tuple[dict, int]:
    """One run of ``file``, run again while the checker calls it inconclusive (at most ``AGAIN`` times more):
    the report it ends on, and how many runs were inconclusive before it."""
    report = _report(lab, file, name)
    again = 0
    while report.get("verdict") == "inconclusive" and again < AGAIN:
        again += 1
        report = _report(lab, file, name)
    return report, again


def check_reference(lab, times: int) -> Result:
    decided = [_decided(lab, lab.solution, "reference") for _ in range(times)]
    reports = [report for report, _ in decided]
    again = sum(n for _, n in decided)
    passed = sum(r.get("verdict") == "passed" for r in reports)
    threshold = lab.threshold(reports[0].get("device") or "cpu")
    speedups = _speedups(reports)
    spread = (f"speed-ups {statistics.median(speedups):.2f}× median ({min(speedups):.2f}–{max(speedups):.2f}×), "
              f"threshold {threshold:.2f}×" if speedups else "no speed-up measured")
    margin = min(speedups) / threshold if speedups and threshold > 0 else None
    close = margin is not None and threshold > 1 and margin < RESOLUTION
    measured = f"{passed} of {times} passed; {spread}" + (
        f"; the slowest is {margin:.2f}× the threshold" if margin and threshold > 1 else "") + (
        f"; {again} inconclusive run{'s' if again > 1 else ''} run again, as the checker advises" if again else "")
    if passed < times:
        bad = next(r for r in reports if r.get("verdict") != "passed")
        return Result("reference", False, measured, f"{lab.solution.name} must pass every time: "
                      f"{_first_failed(bad) or bad.get('verdict')}")
    if close:
        return Result("reference", False, measured,
                      f"the reference passes by less than the checker's resolution ({RESOLUTION:.2f}×): a learner's "
                      "sound fix will be called inconclusive or failed. See the guide's \"When the honest fix "
                      "is small\" (more timed steps, CPU time as the figure, more rounds), or lower the threshold "
                      "below the slowest sound fix")
    return Result("reference", True, measured)


def check_exercise(lab, times: int) -> Result:
    """The untouched exercise fails every time, and on the lesson: its evidence (the bottleneck in its trace).
    Failing on another check means the original breaks one of the checker's rules itself."""
    reports = [_report(lab, lab.exercise, "yours") for _ in range(times)]
    failed = [r for r in reports if r.get("verdict") == "failed"]
    why = sorted({_first_failed(r).split(":", 1)[0] for r in failed})
    measured = f"{len(failed)} of {times} failed" + (f", on {', '.join(why)}" if why else "")
    if len(failed) < times:
        return Result("exercise", False, measured, "the untouched exercise must fail every time: its bottleneck "
                      "must show in the evidence ([evidence] bounds) or its speed-up stay under the threshold")
    other = next((r for r in failed if _first_failed_pays(r) != "evidence"), None)
    if other is not None:
        return Result("exercise", False, measured,
                      f"the exercise must fail on its evidence (the bottleneck in its trace), not on "
                      f"{_first_failed(other)}: the original itself breaks that rule of the checker. See the "
                      "guide's \"The lab file's contract\"")
    return Result("exercise", True, measured)


# What the skeleton leaves for its author to write; a lab that still says it is not finished.
TODO = re.compile(r"\bTODO\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def check_finished(root: Path, lab) -> Result:
    """No TODO left in the lab's files, its labkit module, its page, or its lines in the nav and the index."""
    places = [lab.folder / "lab.toml", lab.original, lab.solution, root / "docs" / lab.docs if lab.docs else None]
    if lab.data:
        module = lab.data.split(":", 1)[0]
        places.append((root / "src" / Path(*module.split("."))).with_suffix(".py"))
    left = []
    for place in places:
        if place is not None and place.is_file():
            lines = [n for n, line in enumerate(place.read_text(encoding="utf-8").splitlines(), 1) if TODO.search(line)]
            if lines:
                left.append(f"{paths_display(root, place)} (line{'s' if len(lines) > 1 else ''} "
                            f"{', '.join(map(str, lines[:8]))}{', …' if len(lines) > 8 else ''})")
    for rel in ("mkdocs.yml", "docs/index.md"):
        lines = (root / rel).read_text(encoding="utf-8").splitlines()
        if any(lab.docs and lab.docs in line and TODO.search(line) for line in lines):
            left.append(f"{rel} (the lab's line)")
    if left:
        return Result("finished", False, f"TODO left in {', '.join(left)}", "write what each TODO asks")
    return Result("finished", True, "no TODO left in the lab's files, its page, its nav and index lines")


def paths_display(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def check_alternatives(lab, readme: Path = expectations.README) -> Result:
    rows = expectations.of_lab(lab.number, readme)
    if not rows:
        return Result("alternatives", False, f"no tests/learner_files/lab{lab.number}_*.py in a table of them",
                      "add the sound fixes a learner would write, and plausible mistakes, each with its row in "
                      f"tests/learner_files/lab{lab.number}.md")
    wrong = []
    for row in rows:
        if not row.file.is_file():
            wrong.append(f"{row.file.name}: in a table, not in tests/learner_files/")
            continue
        report = _report(lab, row.file, f"file-{row.file.stem}")
        if report.get("verdict") == "inconclusive" and row.check is not None:
            report = _report(lab, row.file, f"file-{row.file.stem}")  # the checker's own advice: run it again
        if not expectations.met(row, report):
            wrong.append(f"{row.file.name}: expected {row.said}; got {report.get('verdict')}"
                         f"{' (' + _first_failed(report) + ')' if _first_failed(report) else ''}")
    measured = f"{len(rows) - len(wrong)} of {len(rows)} learner files got their expected verdict"
    if wrong:
        return Result("alternatives", False, measured + ": " + "; ".join(wrong),
                      "a sound fix that fails means the threshold or the evidence is too strict; a mistake "
                      "that passes, too loose")
    return Result("alternatives", True, measured)


def plain(lab) -> bool:
    """A lab graded by the plain checks (one process, evidence, a speed-up): the generic tricks apply."""
    return lab.kind == "pipeline" and lab.margin == "faster"


def check_cheats(lab, cheats: Path) -> Result:
    if not plain(lab):
        return Result("cheats", None, "the generic tricks apply to labs graded by the plain checks only; "
                      "this lab's own attempts belong in its test file")
    passed = []
    os.environ["PROFLAB_CHEAT_LAB"] = str(lab.number)  # tests/cheats/_lab.py: the lab they start from
    for trick in TRICKS:
        report = _report(lab, cheats / trick, f"file-{Path(trick).stem}", audited=False)
        if report.get("verdict") != "failed":
            passed.append(f"{trick} ({report.get('verdict')})")
    measured = f"{len(TRICKS) - len(passed)} of {len(TRICKS)} generic tricks failed, the source audit off"
    if passed:
        return Result("cheats", False, measured + ": not failed: " + ", ".join(passed),
                      "see the guide's \"Tricks, and what catches them\": work_ops and the evidence must show "
                      "work in every profiled step")
    return Result("cheats", True, measured)


def check_page(root: Path, lab) -> Result:
    page = root / "docs" / lab.docs if lab.docs else None
    if page is None or not page.is_file():
        return Result("page", False, f"no page docs/{lab.docs or '(docs is not set in lab.toml)'}",
                      "write it from docs/labs' other pages (proflab new-lab writes one), and set docs in lab.toml")
    missing = [name for name, text in (("mkdocs.yml's nav", (root / "mkdocs.yml").read_text(encoding="utf-8")),
                                       ("docs/index.md's lab table", (root / "docs" / "index.md").read_text(encoding="utf-8")))
               if lab.docs not in text]
    if missing:
        return Result("page", False, f"docs/{lab.docs} is not in {' nor '.join(missing)}", "add its line there")
    broken = page_rules.check(lab, lab.docs, page.read_text(encoding="utf-8"))  # the rules the kit's tests hold
    if broken:
        return Result("page", False, "; ".join(f"{b.rule}: {b.found}" for b in broken),
                      "; ".join(dict.fromkeys(b.change for b in broken)))
    with tempfile.TemporaryDirectory(prefix="proflab-site-") as site:
        built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", site], cwd=root,
                               capture_output=True, text=True)
    if built.returncode != 0:
        lines = [ANSI.sub("", line).strip() for line in (built.stderr + built.stdout).splitlines()]
        errors = [line for line in lines if re.search(r"\b(ERROR|Error|error|WARNING)\b", line)] or lines[-3:]
        return Result("page", False, "mkdocs build --strict failed", " ".join(errors)[-600:])
    text = page.read_text(encoding="utf-8")
    quotes = re.search(rf"\{{\{{\s*lab{lab.number}\.(?!toml\.|hints\b|steps\b|schedule\b|active_steps\b)", text) or \
        re.search(rf"--8<--\s*\"lab{lab.number}/", text)
    if not quotes:
        return Result("page", False, f"docs/{lab.docs} builds, but quotes none of the lab's figures",
                      f"run python docs/gen_figures.py --lab {lab.number}, then quote its outputs on the page "
                      f"(--8<-- \"lab{lab.number}/run-exercise.txt\", {{{{ lab{lab.number}.machine }}}})")
    return Result("page", True, f"docs/{lab.docs} is in the nav and the index, keeps the page rules, builds, and "
                  "quotes the lab's figures")


def check_tests(root: Path, lab) -> Result:
    test = root / "tests" / f"test_lab{lab.number}_check.py"
    if not test.is_file():
        return Result("tests", False, f"no tests/test_lab{lab.number}_check.py",
                      "write it (proflab new-lab writes one): the reference passes, the exercise fails, the "
                      "learner files, the lab's own attempts at gaming it")
    return Result("tests", True, f"tests/test_lab{lab.number}_check.py")


def validate(root: Path, number: int, times: int = 2, quick: bool = False) -> Iterator[Result]:
    """Each named check of lab ``number``, as it is decided. ``quick``: the reference and the exercise once
    each, no learner files, no tricks, no site build."""
    from ..running import forkserver

    manifest, lab = check_manifest(root, number)
    yield manifest
    if lab is None:
        return
    original, data = check_original(lab), check_data(lab)
    yield original
    yield data
    if lab.kind == "gate":
        yield Result("reference", None, "a gate lab: its settings are graded by the gate, as tests/test_lab7_check.py does")
    elif not (original.ok and data.ok):
        for name in ("reference", "exercise", "alternatives", "cheats"):
            yield Result(name, None, "not run: fix the checks above first")
    else:
        global _ahead
        if plain(lab) and not quick:
            os.environ["PROFLAB_CHEAT_LAB"] = str(lab.number)  # tests/cheats/_lab.py: the lab they start from
        with forkserver.session():
            _ahead = _Ahead(lab, _planned(root, lab, quick))
            try:
                yield from _graded(root, lab, 1 if quick else times, quick)
            finally:
                _ahead.close()
                _ahead = None
    yield Result("page", None, "not run (--quick)") if quick else _timed(lambda: check_page(root, lab))
    yield check_tests(root, lab)
    yield Result("finished", None, "not run (--quick)") if quick else check_finished(root, lab)


def _planned(root: Path, lab, quick: bool) -> list[Path]:
    """The files the checks below grade, in their order (each file once: a file checked again is set up then)."""
    files = [lab.solution, lab.exercise]
    if not quick:
        files += [row.file for row in expectations.of_lab(lab.number) if row.file.is_file()]
        if plain(lab):
            files += [root / "tests" / "cheats" / trick for trick in TRICKS]
    return files


def _graded(root: Path, lab, times: int, quick: bool) -> Iterator[Result]:
    """The checks that grade files, in order."""
    yield _timed(lambda: check_reference(lab, times))
    yield _timed(lambda: check_exercise(lab, times))
    if quick:
        yield Result("alternatives", None, "not run (--quick)")
        yield Result("cheats", None, "not run (--quick)")
    else:
        yield _timed(lambda: check_alternatives(lab))
        yield _timed(lambda: check_cheats(lab, root / "tests" / "cheats"))
