"""``proflab grade --merge``: what other engines graded, read back into one class table.

It reads, from the files and folders given (folders searched all the way down):

* Gradescope's ``results.json`` written by this kit's autograder (``proflab
  autograder run``): each lab's full report is in its ``extra_data``, and the
  learner too (from Gradescope's submission metadata). A downloaded export
  holds one folder per submission; a ``submission_metadata.yml`` beside them
  names who submitted each, for results that do not name their learner;
* the JSON record of ``proflab grade`` (``--json-out``, a CI artifact): every
  submission's record;
* JUnit XML written by ``proflab grade --format junit``: each lab's verdict,
  score and speed-up, and each check's outcome.

Each submission's points are counted again from this kit's ``[grading]``
tables, so one class is scored by one rule. A learner with two results for
one lab keeps the newest file's; the other is listed as not graded, with
why. A file that is none of these is listed too, never a crash.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ... import labs
from ..grade import Graded, Result, Skipped, Submission, score
from ..verdicts import FAILED, INCONCLUSIVE, PASSED, SKIPPED, Check, Report

SUFFIXES = (".json", ".xml")


class MergeError(Exception):
    """Nothing to merge as asked (a usage error)."""


def files(inputs: list[Path]) -> Iterator[Path]:
    """The files to read: those given, and in each folder given every ``.json`` and ``.xml`` one (what is not a
    regular file among them, a FIFO or a device, is yielded too, to be named and left unread)."""
    for given in inputs:
        if given.is_dir():
            yield from sorted(p for p in given.rglob("*") if p.suffix in SUFFIXES and not p.name.startswith(".")
                              and not p.is_dir())
        else:
            yield given


TOO_LARGE = 1 << 30  # a file this large is no record of a class: left unread


def read_text(path: Path) -> str:
    """A file's text, never waiting on it: what is not a regular file (a FIFO, which would wait for a writer
    forever, a device) is refused before a byte is read (``ValueError`` says why). A UTF-8 BOM is dropped."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "not a regular file"
            raise ValueError(f"{kind}: not read")
        if info.st_size > TOO_LARGE:
            raise ValueError(f"{info.st_size / 1e9:.1f} GB: too large to be a record, not read")
        return f.read().decode("utf-8-sig")


def _metadata_learners(folder: Path) -> dict[str, str]:
    """Gradescope's export: submission folder name -> who submitted it, from ``submission_metadata.yml``."""
    import yaml

    out: dict[str, str] = {}
    for meta in folder.rglob("submission_metadata.yml"):
        try:
            data = yaml.safe_load(read_text(meta)) or {}
        except (OSError, ValueError, RecursionError, yaml.YAMLError):
            continue
        for name, entry in data.items() if isinstance(data, dict) else ():
            if not isinstance(entry, dict):
                continue
            people = _plain(entry).get("submitters") or []  # Ruby's symbols (:submitters:) read as ":submitters"
            shown = [str(p.get("email") or p.get("name") or "") for p in map(_plain, people) if p]
            if any(shown):
                out[str(name)] = " + ".join(s for s in shown if s)
    return out


def _plain(entry: Any) -> dict[str, Any]:
    return {str(k).strip(":"): v for k, v in entry.items()} if isinstance(entry, dict) else {}


def _why(e: BaseException) -> str:
    if isinstance(e, KeyError):
        return f"no {e} in it"
    return str(e) or type(e).__name__


def _renders(graded: Graded) -> None:
    """Every format renders this one record (a record read back may hold a value of the wrong kind deep in it:
    it is named as unreadable here, and not a crash of the whole class's table)."""
    import io

    from rich.console import Console

    from ...reporting import grade_formats

    alone = Result(Path("."), [graded], [], [graded.submission.learner], "", 0.0)
    for fmt in ("json", "junit", "markdown", "gradescope"):
        grade_formats.render(fmt, alone)
    Console(file=io.StringIO(), width=200).print(grade_formats.summary(alone))


class Merger:
    def __init__(self, inputs: list[Path], known: list[labs.Lab]):
        self.inputs, self.known = inputs, known
        self.found: dict[tuple[str, int], tuple[float, Graded]] = {}
        self.skipped: list[Skipped] = []
        self.named: dict[str, str] = {}
        for given in inputs:
            if given.is_dir():
                self.named.update(_metadata_learners(given))

    def add(self, learner: str, report: Report, source: Path, shown: str) -> None:
        try:
            lab = labs.resolve(str(report.number), self.known)
        except (labs.LabNotFound, labs.ManifestError):
            self.skipped.append(Skipped(shown, f"lab {report.number} ({report.lab}) is not one of this kit's labs",
                                        learner))
            return
        when = source.stat().st_mtime
        try:
            graded = Graded(Submission(learner, lab, source, shown), report, score(report, lab.grading))
            _renders(graded)
        except Exception as e:  # noqa: BLE001 - a record the tables cannot show is named, never a crash
            self.skipped.append(Skipped(shown, f"a record that cannot be read ({_why(e)})", learner))
            return
        key = (learner, lab.number)
        before = self.found.get(key)
        if before is None or when >= before[0]:
            if before is not None:
                self._superseded(before[1], shown)
            self.found[key] = (when, graded)
        else:
            self._superseded(graded, before[1].submission.shown)

    def _superseded(self, old: Graded, newer: str) -> None:
        self.skipped.append(Skipped(old.submission.shown, f"lab {old.report.number} by {old.submission.learner} "
                                    f"is taken from {newer}, newer", old.submission.learner))

    def read(self, path: Path) -> None:
        shown = str(path)
        try:
            text = read_text(path)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            self.skipped.append(Skipped(shown, f"cannot be read: {getattr(e, 'strerror', None) or e}"))
            return
        if path.suffix == ".xml":
            return self._junit(path, shown, text)
        try:
            data = json.loads(text)
        except ValueError as e:
            self.skipped.append(Skipped(shown, f"not JSON ({e})"))
            return
        except RecursionError:
            self.skipped.append(Skipped(shown, "JSON nested too deep to be a record: not read"))
            return
        if isinstance(data, dict) and isinstance(data.get("submissions"), list) and "proflab" in data:
            for i, record in enumerate(data["submissions"], 1):
                if not isinstance(record, dict):
                    self.skipped.append(Skipped(f"{shown}: submission {i}", f"a record is an object, and this "
                                                                            f"is a {type(record).__name__}"))
                    continue
                self._record(record, path, f"{shown}: {record.get('file', '?')}")
        elif isinstance(data, dict) and isinstance(data.get("tests"), list):
            self._gradescope(data, path, shown)
        elif path.name != "submission_metadata.json":
            self.skipped.append(Skipped(shown, "neither a Gradescope results.json nor a proflab grade record"))

    def _record(self, record: dict[str, Any], path: Path, shown: str) -> None:
        try:
            report = Report.from_dict({**record, "file": record.get("file", ""), "label": ""})
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            self.skipped.append(Skipped(shown, f"a record that cannot be read ({_why(e)})",
                                        str(record.get("learner") or "")))
            return
        self.add(str(record.get("learner") or "learner"), report, path, shown)

    def _gradescope(self, data: dict[str, Any], path: Path, shown: str) -> None:
        extra = data.get("extra_data")
        extra = {} if extra is None else extra
        if not isinstance(extra, dict):
            self.skipped.append(Skipped(shown, f"a results.json whose extra_data is a {type(extra).__name__}, "
                                               "not an object: not written by proflab's autograder"))
            return
        records = extra.get("records")
        if not isinstance(records, list):
            self.skipped.append(Skipped(shown, "a results.json not written by proflab's autograder (no records "
                                               "in its extra_data)"))
            return
        learner = str(extra.get("learner") or "")
        if learner in ("", "learner"):  # no submitter in the container's metadata: the export's, or the folder's
            folder = next((p.name for p in path.parents if p.name in self.named), None)
            parent = path.parent.parent if path.parent.name == "results" else path.parent
            learner = self.named[folder] if folder else (parent.name or "learner")
        for i, entry in enumerate(records, 1):
            where = f"{shown}: {entry.get('file', '?')}" if isinstance(entry, dict) else f"{shown}: record {i}"
            try:
                report = Report.from_dict(entry["report"])
            except (TypeError, KeyError, ValueError, AttributeError) as e:
                self.skipped.append(Skipped(where, f"a record that cannot be read ({_why(e)})", learner))
                continue
            self.add(learner, report, path, where)
        if not records and not extra.get("absent"):
            said = (str(data.get("output") or "").splitlines() or ["(its output is empty)"])[0][:200]
            self.skipped.append(Skipped(shown, "the autograder graded nothing here: " + said, learner))

    def _junit(self, path: Path, shown: str, text: str) -> None:
        try:
            root = ET.fromstring(text)
        except ET.ParseError as e:
            self.skipped.append(Skipped(shown, f"not XML ({e})"))
            return
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        read_any = False
        for suite in suites:
            learner = suite.get("name", "")
            props = {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}
            by_lab: dict[int, list[ET.Element]] = {}
            for case in suite.findall("testcase"):
                m = re.match(r"lab (\d+) ", case.get("name", ""))
                if m:
                    by_lab.setdefault(int(m.group(1)), []).append(case)
            for number, cases in by_lab.items():
                read_any = True
                self._junit_lab(learner, number, cases, props, path, shown)
        if not read_any:
            self.skipped.append(Skipped(shown, "no proflab grade test cases in it (lab N name: check)"))

    def _junit_lab(self, learner: str, number: int, cases: list[ET.Element], props: dict[str, str], path: Path,
                   shown: str) -> None:
        try:
            lab = labs.resolve(str(number), self.known)
        except (labs.LabNotFound, labs.ManifestError):
            self.skipped.append(Skipped(shown, f"lab {number} is not one of this kit's labs", learner))
            return
        from ..checks import chain_of

        chain = chain_of(lab).checks
        named = {n.NAME: n for n in chain}
        # a file written before checks had names of their own names each by the points it earns (lab 5's
        # "leaner" was "faster"): read as the check of the lab's chain that earns them
        named.update({n.POINTS: n for n in chain if n.POINTS not in named})
        rows = []
        for case in cases:
            name = case.get("name", "").rsplit(": ", 1)[-1]
            one = named.get(name)
            check = Check(one.NAME if one else name, one.TITLE if one else name, one.WHAT if one else "",
                          points=one.POINTS if one else "")
            outcome = next(iter(case), None)
            if outcome is None:
                check.status = PASSED
            elif outcome.tag == "failure":
                check.status, check.rationale = FAILED, outcome.get("message", "")
            elif outcome.tag == "error" and outcome.get("type") == "inconclusive":
                check.status, check.rationale = INCONCLUSIVE, outcome.get("message", "")
            elif outcome.tag == "error":
                check.status, check.rationale = SKIPPED, outcome.get("message", "")
            else:
                check.status = SKIPPED
            rows.append(check)
        verdict = props.get(f"{lab.slug}.verdict", FAILED)
        report = Report(lab=lab.name, number=lab.number, title=lab.title, file=props.get(f"{lab.slug}.file", ""),
                        label="", verdict=verdict, checks=rows, threshold=lab.threshold("cpu"))
        if verdict == "error":
            report.error = next((c.rationale for c in rows if c.rationale), "not graded")
        speed = props.get(f"{lab.slug}.speedup")
        share = props.get(f"{lab.slug}.peak_share")
        if speed or share:
            try:
                report.comparison = {"speedup": float(speed) if speed else 1 / float(share)}
            except (ValueError, ZeroDivisionError):
                pass
        self.add(learner, report, path, f"{shown}: {learner}, lab {number}")

    def result(self, started: float) -> Result:
        graded = sorted((g for _, g in self.found.values()),
                        key=lambda g: (g.submission.learner, g.report.number))
        learners = sorted({g.submission.learner for g in graded} | {s.learner for s in self.skipped if s.learner})
        folder = self.inputs[0] if len(self.inputs) == 1 else Path(".")
        return Result(folder, graded, self.skipped, learners,
                      datetime.now(timezone.utc).isoformat(timespec="seconds"), time.perf_counter() - started)


def merge(inputs: list[Path], known: list[labs.Lab] | None = None) -> Result:
    """Every result found in ``inputs``, as one graded class (``grade.Result``)."""
    started = time.perf_counter()
    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise MergeError(f"{missing[0]}: no such file or folder")
    merger = Merger(inputs, known if known is not None else labs.discover())
    for path in files(inputs):
        merger.read(path)
    if not merger.found:
        why = "".join(f"\n  {s.shown}: {s.reason}" for s in merger.skipped[:5])
        more = f"\n  … and {len(merger.skipped) - 5} more" if len(merger.skipped) > 5 else ""
        raise MergeError(f"no results in {', '.join(str(p) for p in inputs)}: give results.json files, "
                         "proflab grade's JSON record, or its JUnit XML (or folders that hold them)" + why + more)
    return merger.result(started)
