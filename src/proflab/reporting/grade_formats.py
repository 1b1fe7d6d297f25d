"""How a graded class is written out: JSON, JUnit XML, Gradescope, and the terminal.

* ``json``: the full record, check50-like: per submission the learner, the
  lab, the verdict, the exit code ``proflab check`` would give, the score;
  per check ``passed`` (true, false, or null when it did not run or could not
  be called), ``rationale``, ``help``, ``expected``, ``actual``; and the raw
  timings (``timings``, ``step_times``, ``comparison``).
* ``junit``: JUnit XML (the schema Jenkins, GitLab and most CI systems
  read): a ``<testsuite>`` per learner, a ``<testcase>`` per lab and check. A
  failed check is a ``<failure>``, a check that did not run because an
  earlier one failed is ``<skipped>``. An inconclusive speed-up is an
  ``<error>``: the test could not reach a verdict on this machine, which is
  what JUnit's errors are for (failures are for code that is wrong). It
  keeps the CI run from looking green, which ``<skipped>`` would, and counts
  apart from the failures, so "measure again on a quieter machine" is not
  read as "the fix is too slow". A submission the kit could not grade is an
  ``<error>`` too.
* ``gradescope``: Gradescope's ``results.json``, for one learner (Gradescope
  grades one submission per run): a test per lab and check, with its points,
  and a leaderboard column with the speed-up per lab.
* ``markdown``: the class table and, for each submission that did not pass,
  its checks: a CI job's summary (GitHub's ``$GITHUB_STEP_SUMMARY``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import __version__, atomic, paths
from .. import outputs as outputs_door
from . import report as check_report
from ..grading.verdicts import FAILED, INCONCLUSIVE, PASSED, SKIPPED, Check, Report
from ..grading.grade import Found, Graded, Result, Submission
from ..quiet import printable

FORMATS = ("json", "junit", "gradescope", "markdown")
NOT_GRADED = "error"  # the verdict of a report the kit could not grade


def render(fmt: str, result: Result) -> str:
    return {"json": to_json, "junit": to_junit, "gradescope": to_gradescope, "markdown": to_markdown}[fmt](result)


def refusal(fmt: str, found: Found, folder: str, outputs: tuple[str | None, ...] = ()) -> str | None:
    """Why ``found`` cannot be written as asked, said before any grading; None if it can."""
    learners = found.graded_learners
    if fmt == "gradescope" and len(learners) > 1:
        names = ", ".join(learners[:4]) + (", …" if len(learners) > 4 else "")
        return (f"--format gradescope writes one learner's results.json (Gradescope grades one submission "
                f"per run), and {folder} holds files of {len(learners)} learners ({names}): use --format json "
                "or junit, or grade each learner's folder on its own")
    given = [Path(p).resolve() for p in filter(None, outputs)]
    if len(set(given)) < len(given):
        return "--out and --json-out name the same file: give them two names (or leave --json-out out)"
    class_folder = found.folder.resolve()
    submitted = {sub.path.resolve() for sub in found.submissions}
    for path in filter(None, outputs):
        if Path(path).resolve() in submitted:
            return f"{path} is a submission: an output written there would replace it; write it somewhere else"
        why = outputs_door.refusal(path, [sub.path for sub in found.submissions])
        if why:
            return why
        if Path(path).resolve().is_relative_to(class_folder):
            return (f"{path} is inside the class folder {folder}: an output written there could replace a "
                    "submission, and would be graded as one next time; write it somewhere else")
    return None


def write(fmt: str, result: Result, out: str | None, json_out: str | None) -> dict[str, str]:
    """``fmt`` to the file ``out`` (atomically) or to stdout, as UTF-8; the JSON record to ``json_out``.

    Returns the files that could not be written, and why: their text goes to stdout instead, never lost.
    """
    text = render(fmt, result)
    files = {}
    if out:
        files[out] = text
    else:
        _stdout(text)
    if json_out:
        files[json_out] = text if fmt == "json" else to_json(result)
    failed = {}
    for path, content in files.items():
        try:
            outputs_door.write_text(path, content)
        except (OSError, outputs_door.Refused) as e:
            why = str(e) if isinstance(e, (outputs_door.NotWritten, outputs_door.Refused)) else \
                f"could not write {path} ({e.strerror or e})"
            failed[path] = f"{why}; it follows on stdout instead"
            _stdout(content)
    return failed


def _stdout(text: str) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8", "replace"))
    sys.stdout.buffer.flush()


# --- shared ----------------------------------------------------------------------

def _passed(check: Check, report: Report) -> bool | None:
    """True, False, or None: the check did not run, could not be called, or nothing was graded."""
    if report.verdict == NOT_GRADED or check.status in (SKIPPED, INCONCLUSIVE):
        return None
    return check.status == PASSED


def check_text(check: Check, report: Report, full: bool = False, rationale: bool = True) -> str:
    """A check's outcome in plain text; ``full`` adds the program's output and traceback to a failed run."""
    if report.verdict == NOT_GRADED:
        return f"Not graded: {report.error}"
    if check.status == SKIPPED:
        return f"Not run: {check.skipped_because()}."
    lines = [check.rationale] if rationale else []
    lines += check.details
    if check.expected:
        lines.append(f"expected: {check.expected}")
    if check.actual:
        lines.append(f"measured: {check.actual}")
    if check.help and check.status != PASSED:
        lines.append(f"look at: {check.help}")
    if full and check.status == FAILED and check.name == "runs":
        if report.output.strip():
            lines += ["", "The program printed (last lines):", report.output.rstrip()]
        if report.traceback.strip():
            lines += ["", report.traceback.rstrip()]
    return "\n".join(lines)


def _stopped_at(graded: Graded) -> Check | None:
    return next((c for c in graded.report.checks if c.status in (FAILED, INCONCLUSIVE)), None)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def _score(g: Graded) -> str:
    """``7/10``, or "not graded" (the kit could not grade it: no score, not 0)."""
    return f"{_num(g.score)}/{_num(g.max_score)}" if g.graded else "not graded"


def counts(result: Result) -> dict[str, int]:
    verdicts = Counter(g.report.verdict for g in result.graded)
    return {"learners": len(result.learners), "submissions": len(result.graded),
            "passed": verdicts[PASSED], "failed": verdicts[FAILED], "inconclusive": verdicts[INCONCLUSIVE],
            "not_graded": verdicts[NOT_GRADED], "files_not_graded": len(result.skipped),
            "not_yet_graded": len(result.pending), "resumed": result.resumed}


def _pending(result: Result) -> list[dict[str, Any]]:
    return [{"file": s.shown, "learner": s.learner, "lab": s.lab.name, "number": s.lab.number}
            for s in result.pending]


INTERRUPTED = "not graded yet: the grading was interrupted; run the same command with --resume to finish it"


# --- json ------------------------------------------------------------------------

def submission_record(graded: Graded) -> dict[str, Any]:
    r, sub = graded.report, graded.submission
    return {
        "learner": sub.learner,
        "lab": r.lab,
        "number": r.number,
        "title": r.title,
        "file": sub.shown,
        "verdict": r.verdict,
        "exit_code": r.exit_code,
        "score": graded.score,
        "max_score": graded.max_score,
        "speedup": graded.speedup,  # in a lab graded on memory: how many times leaner at the peak
        "peak_share": round(1 / graded.speedup, 4) if r.memory.get("share") and graded.speedup else None,
        "threshold": r.threshold,
        "device": r.device,
        "error": r.error,
        "duration_s": round(r.duration_s, 3),
        "checks": [
            {"name": c.name, "title": c.title, "description": c.description, "status": c.status,
             "passed": _passed(c, r), "points": c.pays, "score": p.earned, "max_score": p.max,
             "rationale": c.rationale, "help": c.help, "expected": c.expected, "actual": c.actual,
             "details": c.details, **({"waits_on": c.waits_on} if c.status == SKIPPED and c.waits_on else {})}
            for c, p in zip(r.checks, graded.points)
        ],
        "comparison": r.comparison,
        "stopped": r.stopped,
        "timings": r.timings,
        "step_times": r.step_times,
        "first_step": r.first_step,
        "after": {k: ({str(n): a for n, a in v.items()} if isinstance(v, dict) else v) for k, v in r.after.items()},
        "latency": r.latency,
        "evidence": r.evidence,
        "evidences": r.evidences,  # every figure of a lab with several bottlenecks ([[evidence]])
        "breakdown": r.breakdown,
        "memory": r.memory,  # a lab graded on memory: every run's peak, read from outside it
        "traces": r.traces,
        "trace_sha256": r.trace_sha256,  # each trace's fingerprint as the checker kept it
        "rank_traces": r.rank_traces,
        "rank_trace_sha256": r.rank_trace_sha256,
        "sandboxed": r.sandboxed,  # every run in a sandbox of the engine's
        "sandbox": r.sandbox,  # which, in words
        "audited": r.audited,  # the source audit ran
        "refused": r.refused,  # what it refused, line by line
        "notes": r.notes,
        "output": r.output,
        "traceback": r.traceback,
    }


def to_json(result: Result) -> str:
    return json.dumps({
        "proflab": __version__,
        "folder": str(result.folder),
        "started_at": result.started_at,
        "duration_s": round(result.duration_s, 3),
        "partial": result.partial,  # interrupted: `not_yet_graded` lists what --resume will grade
        "learners": result.learners,
        "summary": counts(result),
        "not_yet_graded": _pending(result),
        "submissions": [submission_record(g) for g in result.graded],
        "not_graded": [{"file": s.shown, "learner": s.learner or None, "reason": s.reason} for s in result.skipped],
    }, indent=2, ensure_ascii=False) + "\n"


# --- junit -----------------------------------------------------------------------

# Characters XML 1.0 cannot carry (a program's output may hold escape codes).
_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def _testcase(suite: ET.Element, graded: Graded, check: Check, first: bool) -> str:
    """Add one check's testcase; returns its outcome: passed, failure, error or skipped."""
    r = graded.report
    learner = re.sub(r"[.\s]+", "_", graded.submission.learner)
    case = ET.SubElement(suite, "testcase", name=_x(f"lab {r.number} {r.lab}: {check.name}"),
                         classname=_x(f"{learner}.{graded.submission.lab.slug}"))
    if r.verdict == NOT_GRADED:
        if first:
            ET.SubElement(case, "error", type="not-graded", message=_x(r.error)).text = _x(check_text(check, r))
            return "error"
        ET.SubElement(case, "skipped", message="not graded: the kit could not grade this submission")
        return "skipped"
    if check.status == PASSED:
        return "passed"
    if check.status == SKIPPED:
        ET.SubElement(case, "skipped", message=_x(f"not run: {check.skipped_because()}"))
        return "skipped"
    kind = "failure" if check.status == FAILED else "error"
    ET.SubElement(case, kind, type=check.name if kind == "failure" else "inconclusive",
                  message=_x(check.rationale)).text = _x(check_text(check, r, full=True, rationale=False))
    return kind


def to_junit(result: Result) -> str:
    root = ET.Element("testsuites", name="proflab grade")
    totals = Counter()
    for learner in result.learners:
        mine = [g for g in result.graded if g.submission.learner == learner]
        if not mine:
            continue
        suite = ET.SubElement(root, "testsuite", name=_x(learner))
        props = ET.SubElement(suite, "properties")
        outcomes = Counter()
        for g in mine:
            slug = g.submission.lab.slug
            shown = [("file", g.submission.shown), ("verdict", g.report.verdict),
                     ("score", _score(g))]
            if g.speedup and g.report.memory.get("share"):
                shown.append(("peak_share", f"{1 / g.speedup:.3f}"))
            elif g.speedup:
                shown.append(("speedup", f"{g.speedup:.3f}"))
            for key, value in shown:
                ET.SubElement(props, "property", name=f"{slug}.{key}", value=_x(value))
            for k, check in enumerate(g.report.checks):
                outcomes[_testcase(suite, g, check, first=k == 0)] += 1
        tests = sum(outcomes.values())
        duration = sum(g.report.duration_s for g in mine)
        suite.set("tests", str(tests))
        suite.set("failures", str(outcomes["failure"]))
        suite.set("errors", str(outcomes["error"]))
        suite.set("skipped", str(outcomes["skipped"]))
        suite.set("time", _seconds(duration))
        suite.set("timestamp", result.started_at.replace("+00:00", ""))
        totals.update(outcomes)
        totals["time"] += duration
    if result.pending:  # an interrupted grading: what it did not reach, marked so
        suite = ET.SubElement(root, "testsuite", name="not graded yet (interrupted)", tests=str(len(result.pending)),
                              failures="0", errors="0", skipped=str(len(result.pending)), time="0.000")
        for sub in result.pending:
            learner = re.sub(r"[.\s]+", "_", sub.learner)
            case = ET.SubElement(suite, "testcase", name=_x(f"lab {sub.lab.number} {sub.lab.name}"),
                                 classname=_x(f"{learner}.{sub.lab.slug}"))
            ET.SubElement(case, "skipped", message=_x(INTERRUPTED))
        totals["skipped"] += len(result.pending)
    if result.skipped:
        suite = ET.SubElement(root, "testsuite", name="files not graded", tests=str(len(result.skipped)),
                              failures="0", errors="0", skipped=str(len(result.skipped)), time="0.000")
        for s in result.skipped:
            case = ET.SubElement(suite, "testcase", name=_x(s.shown), classname=_x(s.learner or "folder"))
            ET.SubElement(case, "skipped", message=_x(s.reason))
        totals["skipped"] += len(result.skipped)
    root.set("tests", str(sum(v for k, v in totals.items() if k != "time")))
    root.set("failures", str(totals["failure"]))
    root.set("errors", str(totals["error"]))
    root.set("time", _seconds(result.duration_s))
    if result.partial:
        root.set("name", "proflab grade (partial: interrupted)")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# --- gradescope --------------------------------------------------------------------

NOISY = ("\nToo noisy to call on this machine: this is not a failure of your fix. Submit again, or ask for a "
         "regrade: it is measured again in a fresh container.")


def to_gradescope(result: Result) -> str:
    """Gradescope's results.json: one learner's submissions (Gradescope grades one learner per run)."""
    learners = {g.submission.learner for g in result.graded}
    if len(learners) > 1:
        raise ValueError(f"the Gradescope format holds one learner; these results hold {len(learners)}")
    tests, board, lines = [], [], []
    for g in result.graded:
        r = g.report
        for k, (check, points) in enumerate(zip(r.checks, g.points), 1):
            tests.append({
                "name": f"Lab {r.number} · {check.title}",
                "number": f"{r.number}.{k}",
                **({"score": points.earned} if g.graded else {}),  # not graded: no score, not 0
                "max_score": points.max,
                "status": "passed" if check.status == PASSED and r.verdict != NOT_GRADED else "failed",
                "output": check_text(check, r, full=True) + (NOISY if check.status == INCONCLUSIVE else ""),
                "output_format": "text",
                "tags": [f"lab-{r.number}", check.name],
                "visibility": "visible",
            })
        figure = "times leaner at the peak" if r.memory else "speed-up"
        board.append({"name": f"Lab {r.number} {figure} (×)", "value": round(g.speedup or 0.0, 3), "order": "desc"})
        lines.append(_headline(g))
    for s in result.skipped:
        lines.append(f"Not graded: {s.shown}: {s.reason}")
    if result.pending:
        lines.insert(0, f"Partial: the grading was interrupted; {len(result.pending)} submission(s) not graded yet.")
    for sub in result.pending:
        lines.append(f"Not graded yet: {sub.shown}: the grading was interrupted")
    if not result.graded:
        lines.append("Nothing was graded: no file here names a lab.")
    return json.dumps({
        "score": round(sum(g.score for g in result.graded if g.graded), 4),
        "execution_time": round(result.duration_s),
        "output": "\n".join(lines),
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "leaderboard": board,
        "extra_data": {"proflab": __version__, "partial": result.partial, "submissions": [
            {"file": g.submission.shown, "lab": g.report.lab, "verdict": g.report.verdict,
             "comparison": g.report.comparison, "timings": g.report.timings} for g in result.graded]},
    }, indent=2, ensure_ascii=False) + "\n"


def _headline(g: Graded) -> str:
    r = g.report
    word = {PASSED: "passed", FAILED: "failed", INCONCLUSIVE: "inconclusive (too noisy to call)"}.get(
        r.verdict, "not graded")
    speed = f", {g.speedup:.2f}× (threshold {r.threshold:g}×)" if g.speedup and r.threshold else ""
    if check_report.peak_share(r):
        speed = f", {check_report.peak_share(r)}"
    points = f"{_score(g)} points" if g.graded else "no points given"
    return (f"Lab {r.number} · {r.title} ({g.submission.shown}): {word}{speed}, {points}"
            + (f": {r.error}" if not g.graded else ""))


# --- markdown ----------------------------------------------------------------------

_MD_MARK = {PASSED: "✅", FAILED: "❌", INCONCLUSIVE: "❔", SKIPPED: "➖", NOT_GRADED: "⚠️"}


def _md(text: str) -> str:
    """Learner-derived text in a Markdown table cell or line: no markup, no line breaks."""
    return re.sub(r"([\\`*_{}\[\]<>|#])", r"\\\1", printable(str(text))).replace("\n", " ")


def _md_cell(g: Graded) -> str:
    r = g.report
    word = {PASSED: "passed", FAILED: "failed", INCONCLUSIVE: "too noisy to call: re-run"}.get(r.verdict,
                                                                                         "not graded")
    stopped = _stopped_at(g)
    if r.verdict == FAILED and stopped:
        word += f" ({stopped.name})"
    speed = ""
    if g.speedup:
        speed = f" peak {1 / g.speedup:.0%}" if check_report.peak_share(r) else f" {g.speedup:.2f}×"
    return f"{_MD_MARK.get(r.verdict, '⚠️')} {word}{speed}" + (f" {_score(g)}" if g.graded else "")


def to_markdown(result: Result) -> str:
    found_labs = sorted({(g.report.number, g.report.lab) for g in result.graded})
    c = counts(result)
    lines = [f"## proflab: {c['submissions']} submission{'s' if c['submissions'] != 1 else ''} of "
             f"{c['learners']} learner{'s' if c['learners'] != 1 else ''}", ""]
    if result.graded:
        head = ["learner"] + [f"lab {n} {_md(name)}" for n, name in found_labs] + ["total"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        by = {(g.submission.learner, g.report.number): g for g in result.graded}
        for learner in result.learners:
            mine = [by.get((learner, n)) for n, _ in found_labs]
            scored = [g for g in mine if g is not None and g.graded]
            total = f"{_num(sum(g.score for g in scored))}/{_num(sum(g.max_score for g in scored))}"
            lines.append("| " + " | ".join([_md(learner)] + [_md_cell(g) if g else "–" for g in mine] + [total])
                         + " |")
    for g in result.graded:
        r = g.report
        if r.verdict == PASSED:
            continue
        lines += ["", f"### {_md(g.submission.learner)} · lab {r.number} {_md(r.title)}: {_md_cell(g)}", ""]
        if r.verdict == NOT_GRADED:
            lines.append(f"- Not graded: {_md(r.error)}")
            continue
        for check in r.checks:
            if check.status == SKIPPED:
                continue
            lines.append(f"- {_MD_MARK.get(check.status, '')} **{_md(check.title)}**: {_md(check.rationale)}")
            for label, value in (("expected", check.expected), ("measured", check.actual),
                                 ("look at", check.help if check.status != PASSED else "")):
                if value:
                    lines.append(f"  - {label}: {_md(value)}")
    if result.skipped:
        lines += ["", "Not graded:"] + [f"- {_md(s.shown)}: {_md(s.reason)}" for s in result.skipped]
    return "\n".join(lines) + "\n"


# --- terminal ----------------------------------------------------------------------

def _shown(text: str) -> str:
    """Learner-derived text (names, file names, messages) for the terminal: no markup, no control sequences."""
    return escape(printable(str(text)))


_WORD = {PASSED: "[green]passed[/]", FAILED: "[red]failed[/]", INCONCLUSIVE: "[yellow]inconclusive[/]",
         NOT_GRADED: "[red]not graded[/]"}
_MARK = {PASSED: "[green]✓[/]", FAILED: "[red]✗[/]", INCONCLUSIVE: "[yellow]?[/]", NOT_GRADED: "[red]![/]"}


def _cell(g: Graded) -> str:
    r = g.report
    parts = [_WORD.get(r.verdict, _shown(r.verdict))]
    stopped = _stopped_at(g)
    if r.verdict == FAILED and stopped:
        parts[0] += f" [dim]({_shown(stopped.name)})[/]"
    if g.speedup:
        parts.append(f"peak {1 / g.speedup:.0%}" if check_report.peak_share(r) else f"{g.speedup:.2f}×")
    if g.graded:
        parts.append(_score(g))
    return " ".join(parts)


def done_line(i: int, n: int, g: Graded) -> str:
    sub = g.submission
    return (f"{_MARK.get(g.report.verdict, '?')} {i}/{n} {_shown(sub.learner)} · lab {sub.lab.number} "
            f"({_shown(sub.lab.name)}): {_cell(g)} [dim]· {_shown(sub.shown)} · {g.report.duration_s:.0f} s[/]")


class Progress:
    """While a class is graded: a status line (in a terminal), and a line per submission done."""

    def __init__(self, console: Console, update, verbose: bool = False):
        self.console, self.update, self.verbose, self.current = console, update, verbose, ""

    def start(self, i: int, n: int, sub: Submission) -> None:
        self.current = f"Grading {i}/{n}: {_shown(sub.learner)} · lab {sub.lab.number} ({_shown(sub.lab.name)})"
        self._show(lambda: self.update(self.current + "…"))

    def step(self, message: str) -> None:
        self._show(lambda: self.update(f"{self.current} [dim]· {_shown(message)}[/]"))

    def done(self, i: int, n: int, g: Graded) -> None:
        self._show(lambda: self.console.print(done_line(i, n, g)))
        if self.verbose:
            self._show(lambda: check_report.render(g.report, self.console, verbose=True))

    @staticmethod
    def _show(draw) -> None:
        """Progress is a view: a terminal that went away (SIGHUP, a dropped SSH session) never stops the grading."""
        try:
            draw()
        except (OSError, ValueError):
            pass


def summary(result: Result, out: str | None = None, json_out: str | None = None) -> Group:
    """The learner × lab table, the files not graded, the totals, and where the output went."""
    found_labs = sorted({(g.report.number, g.report.lab) for g in result.graded})
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    table.add_column("learner")
    for number, name in found_labs:
        table.add_column(f"lab {number} {_shown(name)}")
    if len(found_labs) > 1:
        table.add_column("total", justify="right")
    by = {(g.submission.learner, g.report.number): g for g in result.graded}
    for learner in result.learners:
        row = [_shown(learner)]
        mine = []
        for number, _ in found_labs:
            g = by.get((learner, number))
            row.append(_cell(g) if g else "[dim]–[/]")
            mine += [g] if g else []
        if len(found_labs) > 1:
            scored = [g for g in mine if g.graded]
            row.append(f"{_num(sum(g.score for g in scored))}/{_num(sum(g.max_score for g in scored))}"
                       + ("*" if len(scored) < len(mine) else ""))
        table.add_row(*row)
    parts: list[Any] = [table] if result.graded else []
    if result.skipped:
        parts.append(Text("Not graded:", style="bold"))
        for s in result.skipped:
            parts.append(f"  [yellow]–[/] {_shown(s.shown)}: {_shown(s.reason)}")
    c = counts(result)
    tally = ", ".join(f"{c[k]} {word}" for k, word in (("passed", "passed"), ("failed", "failed"),
                                                      ("inconclusive", "inconclusive"),
                                                      ("not_graded", "not graded")) if c[k])
    parts.append(f"{c['submissions']} submission{'s' if c['submissions'] != 1 else ''} from "
                 f"{c['learners']} learner{'s' if c['learners'] != 1 else ''} in {result.duration_s:.0f} s"
                 + (f": {tally}" if tally else "")
                 + (f"; {c['files_not_graded']} file{'s' if c['files_not_graded'] != 1 else ''} not graded"
                    if c["files_not_graded"] else "") + ".")
    if c["not_graded"]:
        parts.append("[red]Not graded[/] means the kit or the machine failed (the reason is in each entry); no "
                     "points were given: fix the cause and grade those submissions again (--resume does).")
    if result.pending:
        parts.append(f"[yellow]Interrupted:[/] {len(result.pending)} of {c['submissions'] + len(result.pending)} "
                     "submissions were not graded yet; the outputs hold the verdicts made, marked partial. Run the "
                     "same command with --resume to grade the rest.")
    if c["inconclusive"]:
        parts.append("[yellow]Inconclusive[/] means the timings were too noisy to call: grade those "
                     "submissions again on a quieter machine.")
    for what, where in (("Written", out), ("JSON record", json_out)):
        if where:
            parts.append(f"[dim]{what}:[/] {_shown(paths.display(where))}")
    return Group(*parts)
